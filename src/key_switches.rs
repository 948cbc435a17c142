//! Keys switched off at run time (`POST /keys/{name}/disable`, undone by `/enable`), on top
//! of what the configuration says. Admission reads a local map, never the store: with a
//! limits store, the map is the store's (every replica's switches, read again every
//! second), so a switch reaches every replica within about a second and costs requests no
//! round trip.
//!
//! A switch only ever turns a key off: `enable` undoes a `disable`, never a key's
//! `disabled: true` in the keys file. Without a limits store a switch holds for this
//! process only, until it stops.

use crate::gateway::Gateway;
use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the store's switches are read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// Who switched a key off, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub by: String,
    pub at_unix_ms: i64,
}

/// The keys switched off now, by name.
#[derive(Default)]
pub struct KeySwitches {
    disabled: ArcSwap<HashMap<String, Switch>>,
    /// Moves with each change made here: a store read that began before it is older than
    /// the change, and is not applied.
    changes: AtomicU64,
}

impl KeySwitches {
    /// Whether `name` is switched off (admission asks this of every request).
    pub fn is_disabled(&self, name: &str) -> bool {
        let disabled = self.disabled.load();
        !disabled.is_empty() && disabled.contains_key(name)
    }

    /// The switch that turned `name` off, if one did.
    pub fn get(&self, name: &str) -> Option<Switch> {
        self.disabled.load().get(name).cloned()
    }

    /// Switches `name` off (`Some`) or back on (`None`) here.
    pub fn set(&self, name: &str, switch: Option<Switch>) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.disabled.rcu(|current| {
            let mut next = HashMap::clone(current);
            match &switch {
                Some(switch) => next.insert(name.to_owned(), switch.clone()),
                None => next.remove(name),
            };
            next
        });
    }

    /// A mark to pass to [`KeySwitches::replace`] with what the store holds, read after it.
    pub fn mark(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Takes the store's switches, unless a change was made here since `mark`.
    pub fn replace(&self, mark: u64, from_store: HashMap<String, Switch>) {
        if self.changes.load(Ordering::Acquire) == mark {
            self.disabled.store(Arc::new(from_store));
        }
    }
}

/// Reads the store's switches every [`REFRESH_INTERVAL`] until `stop` turns true (only
/// with a limits store). A store that does not answer leaves the switches as last read.
pub async fn keep_fresh(gateway: Arc<Gateway>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(store) = gateway.admin_store.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(REFRESH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let mark = gateway.key_switches.mark();
        if let Some(switches) = store.switches().await {
            gateway.key_switches.replace(mark, switches);
        }
    }
}
