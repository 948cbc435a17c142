//! An upstream's `retry_on`: the failures that move a request to another target of its
//! model. The default names only failures where the upstream did not process the request;
//! the others are an operator's choice to accept that a request may be processed twice.

use super::values::Errors;
use super::RetryOn;

/// What `retry_on` may name, as the error message lists it.
const KNOWN: &str = "connect_failure, first_byte_timeout, 429, 500, 502, 503 or 504";

/// The `retry_on` list at `path`, or the default when it is not written. Every value that
/// is not a known failure is reported with its index.
pub(super) fn retry_on(
    errors: &mut Errors,
    path: &str,
    written: Option<&[serde_yaml::Value]>,
) -> Vec<RetryOn> {
    let Some(written) = written else {
        return RetryOn::DEFAULT.to_vec();
    };
    let mut list = Vec::with_capacity(written.len());
    for (i, value) in written.iter().enumerate() {
        match failure(value) {
            Some(failure) if list.contains(&failure) => {}
            Some(failure) => list.push(failure),
            None => errors.push(
                format!("{path}[{i}]"),
                format!("{} is not a failure to retry on; use {KNOWN}", shown(value)),
            ),
        }
    }
    list
}

/// The failure a value names: a name, or a status as a number or as text.
fn failure(value: &serde_yaml::Value) -> Option<RetryOn> {
    let status = match value {
        serde_yaml::Value::Number(n) => n.as_u64()?,
        serde_yaml::Value::String(text) => match text.as_str() {
            "connect_failure" => return Some(RetryOn::ConnectFailure),
            "first_byte_timeout" => return Some(RetryOn::FirstByteTimeout),
            digits => digits.parse().ok()?,
        },
        _ => return None,
    };
    match status {
        429 | 500 | 502 | 503 | 504 => Some(RetryOn::Status(status as u16)),
        _ => None,
    }
}

/// A written value, quoted for a message.
fn shown(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(text) => format!("'{text}'"),
        serde_yaml::Value::Number(n) => n.to_string(),
        _ => "this value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Vec<RetryOn>, Vec<String>) {
        let mut errors = Errors::new("f.yaml");
        let values: Vec<serde_yaml::Value> = serde_yaml::from_str(yaml).unwrap();
        let list = retry_on(&mut errors, "upstreams[0].retry_on", Some(&values));
        let messages = errors.list.into_iter().map(|e| e.path).collect();
        (list, messages)
    }

    #[test]
    fn names_and_statuses_are_read_and_the_rest_refused_by_index() {
        let (list, errors) = read(r#"[connect_failure, 500, "503", first_byte_timeout, 500]"#);
        assert_eq!(
            list,
            [
                RetryOn::ConnectFailure,
                RetryOn::Status(500),
                RetryOn::Status(503),
                RetryOn::FirstByteTimeout
            ]
        );
        assert!(errors.is_empty());
        let (_, errors) = read("[429, 404, timeout, 70000]");
        assert_eq!(
            errors,
            [
                "f.yaml: upstreams[0].retry_on[1]",
                "f.yaml: upstreams[0].retry_on[2]",
                "f.yaml: upstreams[0].retry_on[3]"
            ]
        );
    }

    #[test]
    fn unwritten_is_the_default_and_empty_is_nothing() {
        let mut errors = Errors::new("f.yaml");
        assert_eq!(retry_on(&mut errors, "p", None), RetryOn::DEFAULT);
        assert_eq!(retry_on(&mut errors, "p", Some(&[])), []);
    }
}
