//! Keys: those written in `gateway.yaml` and those of the keys file it names, each
//! checked, then unique by name and by hash across both.

use super::raw::{RawKey, RawKeysFile};
use super::values::{check_name, check_unique, items, nonzero, Errors};
use super::KeyConfig;
use crate::secret::KeyHash;

/// The valid keys, the configuration's own first. `file` is the keys file (its name for
/// messages, and its text) when one was given; `named` says whether the configuration
/// names one.
pub(super) fn keys(
    errors: &mut Errors,
    inline: Vec<serde_yaml::Value>,
    named: bool,
    file: Option<(&str, &str)>,
) -> Vec<KeyConfig> {
    let mut keys = parse_keys(errors, inline);
    if let Some((name, text)) = file {
        if !named {
            errors.push(
                "keys_file",
                "a keys file was given but the configuration names none",
            );
        }
        keys.extend(keys_file(errors, name, text));
    }
    check_unique(errors, "keys", keys.iter().map(|k| k.name.as_str()), "name");
    let hashes: Vec<String> = keys.iter().map(|k| k.hash.to_hex()).collect();
    check_unique(errors, "keys", hashes.iter().map(String::as_str), "sha256");
    keys
}

/// The valid keys of the keys file called `name`.
fn keys_file(errors: &mut Errors, name: &str, text: &str) -> Vec<KeyConfig> {
    // Errors inside the keys file name that file, not the configuration.
    let mut file_errors = Errors::new(name);
    let keys = match file_errors.document::<RawKeysFile>(text) {
        Some(file) => parse_keys(&mut file_errors, file.keys),
        None => Vec::new(),
    };
    errors.list.extend(file_errors.list);
    keys
}

fn parse_keys(errors: &mut Errors, values: Vec<serde_yaml::Value>) -> Vec<KeyConfig> {
    let raw_keys: Vec<(String, RawKey)> = items(errors, "keys", values);
    raw_keys
        .into_iter()
        .filter_map(|(path, raw)| key(errors, &path, raw))
        .collect()
}

fn key(errors: &mut Errors, path: &str, raw: RawKey) -> Option<KeyConfig> {
    let before = errors.list.len();
    check_name(errors, &format!("{path}.name"), &raw.name);
    let hash = KeyHash::from_hex(raw.sha256.trim_start_matches("sha256:"));
    if hash.is_none() {
        errors.push(
            format!("{path}.sha256"),
            "must be 64 hexadecimal digits (the SHA-256 of the key; `sluice key` prints one)",
        );
    }
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
    if burst.is_some() && requests_per_minute.is_none() {
        errors.push(format!("{path}.burst"), "needs requests_per_minute");
    }
    let max_concurrent = nonzero(
        errors,
        &format!("{path}.max_concurrent"),
        raw.max_concurrent,
    );
    if errors.list.len() > before {
        return None;
    }
    Some(KeyConfig {
        name: raw.name,
        hash: hash?,
        enabled: raw.enabled.unwrap_or(true),
        models: raw.models,
        requests_per_minute,
        burst,
        max_concurrent,
    })
}
