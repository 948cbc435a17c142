//! The tokens of a message's `Connection` fields: whether it asks to close or to keep the
//! connection, and which fields it names as hop-by-hop (RFC 9110 §7.6.1). Read for client
//! requests (`http1/server.rs`), upstream requests and upstream answers.

use http::header;

/// What a message's `Connection` values say, gathered as its head's fields are read
/// (`head.rs`): no look-up in the field map afterwards. Most messages name `close` or
/// `keep-alive` or nothing; only another token sends [`ConnectionTokens`] to the values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionFacts {
    close: bool,
    keep_alive: bool,
    /// A token other than `close` and `keep-alive` is there: only then can a field name be
    /// one of them.
    names_fields: bool,
}

impl ConnectionFacts {
    /// Adds one `Connection` value's tokens.
    pub fn add(&mut self, value: &[u8]) {
        for token in value_tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else {
                self.names_fields = true;
            }
        }
    }

    /// The facts of every `Connection` value in `headers` (the tests' reference).
    #[cfg(test)]
    pub fn of(headers: &http::HeaderMap) -> Self {
        let mut facts = ConnectionFacts::default();
        for value in headers.get_all(header::CONNECTION) {
            facts.add(value.as_bytes());
        }
        facts
    }

    /// Whether a message of `version` with these tokens lets its connection carry another:
    /// HTTP/1.1 unless it says `close`, HTTP/1.0 only when it says `keep-alive`.
    pub fn keep_alive(&self, version: http::Version) -> bool {
        match version {
            _ if self.close => false,
            http::Version::HTTP_10 => self.keep_alive,
            _ => true,
        }
    }
}

/// The tokens of a message's `Connection` fields, read where they stand: most messages
/// name one or none, and a copy of each (as `String`s) cost an allocation per message.
pub struct ConnectionTokens<'a> {
    /// The values, looked up only when a token may name a field.
    values: Option<http::header::GetAll<'a, http::HeaderValue>>,
    facts: ConnectionFacts,
}

impl<'a> ConnectionTokens<'a> {
    pub fn of(headers: &'a http::HeaderMap) -> Self {
        let values = headers.get_all(header::CONNECTION);
        let mut facts = ConnectionFacts::default();
        for value in &values {
            facts.add(value.as_bytes());
        }
        ConnectionTokens {
            values: facts.names_fields.then_some(values),
            facts,
        }
    }

    /// The tokens of `headers`, whose `Connection` values gave `facts` as they were read:
    /// the values are looked up again only when a token may name a field.
    pub fn with_facts(headers: &'a http::HeaderMap, facts: ConnectionFacts) -> Self {
        ConnectionTokens {
            values: facts
                .names_fields
                .then(|| headers.get_all(header::CONNECTION)),
            facts,
        }
    }

    /// Whether a message of `version` with these tokens lets its connection carry another:
    /// HTTP/1.1 unless it says `close`, HTTP/1.0 only when it says `keep-alive`.
    pub fn keep_alive(&self, version: http::Version) -> bool {
        self.facts.keep_alive(version)
    }

    /// `token` (lowercase) is among them, in any case.
    pub fn contains(&self, token: &str) -> bool {
        match token {
            "close" => self.facts.close,
            "keep-alive" => self.facts.keep_alive,
            _ => self.values.as_ref().is_some_and(|values| {
                values
                    .iter()
                    .flat_map(|v| value_tokens(v.as_bytes()))
                    .any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
            }),
        }
    }
}

/// One `Connection` value's comma-separated tokens, trimmed, empty ones left out.
fn value_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
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
        assert!(usual.contains("keep-alive") && !usual.facts.names_fields);
        assert!(!usual.contains("close") && !usual.contains("x-drop-me"));
        headers.append(header::CONNECTION, " close ,, X-Drop-Me ".parse().unwrap());
        let named = ConnectionTokens::of(&headers);
        assert!(named.facts.names_fields);
        assert!(named.contains("x-drop-me") && named.contains("close"));
        assert!(!named.contains("x-drop") && !named.contains(""));
    }

    #[test]
    fn facts_gathered_value_by_value_answer_as_the_map_does() {
        let cases: [&[&str]; 7] = [
            &[],
            &["Keep-Alive"],
            &["close"],
            &[" close ,, X-Drop-Me "],
            &["keep-alive", "Upgrade"],
            &[",", "  "],
            &["CLOSE, keep-alive"],
        ];
        for values in cases {
            let mut headers = http::HeaderMap::new();
            let mut facts = ConnectionFacts::default();
            for value in values {
                headers.append(header::CONNECTION, value.parse().unwrap());
                facts.add(value.as_bytes());
            }
            assert_eq!(facts, ConnectionFacts::of(&headers), "{values:?}");
            let (looked_up, gathered) = (
                ConnectionTokens::of(&headers),
                ConnectionTokens::with_facts(&headers, facts),
            );
            // Plainly: the trimmed, non-empty tokens of every value, compared in any case.
            let listed = |token: &str| {
                values
                    .iter()
                    .flat_map(|v| v.split(','))
                    .map(str::trim)
                    .any(|t| !t.is_empty() && t.eq_ignore_ascii_case(token))
            };
            for token in ["close", "keep-alive", "x-drop-me", "upgrade", "", "x-drop"] {
                assert_eq!(
                    looked_up.contains(token),
                    listed(token),
                    "{values:?} {token}"
                );
                assert_eq!(
                    gathered.contains(token),
                    listed(token),
                    "{values:?} {token}"
                );
            }
            for version in [http::Version::HTTP_10, http::Version::HTTP_11] {
                assert_eq!(looked_up.keep_alive(version), facts.keep_alive(version));
            }
        }
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
