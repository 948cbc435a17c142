//! The two injected clocks: the monotonic one that limits, upstream health and cooldowns
//! read, and the wall clock that key validity (`expires_at`, `not_before`) is checked
//! against. Tests move both themselves instead of waiting for time to pass.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Monotonic time since an arbitrary start.
pub trait Clock: Send + Sync {
    fn now(&self) -> Duration;
}

/// The real clock.
pub struct MonotonicClock(Instant);

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock(Instant::now())
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// Wall-clock time, read where a configured date and time is compared with now (a key's
/// `expires_at` and `not_before`), injected so tests set the date themselves.
pub trait WallClock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn unix_millis(&self) -> i64;
}

/// The system's clock (`SystemTime::now`, a vDSO read on Linux: no system call).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn unix_millis(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => since.as_millis() as i64,
            Err(before) => -(before.duration().as_millis() as i64),
        }
    }
}

/// A wall-clock instant as RFC 3339 in UTC (`2026-03-01T00:00:00Z`, with a fraction only
/// when it has one), for messages and the admin view.
pub fn rfc3339(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
        || format!("{unix_ms} ms after the Unix epoch"),
        |time| time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    )
}
