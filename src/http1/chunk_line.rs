//! The chunk-size line of the chunked transfer coding (RFC 9112 §7.1.1): the one parser
//! every chunked reader uses (client request bodies, upstream answers, the echo backend, all
//! through `MessageReader`).
//!
//! ```text
//! chunk-line = 1*HEXDIG *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ) BWS
//! ```
//!
//! The line end (CRLF, or a bare LF) is taken off by the reader, which refuses a bare CR
//! anywhere in a framing line; none can pass here either, as no rule above admits a CR.
//! Whitespace after the size or the last extension is let through (nginx reads it too, and
//! it cannot move where the line ends). Extensions are checked, then dropped.

/// Most hexadecimal digits of a chunk size: 15 (about 2^60 bytes), so the size never
/// overflows whatever the digits.
const MAX_SIZE_DIGITS: usize = 15;

/// The size a chunk-size line declares (the line without its end); `None` when the line
/// is not one.
pub fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > MAX_SIZE_DIGITS {
        return None;
    }
    let size = line[..digits].iter().fold(0u64, |size, &digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => digit - b'A' + 10,
        };
        (size << 4) | u64::from(value)
    });
    extensions(&line[digits..]).then_some(size)
}

/// Whether `rest` (what follows the size) is zero or more well-formed extensions.
fn extensions(mut rest: &[u8]) -> bool {
    loop {
        rest = skip_whitespace(rest);
        let Some((b';', after)) = rest.split_first() else {
            return rest.is_empty();
        };
        let Some(after_name) = token(skip_whitespace(after)) else {
            return false;
        };
        rest = skip_whitespace(after_name);
        if let Some((b'=', after)) = rest.split_first() {
            let value = skip_whitespace(after);
            match token(value).or_else(|| quoted_string(value)) {
                Some(after_value) => rest = after_value,
                None => return false,
            }
        }
    }
}

/// `bytes` past its leading spaces and tabs (BWS).
fn skip_whitespace(bytes: &[u8]) -> &[u8] {
    let blank = bytes
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    &bytes[blank..]
}

/// What follows a token (one or more `tchar`) at the front of `bytes`; `None` when there is
/// none.
fn token(bytes: &[u8]) -> Option<&[u8]> {
    let length = bytes.iter().take_while(|&&b| is_tchar(b)).count();
    (length > 0).then_some(&bytes[length..])
}

/// RFC 9110 §5.6.2: the characters of a token.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What follows a quoted-string at the front of `bytes` (RFC 9110 §5.6.4); `None` when
/// there is none, or it does not end on the line.
fn quoted_string(bytes: &[u8]) -> Option<&[u8]> {
    let (b'"', mut rest) = bytes.split_first()? else {
        return None;
    };
    loop {
        match rest.split_first()? {
            (b'"', after) => return Some(after),
            (b'\\', after) => {
                let (&escaped, after) = after.split_first()?;
                if !(escaped == b'\t' || escaped == b' ' || is_visible(escaped)) {
                    return None;
                }
                rest = after;
            }
            (&b, after) if b == b'\t' || b == b' ' || is_visible(b) => rest = after,
            _ => return None,
        }
    }
}

/// A visible character (VCHAR) or one of `obs-text` (0x80-0xFF).
fn is_visible(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::chunk_size;

    #[test]
    fn a_size_is_hexadecimal_digits() {
        assert_eq!(chunk_size(b"0"), Some(0));
        assert_eq!(chunk_size(b"5"), Some(5));
        assert_eq!(chunk_size(b"1aF"), Some(0x1af));
        assert_eq!(chunk_size(b"000000000000010"), Some(16), "15 digits");
        assert_eq!(
            chunk_size(b"fffffffffffffff"),
            Some((1 << 60) - 1),
            "the largest size"
        );
        assert_eq!(chunk_size(b"5 \t"), Some(5), "trailing whitespace");
    }

    #[test]
    fn extensions_are_tokens_with_token_or_quoted_values() {
        for line in [
            &b"5;a"[..],
            b"5;name=value",
            b"5 ; name = value ; other",
            b"5;a=\"quoted ; \\\" value\"",
            b"5;a=\"\"",
            b"5;a=b;c=\"d\";e",
            b"5;!#$%&'*+-.^_`|~=x",
            b"5;a=\"caf\xc3\xa9\"",
        ] {
            assert_eq!(
                chunk_size(line),
                Some(5),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for line in [
            &b""[..],
            b";a",
            b" 5",
            b"x",
            b"0x5",
            b"+5",
            b"-5",
            b"5x",
            b"5 5",
            b"0000000000000005",
            b"10000000000000000",
            b"5\r",
            b"5\rx",
            b"5;a\rb",
            b"5;a=\"b\rc\"",
            b"5;",
            b"5;=b",
            b"5;a=",
            b"5;a=b c",
            b"5;a=\"unterminated",
            b"5;a=\"bad\\\x01\"",
            b"5;a=\"nul\x00\"",
            b"5;a b",
            b"5;a=b=c",
            b"5;a,b",
            b"5;a=(b)",
            b"5\x0c",
            b"5\x00",
        ] {
            assert_eq!(
                chunk_size(line),
                None,
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
