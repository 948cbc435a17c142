//! `limits_store`: where limits shared by every replica live.

use super::raw::RawLimitsStore;
use super::upstream::credential;
use super::values::{ca_file, duration, Bounds, Errors};
use super::{LimitsStoreConfig, OnStoreError};
use redis::IntoConnectionInfo;
use std::num::NonZeroU32;
use std::time::Duration;

/// The section checked: a `redis://` or `rediss://` URL without a password (that comes from
/// `password_env`), the CA of a `rediss://` store if it is not the system's, a per-call
/// timeout, what to do when the store fails, and the namespace of its key names (by default
/// `environment`).
pub(super) fn limits_store(
    errors: &mut Errors,
    raw: Option<&RawLimitsStore>,
    environment: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<LimitsStoreConfig> {
    let raw = raw?;
    let before = errors.list.len();
    let url = match raw.url.as_deref() {
        None => {
            errors.push("limits_store.url", "is required");
            None
        }
        Some(url) => check_url(errors, url),
    };
    let cluster = raw.cluster.unwrap_or(false);
    if cluster
        && url
            .as_deref()
            .and_then(|u| u.into_connection_info().ok())
            .is_some_and(|info| info.redis_settings().db() != 0)
    {
        errors.push(
            "limits_store.url",
            "names a database other than 0, which a Redis Cluster does not have",
        );
    }
    let password = raw
        .password_env
        .as_deref()
        .and_then(|name| credential(errors, "limits_store.password_env", name, env));
    let ca = raw.ca_file.as_deref().and_then(|name| {
        if url.as_deref().is_some_and(|u| !u.starts_with("rediss://")) {
            errors.push("limits_store.ca_file", "only applies to a rediss:// url");
        }
        ca_file(errors, "limits_store.ca_file", name).map(|file| file.pem)
    });
    let timeout = duration(
        errors,
        "limits_store.timeout",
        raw.timeout.as_deref(),
        Duration::from_millis(50),
        Bounds::CONNECT,
    );
    let lease_lifetime = duration(
        errors,
        "limits_store.lease_lifetime",
        raw.lease_lifetime.as_deref(),
        Duration::from_secs(30),
        Bounds::LEASE,
    );
    let on_error = match raw.on_error.as_deref() {
        None | Some("local") => OnStoreError::Local,
        Some("open") => OnStoreError::Open,
        Some("closed") => OnStoreError::Closed,
        Some(other) => {
            errors.push(
                "limits_store.on_error",
                format!("'{other}' is not one of local, open, closed"),
            );
            OnStoreError::Local
        }
    };
    let expected_replicas = match raw.expected_replicas.map(NonZeroU32::new) {
        None => NonZeroU32::MIN,
        Some(Some(n)) => n,
        Some(None) => {
            errors.push("limits_store.expected_replicas", "must be at least 1");
            NonZeroU32::MIN
        }
    };
    let namespace = check_namespace(errors, raw.namespace.as_deref(), environment);
    if errors.list.len() > before {
        return None;
    }
    Some(LimitsStoreConfig {
        url: url?,
        cluster,
        password,
        ca,
        timeout: timeout?,
        on_error,
        expected_replicas,
        lease_lifetime: lease_lifetime?,
        namespace: namespace?,
    })
}

/// Longest namespace accepted.
const MAX_NAMESPACE_BYTES: usize = 64;

/// The namespace, or `environment` when none is set: 1-64 characters of `[A-Za-z0-9._-]`
/// (no `{` or `}`, which would change a key's Redis Cluster hash tag; no `:`, which
/// separates the parts of a key name).
fn check_namespace(
    errors: &mut Errors,
    namespace: Option<&str>,
    environment: &str,
) -> Option<String> {
    let value = namespace.unwrap_or(environment);
    let valid = (1..=MAX_NAMESPACE_BYTES).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        return Some(value.to_owned());
    }
    const CHARACTERS: &str = "1-64 characters of letters, digits, '.', '_' and '-'";
    let message = match namespace {
        Some(_) => format!("must be {CHARACTERS}"),
        None => format!(
            "is not set, and its default, the environment '{environment}', is not {CHARACTERS}: set one"
        ),
    };
    errors.push("limits_store.namespace", message);
    None
}

fn check_url(errors: &mut Errors, url: &str) -> Option<String> {
    let problem = if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        "must start with redis:// (or rediss:// for TLS)"
    } else if url.split_once("://").is_some_and(|(_, rest)| {
        rest.split('/')
            .next()
            .is_some_and(|authority| authority.contains('@'))
    }) {
        "must not carry a user or password: set password_env instead, so no secret sits in the file"
    } else {
        match url.into_connection_info() {
            Ok(_) => return Some(url.to_owned()),
            Err(_) => "is not a Redis URL (redis://host:port/db)",
        }
    };
    errors.push("limits_store.url", problem);
    None
}
