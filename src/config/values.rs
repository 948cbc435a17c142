//! The error collector every section reports into, and the scalar checks the sections
//! share: names, uniqueness, addresses, limits, durations and sizes.

use super::{ConfigError, ConfigWarning};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

/// Collects errors (and warnings) about one file while validation goes on.
pub(super) struct Errors {
    /// The file the errors are about, as it is named in messages.
    pub(super) file: String,
    pub(super) list: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigWarning>,
}

impl Errors {
    pub(super) fn new(file: &str) -> Self {
        Errors {
            file: file.to_string(),
            list: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// `file: path`, or the file alone for an error about the whole file.
    fn locate(&self, path: String) -> String {
        if path.is_empty() {
            self.file.clone()
        } else {
            format!("{}: {path}", self.file)
        }
    }

    pub(super) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = self.locate(path.into());
        self.list.push(ConfigError {
            path,
            message: message.into(),
        });
    }

    /// Something valid that is probably not what was meant.
    pub(super) fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = self.locate(path.into());
        self.warnings.push(ConfigWarning {
            path,
            message: message.into(),
        });
    }

    /// Takes in what another file's collector found (the keys file's).
    pub(super) fn absorb(&mut self, other: Errors) {
        self.list.extend(other.list);
        self.warnings.extend(other.warnings);
    }
}

/// A required field's value; its absence is reported, unless it was written but could not
/// be read (then that was reported).
pub(super) fn required<T>(
    errors: &mut Errors,
    path: String,
    value: Option<T>,
    unreadable: bool,
) -> Option<T> {
    if value.is_none() && !unreadable {
        errors.push(path, "is required");
    }
    value
}

/// A required `name` (of an upstream or a key), checked: missing is reported unless the
/// field was unreadable (reported already), a bad one by [`name_problem`]'s rule.
pub(super) fn required_name<'a>(
    errors: &mut Errors,
    path: String,
    value: Option<&'a str>,
    unreadable: bool,
) -> Option<&'a str> {
    let name = required(errors, path.clone(), value, unreadable)?;
    check_name(errors, &path, name);
    Some(name)
}

/// What is wrong with `name` as the name of an upstream or a key, if anything. Names
/// become metric labels and log fields: they stay short and plain. `sluice key --name`
/// applies the same rule.
pub fn name_problem(name: &str) -> Option<&'static str> {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > 64 || !plain {
        return Some("must be 1-64 characters of letters, digits, '-', '_' or '.'");
    }
    None
}

/// Longest `owner` or label value: they are written on every access-log line.
const MAX_TEXT_CHARS: usize = 256;

/// What is wrong with `text` as a key's `owner` or label value, if anything. Free text,
/// shown in logs and the admin view, so one bounded line. `sluice key --owner` applies the
/// same rule.
pub fn text_problem(text: &str) -> Option<&'static str> {
    if text.trim().is_empty() {
        return Some("is empty (leave it out instead)");
    }
    if text.chars().count() > MAX_TEXT_CHARS || text.chars().any(char::is_control) {
        return Some("must be at most 256 characters on one line");
    }
    None
}

pub(super) fn check_name(errors: &mut Errors, path: &str, name: &str) {
    if let Some(problem) = name_problem(name) {
        errors.push(path, problem);
    }
}

/// Reports each item whose `field` repeats an earlier item's, at the later one and naming
/// the first: `models[3].id: duplicates models[0] ('m')`. `items` are (item path, value).
pub(super) fn check_unique<'a>(
    errors: &mut Errors,
    field: &str,
    items: impl Iterator<Item = (&'a str, &'a str)>,
) {
    let mut first_seen = std::collections::HashMap::new();
    for (path, value) in items {
        match first_seen.get(value) {
            Some(first) => errors.push(
                format!("{path}.{field}"),
                format!("duplicates {first} ('{value}'): each {field} must be unique"),
            ),
            None => {
                first_seen.insert(value, path);
            }
        }
    }
}

pub(super) fn socket_addr(errors: &mut Errors, path: &str, text: &str) -> Option<SocketAddr> {
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            // The commonest slip: a port past 65535 (one digit too many).
            let port = text.rsplit_once(':').map(|(_, port)| port);
            let why = match port.and_then(|p| p.parse::<u64>().ok()) {
                Some(port) if port > u64::from(u16::MAX) => {
                    format!(": port {port} is past 65535")
                }
                _ => String::new(),
            };
            errors.push(
                path,
                format!("'{text}' is not an address like 127.0.0.1:8080{why}"),
            );
            None
        }
    }
}

/// An optional limit: absent means none, zero is an error.
pub(super) fn nonzero(errors: &mut Errors, path: &str, value: Option<u32>) -> Option<NonZeroU32> {
    nonzero_u64(errors, path, value.map(u64::from)).and_then(|n| NonZeroU32::new(n.get() as u32))
}

/// A limit of at least 1, as a 64-bit count (tokens).
pub(super) fn nonzero_u64(
    errors: &mut Errors,
    path: &str,
    value: Option<u64>,
) -> Option<NonZeroU64> {
    let nonzero = NonZeroU64::new(value?);
    if nonzero.is_none() {
        errors.push(path, "must be at least 1 (leave it out for no limit)");
    }
    nonzero
}

/// The range a duration setting must fall in. Nothing reaches a year, where a deadline
/// computed from it could overflow the clock; most are tighter, to catch a wrong unit.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    min: Duration,
    max: Duration,
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

impl Bounds {
    /// Opening a connection: more than minutes is never a working network.
    pub(super) const CONNECT: Bounds = Bounds::new(Duration::from_millis(1), 10 * MINUTE);
    /// A concurrency lease in the shared limits store: refreshed every third of it.
    pub(super) const LEASE: Bounds = Bounds::new(Duration::from_secs(1), 60 * MINUTE);
    /// A pause before a resend, which the client spends waiting.
    pub(super) const BACKOFF: Bounds = Bounds::new(Duration::from_millis(1), MINUTE);
    /// Waits a request spends held back: in a queue, behind a cooldown.
    pub(super) const WAIT: Bounds = Bounds::new(Duration::from_millis(1), HOUR);
    /// Timeouts that a long generation or a held stream must fit in, ejections, check
    /// periods, the shutdown grace.
    pub(super) const LONG: Bounds = Bounds::new(Duration::from_millis(1), 24 * HOUR);
    /// How often the files are read: faster than 10 ms only burns CPU.
    pub(super) const WATCH: Bounds = Bounds::new(Duration::from_millis(10), 24 * HOUR);

    const fn new(min: Duration, max_seconds: u64) -> Bounds {
        Bounds {
            min,
            max: Duration::from_secs(max_seconds),
        }
    }
}

/// A duration like `150ms` within `bounds`: `default` when absent, `None` after an error
/// (so no check compares against a value that was not written).
pub(super) fn duration(
    errors: &mut Errors,
    path: &str,
    text: Option<&str>,
    default: Duration,
    bounds: Bounds,
) -> Option<Duration> {
    match text {
        None => Some(default),
        Some(text) => optional_duration(errors, path, Some(text), bounds),
    }
}

/// A duration like `150ms` within `bounds`; `None` when absent or after an error.
pub(super) fn optional_duration(
    errors: &mut Errors,
    path: &str,
    text: Option<&str>,
    bounds: Bounds,
) -> Option<Duration> {
    let text = text?;
    let Ok(value) = humantime::parse_duration(text) else {
        errors.push(
            path,
            format!("'{text}' is not a duration (examples: 150ms, 2s, 5m)"),
        );
        return None;
    };
    if value < bounds.min || value > bounds.max {
        errors.push(
            path,
            format!(
                "'{text}' is out of range: must be from {} to {}",
                humantime::format_duration(bounds.min),
                humantime::format_duration(bounds.max)
            ),
        );
        return None;
    }
    Some(value)
}

/// Parses `8MiB`, `512KiB`, `1MB`, `1048576`.
pub fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits.parse().ok()?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A file named in the configuration: relative to the directory of the file the errors
/// name (the configuration file, when it was loaded by `load_files`).
pub(super) fn beside_config(errors: &Errors, name: &str) -> std::path::PathBuf {
    std::path::Path::new(&errors.file)
        .parent()
        .unwrap_or(std::path::Path::new(""))
        .join(name)
}

/// A `ca_file` as read: the file's PEM text and each certificate in it (DER), every one
/// checked to parse.
pub(super) struct CaFile {
    pub(super) pem: Vec<u8>,
    pub(super) certificates: Vec<Vec<u8>>,
}

/// The `ca_file` called `name` at `field`, read relative to the directory of the file the
/// errors name (the configuration file, when it was loaded by `load_files`).
pub(super) fn ca_file(errors: &mut Errors, field: &str, name: &str) -> Option<CaFile> {
    match read_ca_file(&beside_config(errors, name)) {
        Ok(ca) => Some(ca),
        Err(message) => {
            errors.push(field, message);
            None
        }
    }
}

fn read_ca_file(path: &std::path::Path) -> Result<CaFile, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // pingora's parser panics on a bad certificate: each is checked with the same parser.
    let certificates = crate::listener::tls::certificates_in(&pem, path)?
        .iter()
        .map(|der| der.to_vec())
        .collect();
    Ok(CaFile { pem, certificates })
}
