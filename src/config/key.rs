//! Keys: those written in `gateway.yaml` and those of the keys file it names, each
//! checked, then unique by name and by hash across both. A key whose `models` patterns
//! match no model is valid but warned about, as is one that has expired or expires soon.
//! Also `metric_labels`, which names labels of the keys.

use super::parsed::{items, Parsed};
use super::raw::{RawKey, RawKeysFile};
use super::values::{nonzero, nonzero_u64, required, required_name, Errors};
use super::KeyConfig;
use crate::glob;
use crate::secret::KeyHash;
use std::collections::{HashMap, HashSet};

/// A key that expires sooner than this after a load is warned about.
const EXPIRY_WARNING_MS: i64 = 7 * 24 * 3600 * 1000;

/// The valid keys, the configuration's own first. `file` is the keys file (its name for
/// messages, and its text) when one was given; `named` says whether the configuration
/// names one. `models` are the IDs of the catalog, for the patterns to be tried on.
pub(super) fn keys(
    errors: &mut Errors,
    inline: Vec<serde_yaml::Value>,
    named: bool,
    file: Option<(&str, &str)>,
    models: &[&str],
    now_unix_ms: i64,
) -> Vec<KeyConfig> {
    let own = parse_keys(errors, inline, models, now_unix_ms);
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
                Some(parsed) => parse_keys(&mut file_errors, parsed.raw.keys, models, now_unix_ms),
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
    now_unix_ms: i64,
) -> Vec<(String, KeyConfig)> {
    let raw_keys: Vec<Parsed<RawKey>> = items(errors, "keys", values);
    raw_keys
        .into_iter()
        .filter_map(|parsed| {
            let path = parsed.path.clone();
            key(errors, parsed, models, now_unix_ms).map(|key| (path, key))
        })
        .collect()
}

fn key(
    errors: &mut Errors,
    parsed: Parsed<RawKey>,
    models: &[&str],
    now_unix_ms: i64,
) -> Option<KeyConfig> {
    let before = errors.list.len();
    let path = parsed.path.as_str();
    let raw = &parsed.raw;
    let name = required_name(
        errors,
        parsed.at("name"),
        raw.name.as_deref(),
        parsed.unreadable("name"),
    );
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
    let tokens_per_minute = nonzero_u64(
        errors,
        &format!("{path}.tokens_per_minute"),
        raw.tokens_per_minute,
    );
    let tokens_per_day = nonzero_u64(
        errors,
        &format!("{path}.tokens_per_day"),
        raw.tokens_per_day,
    );
    let budget = raw
        .budget
        .as_ref()
        .and_then(|budget| super::budget::budget(errors, &parsed.at("budget"), budget));
    let disabled = disabled(errors, &parsed);
    let not_before = timestamp(errors, &parsed.at("not_before"), raw.not_before.as_deref());
    let expires_at = timestamp(errors, &parsed.at("expires_at"), raw.expires_at.as_deref());
    if let (Some(from), Some(until)) = (not_before, expires_at) {
        if from >= until {
            errors.push(
                parsed.at("not_before"),
                "is not before expires_at: the key would never be valid",
            );
        }
    }
    if let Some(owner) = &raw.owner {
        check_text(errors, &parsed.at("owner"), owner);
    }
    for (label, value) in raw.labels.iter().flatten() {
        let path = format!("{}.{label}", parsed.at("labels"));
        if let Some(problem) = super::name_problem(label) {
            errors.push(&path, format!("a label name {problem}"));
        }
        check_text(errors, &path, value);
    }
    if errors.list.len() > before || parsed.has_unreadable() {
        return None;
    }
    if let Some(until) = expires_at {
        warn_expiry(errors, &parsed.at("expires_at"), until, now_unix_ms);
    }
    Some(KeyConfig {
        name: name?.to_string(),
        hash: hash?,
        disabled,
        not_before_unix_ms: not_before,
        expires_at_unix_ms: expires_at,
        owner: raw.owner.clone(),
        labels: raw.labels.clone().unwrap_or_default(),
        models: raw.models.clone(),
        requests_per_minute,
        burst,
        max_concurrent,
        tokens_per_minute,
        tokens_per_day,
        budget,
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

/// `disabled`, or its older spelling `enabled` (inverted). Both may be written only if
/// they agree.
fn disabled(errors: &mut Errors, parsed: &Parsed<RawKey>) -> bool {
    match (parsed.raw.disabled, parsed.raw.enabled) {
        (Some(disabled), Some(enabled)) if disabled == enabled => {
            errors.push(
                parsed.at("disabled"),
                format!(
                    "disabled: {disabled} contradicts enabled: {enabled}; \
                     write only disabled (enabled is its older spelling)"
                ),
            );
            disabled
        }
        (Some(disabled), _) => disabled,
        (None, Some(enabled)) => !enabled,
        (None, None) => false,
    }
}

/// An RFC 3339 date and time (`2026-03-01T00:00:00Z`, or with an offset), as milliseconds
/// since the Unix epoch; `None` when absent or after an error.
fn timestamp(errors: &mut Errors, path: &str, text: Option<&str>) -> Option<i64> {
    let text = text?;
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(time) => Some(time.timestamp_millis()),
        Err(_) => {
            errors.push(
                path,
                format!(
                    "'{text}' is not an RFC 3339 date and time \
                     (examples: 2026-03-01T00:00:00Z, 2026-03-01T09:00:00+01:00)"
                ),
            );
            None
        }
    }
}

fn check_text(errors: &mut Errors, path: &str, text: &str) {
    if let Some(problem) = super::text_problem(text) {
        errors.push(path, problem);
    }
}

/// A key that has expired at load is valid but inactive; one that expires within a week
/// is about to stop working. Both are warned about.
fn warn_expiry(errors: &mut Errors, path: &str, until: i64, now: i64) {
    if until <= now {
        errors.warn(
            path,
            "is in the past: the key has expired and every request with it gets 401",
        );
    } else if until - now < EXPIRY_WARNING_MS {
        let hours = (until - now) / 3_600_000;
        errors.warn(
            path,
            format!("the key expires in less than 7 days (in {hours} h): issue its successor"),
        );
    }
}

/// `metric_labels`: each a Prometheus label name, not `key`, listed once and, when `keys`
/// is known (every key could be read), used by some key's `labels`.
pub(super) fn metric_labels(
    errors: &mut Errors,
    names: Vec<String>,
    keys: Option<&[KeyConfig]>,
) -> Vec<String> {
    let used: Option<HashSet<&str>> = keys.map(|keys| {
        keys.iter()
            .flat_map(|k| k.labels.keys())
            .map(String::as_str)
            .collect()
    });
    let mut seen = HashSet::new();
    for (i, name) in names.iter().enumerate() {
        let path = format!("metric_labels[{i}]");
        if !is_label_name(name) {
            errors.push(
                path,
                format!(
                    "'{name}' is not a Prometheus label name \
                     (letters, digits and '_', not starting with a digit or '__')"
                ),
            );
        } else if name == "key" {
            errors.push(
                path,
                "'key' is the label that names the key: choose another name",
            );
        } else if !seen.insert(name.as_str()) {
            errors.push(path, format!("'{name}' is listed twice"));
        } else if used
            .as_ref()
            .is_some_and(|used| !used.contains(name.as_str()))
        {
            errors.push(
                path,
                format!("'{name}' is not a label of any key (keys[].labels)"),
            );
        }
    }
    names
}

/// Prometheus label name syntax, without the reserved `__` prefix.
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_follow_prometheus() {
        for good in ["team", "_x", "cost_center2"] {
            assert!(is_label_name(good), "{good} is a label name");
        }
        for bad in ["", "2team", "cost-center", "__name", "t.x", "é"] {
            assert!(!is_label_name(bad), "{bad:?} is not a label name");
        }
    }
}
