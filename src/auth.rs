//! Bearer API keys: parse the header, hash the key, look the hash up, and check that the
//! key it names may be used now (not disabled, not before its `not_before`, not past its
//! `expires_at`, against the wall clock, so expiry needs no reload).
//!
//! The lookup compares SHA-256 digests in a hash map, so its timing depends on the digest,
//! never on how many leading characters of the key were right.

use crate::catalog::{Catalog, Key};
use crate::clock::WallClock;
use crate::error::RequestError;
use crate::secret::KeyHash;
use std::sync::Arc;

/// A request that did not authenticate.
#[derive(Debug)]
pub struct Refused {
    pub error: RequestError,
    /// The key the request named, when it is a known key that may not be used now: its
    /// name goes into the access log and the rejection count, never into the answer.
    pub key: Option<Arc<Key>>,
}

impl From<RequestError> for Refused {
    fn from(error: RequestError) -> Self {
        Refused { error, key: None }
    }
}

/// The key a request authenticates as, from its `Authorization` header value.
pub fn authenticate(
    catalog: &Catalog,
    authorization: Option<&[u8]>,
    clock: &dyn WallClock,
) -> Result<Arc<Key>, Refused> {
    let token = authorization
        .and_then(bearer_token)
        .ok_or(RequestError::MissingApiKey)?;
    let key = catalog
        .key(&KeyHash::of(token))
        .ok_or(RequestError::InvalidApiKey)?;
    match key.inactive(clock) {
        None => Ok(Arc::clone(key)),
        Some(why) => Err(Refused {
            error: RequestError::InactiveApiKey { why },
            key: Some(Arc::clone(key)),
        }),
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
