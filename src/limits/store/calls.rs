//! A key's calls to the store: at most one in flight per key on a replica; the key's
//! admissions and settlements that arrive meanwhile wait here and travel together in the
//! next call of `batch.lua` (settlements first, then the leases kept alive, then each
//! admission in order, decided on the key's limits and budgets at once). And the
//! [`Grant`] an admitted request holds until its settlement joins that queue.

use super::budget::{account_lifetime, account_limits, accounts};
use super::packed::{self, Packed};
use super::{redis_keys, Store};
use crate::catalog::Key;
use crate::limits::budget::{Budgets, Windows};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The most admissions, and the most settlements, one call carries.
const BATCH_MAX: usize = 128;

/// Values an admission's answer is read as (`packed::answers`).
pub(super) const ANSWER: usize = 15;

/// `batch.lua`'s answer to one admission, and the budget windows of the call that made it.
pub(super) type Answer = ([i64; ANSWER], Windows);

/// What waits for a key's next call, and whether a call of the key is in flight.
#[derive(Default)]
pub(super) struct Queue {
    busy: bool,
    /// The key as the latest admission saw it: its limits, its budgets, where they live.
    pub(super) key: Option<Arc<Key>>,
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

impl Limits {
    pub(super) fn of(key: &Key) -> Limits {
        Limits {
            per_minute: key.requests_per_minute.map_or(0, |n| n.get()),
            burst: key.burst.or(key.requests_per_minute).map_or(0, |n| n.get()),
            tokens_per_minute: key.tokens_per_minute.map_or(0, |n| n.get()),
            tokens_per_day: key.tokens_per_day.map_or(0, |n| n.get()),
            max_concurrent: key.max_concurrent.map_or(0, |n| n.get()),
        }
    }
}

/// An admission waiting for its answer (`None`: the store could not be used).
pub(super) struct Waiting {
    pub(super) estimate: u64,
    /// The lease it takes (its number on this replica), for a key with `max_concurrent`.
    pub(super) lease: Option<u64>,
    /// Micro-dollars to reserve in the key's budgets; `None`: nothing (no price, no budget).
    pub(super) cost: Option<u64>,
    /// The wall clock when the request arrived (Unix ms): the calendar of its budgets.
    pub(super) now_ms: i64,
    pub(super) answer: oneshot::Sender<Option<Answer>>,
}

/// Money reserved in a key's budgets for a request in flight: how much, and the day and
/// month it was reserved in.
#[derive(Clone, Copy)]
pub(super) struct Money {
    pub(super) reserved: u64,
    pub(super) windows: Windows,
}

/// The end of an admitted request: its reservation (-1: no such window), the tokens it
/// used (-1: unknown, the reservation stands), its lease, and its money with what it cost.
pub(super) struct Settlement {
    pub(super) reserved: [i64; 2],
    pub(super) used: i64,
    pub(super) lease: Option<u64>,
    pub(super) money: Option<(Money, u64)>,
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
            let (key, admissions, settlements, kept) = {
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
                    waiting.key.clone(),
                    waiting.admissions.drain(..admissions).collect::<Vec<_>>(),
                    waiting.settlements.drain(..settlements).collect::<Vec<_>>(),
                    kept,
                )
            };
            // The budgets' calendar: the wall clock of the latest admission sent.
            let now_ms = admissions.iter().map(|w| w.now_ms).max().unwrap_or(0);
            let windows = match &key {
                Some(key) if Budgets::applies(key) => Windows::at(now_ms),
                _ => Windows::NONE,
            };
            let answer = match &key {
                // Down: the admissions apply `on_error`; the leases expire on their own.
                Some(key) if self.is_up() => {
                    let call = Call {
                        limits: Limits::of(key),
                        windows,
                        now_ms,
                    };
                    self.send(key, call, &admissions, &settlements, &kept).await
                }
                _ => None,
            };
            for (i, waiting) in admissions.into_iter().enumerate() {
                let values = answer.as_ref().and_then(|a| a.get(i).copied());
                let (cost, lease) = (waiting.cost, waiting.lease);
                if let Err(Some((values, windows))) =
                    waiting.answer.send(values.map(|v| (v, windows)))
                {
                    if values[0] == 0 {
                        // Admitted for a request that is gone: nobody will settle it. It
                        // was never sent upstream: its money goes back whole.
                        let money = cost
                            .filter(|_| values[10] >= 0)
                            .map(|reserved| (Money { reserved, windows }, 0));
                        let settlement = Settlement {
                            reserved: [values[8], values[9]],
                            used: -1,
                            lease,
                            money,
                        };
                        let mut waiting = queue.lock().unwrap_or_else(|p| p.into_inner());
                        waiting.settlements.push(settlement);
                    }
                }
            }
        }
    }

    /// One call of `batch.lua` for the key: its settlements, the leases it keeps, then its
    /// admissions; the answer to each admission, or `None` if the call failed.
    pub(super) async fn send(
        &self,
        key: &Key,
        call: Call,
        admissions: &[Waiting],
        settlements: &[Settlement],
        kept: &[u64],
    ) -> Option<Vec<[i64; ANSWER]>> {
        let namespace = &self.config.namespace;
        let mut invocation = self.batch.prepare_invoke();
        for redis_key in redis_keys(namespace, key) {
            invocation.key(redis_key);
        }
        let accounts = accounts(namespace, key);
        // Money travels, and is answered, only for a key with budget accounts.
        let budgeted = !accounts.is_empty();
        for account in accounts {
            invocation.key(account);
        }
        let Call {
            limits,
            windows,
            now_ms,
        } = call;
        invocation
            .arg(limits.per_minute)
            .arg(limits.burst)
            .arg(limits.tokens_per_minute)
            .arg(limits.tokens_per_day)
            .arg(limits.max_concurrent)
            .arg(self.lease_lifetime.as_micros() as u64)
            .arg(windows.day.0)
            .arg(windows.month.0)
            .arg(account_lifetime(&windows, now_ms));
        let account_limits: Vec<[i64; 2]> = account_limits(key).collect();
        for &[day, month] in &account_limits {
            invocation.arg(day).arg(month);
        }
        let packed = Packed::new(self.replica, budgeted, settlements, kept, admissions);
        invocation
            .arg(packed.settled)
            .arg(packed.settled_leases)
            .arg(packed.kept_leases)
            .arg(packed.admitting)
            .arg(packed.admitted_leases);
        let answer: Vec<u8> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await?;
        let answers = packed::answers(&answer, admissions, &limits, &account_limits);
        if answers.is_none() {
            self.script_failed();
        }
        answers
    }
}

/// What one call is decided under: the key's limits (all 0 for a call that only writes
/// leases back), and the budgets' calendar at `now_ms` (Unix ms, the wall clock).
pub(super) struct Call {
    pub(super) limits: Limits,
    pub(super) windows: Windows,
    pub(super) now_ms: i64,
}

/// What an admitted request holds in the store until it ends: its lease, its token
/// reservation and its money. Settled once; dropped unsettled (a cancelled request), the
/// lease is given back and the reservations stand.
pub struct Grant {
    store: Arc<Store>,
    key: String,
    lease: Option<u64>,
    /// Tokens reserved per window (minute, day); -1: no such window.
    reserved: [i64; 2],
    money: Option<Money>,
    settled: bool,
}

impl Grant {
    /// What a request holds: `lease` (if any), `reserved` tokens per window (-1: none) and
    /// `money` in its budgets.
    pub(super) fn new(
        store: &Arc<Store>,
        key: &str,
        lease: Option<u64>,
        reserved: [i64; 2],
        money: Option<Money>,
    ) -> Grant {
        Grant {
            store: Arc::clone(store),
            key: key.to_owned(),
            lease,
            reserved,
            money,
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

    /// The micro-dollars reserved in the key's budgets (`None`: none).
    pub fn money_reserved(&self) -> Option<u64> {
        self.money.map(|m| m.reserved)
    }

    /// Settles the tokens (`Some(used)`, or `None`: the reservation stands) and the money
    /// (`Some(cost)`, or `None`: the reservation stands), and gives the lease back, in the
    /// key's next store call: the response is not held up.
    pub fn settle(mut self, used: Option<u64>, cost: Option<u64>) {
        self.settled = true;
        self.queue_settlement(used, cost);
    }

    /// Puts the settlement in the queue of the key's next store call.
    fn queue_settlement(&mut self, used: Option<u64>, cost: Option<u64>) {
        let lease = self.lease.take();
        if let Some(lease) = lease {
            self.store.leases.give_back(&self.key, lease);
        }
        // Money whose reservation stands needs no settling.
        let money = self
            .money
            .take()
            .zip(cost)
            .filter(|(money, cost)| money.reserved != *cost);
        if self.reserved.iter().all(|&n| n < 0) && lease.is_none() && money.is_none() {
            return;
        }
        let settlement = Settlement {
            reserved: self.reserved,
            used: used.map_or(-1, |n| n.min(1 << 40) as i64),
            lease,
            money,
        };
        self.store
            .enqueue(&self.key, |queue| queue.settlements.push(settlement));
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if !self.settled {
            self.queue_settlement(None, None);
        }
    }
}
