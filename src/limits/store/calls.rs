//! A key's calls to the store: at most one in flight per key on a replica; the key's
//! admissions and settlements that arrive meanwhile wait here and travel together in the
//! next call of `batch.lua` (settlements first, then the leases kept alive, then each
//! admission in order). And the [`Grant`] an admitted request holds until its settlement
//! joins that queue.

use super::{redis_keys, Store};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The most admissions, and the most settlements, one call carries.
const BATCH_MAX: usize = 128;

/// Values `batch.lua` answers per admission.
const ANSWER: usize = 10;

/// What waits for a key's next call, and whether a call of the key is in flight.
#[derive(Default)]
pub(super) struct Queue {
    busy: bool,
    /// The key's limits as the latest admission saw them.
    pub(super) limits: Limits,
    pub(super) admissions: Vec<Waiting>,
    pub(super) settlements: Vec<Settlement>,
    /// The key's leases held here are due for a refresh.
    pub(super) refresh: bool,
}

/// A key's caller, on its way out: if it ends any other way than by finding nothing left
/// to send (a panic, the runtime shutting down), the key is freed for a new caller and the
/// admissions waiting are dropped (they apply `on_error`) instead of waiting for ever.
struct Caller {
    queue: Arc<Mutex<Queue>>,
    done: bool,
}

impl Drop for Caller {
    fn drop(&mut self) {
        if !self.done {
            let mut waiting = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            waiting.busy = false;
            waiting.admissions.clear();
        }
    }
}

/// A key's limits as `batch.lua` takes them (0: no such limit).
#[derive(Clone, Copy, Default)]
pub(super) struct Limits {
    pub(super) per_minute: u32,
    pub(super) burst: u32,
    pub(super) tokens_per_minute: u64,
    pub(super) tokens_per_day: u64,
    pub(super) max_concurrent: u32,
}

/// An admission waiting for its answer (`None`: the store could not be used).
pub(super) struct Waiting {
    pub(super) estimate: u64,
    pub(super) lease: Option<String>,
    pub(super) answer: oneshot::Sender<Option<[i64; ANSWER]>>,
}

/// The end of an admitted request: its reservation (-1: no such window), the tokens it
/// used (-1: unknown, the reservation stands) and its lease.
pub(super) struct Settlement {
    pub(super) reserved: [i64; 2],
    pub(super) used: i64,
    pub(super) lease: Option<String>,
}

impl Store {
    /// Adds to what waits for the key's next call, and starts the key's caller if no call
    /// of the key is in flight.
    pub(super) fn enqueue(self: &Arc<Self>, name: &str, add: impl FnOnce(&mut Queue)) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queue = match self.queues.get(name) {
            Some(queue) => Arc::clone(&queue),
            None => Arc::clone(&self.queues.entry(name.to_owned()).or_default()),
        };
        let start = {
            let mut waiting = queue.lock().unwrap_or_else(|p| p.into_inner());
            add(&mut waiting);
            !std::mem::replace(&mut waiting.busy, true)
        };
        if start {
            runtime.spawn(Arc::clone(self).drive(name.to_owned(), queue));
        }
    }

    /// The key's caller: sends what waits, one call at a time, until nothing does.
    async fn drive(self: Arc<Self>, name: String, queue: Arc<Mutex<Queue>>) {
        let mut caller = Caller {
            queue: Arc::clone(&queue),
            done: false,
        };
        loop {
            let (limits, admissions, settlements, kept) = {
                let mut waiting = queue.lock().unwrap_or_else(|p| p.into_inner());
                // Requests given up while waiting (their clients left) are not sent.
                waiting.admissions.retain(|w| !w.answer.is_closed());
                let refresh = std::mem::take(&mut waiting.refresh);
                if waiting.admissions.is_empty() && waiting.settlements.is_empty() && !refresh {
                    waiting.busy = false;
                    caller.done = true;
                    return;
                }
                let admissions = waiting.admissions.len().min(BATCH_MAX);
                let settlements = waiting.settlements.len().min(BATCH_MAX);
                // Read under the queue's lock: a request that ends takes its lease out of
                // the map before it queues its settlement, so a lease read here has not
                // been given back, and its settlement travels in a later call.
                let kept = if refresh {
                    self.leases.of(&name)
                } else {
                    Vec::new()
                };
                (
                    waiting.limits,
                    waiting.admissions.drain(..admissions).collect::<Vec<_>>(),
                    waiting.settlements.drain(..settlements).collect::<Vec<_>>(),
                    kept,
                )
            };
            let answer = if self.is_up() {
                self.send(&name, limits, &admissions, &settlements, &kept)
                    .await
            } else {
                // Down: the admissions apply `on_error`; the leases expire on their own.
                None
            };
            for (i, waiting) in admissions.into_iter().enumerate() {
                let values = answer.as_ref().and_then(|a| {
                    let values = a.get(i * ANSWER..(i + 1) * ANSWER)?;
                    <[i64; ANSWER]>::try_from(values).ok()
                });
                if let Err(Some(values)) = waiting.answer.send(values) {
                    if values[0] == 0 {
                        // Admitted for a request that is gone: nobody will settle it.
                        let settlement = Settlement {
                            reserved: [values[8], values[9]],
                            used: -1,
                            lease: waiting.lease,
                        };
                        let mut waiting = queue.lock().unwrap_or_else(|p| p.into_inner());
                        waiting.settlements.push(settlement);
                    }
                }
            }
        }
    }

    /// One call of `batch.lua` for the key: its settlements, the leases it keeps, then its
    /// admissions; the answers, ten values per admission, or `None` if the call failed.
    pub(super) async fn send(
        &self,
        name: &str,
        limits: Limits,
        admissions: &[Waiting],
        settlements: &[Settlement],
        kept: &[String],
    ) -> Option<Vec<i64>> {
        let mut invocation = self.batch.prepare_invoke();
        for key in redis_keys(&self.config.namespace, name) {
            invocation.key(key);
        }
        invocation
            .arg(limits.per_minute)
            .arg(limits.burst)
            .arg(limits.tokens_per_minute)
            .arg(limits.tokens_per_day)
            .arg(limits.max_concurrent)
            .arg(self.lease_lifetime.as_micros() as u64)
            .arg(settlements.len());
        for settlement in settlements {
            invocation
                .arg(settlement.reserved[0])
                .arg(settlement.reserved[1])
                .arg(settlement.used)
                .arg(settlement.lease.as_deref().unwrap_or_default());
        }
        invocation.arg(kept.len());
        for lease in kept {
            invocation.arg(lease);
        }
        invocation.arg(admissions.len());
        for waiting in admissions {
            invocation
                .arg(waiting.estimate)
                .arg(waiting.lease.as_deref().unwrap_or_default());
        }
        let answer: Vec<i64> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await?;
        if answer.len() == admissions.len() * ANSWER {
            Some(answer)
        } else {
            self.script_failed();
            None
        }
    }
}

/// What an admitted request holds in the store until it ends: its lease and its token
/// reservation. Settled once; dropped unsettled (a cancelled request), the lease is given
/// back and the reservation stands.
pub struct Grant {
    store: Arc<Store>,
    key: String,
    lease: Option<String>,
    /// Tokens reserved per window (minute, day); -1: no such window.
    reserved: [i64; 2],
    settled: bool,
}

impl Grant {
    /// What a request holds: `lease` (if any) and `reserved` tokens per window (-1: none).
    pub(super) fn new(
        store: &Arc<Store>,
        key: &str,
        lease: Option<String>,
        reserved: [i64; 2],
    ) -> Grant {
        Grant {
            store: Arc::clone(store),
            key: key.to_owned(),
            lease,
            reserved,
            settled: false,
        }
    }

    /// The most any window holds for this request (`None` without token windows).
    pub fn reserved(&self) -> Option<u64> {
        self.reserved
            .iter()
            .filter(|&&n| n >= 0)
            .map(|&n| n as u64)
            .max()
    }

    /// Settles the tokens (`Some(used)`, or `None`: the reservation stands) and gives the
    /// lease back, in the key's next store call: the response is not held up.
    pub fn settle(mut self, used: Option<u64>) {
        self.settled = true;
        self.queue_settlement(used);
    }

    /// Puts the settlement in the queue of the key's next store call.
    fn queue_settlement(&mut self, used: Option<u64>) {
        let lease = self.lease.take();
        if let Some(lease) = &lease {
            self.store.leases.give_back(&self.key, lease);
        }
        if self.reserved.iter().all(|&n| n < 0) && lease.is_none() {
            return;
        }
        let settlement = Settlement {
            reserved: self.reserved,
            used: used.map_or(-1, |n| n.min(1 << 40) as i64),
            lease,
        };
        self.store
            .enqueue(&self.key, |queue| queue.settlements.push(settlement));
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if !self.settled {
            self.queue_settlement(None);
        }
    }
}
