//! API keys: read the key from `Authorization: Bearer` or `x-api-key` (Anthropic's SDKs
//! send the latter; both with different keys is refused), hash the key, look the hash up, and check that the
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
    authenticate_either(catalog, authorization, None, clock)
}

/// The key a request authenticates as, from its `Authorization` and `x-api-key` values.
pub fn authenticate_either(
    catalog: &Catalog,
    authorization: Option<&[u8]>,
    x_api_key: Option<&[u8]>,
    clock: &dyn WallClock,
) -> Result<Arc<Key>, Refused> {
    let token = presented_key(authorization, x_api_key)?;
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

/// The key the request presents: `Authorization: Bearer <key>`, or `x-api-key: <key>`.
/// Both, with different keys, is refused: the gateway must not pick one of two identities.
fn presented_key<'a>(
    authorization: Option<&'a [u8]>,
    x_api_key: Option<&'a [u8]>,
) -> Result<&'a [u8], RequestError> {
    let x_api_key = x_api_key.map(<[u8]>::trim_ascii).filter(|k| !k.is_empty());
    match (authorization, x_api_key) {
        (None, None) => Err(RequestError::MissingApiKey),
        (None, Some(key)) => Ok(key),
        (Some(value), other) => {
            let token = bearer_token(value).ok_or(RequestError::MissingApiKey)?;
            match other {
                Some(key) if key != token => Err(RequestError::ConflictingApiKeys),
                _ => Ok(token),
            }
        }
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

    #[test]
    fn a_key_may_come_in_either_header_but_not_two_different_ones() {
        type Case<'a> = (
            Option<&'a [u8]>,
            Option<&'a [u8]>,
            Result<&'a [u8], RequestError>,
        );
        let table: [Case; 6] = [
            (Some(b"Bearer k1"), None, Ok(b"k1")),
            (None, Some(b"k1"), Ok(b"k1")),
            (Some(b"Bearer k1"), Some(b"k1"), Ok(b"k1")),
            (
                Some(b"Bearer k1"),
                Some(b"k2"),
                Err(RequestError::ConflictingApiKeys),
            ),
            (None, Some(b"  "), Err(RequestError::MissingApiKey)),
            (
                Some(b"Basic x"),
                Some(b"k1"),
                Err(RequestError::MissingApiKey),
            ),
        ];
        for (authorization, x_api_key, expected) in table {
            assert_eq!(
                presented_key(authorization, x_api_key),
                expected,
                "{authorization:?} {x_api_key:?}"
            );
        }
    }
}
