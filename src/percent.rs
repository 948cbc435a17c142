//! Percent-encoding for the parts of an upstream URL the gateway writes: a query value
//! (`query:` of an upstream) and a path segment (a stored response's upstream ID); and the
//! decoding of a query parameter's name, to compare the client's with the operator's.

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

/// A query parameter's name or value as the upstream's framework reads it: `%XX` escapes
/// decoded, `+` read as a space (form encoding); a malformed escape, or bytes that are not
/// UTF-8, kept as they are (replaced by U+FFFD), as lenient decoders do.
pub fn query_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', None) => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

    #[test]
    fn a_query_name_decodes_as_an_upstream_reads_it() {
        assert_eq!(super::query_decode("api%2Dversion"), "api-version");
        assert_eq!(super::query_decode("a+b%20c"), "a b c");
        assert_eq!(super::query_decode("%C3%A9"), "é");
        assert_eq!(super::query_decode("100%"), "100%", "a cut escape is kept");
        assert_eq!(super::query_decode("%zz%4"), "%zz%4");
        assert_eq!(super::query_decode("%FF"), "\u{FFFD}");
    }
}
