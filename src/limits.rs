//! Per-key request rate (GCRA), token windows (`tokens.rs`) and concurrency, and the
//! gateway-wide in-flight cap.
//!
//! State lives beside the catalog snapshot, keyed by key name, so a reload keeps the
//! counters of keys that remain. Concurrency slots are RAII permits: dropping the request
//! context (finished, failed, disconnected or cancelled at shutdown) gives the slot back.

use crate::catalog::Key;
use crate::clock::Clock;
use crate::error::RequestError;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

mod admin_store;
mod budget;
mod connection;
mod rate;
mod store;
mod tokens;

pub use admin_store::{AdminStore, StoredLimits};
pub use budget::{cost_micros, format_usd, BudgetHold, BudgetWindow, Budgets, Period, Scope};
pub use rate::{format_reset, rate_headers};
use rate::{gcra, position, within_window};
pub use store::{Grant, Position, Shared, Store};
pub use tokens::{token_headers, Reservation, TokenStatus, Window};

/// How long a client refused for concurrency is told to wait: a hint, since the gateway
/// cannot know when a request in flight will end.
pub const CONCURRENCY_RETRY_HINT: Duration = Duration::from_secs(1);

/// The most a key may owe a token window beyond its period: a window's arrival time is
/// never more than its period plus this ahead of the clock, so no wait a client is told
/// (`Retry-After`, `x-ratelimit-reset-*`) is longer than this plus a period, whatever an
/// upstream reported.
pub const MAX_DEBT: Duration = Duration::from_secs(7 * 86_400);

/// A key's rate-limit position, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    pub limit: u32,
    pub remaining: u32,
    /// Time until the bucket is full again.
    pub reset: Duration,
}

/// What the limiter knows of one key now, for the admin view. Read without changing
/// anything: a key that has sent nothing has no state, and reads as idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUsage {
    /// Where the key stands on its request rate; `None` without `requests_per_minute`.
    pub rate: Option<RateStatus>,
    /// Its requests in flight now (every key's are counted, limited or not).
    pub in_flight: u32,
    /// How long ago its last request was authenticated (admitted or refused by a limit).
    pub since_last_request: Option<Duration>,
}

/// A held concurrency slot (per key, or gateway-wide). Released on drop; the last
/// gateway-wide slot to go wakes whoever waits for the gateway to be idle.
#[derive(Debug, Default)]
pub struct Permit {
    slots: Vec<Arc<AtomicU32>>,
    idle: Option<Arc<Notify>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        for slot in &self.slots {
            let before = slot.fetch_sub(1, Ordering::AcqRel);
            if before == 1 {
                if let Some(idle) = &self.idle {
                    idle.notify_waiters();
                }
            }
        }
    }
}

/// The limiter's answer for one request.
#[derive(Debug)]
pub enum Admission {
    Allowed {
        permit: Permit,
        rate: Option<RateStatus>,
        since_previous: Option<Duration>,
    },
    Denied {
        error: RequestError,
        rate: Option<RateStatus>,
        since_previous: Option<Duration>,
    },
}

struct KeyState {
    /// Theoretical arrival time of the GCRA, as time since the clock's start.
    tat: Mutex<Duration>,
    in_flight: Arc<AtomicU32>,
    /// Clock time of the previous request plus one (0: none yet), in microseconds.
    previous_micros: AtomicU64,
    tokens: tokens::TokenState,
}

impl KeyState {
    fn new() -> Self {
        KeyState {
            tat: Mutex::new(Duration::ZERO),
            in_flight: Arc::new(AtomicU32::new(0)),
            previous_micros: AtomicU64::new(0),
            tokens: tokens::TokenState::default(),
        }
    }
}

/// All limit state of the gateway.
pub struct Limiter {
    clock: Arc<dyn Clock>,
    keys: DashMap<String, Arc<KeyState>>,
    gateway_in_flight: Arc<AtomicU32>,
    idle: Arc<Notify>,
}

impl Limiter {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Limiter {
            clock,
            keys: DashMap::new(),
            gateway_in_flight: Arc::new(AtomicU32::new(0)),
            idle: Arc::new(Notify::new()),
        }
    }

    /// Takes a gateway-wide slot, or `Overloaded` when `cap` are in flight. Every request
    /// holds one (with or without a cap), so the count also tells shutdown when all is done.
    pub fn admit_gateway(&self, cap: Option<std::num::NonZeroU32>) -> Result<Permit, RequestError> {
        let limit = cap.map_or(u32::MAX, |c| c.get());
        if !try_take(&self.gateway_in_flight, limit) {
            return Err(RequestError::Overloaded {
                retry_after: CONCURRENCY_RETRY_HINT,
            });
        }
        Ok(Permit {
            slots: vec![Arc::clone(&self.gateway_in_flight)],
            idle: Some(Arc::clone(&self.idle)),
        })
    }

    /// Resolves once no request is in flight (checked without polling).
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.gateway_in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Requests in flight through the whole gateway.
    pub fn gateway_in_flight(&self) -> u32 {
        self.gateway_in_flight.load(Ordering::Acquire)
    }

    /// Rate first, then concurrency, for one request of `key`.
    pub fn admit(&self, key: &Key) -> Admission {
        let state = self.state(&key.name);
        let now = self.clock.now();
        let since_previous = record_previous(&state.previous_micros, now);
        // The rate step is committed only once the request is admitted, so a request refused
        // for concurrency does not use up rate. No await happens while the lock is held.
        let mut tat = state.tat.lock().unwrap_or_else(|p| p.into_inner());
        let limits = key
            .requests_per_minute
            .map(|per_minute| (per_minute.get(), key.burst.unwrap_or(per_minute).get()));
        let mut next_tat = None;
        let mut rate = None;
        if let Some((per_minute, burst)) = limits {
            // Kept within the window of the limits now (a raised rate shrinks it), so the
            // time that passes from here counts at the new rate.
            *tat = within_window(*tat, now, per_minute, burst);
            match gcra(*tat, now, per_minute, burst) {
                Ok((next, status)) => (next_tat, rate) = (Some(next), Some(status)),
                Err((status, retry_after)) => {
                    let error = RequestError::RateLimited { retry_after };
                    return Admission::Denied {
                        error,
                        rate: Some(status),
                        since_previous,
                    };
                }
            }
        }
        let mut permit = Permit::default();
        // Every key's requests in flight are counted (for the admin view); only a key with
        // max_concurrent can be refused.
        let limit = key.max_concurrent.map_or(u32::MAX, |limit| limit.get());
        if !try_take(&state.in_flight, limit) {
            let error = RequestError::ConcurrencyLimited {
                retry_after: CONCURRENCY_RETRY_HINT,
            };
            let rate = limits.map(|(per_minute, burst)| position(*tat, now, per_minute, burst));
            return Admission::Denied {
                error,
                rate,
                since_previous,
            };
        }
        permit.slots.push(Arc::clone(&state.in_flight));
        if let Some(next) = next_tat {
            *tat = next;
        }
        Admission::Allowed {
            permit,
            rate,
            since_previous,
        }
    }

    /// Counts a request of `key` in flight whose limits the shared store decides, and notes
    /// its arrival. The one check made here, before the body is read: a key that already
    /// has `max_concurrent` requests in flight on this replica alone is refused (the store
    /// could only refuse it too). The time since the key's previous request either way.
    pub fn count_in_flight(&self, key: &Key) -> (Result<Permit, RequestError>, Option<Duration>) {
        let state = self.state(&key.name);
        let since_previous = record_previous(&state.previous_micros, self.clock.now());
        let limit = key.max_concurrent.map_or(u32::MAX, |limit| limit.get());
        if !try_take(&state.in_flight, limit) {
            let error = RequestError::ConcurrencyLimited {
                retry_after: CONCURRENCY_RETRY_HINT,
            };
            return (Err(error), since_previous);
        }
        let permit = Permit {
            slots: vec![Arc::clone(&state.in_flight)],
            idle: None,
        };
        (Ok(permit), since_previous)
    }

    /// Notes the arrival of a request of `key` that is answered without its limits being
    /// asked (the shared store's local gate refuses it): it is still the key's last use.
    /// The time since the key's previous request.
    pub fn note_arrival(&self, key: &Key) -> Option<Duration> {
        let state = self.state(&key.name);
        record_previous(&state.previous_micros, self.clock.now())
    }

    /// Where a key stands on its rate limit now, without counting a request.
    pub fn rate_position(&self, key: &Key) -> Option<RateStatus> {
        let per_minute = key.requests_per_minute?;
        let burst = key.burst.unwrap_or(per_minute).get();
        let state = self.state(&key.name);
        let tat = *state.tat.lock().unwrap_or_else(|p| p.into_inner());
        Some(position(tat, self.clock.now(), per_minute.get(), burst))
    }

    /// Requests of this key in flight now.
    pub fn in_flight(&self, key_name: &str) -> u32 {
        self.keys
            .get(key_name)
            .map_or(0, |s| s.in_flight.load(Ordering::Acquire))
    }

    /// The key's rate position, requests in flight and last request, without counting a
    /// request or creating state.
    pub fn usage(&self, key: &Key) -> KeyUsage {
        let now = self.clock.now();
        let state = self.keys.get(&key.name).map(|s| Arc::clone(&s));
        let rate = key.requests_per_minute.map(|per_minute| {
            let tat = state.as_ref().map_or(Duration::ZERO, |s| {
                *s.tat.lock().unwrap_or_else(|p| p.into_inner())
            });
            let burst = key.burst.unwrap_or(per_minute).get();
            position(tat, now, per_minute.get(), burst)
        });
        let Some(state) = state else {
            return KeyUsage {
                rate,
                in_flight: 0,
                since_last_request: None,
            };
        };
        let previous = state.previous_micros.load(Ordering::Acquire);
        KeyUsage {
            rate,
            in_flight: state.in_flight.load(Ordering::Acquire),
            since_last_request: (previous != 0)
                .then(|| now.saturating_sub(Duration::from_micros(previous - 1))),
        }
    }

    /// After a reload: drop the state of keys that no longer exist, once nothing of theirs
    /// is in flight. Keys that remain keep their counters.
    pub fn retain_keys(&self, exists: impl Fn(&str) -> bool) {
        self.keys
            .retain(|name, state| exists(name) || state.in_flight.load(Ordering::Acquire) > 0);
    }

    /// How many keys have state (for tests and metrics).
    pub fn tracked_keys(&self) -> usize {
        self.keys.len()
    }

    fn state(&self, name: &str) -> Arc<KeyState> {
        if let Some(state) = self.keys.get(name) {
            return Arc::clone(&state);
        }
        Arc::clone(
            &self
                .keys
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(KeyState::new())),
        )
    }
}

/// Takes one slot unless `limit` are taken; exact under contention.
fn try_take(counter: &AtomicU32, limit: u32) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

fn record_previous(previous: &AtomicU64, now: Duration) -> Option<Duration> {
    let now_micros = now.as_micros() as u64 + 1;
    let before = previous.swap(now_micros, Ordering::AcqRel);
    (before != 0).then(|| Duration::from_micros(now_micros.saturating_sub(before)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_slots_are_exact_and_released_on_drop() {
        let counter = AtomicU32::new(0);
        assert!(try_take(&counter, 2) && try_take(&counter, 2));
        assert!(!try_take(&counter, 2));
        assert_eq!(
            counter.load(Ordering::Acquire),
            2,
            "a refused take leaves no trace"
        );
    }
}
