//! `x-request-id`: keep a well-formed client value, otherwise make one.

use http::HeaderName;
use rand::Rng;

/// The header's name, parsed once (a name given as text is parsed on every insert).
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The request ID for a request: the client's if it is 1-128 characters of
/// `[A-Za-z0-9._:-]`, else a new random one.
pub fn accept_or_generate(client_value: Option<&[u8]>) -> String {
    match client_value {
        Some(value) if is_valid(value) => String::from_utf8_lossy(value).into_owned(),
        _ => generate(),
    }
}

fn is_valid(value: &[u8]) -> bool {
    (1..=128).contains(&value.len())
        && value
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// 32 random hexadecimal digits.
fn generate() -> String {
    let digits = crate::hex::digits_u128(rand::thread_rng().gen::<u128>());
    // Hexadecimal digits are ASCII: the check cannot fail, and costs less than a `String`
    // grown a `char` at a time.
    std::str::from_utf8(&digits).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_client_ids_are_kept_and_others_replaced() {
        assert_eq!(accept_or_generate(Some(b"req-1.a_b:c")), "req-1.a_b:c");
        for bad in [&b""[..], b"has space", b"semi;colon", &[b'a'; 129]] {
            let id = accept_or_generate(Some(bad));
            assert_eq!(id.len(), 32, "generated for {bad:?}");
            assert!(is_valid(id.as_bytes()));
        }
        assert_ne!(
            accept_or_generate(None),
            accept_or_generate(None),
            "generated ids differ"
        );
    }
}
