//! Percent-encoding for the parts of an upstream URL the gateway writes: a query value
//! (`query:` of an upstream) and a path segment (a stored response's upstream ID).

/// `text` with everything but RFC 3986's unreserved characters percent-encoded: safe as a
/// query name or value, and as one path segment.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_unreserved_characters_stay() {
        assert_eq!(super::percent_encode("2024-10-21"), "2024-10-21");
        assert_eq!(
            super::percent_encode("a b/c?d&e=é"),
            "a%20b%2Fc%3Fd%26e%3D%C3%A9"
        );
    }
}
