//! Keys: those written in `gateway.yaml` and those of the keys file it names, each
//! checked, then unique by name and by hash across both. A key whose `models` patterns
//! match no model is valid but warned about.

use super::parsed::{items, Parsed};
use super::raw::{RawKey, RawKeysFile};
use super::values::{check_name, nonzero, required, Errors};
use super::KeyConfig;
use crate::glob;
use crate::secret::KeyHash;
use std::collections::HashMap;

/// The valid keys, the configuration's own first. `file` is the keys file (its name for
/// messages, and its text) when one was given; `named` says whether the configuration
/// names one. `models` are the IDs of the catalog, for the patterns to be tried on.
pub(super) fn keys(
    errors: &mut Errors,
    inline: Vec<serde_yaml::Value>,
    named: bool,
    file: Option<(&str, &str)>,
    models: &[&str],
) -> Vec<KeyConfig> {
    let own = parse_keys(errors, inline, models);
    // Errors inside the keys file name that file, not the configuration.
    let mut file_errors = Errors::new(file.map_or("", |(name, _)| name));
    let from_file = match file {
        Some((_, text)) => {
            if !named {
                errors.push(
                    "keys_file",
                    "a keys file was given but the configuration names none",
                );
            }
            match file_errors.document::<RawKeysFile>(text) {
                Some(parsed) => parse_keys(&mut file_errors, parsed.raw.keys, models),
                None => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    check_unique(errors, &own, &mut file_errors, &from_file);
    errors.absorb(file_errors);
    own.into_iter()
        .chain(from_file)
        .map(|(_, key)| key)
        .collect()
}

/// Names and hashes are unique across both files. A clash is reported at the later key,
/// in the file it is written in; a hash is never shown.
fn check_unique(
    errors: &mut Errors,
    own: &[(String, KeyConfig)],
    file_errors: &mut Errors,
    from_file: &[(String, KeyConfig)],
) {
    // Where each name and hash was first seen: in the keys file or not, and the key's path.
    let mut names: HashMap<&str, (bool, &str)> = HashMap::new();
    let mut hashes: HashMap<String, (bool, &str)> = HashMap::new();
    let own_file = errors.file.clone();
    let listed =
        (own.iter().map(|key| (false, key))).chain(from_file.iter().map(|key| (true, key)));
    for (in_keys_file, (path, key)) in listed {
        let first_seen = |(first_in_keys_file, first_path): (bool, &str)| {
            if first_in_keys_file == in_keys_file {
                first_path.to_string()
            } else {
                // Only a keys-file key can follow one of the configuration.
                format!("{first_path} of {own_file}")
            }
        };
        let collector: &mut Errors = if in_keys_file { file_errors } else { errors };
        match names.get(key.name.as_str()) {
            Some(&first) => collector.push(
                format!("{path}.name"),
                format!(
                    "the name '{}' is already used by {}",
                    key.name,
                    first_seen(first)
                ),
            ),
            None => {
                names.insert(&key.name, (in_keys_file, path));
            }
        }
        let hash = key.hash.to_hex();
        match hashes.get(&hash) {
            Some(&first) => collector.push(
                format!("{path}.sha256"),
                format!("the same hash as {}", first_seen(first)),
            ),
            None => {
                hashes.insert(hash, (in_keys_file, path));
            }
        }
    }
}

/// The valid keys of a list, with their paths.
fn parse_keys(
    errors: &mut Errors,
    values: Vec<serde_yaml::Value>,
    models: &[&str],
) -> Vec<(String, KeyConfig)> {
    let raw_keys: Vec<Parsed<RawKey>> = items(errors, "keys", values);
    raw_keys
        .into_iter()
        .filter_map(|parsed| {
            let path = parsed.path.clone();
            key(errors, parsed, models).map(|key| (path, key))
        })
        .collect()
}

fn key(errors: &mut Errors, parsed: Parsed<RawKey>, models: &[&str]) -> Option<KeyConfig> {
    let before = errors.list.len();
    let path = parsed.path.as_str();
    let raw = &parsed.raw;
    let name = required(
        errors,
        parsed.at("name"),
        raw.name.as_deref(),
        parsed.unreadable("name"),
    );
    if let Some(name) = name {
        check_name(errors, &parsed.at("name"), name);
    }
    let sha256 = required(
        errors,
        parsed.at("sha256"),
        raw.sha256.as_deref(),
        parsed.unreadable("sha256"),
    );
    let hash = sha256.and_then(|text| {
        let hash = KeyHash::from_hex(text.trim_start_matches("sha256:"));
        if hash.is_none() {
            errors.push(
                parsed.at("sha256"),
                "must be 64 hexadecimal digits (the SHA-256 of the key; `sluice key` prints one)",
            );
        }
        hash
    });
    if let Some(patterns) = &raw.models {
        check_patterns(errors, &parsed.at("models"), patterns, models);
    }
    let requests_per_minute = nonzero(
        errors,
        &format!("{path}.requests_per_minute"),
        raw.requests_per_minute,
    );
    let burst = nonzero(errors, &format!("{path}.burst"), raw.burst);
    // Only when requests_per_minute is not written at all: a bad one is its own error.
    if raw.burst.is_some()
        && raw.requests_per_minute.is_none()
        && !parsed.unreadable("requests_per_minute")
    {
        errors.push(format!("{path}.burst"), "needs requests_per_minute");
    }
    let max_concurrent = nonzero(
        errors,
        &format!("{path}.max_concurrent"),
        raw.max_concurrent,
    );
    if errors.list.len() > before || parsed.has_unreadable() {
        return None;
    }
    Some(KeyConfig {
        name: name?.to_string(),
        hash: hash?,
        enabled: raw.enabled.unwrap_or(true),
        models: raw.models.clone(),
        requests_per_minute,
        burst,
        max_concurrent,
    })
}

/// An empty pattern is an error; a pattern that matches no model of the catalog (a typo,
/// or a model not added yet) is a warning, as is an empty list (the key may use nothing).
fn check_patterns(errors: &mut Errors, path: &str, patterns: &[String], models: &[&str]) {
    if patterns.is_empty() {
        errors.warn(path, "lists no pattern: the key may use no model");
    }
    let models: Vec<Vec<char>> = models.iter().map(|id| id.chars().collect()).collect();
    for (i, pattern) in patterns.iter().enumerate() {
        if pattern.is_empty() {
            errors.push(format!("{path}[{i}]"), "an empty pattern matches nothing");
            continue;
        }
        let pattern_chars: Vec<char> = pattern.chars().collect();
        if !models.iter().any(|id| glob::matches(&pattern_chars, id)) {
            errors.warn(
                format!("{path}[{i}]"),
                format!("'{pattern}' matches no model: the key may not use any model through it"),
            );
        }
    }
}
