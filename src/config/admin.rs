//! `admin_tokens` and `admin_token_env`: who may use the admin listener's protected
//! endpoints (`/keys`, the key switches), each token with a name that audit lines carry.

use super::parsed::items;
use super::raw::RawAdminToken;
use super::upstream::credential;
use super::values::{check_unique, required_name, Errors};
use crate::secret::KeyHash;
use std::net::SocketAddr;

/// A token of the admin listener: its name (in audit lines) and the SHA-256 of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub name: String,
    pub hash: KeyHash,
}

/// The name `admin_token_env`'s token goes by in audit lines.
pub const ENV_TOKEN_NAME: &str = "admin";

/// Every token: `admin_token_env`'s (named `admin`) first, then the list's entries, each
/// `{name, sha256}` (the token's SHA-256, as `sluice key` prints it) or `{name, token_env}`
/// (the token itself in an environment variable). Names are unique. Without any token, an
/// admin listener on a non-loopback address serves only `/metrics`, `/healthz` and
/// `/readyz`, which is warned about.
pub(super) fn admin_tokens(
    errors: &mut Errors,
    token_env: Option<&str>,
    list: Option<Vec<serde_yaml::Value>>,
    admin_listen: Option<SocketAddr>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<AdminToken> {
    let mut tokens = Vec::new();
    // Where each token was written, for a duplicate's message.
    let mut paths = Vec::new();
    if let Some(name) = token_env {
        if let Some(token) = credential(errors, "admin_token_env", name, env) {
            paths.push("admin_token_env".to_string());
            tokens.push(AdminToken {
                name: ENV_TOKEN_NAME.into(),
                hash: KeyHash::of(token.expose().as_bytes()),
            });
        }
    }
    for parsed in items::<RawAdminToken>(errors, "admin_tokens", list.unwrap_or_default()) {
        let raw = &parsed.raw;
        let name = required_name(
            errors,
            parsed.at("name"),
            raw.name.as_deref(),
            parsed.unreadable("name"),
        );
        let hash = match (raw.sha256.as_deref(), raw.token_env.as_deref()) {
            (Some(hex), None) => KeyHash::from_hex(hex).or_else(|| {
                errors.push(parsed.at("sha256"), "must be 64 hexadecimal digits");
                None
            }),
            (None, Some(variable)) => credential(errors, &parsed.at("token_env"), variable, env)
                .map(|token| KeyHash::of(token.expose().as_bytes())),
            (Some(_), Some(_)) => {
                errors.push(
                    parsed.path.clone(),
                    "has both sha256 and token_env: keep one",
                );
                None
            }
            (None, None) if parsed.has_unreadable() => None,
            (None, None) => {
                errors.push(
                    parsed.path.clone(),
                    "needs sha256 (the token's SHA-256) or token_env (a variable holding it)",
                );
                None
            }
        };
        if let (Some(name), Some(hash)) = (name, hash) {
            paths.push(parsed.path.clone());
            tokens.push(AdminToken {
                name: name.to_owned(),
                hash,
            });
        }
    }
    let names = paths
        .iter()
        .map(String::as_str)
        .zip(tokens.iter().map(|t| t.name.as_str()));
    check_unique(errors, "name", names);
    if tokens.is_empty() && admin_listen.is_some_and(|addr| !addr.ip().is_loopback()) {
        errors.warn(
            "admin_listen",
            "is not a loopback address and no admin_tokens are set: /keys and the key \
             switches answer 403 until one is",
        );
    }
    tokens
}
