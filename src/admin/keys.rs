//! `GET /keys` and `GET /keys/{name}` on the admin listener: each key's settings, whether it
//! may be used now (and if not, why), and what the limiter knows of it on this replica.
//!
//! Built from the catalog's key settings and the limiter's read-only view, never from the
//! hash map that holds the hashes: no hash, and nothing of a key, can appear in it.

use crate::catalog::Key;
use crate::clock::rfc3339;
use crate::gateway::Gateway;
use crate::limits::Window;
use serde_json::{json, Value};

/// `GET /keys`: every key, in configuration order.
pub(super) fn list(gateway: &Gateway) -> Value {
    let catalog = gateway.catalog();
    let keys: Vec<Value> = catalog.keys().iter().map(|k| view(gateway, k)).collect();
    json!({
        "generation": catalog.generation,
        "now": rfc3339(gateway.wall_clock.unix_millis()),
        "keys": keys,
    })
}

/// `GET /keys/{name}`: one key, or `None` when no key has that name.
pub(super) fn one(gateway: &Gateway, name: &str) -> Option<Value> {
    let catalog = gateway.catalog();
    catalog.key_named(name).map(|key| view(gateway, key))
}

/// One key as the admin view shows it.
fn view(gateway: &Gateway, key: &Key) -> Value {
    let now_ms = gateway.wall_clock.unix_millis();
    let inactive = key.inactive(gateway.wall_clock.as_ref());
    let usage = gateway.limiter.usage(key);
    let requests = usage.rate.map(|rate| {
        let burst = key.burst.or(key.requests_per_minute).map_or(0, |b| b.get());
        json!({
            "limit_per_minute": rate.limit,
            "burst": burst,
            "used": burst.saturating_sub(rate.remaining),
            "remaining": rate.remaining,
            "reset_ms": rate.reset.as_millis() as u64,
        })
    });
    let last_used_ms = usage
        .since_last_request
        .map(|since| now_ms - since.as_millis() as i64);
    json!({
        "name": key.name,
        "owner": key.owner,
        "labels": key.labels,
        "models": key.models,
        "limits": {
            "requests_per_minute": key.requests_per_minute.map(|n| n.get()),
            "burst": key.burst.map(|n| n.get()),
            "max_concurrent": key.max_concurrent.map(|n| n.get()),
            "tokens_per_minute": key.tokens_per_minute.map(|n| n.get()),
            "tokens_per_day": key.tokens_per_day.map(|n| n.get()),
        },
        "not_before": key.not_before_unix_ms.map(rfc3339),
        "expires_at": key.expires_at_unix_ms.map(rfc3339),
        "expires_in_seconds": key.expires_at_unix_ms.map(|at| (at - now_ms).div_euclid(1000)),
        "active": inactive.is_none(),
        "inactive_reason": inactive.map(|why| why.name()),
        "requests": requests,
        "tokens": tokens(gateway, key),
        "in_flight": usage.in_flight,
        "last_used": last_used_ms.map(rfc3339),
        "last_used_seconds_ago": usage.since_last_request.map(|since| since.as_secs_f64()),
    })
}

/// The key's token windows (`null` without token limits): each one's limit, what is used
/// and left of it now, and the time until it is full again.
fn tokens(gateway: &Gateway, key: &Key) -> Value {
    let windows = gateway.limiter.token_windows(key);
    if windows.is_empty() {
        return Value::Null;
    }
    let entries = windows.iter().map(|status| {
        let name = match status.window {
            Window::Minute => "per_minute",
            Window::Day => "per_day",
        };
        let view = json!({
            "limit": status.limit,
            "used": status.limit.saturating_sub(status.remaining),
            "remaining": status.remaining,
            "reset_ms": status.reset.as_millis() as u64,
        });
        (name.to_owned(), view)
    });
    Value::Object(entries.collect())
}
