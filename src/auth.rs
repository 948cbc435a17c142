//! Bearer API keys: parse the header, hash the key, look the hash up.
//!
//! The lookup compares SHA-256 digests in a hash map, so its timing depends on the digest,
//! never on how many leading characters of the key were right.

use crate::catalog::{Catalog, Key};
use crate::error::RequestError;
use crate::secret::KeyHash;
use std::sync::Arc;

/// The key a request authenticates as, from its `Authorization` header value.
pub fn authenticate(
    catalog: &Catalog,
    authorization: Option<&[u8]>,
) -> Result<Arc<Key>, RequestError> {
    let token = authorization
        .and_then(bearer_token)
        .ok_or(RequestError::MissingApiKey)?;
    match catalog.key(&KeyHash::of(token)) {
        Some(key) if key.enabled => Ok(Arc::clone(key)),
        _ => Err(RequestError::InvalidApiKey),
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive), or `None` when malformed.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty() && !token.contains(&b' ')).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_parsed_strictly() {
        assert_eq!(bearer_token(b"Bearer sk-abc"), Some(&b"sk-abc"[..]));
        assert_eq!(bearer_token(b"bearer   sk-abc "), Some(&b"sk-abc"[..]));
        assert_eq!(bearer_token(b"Basic c2stYWJj"), None);
        assert_eq!(bearer_token(b"Bearer"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"Bearer a b"), None);
        assert_eq!(bearer_token(b"sk-abc"), None);
    }
}
