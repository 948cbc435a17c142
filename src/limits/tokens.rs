//! Token limits per key: `tokens_per_minute` and `tokens_per_day`, each a GCRA weighted by
//! tokens (a request of `n` tokens moves the theoretical arrival time by `n` times the
//! interval of one token), so the window rolls rather than resetting at the minute.
//!
//! Admission reserves an estimate (capped at each bucket's capacity, so one large request
//! still passes on a full bucket); the end of the answer reconciles it with the real usage:
//! what was over-reserved goes back, overage is taken even into debt.
//!
//! A window's arrival time is kept with the limit it was computed under: when a reload
//! changes the limit, the tokens it holds stay the same and drain at the new rate.

use super::{KeyState, Limiter};
use crate::catalog::Key;
use crate::error::RequestError;
use http::HeaderName;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A token window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Minute,
    Day,
}

impl Window {
    const ALL: [Window; 2] = [Window::Minute, Window::Day];

    pub(super) fn period(self) -> Duration {
        match self {
            Window::Minute => Duration::from_secs(60),
            Window::Day => Duration::from_secs(86_400),
        }
    }

    /// As messages and the admin view name it.
    pub fn name(self) -> &'static str {
        match self {
            Window::Minute => "tokens per minute",
            Window::Day => "tokens per day",
        }
    }

    fn limit(self, key: &Key) -> Option<u64> {
        match self {
            Window::Minute => key.tokens_per_minute,
            Window::Day => key.tokens_per_day,
        }
        .map(|n| n.get())
    }
}

/// Where a key stands in one token window, for the `x-ratelimit-*-tokens` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenStatus {
    pub window: Window,
    pub limit: u64,
    pub remaining: u64,
    /// Time until the window is full again.
    pub reset: Duration,
}

/// A key's token windows (minute, day).
#[derive(Debug, Default)]
pub(super) struct TokenState(Mutex<[Bucket; 2]>);

/// One window: its theoretical arrival time (time since the clock's start) and the limit
/// that time was computed under (0: never used).
#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    tat: Duration,
    limit: u64,
}

impl Bucket {
    /// The same window under `limit`: the tokens it holds are kept, not the time.
    fn under(self, limit: u64, now: Duration, period: Duration) -> Bucket {
        if self.limit == limit || self.limit == 0 {
            return Bucket {
                tat: self.tat,
                limit,
            };
        }
        let backlog = self.tat.saturating_sub(now);
        let held = (backlog.as_nanos() * self.limit as u128 / period.as_nanos())
            .min(u64::MAX as u128) as u64;
        Bucket {
            tat: ahead_at_most(now.saturating_add(cost(held, limit, period)), now, period),
            limit,
        }
    }
}

/// `tat`, or the furthest a window may be ahead of `now` ([`super::MAX_DEBT`] past its
/// period) if it is further: debt beyond that is forgiven, so waits stay bounded.
fn ahead_at_most(tat: Duration, now: Duration, period: Duration) -> Duration {
    tat.min(now.saturating_add(period).saturating_add(super::MAX_DEBT))
}

/// Tokens reserved for a request in flight, until its usage is known.
pub struct Reservation {
    state: Arc<KeyState>,
    /// Per window: the tokens reserved (`None`: the key has no such limit).
    reserved: [Option<u64>; 2],
    /// The estimate, before any cap.
    pub estimate: u64,
}

impl Reservation {
    /// The most any window holds for this request.
    pub fn reserved(&self) -> u64 {
        self.reserved.iter().flatten().copied().max().unwrap_or(0)
    }
}

/// The time `tokens` take in a window of `limit` per `period`, rounded up.
fn cost(tokens: u64, limit: u64, period: Duration) -> Duration {
    let period = period.as_nanos() as u64;
    // In 64 bits when the product fits (any request under ~200,000 tokens per day): a
    // 128-bit division costs several times more, and this runs on every request.
    let nanos = match tokens.checked_mul(period) {
        Some(product) => product.div_ceil(limit),
        None => (tokens as u128 * period as u128)
            .div_ceil(limit as u128)
            .min(u64::MAX as u128) as u64,
    };
    Duration::from_nanos(nanos)
}

/// Where a window with arrival time `tat` stands now.
fn position(window: Window, limit: u64, tat: Duration, now: Duration) -> TokenStatus {
    let period = window.period();
    let backlog = tat.saturating_sub(now);
    let free = period.saturating_sub(backlog);
    let (free, period) = (free.as_nanos() as u64, period.as_nanos() as u64);
    let remaining = match free.checked_mul(limit) {
        Some(product) => product / period,
        None => (free as u128 * limit as u128 / period as u128) as u64,
    };
    TokenStatus {
        window,
        limit,
        remaining,
        reset: backlog,
    }
}

/// The window with the fewest tokens left (the minute's on a tie): what the headers show.
fn binding(statuses: impl Iterator<Item = TokenStatus>) -> Option<TokenStatus> {
    statuses.fold(None, |best: Option<TokenStatus>, status| match best {
        Some(best) if best.remaining <= status.remaining => Some(best),
        _ => Some(status),
    })
}

impl Limiter {
    /// Reserves `estimate` tokens in each of the key's token windows (capped at the
    /// window's capacity), or refuses with the wait after which it would pass. `None`
    /// for a key without token limits.
    pub fn reserve_tokens(
        &self,
        key: &Key,
        estimate: u64,
    ) -> Option<Result<(Reservation, TokenStatus), (RequestError, TokenStatus)>> {
        let limits = Window::ALL.map(|w| w.limit(key));
        if limits.iter().all(Option::is_none) {
            return None;
        }
        let state = self.state(&key.name);
        let now = self.clock.now();
        let mut buckets = state.tokens.0.lock().unwrap_or_else(|p| p.into_inner());
        let current = current(&buckets, &limits, now);
        let mut next = current;
        let mut reserved = [None; 2];
        let mut refused: Option<(Window, Duration)> = None;
        for (i, window) in Window::ALL.into_iter().enumerate() {
            let Some(limit) = limits[i] else { continue };
            let tokens = estimate.min(limit);
            let period = window.period();
            let after = current[i]
                .tat
                .max(now)
                .saturating_add(cost(tokens, limit, period));
            let ahead = after - now;
            if ahead > period {
                let wait = ahead - period;
                if refused.is_none_or(|(_, longest)| wait > longest) {
                    refused = Some((window, wait));
                }
            }
            next[i].tat = after;
            reserved[i] = Some(tokens);
        }
        if let Some((window, retry_after)) = refused {
            // The windows under the limits now are kept even so: a changed limit applies
            // from the moment it was first seen, not from the next admission.
            *buckets = current;
            let status = binding_of(&current, &limits, now)?;
            let error = RequestError::TokensLimited {
                retry_after,
                window: window.name(),
                limit: window.limit(key).unwrap_or(0),
                estimate,
            };
            return Some(Err((error, status)));
        }
        *buckets = next;
        drop(buckets);
        let status = binding_of(&next, &limits, now)?;
        let reservation = Reservation {
            state,
            reserved,
            estimate,
        };
        Some(Ok((reservation, status)))
    }

    /// Settles a reservation with the tokens the answer used: refunds what was reserved
    /// over it, takes what went beyond it (a key may go into debt, and then waits).
    pub fn reconcile(&self, reservation: Reservation, used: u64) {
        let now = self.clock.now();
        let mut buckets = reservation
            .state
            .tokens
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (i, window) in Window::ALL.into_iter().enumerate() {
            let (Some(reserved), bucket) = (reservation.reserved[i], &mut buckets[i]) else {
                continue;
            };
            // In the window's current scale (a reload may have changed its limit since).
            let period = window.period();
            let limit = bucket.limit.max(1);
            let (held, owed) = (cost(reserved, limit, period), cost(used, limit, period));
            bucket.tat = if owed < held {
                bucket.tat.saturating_sub(held - owed)
            } else {
                let tat = bucket.tat.max(now).saturating_add(owed - held);
                ahead_at_most(tat, now, period)
            };
        }
    }

    /// Where the key stands on its token limits now, without reserving anything.
    pub fn token_position(&self, key: &Key) -> Option<TokenStatus> {
        let limits = Window::ALL.map(|w| w.limit(key));
        if limits.iter().all(Option::is_none) {
            return None;
        }
        let now = self.clock.now();
        binding_of(&self.buckets(key, &limits, now), &limits, now)
    }

    /// Every token window of the key, without reserving anything (for the admin view).
    pub fn token_windows(&self, key: &Key) -> Vec<TokenStatus> {
        let limits = Window::ALL.map(|w| w.limit(key));
        let now = self.clock.now();
        let buckets = self.buckets(key, &limits, now);
        statuses(&buckets, &limits, now).collect()
    }

    /// The key's windows under its limits now, read without creating state.
    fn buckets(&self, key: &Key, limits: &[Option<u64>; 2], now: Duration) -> [Bucket; 2] {
        let buckets = self
            .keys
            .get(&key.name)
            .map_or([Bucket::default(); 2], |s| {
                *s.tokens.0.lock().unwrap_or_else(|p| p.into_inner())
            });
        current(&buckets, limits, now)
    }
}

/// The windows under the key's limits now.
fn current(buckets: &[Bucket; 2], limits: &[Option<u64>; 2], now: Duration) -> [Bucket; 2] {
    let mut current = *buckets;
    for (i, window) in Window::ALL.into_iter().enumerate() {
        if let Some(limit) = limits[i] {
            current[i] = buckets[i].under(limit, now, window.period());
        }
    }
    current
}

/// Each limited window's position.
fn statuses<'a>(
    buckets: &'a [Bucket; 2],
    limits: &'a [Option<u64>; 2],
    now: Duration,
) -> impl Iterator<Item = TokenStatus> + 'a {
    Window::ALL
        .into_iter()
        .enumerate()
        .filter_map(move |(i, w)| limits[i].map(|limit| position(w, limit, buckets[i].tat, now)))
}

/// The binding window's position.
fn binding_of(
    buckets: &[Bucket; 2],
    limits: &[Option<u64>; 2],
    now: Duration,
) -> Option<TokenStatus> {
    binding(statuses(buckets, limits, now))
}

/// The `x-ratelimit-*-tokens` headers.
pub fn token_headers(status: &TokenStatus) -> [(HeaderName, String); 3] {
    const NAMES: [HeaderName; 3] = [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ];
    super::position_headers(NAMES, status.limit, status.remaining, status.reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_weighted_window_admits_until_the_estimate_no_longer_fits() {
        let (limit, now) = (1000, Duration::from_secs(1000));
        let mut tat = Duration::ZERO;
        for _ in 0..4 {
            tat = tat.max(now) + cost(250, limit, MINUTE);
        }
        assert_eq!(position(Window::Minute, limit, tat, now).remaining, 0);
        // 250 more are 15 s ahead of a full window: that is the wait, exactly.
        let ahead = tat.max(now) + cost(250, limit, MINUTE) - now;
        assert_eq!(ahead - MINUTE, Duration::from_secs(15));
        let later = now + Duration::from_secs(15);
        assert!(tat.max(later) + cost(250, limit, MINUTE) - later <= MINUTE);
    }

    #[test]
    fn a_changed_limit_keeps_the_tokens_a_window_holds() {
        let now = Duration::from_secs(1000);
        let used = Bucket {
            tat: now + cost(500, 1000, MINUTE),
            limit: 1000,
        };
        let doubled = used.under(2000, now, MINUTE);
        assert_eq!(
            position(Window::Minute, 2000, doubled.tat, now).remaining,
            1500
        );
        let fresh = Bucket::default().under(2000, now, MINUTE);
        assert_eq!(
            position(Window::Minute, 2000, fresh.tat, now).remaining,
            2000
        );
    }

    #[test]
    fn costs_are_exact_for_limits_that_do_not_divide_the_period() {
        assert_eq!(cost(7, 7, MINUTE), MINUTE);
        assert_eq!(cost(1, 7, MINUTE), Duration::from_nanos(8_571_428_572));
        assert_eq!(cost(0, 7, MINUTE), Duration::ZERO);
        // Past 64 bits, the 128-bit path gives the same exact answer.
        let day = Duration::from_secs(86_400);
        assert_eq!(cost(1_000_000_000, 1_000_000_000, day), day);
        assert_eq!(cost(3_000_000_000, 1_000_000_000, day), day * 3);
    }

    #[test]
    fn the_binding_window_is_the_one_with_fewest_left() {
        let minute = position(Window::Minute, 1000, Duration::ZERO, MINUTE);
        let day = TokenStatus {
            window: Window::Day,
            limit: 5000,
            remaining: 10,
            reset: Duration::ZERO,
        };
        assert_eq!(binding([minute, day].into_iter()), Some(day));
        assert_eq!(binding([minute].into_iter()), Some(minute));
    }
}
