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
    let key = catalog.key_named(name).ok_or(AdminError::UnknownKey)?;
    let at_unix_ms = gateway.wall_clock.unix_millis();
    let switch = disable.then(|| Switch {
        by: caller.name().to_owned(),
        at_unix_ms,
    });
    // The store first: a switch it did not take would be undone here by the next read of
    // the store's switches, and would never reach the other replicas.
    let shared = match &gateway.admin_store {
        Some(store) => {
            if !store.switch(&key.name, switch.as_ref()).await {
                return Err(AdminError::StoreUnavailable);
            }
            true
        }
        None => false,
    };
    gateway.key_switches.set(&key.name, switch);
    let action = if disable { "disable_key" } else { "enable_key" };
    log::info!(
        target: "sluice::audit",
        action,
        key = key.name.as_str(),
        by = caller.name(),
        at:% = rfc3339(at_unix_ms),
        shared;
        "admin action"
    );
    let active = key.inactive(gateway.wall_clock.as_ref()).is_none() && !disable;
    Ok(json!({
        "name": key.name,
        "switched_off": disable,
        "by": caller.name(),
        "at": rfc3339(at_unix_ms),
        "shared": shared,
        "active": active,
    }))
}
