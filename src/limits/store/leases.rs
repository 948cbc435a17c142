//! The leases of this replica's requests in flight, by key: given to the store with each
//! admission, refreshed every third of their lifetime (in the key's next call, so a key's
//! refreshes cost one call whatever its number of leases), re-created when the store lost
//! them, and written back whole when a store that was down answers again. A request
//! admitted in this process while the store could not be used holds one too.

use super::calls::{Call, Limits};
use super::{Grant, Store};
use crate::catalog::Key;
use crate::limits::budget::Windows;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Leases held by requests in flight on this replica (their numbers), per key name.
#[derive(Default)]
pub(super) struct Leases(Mutex<HashMap<String, HashSet<u64>>>);

impl Leases {
    /// A request of `key` holds `lease`.
    pub(super) fn hold(&self, key: &str, lease: u64) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match held.get_mut(key) {
            Some(leases) => {
                leases.insert(lease);
            }
            None => {
                held.insert(key.to_owned(), HashSet::from([lease]));
            }
        }
    }

    /// The request holding `lease` ended (taken out before its settlement is queued, so a
    /// refresh read after this never writes it again).
    pub(super) fn give_back(&self, key: &str, lease: u64) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(leases) = held.get_mut(key) {
            leases.remove(&lease);
            if leases.is_empty() {
                held.remove(key);
            }
        }
    }

    /// The keys with leases held here.
    pub(super) fn keys(&self) -> Vec<String> {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.keys().cloned().collect()
    }

    /// The leases of `key` held here.
    pub(super) fn of(&self, key: &str) -> Vec<u64> {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.get(key)
            .map_or_else(Vec::new, |leases| leases.iter().copied().collect())
    }
}

impl Store {
    /// A lease for a request of `key` admitted in this process while the store could not
    /// be used (`on_error: local` or `open`): kept here like the store's own leases, and
    /// written to the store when it answers again, so the request counts against the key's
    /// `max_concurrent` there for as long as it runs. `None` for a key without one.
    pub fn local_lease(self: &Arc<Self>, key: &Arc<Key>) -> Option<Grant> {
        key.max_concurrent?;
        self.start_refreshing();
        // Where the lease is written and refreshed: the key as this request saw it.
        let queue = match self.queues.get(&key.name) {
            Some(queue) => Arc::clone(&queue),
            None => Arc::clone(&self.queues.entry(key.name.clone()).or_default()),
        };
        queue.lock().unwrap_or_else(|p| p.into_inner()).key = Some(Arc::clone(key));
        let lease = self.new_lease();
        self.leases.hold(&key.name, lease);
        Some(Grant::new(self, &key.name, Some(lease), [-1, -1], None))
    }

    /// A new lease's number on this replica (its id in the store adds the replica's:
    /// `packed.rs`).
    pub(super) fn new_lease(&self) -> u64 {
        self.next_lease.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes every lease of this replica's requests in flight to a store that answers
    /// again, one call per key. (A request that ends during this call may leave its lease
    /// for one lifetime: its settlement found the store down.)
    pub(super) async fn restore_leases(&self) {
        for name in self.leases.keys() {
            let leases = self.leases.of(&name);
            let key = self
                .queues
                .get(&name)
                .and_then(|queue| queue.lock().unwrap_or_else(|p| p.into_inner()).key.clone());
            if let (false, Some(key)) = (leases.is_empty(), key) {
                // Leases only: no limits, nothing decided.
                let call = Call {
                    limits: Limits::default(),
                    windows: Windows::at(0),
                    now_ms: 0,
                };
                let _ = self.send(&key, call, &[], &[], &leases).await;
            }
        }
    }

    /// Keeps this replica's leases alive while their requests run: each key's leases
    /// travel in its next call, every third of their lifetime.
    pub(super) fn start_refreshing(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = Arc::downgrade(self);
        let every = self.lease_lifetime / 3;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { return };
                if !store.is_up() {
                    continue;
                }
                for name in store.leases.keys() {
                    store.enqueue(&name, |queue| queue.refresh = true);
                }
            }
        });
    }
}
