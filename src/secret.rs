//! Secrets that cannot be printed: upstream credentials and API key hashes.

use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fmt;

/// What a secret found in text is replaced by.
pub const REDACTED: &str = "[redacted]";

/// A credential held in memory. `Debug` and `Display` print `[redacted]`; the value is
/// reachable only through [`Secret::expose`], which names every place that uses it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The secret value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with this secret replaced by [`REDACTED`] wherever it appears, together with
    /// the `scheme` and space before it when they are there (`Bearer sk-1` becomes
    /// `[redacted]`; the scheme is matched in any case). For text an upstream sent back
    /// that may echo the credential the gateway gave it: an error message, a request id.
    pub fn redact<'t>(&self, text: &'t [u8], scheme: &str) -> Cow<'t, [u8]> {
        let secret = self.0.as_bytes();
        if secret.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut found = memchr::memmem::find_iter(text, secret).peekable();
        if found.peek().is_none() {
            return Cow::Borrowed(text);
        }
        let mut out = Vec::with_capacity(text.len());
        let mut copied = 0;
        for at in found {
            if at < copied {
                // Overlaps the occurrence just replaced.
                continue;
            }
            let mut start = at;
            if !scheme.is_empty() {
                let before = &text[copied..at];
                let prefix_len = scheme.len() + 1;
                if before.len() >= prefix_len {
                    let prefix = &before[before.len() - prefix_len..];
                    if prefix[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
                        && prefix[scheme.len()] == b' '
                    {
                        start = at - prefix_len;
                    }
                }
            }
            out.extend_from_slice(&text[copied..start]);
            out.extend_from_slice(REDACTED.as_bytes());
            copied = at + secret.len();
        }
        out.extend_from_slice(&text[copied..]);
        Cow::Owned(out)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The SHA-256 of a client API key: what the configuration stores and lookups compare.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash([u8; 32]);

impl KeyHash {
    /// Hashes a presented key.
    pub fn of(key: &[u8]) -> Self {
        KeyHash(Sha256::digest(key).into())
    }

    /// Parses 64 hexadecimal digits, either case.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let high = (pair[0] as char).to_digit(16)?;
            let low = (pair[1] as char).to_digit(16)?;
            out[i] = (high * 16 + low) as u8;
        }
        Some(KeyHash(out))
    }

    /// Equality whose time does not depend on where the digests differ (admin tokens are
    /// compared one by one, not looked up in a map).
    pub fn matches(&self, other: &KeyHash) -> bool {
        let difference = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A hash is not the key, but printing it invites copying it around; show a prefix.
        write!(f, "KeyHash({}…)", &self.to_hex()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_format() {
        let secret = Secret::new("sk-very-secret".into());
        assert_eq!(format!("{secret:?} {secret}"), "[redacted] [redacted]");
        assert_eq!(secret.expose(), "sk-very-secret");
    }

    #[test]
    fn a_secret_and_its_scheme_are_redacted_in_text() {
        let secret = Secret::new("up-cred-42".into());
        let redact = |text: &str, scheme: &str| {
            String::from_utf8(secret.redact(text.as_bytes(), scheme).into_owned()).unwrap()
        };
        assert_eq!(
            redact(
                r#"{"error":"bad key: Bearer up-cred-42 rejected"}"#,
                "Bearer"
            ),
            r#"{"error":"bad key: [redacted] rejected"}"#
        );
        assert_eq!(
            redact("bearer up-cred-42, up-cred-42up-cred-42.", "Bearer"),
            "[redacted], [redacted][redacted].",
            "any case of the scheme; every occurrence"
        );
        assert_eq!(redact("key=up-cred-42", ""), "key=[redacted]");
        assert_eq!(redact("up-cred-4 up-cred", "Bearer"), "up-cred-4 up-cred");
        assert!(matches!(
            secret.redact(b"nothing here", "Bearer"),
            Cow::Borrowed(_)
        ));
        let overlapping = Secret::new("aa".into());
        assert_eq!(&*overlapping.redact(b"aaa", ""), b"[redacted]a");
    }

    #[test]
    fn hex_round_trips_and_matches_sha256() {
        let hash = KeyHash::of(b"test");
        assert_eq!(
            hash.to_hex(),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        assert_eq!(KeyHash::from_hex(&hash.to_hex().to_uppercase()), Some(hash));
        assert_eq!(KeyHash::from_hex("zz"), None);
        assert_eq!(KeyHash::from_hex(&"g".repeat(64)), None);
    }
}
