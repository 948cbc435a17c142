//! The tokens of a message's `Connection` fields: whether it asks to close or to keep the
//! connection, and which fields it names as hop-by-hop (RFC 9110 §7.6.1). Read for client
//! requests (`http1/server.rs`), upstream requests and upstream answers.

use http::header;

/// The tokens of a message's `Connection` fields, read where they stand: most messages
/// name one or none, and a copy of each (as `String`s) cost an allocation per message.
pub struct ConnectionTokens<'a> {
    values: http::header::GetAll<'a, http::HeaderValue>,
    /// A token other than `close` and `keep-alive` (the usual ones) is there: only then
    /// can a field name be one of them, checked for every field.
    names_fields: bool,
}

impl<'a> ConnectionTokens<'a> {
    pub fn of(headers: &'a http::HeaderMap) -> Self {
        let values = headers.get_all(header::CONNECTION);
        let names_fields = tokens(&values)
            .any(|t| !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"));
        ConnectionTokens {
            values,
            names_fields,
        }
    }

    /// Whether a message of `version` with these tokens lets its connection carry another:
    /// HTTP/1.1 unless it says `close`, HTTP/1.0 only when it says `keep-alive`.
    pub fn keep_alive(&self, version: http::Version) -> bool {
        match version {
            _ if self.contains("close") => false,
            http::Version::HTTP_10 => self.contains("keep-alive"),
            _ => true,
        }
    }

    /// `token` (lowercase) is among them, in any case.
    pub fn contains(&self, token: &str) -> bool {
        let usual = matches!(token, "close" | "keep-alive");
        (usual || self.names_fields)
            && tokens(&self.values).any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
    }
}

/// The comma-separated tokens of `Connection` values, trimmed, empty ones left out.
fn tokens<'a>(
    values: &http::header::GetAll<'a, http::HeaderValue>,
) -> impl Iterator<Item = &'a [u8]> {
    values
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_tokens_are_found_in_any_case_and_the_usual_ones_cost_nothing() {
        let mut headers = http::HeaderMap::new();
        let none = ConnectionTokens::of(&headers);
        assert!(!none.contains("close") && !none.contains("x-drop-me"));
        headers.append(header::CONNECTION, "Keep-Alive".parse().unwrap());
        let usual = ConnectionTokens::of(&headers);
        assert!(usual.contains("keep-alive") && !usual.names_fields);
        assert!(!usual.contains("close") && !usual.contains("x-drop-me"));
        headers.append(header::CONNECTION, " close ,, X-Drop-Me ".parse().unwrap());
        let named = ConnectionTokens::of(&headers);
        assert!(named.names_fields);
        assert!(named.contains("x-drop-me") && named.contains("close"));
        assert!(!named.contains("x-drop") && !named.contains(""));
    }

    #[test]
    fn http_1_1_keeps_unless_closed_and_http_1_0_only_when_asked() {
        let keeps = |values: &[&str], version| {
            let mut headers = http::HeaderMap::new();
            for value in values {
                headers.append(header::CONNECTION, value.parse().unwrap());
            }
            ConnectionTokens::of(&headers).keep_alive(version)
        };
        const HTTP_10: http::Version = http::Version::HTTP_10;
        const HTTP_11: http::Version = http::Version::HTTP_11;
        assert!(keeps(&[], HTTP_11) && keeps(&["upgrade"], HTTP_11));
        assert!(!keeps(&["Close"], HTTP_11) && !keeps(&["keep-alive", "close"], HTTP_11));
        assert!(!keeps(&[], HTTP_10) && keeps(&["Keep-Alive"], HTTP_10));
        assert!(!keeps(&["keep-alive, close"], HTTP_10));
    }
}
