//! Upstream health as the gateway sees it, per upstream name, beside the catalog (so a
//! reload keeps it): requests in flight, passive ejection after consecutive failures with a
//! backoff that doubles while failures go on, cooldown after a 429, and the queue that
//! enforces an upstream's `max_concurrent`.

use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::limits::Clock;
use dashmap::DashMap;
use prometheus::IntGauge;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Whether an upstream takes requests now, and if not, until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// It answered 429: nothing is sent until `until` (clock time).
    CoolingDown {
        until: Duration,
    },
    /// It failed `eject_after_failures` times in a row.
    Ejected {
        until: Duration,
    },
}

impl Availability {
    pub fn name(&self) -> &'static str {
        match self {
            Availability::Available => "available",
            Availability::CoolingDown { .. } => "cooling_down",
            Availability::Ejected { .. } => "ejected",
        }
    }
}

#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    /// Ejections since the last success: each doubles the next one's length.
    ejections_in_a_row: u32,
    ejected_until: Option<Duration>,
    cooldown_until: Option<Duration>,
}

/// The `max_concurrent` gate of one upstream.
struct Gate {
    limit: u32,
    slots: Arc<Semaphore>,
    waiting: Arc<AtomicU32>,
}

/// One upstream's state.
#[derive(Default)]
pub struct UpstreamState {
    in_flight: Arc<AtomicU32>,
    health: Mutex<Health>,
    gate: Mutex<Option<Gate>>,
}

/// Counts a request as in flight to an upstream (for balancing, and in its gauge) while
/// it lives.
pub struct InFlightToUpstream(Arc<AtomicU32>, IntGauge);

impl Drop for InFlightToUpstream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        self.1.dec();
    }
}

/// One place in an upstream's queue, given back on drop.
struct Waiting(Arc<AtomicU32>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a request went through to get an upstream slot.
pub struct Slot {
    pub permit: Option<OwnedSemaphorePermit>,
    /// Time spent waiting in the queue.
    pub queued: Duration,
}

/// Every upstream's state.
pub struct UpstreamStates {
    clock: Arc<dyn Clock>,
    states: DashMap<String, Arc<UpstreamState>>,
}

impl UpstreamStates {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        UpstreamStates {
            clock,
            states: DashMap::new(),
        }
    }

    /// The clock's time now (the reference for `Availability` times).
    pub fn now(&self) -> Duration {
        self.clock.now()
    }

    fn state(&self, name: &str) -> Arc<UpstreamState> {
        if let Some(state) = self.states.get(name) {
            return Arc::clone(&state);
        }
        Arc::clone(&self.states.entry(name.to_owned()).or_default())
    }

    pub fn in_flight(&self, name: &str) -> u32 {
        self.states
            .get(name)
            .map_or(0, |s| s.in_flight.load(Ordering::Acquire))
    }

    /// Requests waiting in the upstream's `max_concurrent` queue now.
    pub fn waiting(&self, name: &str) -> u32 {
        let Some(state) = self.states.get(name) else {
            return 0;
        };
        let gate = state.gate.lock().unwrap_or_else(|p| p.into_inner());
        gate.as_ref()
            .map_or(0, |g| g.waiting.load(Ordering::Acquire))
    }

    /// Counts one more request in flight to `name` until the guard drops.
    pub fn start_request(&self, name: &str, gauge: IntGauge) -> InFlightToUpstream {
        let counter = Arc::clone(&self.state(name).in_flight);
        counter.fetch_add(1, Ordering::AcqRel);
        gauge.inc();
        InFlightToUpstream(counter, gauge)
    }

    pub fn availability(&self, name: &str) -> Availability {
        let Some(state) = self.states.get(name) else {
            return Availability::Available;
        };
        let health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        match (health.ejected_until, health.cooldown_until) {
            (Some(until), _) if until > now => Availability::Ejected { until },
            (_, Some(until)) if until > now => Availability::CoolingDown { until },
            _ => Availability::Available,
        }
    }

    /// A request that the upstream answered well: failures and past ejections are
    /// forgotten. A request that started before an ejection does not end it (failures
    /// during an ejection are ignored the same way); only a passing check does.
    pub fn record_success(&self, name: &str) {
        self.reset(name, false);
    }

    /// An active check passed: the upstream is back at once, ejected or not.
    pub fn record_check_passed(&self, name: &str) {
        self.reset(name, true);
    }

    /// Forgets failures and past ejections; a current ejection ends only if `end_ejection`.
    fn reset(&self, name: &str, end_ejection: bool) {
        let state = self.state(name);
        let mut health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        let ejected_now = health
            .ejected_until
            .is_some_and(|until| until > self.clock.now());
        if ejected_now && !end_ejection {
            return;
        }
        health.consecutive_failures = 0;
        health.ejections_in_a_row = 0;
        health.ejected_until = None;
    }

    /// A failure (no connection, timeout, garbage, a 500/502/503/504, a cut stream). Returns the
    /// ejection's length when this failure ejects the upstream.
    pub fn record_failure(&self, upstream: &Upstream) -> Option<Duration> {
        let policy = &upstream.policy;
        let state = self.state(&upstream.name);
        let mut health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        if health.ejected_until.is_some_and(|until| until > now) {
            return None;
        }
        health.consecutive_failures += 1;
        // Back from an ejection, one failure is enough to go out again, for longer.
        let threshold = if health.ejections_in_a_row > 0 {
            1
        } else {
            policy.eject_after_failures
        };
        if health.consecutive_failures < threshold {
            return None;
        }
        let doublings = health.ejections_in_a_row.min(16);
        let length = (policy.eject_duration * 2u32.pow(doublings)).min(policy.eject_duration_max);
        health.ejections_in_a_row += 1;
        health.consecutive_failures = 0;
        health.ejected_until = Some(now + length);
        Some(length)
    }

    /// A 429: send nothing to this upstream for `wait`, at most `eject_duration_max` (an
    /// upstream asking for an hour does not take itself out for an hour).
    pub fn cool_down(&self, upstream: &Upstream, wait: Duration) {
        let state = self.state(&upstream.name);
        let mut health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        let until = self.clock.now() + wait.min(upstream.policy.eject_duration_max);
        health.cooldown_until = Some(health.cooldown_until.map_or(until, |u| u.max(until)));
    }

    /// Takes a slot of the upstream's `max_concurrent`, waiting in its bounded queue.
    pub async fn acquire(&self, upstream: &Upstream) -> Result<Slot, RequestError> {
        let policy = &upstream.policy;
        let Some(limit) = policy.max_concurrent else {
            return Ok(Slot {
                permit: None,
                queued: Duration::ZERO,
            });
        };
        let (slots, waiting) = {
            let state = self.state(&upstream.name);
            let mut gate = state.gate.lock().unwrap_or_else(|p| p.into_inner());
            // A new limit after a reload gets a new gate; requests on the old one finish.
            if gate.as_ref().is_some_and(|g| g.limit != limit.get()) {
                *gate = None;
            }
            let gate = gate.get_or_insert_with(|| Gate {
                limit: limit.get(),
                slots: Arc::new(Semaphore::new(limit.get() as usize)),
                waiting: Arc::new(AtomicU32::new(0)),
            });
            (Arc::clone(&gate.slots), Arc::clone(&gate.waiting))
        };
        if let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
            return Ok(Slot {
                permit: Some(permit),
                queued: Duration::ZERO,
            });
        }
        let saturated = RequestError::UpstreamSaturated {
            retry_after: Duration::from_secs(1),
        };
        let took = waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < policy.max_queue).then_some(n + 1)
        });
        if took.is_err() {
            return Err(saturated);
        }
        // A guard, so a request dropped while it waits (shutdown) still leaves the queue.
        let _in_queue = Waiting(waiting);
        let started = std::time::Instant::now();
        let acquired = tokio::time::timeout(policy.queue_timeout, slots.acquire_owned()).await;
        match acquired {
            Ok(Ok(permit)) => Ok(Slot {
                permit: Some(permit),
                queued: started.elapsed(),
            }),
            _ => Err(saturated),
        }
    }

    /// After a reload: forget upstreams that are gone and idle.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.states
            .retain(|name, state| exists(name) || state.in_flight.load(Ordering::Acquire) > 0);
    }
}

/// How long an upstream's 429 asks to wait: `retry-after-ms`, else `Retry-After` as seconds
/// (fractions allowed) or as an HTTP-date; `None` when absent or unreadable.
pub fn upstream_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: std::time::SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            // try_: a huge value (1e30) would overflow a Duration and panic.
            return Duration::try_from_secs_f64(ms / 1000.0)
                .ok()
                .or(Some(Duration::MAX));
        }
    }
    let value = retry_after?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn retry_after_is_read_in_every_form() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            upstream_retry_after(None, Some("7"), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            upstream_retry_after(None, Some("0.5"), now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            upstream_retry_after(Some("1500"), Some("9"), now),
            Some(Duration::from_millis(1500))
        );
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            upstream_retry_after(None, Some("Sun, 06 Nov 1994 08:49:47 GMT"), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            upstream_retry_after(None, Some("Sun, 06 Nov 1994 08:49:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(upstream_retry_after(None, Some("soon"), now), None);
        assert_eq!(
            upstream_retry_after(None, Some("1e20"), now),
            Some(Duration::MAX),
            "huge, not a panic"
        );
        assert_eq!(
            upstream_retry_after(Some("1e30"), None, now),
            Some(Duration::MAX)
        );
        assert_eq!(upstream_retry_after(None, None, SystemTime::now()), None);
    }
}
