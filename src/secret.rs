//! Secrets that cannot be printed: upstream credentials and API key hashes.

use sha2::{Digest, Sha256};
use std::fmt;

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
