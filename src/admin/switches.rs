//! `POST /keys/{name}/disable` and `/enable`: switch a key off (or back on) at once, on
//! every replica when there is a limits store (`key_switches.rs`), with an audit line that
//! says who, what and when.

use super::auth::{AdminError, Caller};
use crate::clock::rfc3339;
use crate::gateway::Gateway;
use crate::key_switches::Switch;
use serde_json::{json, Value};

/// Switches the key `name` off (`disable`) or back on, and answers with its state.
pub(super) async fn switch(
    gateway: &Gateway,
    name: &str,
    disable: bool,
    caller: &Caller,
) -> Result<Value, AdminError> {
    let catalog = gateway.catalog();
    let key = catalog.key_named(name);
    // A key removed from the configuration while switched off can still be switched back
    // on (so a switch does not outlive its key unseen); it cannot be switched off.
    if key.is_none() && (disable || gateway.key_switches.get(name).is_none()) {
        return Err(AdminError::UnknownKey);
    }
    let at_unix_ms = gateway.wall_clock.unix_millis();
    let switch = disable.then(|| Switch {
        by: caller.name().to_owned(),
        at_unix_ms,
    });
    // The store first: a switch it did not take would be undone here by the next read of
    // the store's switches, and would never reach the other replicas.
    let shared = match &gateway.admin_store {
        Some(store) => {
            if !store.switch(name, switch.as_ref()).await {
                return Err(AdminError::StoreUnavailable);
            }
            true
        }
        None => false,
    };
    gateway.key_switches.set(name, switch);
    let action = if disable { "disable_key" } else { "enable_key" };
    log::info!(
        target: "sluice::audit",
        action,
        key = name,
        by = caller.name(),
        at:% = rfc3339(at_unix_ms),
        shared;
        "admin action"
    );
    let active =
        key.is_some_and(|key| key.inactive(gateway.wall_clock.as_ref()).is_none()) && !disable;
    Ok(json!({
        "name": name,
        "switched_off": disable,
        "by": caller.name(),
        "at": rfc3339(at_unix_ms),
        "shared": shared,
        "active": active,
    }))
}
