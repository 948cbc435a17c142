//! Who may use the admin listener's protected endpoints, and the errors its answers carry.
//!
//! `/metrics`, `/healthz` and `/readyz` are open (probes and Prometheus send no token).
//! Everything else needs `Authorization: Bearer <token>` with a token of `admin_tokens`;
//! with none configured, only an admin listener bound to a loopback address serves them
//! (to the host's own processes), and any other answers 403. A token is hashed and
//! compared with every configured hash in constant time, so neither the time nor the
//! order of tokens tells which bytes were right.

use crate::catalog::Catalog;
use crate::secret::KeyHash;

/// Who made an admin request, as audit lines name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A configured token, by its name.
    Token(String),
    /// No token configured, on a loopback admin listener: a process of the same host.
    Loopback,
}

impl Caller {
    pub fn name(&self) -> &str {
        match self {
            Caller::Token(name) => name,
            Caller::Loopback => "loopback",
        }
    }
}

/// An answer of the admin listener that is not a success, in the gateway's error envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// No `Authorization: Bearer` header.
    TokenRequired,
    /// A token that is not one of `admin_tokens`.
    InvalidToken,
    /// No `admin_tokens`, and the admin listener is not on a loopback address.
    TokensNotConfigured,
    UnknownKey,
    UnknownPath,
    MethodNotAllowed,
    /// The limits store did not take a key switch; nothing changed.
    StoreUnavailable,
}

impl AdminError {
    pub fn status(&self) -> u16 {
        match self {
            AdminError::TokenRequired | AdminError::InvalidToken => 401,
            AdminError::TokensNotConfigured => 403,
            AdminError::UnknownKey | AdminError::UnknownPath => 404,
            AdminError::MethodNotAllowed => 405,
            AdminError::StoreUnavailable => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            AdminError::TokenRequired => "missing_admin_token",
            AdminError::InvalidToken => "invalid_admin_token",
            AdminError::TokensNotConfigured => "admin_tokens_not_configured",
            AdminError::UnknownKey => "unknown_key",
            AdminError::UnknownPath => "unknown_route",
            AdminError::MethodNotAllowed => "method_not_allowed",
            AdminError::StoreUnavailable => "limits_unavailable",
        }
    }

    fn error_type(&self) -> &'static str {
        match self {
            AdminError::TokenRequired | AdminError::InvalidToken => "authentication_error",
            AdminError::TokensNotConfigured => "permission_error",
            AdminError::StoreUnavailable => "server_error",
            _ => "invalid_request_error",
        }
    }

    fn message(&self) -> &'static str {
        match self {
            AdminError::TokenRequired => {
                "This admin endpoint needs a token: send \
                `Authorization: Bearer <admin token>`."
            }
            AdminError::InvalidToken => "The admin token is not valid.",
            AdminError::TokensNotConfigured => {
                "This admin endpoint is served only to a \
                token of admin_tokens, and none is configured (or to the host itself, when \
                admin_listen is a loopback address)."
            }
            AdminError::UnknownKey => "No key has this name; GET /keys lists them.",
            AdminError::UnknownPath => {
                "No such admin route: try /metrics, /healthz, /readyz, \
                /keys, /keys/{name}, or POST /keys/{name}/disable or /enable."
            }
            AdminError::MethodNotAllowed => "This admin route does not take this method.",
            AdminError::StoreUnavailable => {
                "The limits store did not answer, so the change \
                would not reach the other replicas: nothing was changed. Retry, or use the \
                keys file."
            }
        }
    }

    /// The OpenAI-shaped error envelope.
    pub fn envelope(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message(),
                "type": self.error_type(),
                "param": null,
                "code": self.code(),
            }
        })
    }
}

/// The caller of a protected endpoint, from the request's `Authorization` value.
pub fn authorize(
    catalog: &Catalog,
    loopback_listener: bool,
    authorization: Option<&[u8]>,
) -> Result<Caller, AdminError> {
    if catalog.admin_tokens.is_empty() {
        return if loopback_listener {
            Ok(Caller::Loopback)
        } else {
            Err(AdminError::TokensNotConfigured)
        };
    }
    let token = authorization
        .and_then(bearer_token)
        .ok_or(AdminError::TokenRequired)?;
    let presented = KeyHash::of(token);
    // Every token is compared, whichever matches: the time is the same for all.
    let mut caller = None;
    for token in &catalog.admin_tokens {
        if token.hash.matches(&presented) && caller.is_none() {
            caller = Some(token.name.clone());
        }
    }
    caller.map(Caller::Token).ok_or(AdminError::InvalidToken)
}

/// The token of `Bearer <token>` (scheme case-insensitive), or `None` when malformed.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    let token = rest.trim_ascii();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty() && !token.contains(&b' '))
        .then_some(token)
}
