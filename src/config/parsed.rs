//! Reading YAML into the raw shapes without stopping at the first problem.
//!
//! A field that cannot be read (an unknown key, a value of the wrong type) is reported once
//! with its path, taken out, and the rest is read again, so one typo does not hide the other
//! errors of its item or of the file. The fields taken out are remembered: validation must
//! treat them as written-but-unreadable, never as absent (an absent field has a default,
//! and comparing with a default nobody wrote would report errors that are not there).

use super::values::Errors;
use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use serde_yaml::Value;

/// A document or list item as read, minus its unreadable fields.
pub(super) struct Parsed<T> {
    /// The key path of the item (`upstreams[2]`); empty for a whole document.
    pub(super) path: String,
    pub(super) raw: T,
    /// Top-level fields of the item that were written but could not be read (reported).
    unreadable: Vec<String>,
}

impl<T> Parsed<T> {
    /// Whether `field` was written but could not be read.
    pub(super) fn unreadable(&self, field: &str) -> bool {
        self.unreadable.iter().any(|f| f == field)
    }

    /// Whether any field was written but could not be read: the item is reported, not valid.
    pub(super) fn has_unreadable(&self) -> bool {
        !self.unreadable.is_empty()
    }

    /// The key path of `field` of this item.
    pub(super) fn at(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }
}

impl Errors {
    /// Reads a whole file's text. A YAML syntax error stops it (reported with its line and
    /// key path, `syntax.rs`);
    /// anything else is reported field by field.
    pub(super) fn document<T: DeserializeOwned>(&mut self, text: &str) -> Option<Parsed<T>> {
        let value = match serde_yaml::from_str::<Value>(text) {
            // An empty file is an empty mapping: every field takes its default.
            Ok(Value::Null) => Value::Mapping(Default::default()),
            Ok(value) => value,
            Err(error) => {
                let (place, message) = super::syntax::describe(text, &error);
                self.push(place, message);
                return None;
            }
        };
        self.item("", value)
    }

    /// Reads one value (a list item, or a whole document when `path` is empty), recording
    /// each field that cannot be read under its full key path.
    pub(super) fn item<T: DeserializeOwned>(
        &mut self,
        path: &str,
        mut value: Value,
    ) -> Option<Parsed<T>> {
        if !value.is_mapping() {
            // serde would name our internal type ("expected struct RawUpstream").
            self.push(
                path,
                format!(
                    "must be a mapping (`field: value` lines), not {}",
                    kind(&value)
                ),
            );
            return None;
        }
        let mut unreadable = Vec::new();
        loop {
            let error = match serde_path_to_error::deserialize::<_, T>(&value) {
                Ok(raw) => {
                    return Some(Parsed {
                        path: path.to_string(),
                        raw,
                        unreadable,
                    })
                }
                Err(error) => error,
            };
            let inner = error.path().to_string();
            let full = match (path.is_empty(), inner == ".") {
                (_, true) => path.to_string(),
                (true, false) => inner.clone(),
                (false, false) => format!("{path}.{inner}"),
            };
            let field = match error.path().iter().next() {
                Some(Segment::Map { key }) => Some(key.clone()),
                _ => None,
            };
            self.push(full, message(&inner, &error.into_inner()));
            // Take the field out and read the rest again; each pass removes one field, so
            // this ends. An error about the item as a whole ends it at once.
            let removed = match (&field, value.as_mapping_mut()) {
                (Some(field), Some(mapping)) => mapping.remove(field.as_str()).is_some(),
                _ => false,
            };
            if !removed {
                return None;
            }
            unreadable.extend(field);
        }
    }
}

/// What a YAML value is, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// serde_yaml's message without what the error line already says: the key path it starts
/// with, and a position (a value read from a parsed document has none anyway).
fn message(path: &str, error: &serde_yaml::Error) -> String {
    let text = error.to_string();
    let text = text
        .strip_prefix(path)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(&text);
    let text = match text.find(" at line ") {
        Some(at) if error.location().is_some() => &text[..at],
        _ => text,
    };
    // Rust's names for numbers mean nothing to whoever writes the file.
    let mut text = text.to_string();
    for (rust, ours) in [
        ("expected u32", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected usize", "expected a whole number"),
        ("expected f64", "expected a number"),
    ] {
        text = text.replace(rust, ours);
    }
    if let Some(suggestion) = did_you_mean(&text) {
        text = format!("{text}; did you mean `{suggestion}`?");
    }
    text
}

/// For serde's "unknown field `idle_timeuot`, expected one of `a`, `b`": the expected name
/// closest to the unknown one, when it is close enough to be a typo of it.
fn did_you_mean(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split_once("expected ")?.1;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|name| (edit_distance(unknown, name), name))
        .filter(|(distance, _)| *distance <= 2.max(unknown.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![(0..=b.len()).collect::<Vec<usize>>(); a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// Reads each item of a list on its own, with its path (`upstreams[2]`).
pub(super) fn items<T: DeserializeOwned>(
    errors: &mut Errors,
    list: &str,
    values: Vec<Value>,
) -> Vec<Parsed<T>> {
    values
        .into_iter()
        .enumerate()
        .filter_map(|(i, value)| errors.item::<T>(&format!("{list}[{i}]"), value))
        .collect()
}
