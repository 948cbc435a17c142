//! `GET /keys` and `GET /keys/{name}` on the admin listener: each key's settings, whether it
//! may be used now (and if not, why), and where its limits stand: as the limits store holds
//! them for every replica when there is one (`limits_source: store`), else as this
//! replica's limiter knows them (`this_replica`). A store that does not answer leaves the
//! windows `null` (`store_unreachable`): a replica's own counts say nothing of the key.
//!
//! Built from the catalog's key settings and the limiter's read-only view, never from the
//! hash map that holds the hashes: no hash, and nothing of a key, can appear in it.

use crate::catalog::Key;
use crate::clock::rfc3339;
use crate::gateway::Gateway;
use crate::limits::{format_usd, BudgetWindow, RateStatus, StoredLimits, TokenStatus, Window};
use serde_json::{json, Value};

/// Where a key's windows come from.
enum Source {
    ThisReplica,
    Store(StoredLimits),
    StoreUnreachable,
}

/// The key's windows from the store, when there is one. After one call that failed, the
/// rest are not tried (`reachable` turns false): a list must not wait a timeout per key.
async fn source(gateway: &Gateway, key: &Key, reachable: &mut bool) -> Source {
    let Some(store) = &gateway.admin_store else {
        return Source::ThisReplica;
    };
    if !*reachable {
        return Source::StoreUnreachable;
    }
    match store.limits(key).await {
        Some(limits) => Source::Store(limits),
        None => {
            *reachable = false;
            Source::StoreUnreachable
        }
    }
}

/// `GET /keys`: every key, in configuration order.
pub(super) async fn list(gateway: &Gateway) -> Value {
    let catalog = gateway.catalog();
    let mut reachable = true;
    let mut keys = Vec::with_capacity(catalog.keys().len());
    for key in catalog.keys() {
        let source = source(gateway, key, &mut reachable).await;
        let budget = budget_windows(gateway, key).await;
        keys.push(view(gateway, key, source, budget));
    }
    json!({
        "generation": catalog.generation,
        "now": rfc3339(gateway.wall_clock.unix_millis()),
        "keys": keys,
    })
}

/// `GET /keys/{name}`: one key, or `None` when no key has that name.
pub(super) async fn one(gateway: &Gateway, name: &str) -> Option<Value> {
    let catalog = gateway.catalog();
    let key = catalog.key_named(name)?;
    let source = source(gateway, key, &mut true).await;
    let budget = budget_windows(gateway, key).await;
    Some(view(gateway, key, source, budget))
}

/// One key as the admin view shows it.
fn view(gateway: &Gateway, key: &Key, source: Source, budget: Option<Vec<BudgetWindow>>) -> Value {
    let now_ms = gateway.wall_clock.unix_millis();
    let switch = gateway.key_switches.get(&key.name);
    let inactive = key.inactive(gateway.wall_clock.as_ref());
    let inactive_reason = match (&inactive, &switch) {
        (Some(why), _) => Some(why.name()),
        (None, Some(_)) => Some("switched_off"),
        (None, None) => None,
    };
    let usage = gateway.limiter.usage(key);
    let (source_name, rate, token_windows, in_flight) = match source {
        Source::ThisReplica => (
            "this_replica",
            usage.rate,
            gateway.limiter.token_windows(key),
            Some(u64::from(usage.in_flight)),
        ),
        Source::Store(stored) => ("store", stored.rate, stored.tokens, Some(stored.in_flight)),
        Source::StoreUnreachable => ("store_unreachable", None, Vec::new(), None),
    };
    let requests = rate.map(|rate: RateStatus| {
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
        "active": inactive_reason.is_none(),
        "inactive_reason": inactive_reason,
        "switched_off": switch.map(|s| json!({"by": s.by, "at": rfc3339(s.at_unix_ms)})),
        "limits_source": source_name,
        "requests": requests,
        "tokens": tokens(&token_windows),
        "budget": budget.as_deref().map_or(Value::Null, budget_view),
        "in_flight": in_flight,
        "last_used": last_used_ms.map(rfc3339),
        "last_used_seconds_ago": usage.since_last_request.map(|since| since.as_secs_f64()),
    })
}

/// The key's token windows (`null` without token limits): each one's limit, what is used
/// and left of it now, and the time until it is full again.
fn tokens(windows: &[TokenStatus]) -> Value {
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

/// The key's budget windows: from the limits store when there is one (`None` when it does
/// not answer), else this replica's ledger.
async fn budget_windows(gateway: &Gateway, key: &Key) -> Option<Vec<BudgetWindow>> {
    if !crate::limits::Budgets::applies(key) {
        return Some(Vec::new());
    }
    match &gateway.limits_store {
        Some(store) => {
            store
                .budget_windows(key, gateway.wall_clock.unix_millis())
                .await
        }
        None => Some(gateway.budgets.windows(key)),
    }
}

/// The key's money budgets and its owner's (`null` without any): each window's limit, spend and what is left in USD, and its reset.
fn budget_view(windows: &[BudgetWindow]) -> Value {
    if windows.is_empty() {
        return Value::Null;
    }
    let entries: Vec<Value> = windows
        .iter()
        .map(|w| {
            json!({
                "scope": w.scope.name(),
                "name": w.name,
                "window": w.period.name(),
                "limit_usd": format_usd(w.limit_micros),
                "spent_usd": format_usd(w.spent_micros),
                "remaining_usd": format_usd(w.remaining_micros()),
                "resets_at": rfc3339(w.resets_at_unix_ms),
            })
        })
        .collect();
    Value::Array(entries)
}
