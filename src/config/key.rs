//! Keys: those written in `gateway.yaml` and those of the keys file it names, each
//! checked, then unique by name and by hash across both.

use super::parsed::{items, Parsed};
use super::raw::{RawKey, RawKeysFile};
use super::values::{check_name, nonzero, required, Errors};
use super::KeyConfig;
use crate::secret::KeyHash;
use std::collections::HashMap;

/// The valid keys, the configuration's own first. `file` is the keys file (its name for
/// messages, and its text) when one was given; `named` says whether the configuration
/// names one.
pub(super) fn keys(
    errors: &mut Errors,
    inline: Vec<serde_yaml::Value>,
    named: bool,
    file: Option<(&str, &str)>,
) -> Vec<KeyConfig> {
    let own = parse_keys(errors, inline);
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
                Some(parsed) => parse_keys(&mut file_errors, parsed.raw.keys),
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
fn parse_keys(errors: &mut Errors, values: Vec<serde_yaml::Value>) -> Vec<(String, KeyConfig)> {
    let raw_keys: Vec<Parsed<RawKey>> = items(errors, "keys", values);
    raw_keys
        .into_iter()
        .filter_map(|parsed| {
            let path = parsed.path.clone();
            key(errors, parsed).map(|key| (path, key))
        })
        .collect()
}

fn key(errors: &mut Errors, parsed: Parsed<RawKey>) -> Option<KeyConfig> {
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
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern.is_empty() {
                errors.push(
                    format!("{path}.models[{i}]"),
                    "an empty pattern matches nothing",
                );
            }
        }
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
