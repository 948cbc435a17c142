//! Upstream health as the gateway sees it: passive ejection after consecutive failures with a
//! backoff that doubles while failures go on, and cooldown after a 429. [`Upstreams::record`]
//! is the one place that ejects, cools down, counts and logs, for requests and active checks
//! alike.
//!
//! One tenant cannot eject an upstream that others share: a streak of failures ejects only
//! once at least two tenants (a key's `owner`, else its name) took part in it, or the
//! upstream failed where no request's content could be the cause: an active check, or a
//! connection that could not be opened (nothing of the request was sent). One tenant's
//! slow requests (first-byte timeouts on long generations) therefore never take the
//! upstream away from everyone; a backend that is down refuses connections, fails its
//! checks, or fails everyone's requests.

use super::Upstreams;
use crate::catalog::Upstream;
use crate::metrics::Metrics;
use std::time::Duration;

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

/// What one outcome does to an upstream's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthEffect {
    /// It answered well: failures and past ejections are forgotten (a current ejection
    /// stays; only a passing check ends one early).
    Success,
    /// An active check passed: the upstream is back at once, ejected or not.
    CheckPassed,
    /// It failed; enough failures in a row eject it.
    Failure,
    /// It answered 429: nothing is sent to it for the wait it asked (or the default).
    CoolDown(Option<Duration>),
    /// Nothing about the upstream was learned (the client left, our credential was refused).
    Unchanged,
}

/// Who saw an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Witness<'a> {
    /// A request, of this tenant (its key's `owner`, else the key's name).
    Request {
        request_id: &'a str,
        tenant: &'a str,
    },
    /// A request that could not connect: nothing of it was sent, so it tells of the
    /// upstream alone, as a check does.
    Connect { request_id: &'a str },
    /// An active health check.
    Check,
}

/// One upstream's health counters.
#[derive(Debug, Default)]
pub(super) struct Health {
    consecutive_failures: u32,
    /// The tenant of the streak's first request failure, and whether another tenant's
    /// request failed in the same streak.
    first_tenant: Option<String>,
    several_tenants: bool,
    /// An active check, or a connection, failed during the streak.
    check_failed: bool,
    /// Ejections since the last success: each doubles the next one's length.
    ejections_in_a_row: u32,
    ejected_until: Option<Duration>,
    cooldown_until: Option<Duration>,
}

impl Health {
    /// Whether an ejection or a cooldown was set (it may have ended): only then does the
    /// time matter to the upstream's availability.
    fn holds_a_time(&self) -> bool {
        self.ejected_until.is_some() || self.cooldown_until.is_some()
    }

    fn ejected_at(&self, now: Duration) -> bool {
        self.ejected_until.is_some_and(|until| until > now)
    }

    fn availability(&self, now: Duration) -> Availability {
        match (self.ejected_until, self.cooldown_until) {
            (Some(until), _) if until > now => Availability::Ejected { until },
            (_, Some(until)) if until > now => Availability::CoolingDown { until },
            _ => Availability::Available,
        }
    }

    /// Forgets failures and past ejections; a current ejection ends only if `end_ejection`.
    fn reset(&mut self, now: Duration, end_ejection: bool) {
        if self.ejected_at(now) && !end_ejection {
            return;
        }
        self.forget_streak();
        self.ejections_in_a_row = 0;
        self.ejected_until = None;
    }

    fn forget_streak(&mut self) {
        self.consecutive_failures = 0;
        self.first_tenant = None;
        self.several_tenants = false;
        self.check_failed = false;
    }

    /// Notes who saw a failure of the streak.
    fn witness(&mut self, by: Witness<'_>) {
        match by {
            Witness::Check | Witness::Connect { .. } => self.check_failed = true,
            Witness::Request { tenant, .. } => match &self.first_tenant {
                None => self.first_tenant = Some(tenant.to_owned()),
                Some(first) if first != tenant => self.several_tenants = true,
                Some(_) => {}
            },
        }
    }

    /// Whether the streak says the upstream is unwell for everyone, not one tenant's doing.
    fn confirmed(&self) -> bool {
        self.several_tenants || self.check_failed
    }

    /// Counts a failure; the ejection's length when this one ejects. Failures while ejected
    /// are ignored (requests that started before the ejection). A streak long enough ejects
    /// only when it is [confirmed](Health::confirmed); until then it goes on growing.
    fn fail(&mut self, now: Duration, upstream: &Upstream, by: Witness<'_>) -> Option<Duration> {
        let policy = &upstream.policy;
        if self.ejected_at(now) {
            return None;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.witness(by);
        // Back from an ejection, one failure is enough to go out again, for longer.
        let threshold = if self.ejections_in_a_row > 0 {
            1
        } else {
            policy.eject_after_failures
        };
        if self.consecutive_failures < threshold || !self.confirmed() {
            return None;
        }
        let doublings = self.ejections_in_a_row.min(16);
        let length = (policy.eject_duration * 2u32.pow(doublings)).min(policy.eject_duration_max);
        self.ejections_in_a_row += 1;
        self.forget_streak();
        self.ejected_until = Some(now + length);
        Some(length)
    }

    /// Sends nothing until `now + wait`, at most `eject_duration_max` (an upstream asking
    /// for an hour does not take itself out for an hour).
    fn cool_down(&mut self, now: Duration, wait: Duration, upstream: &Upstream) {
        let until = now + wait.min(upstream.policy.eject_duration_max);
        self.cooldown_until = Some(self.cooldown_until.map_or(until, |u| u.max(until)));
    }
}

impl Upstreams {
    pub fn availability(&self, name: &str) -> Availability {
        let Some(state) = self.states.get(name) else {
            return Availability::Available;
        };
        let health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        if !health.holds_a_time() {
            // Neither ejected nor cooling down: nothing to compare with the clock.
            return Availability::Available;
        }
        health.availability(self.clock.now())
    }

    /// Applies one outcome to the upstream's health, counting and logging what it caused;
    /// `by` is the request (and its tenant) or the active check that saw it.
    pub fn record(
        &self,
        upstream: &Upstream,
        effect: HealthEffect,
        metrics: &Metrics,
        by: Witness<'_>,
    ) {
        if effect == HealthEffect::Unchanged {
            return;
        }
        let state = self.state(&upstream.name);
        let mut health = state.health.lock().unwrap_or_else(|p| p.into_inner());
        let now = match effect {
            // A success is compared with the time only to keep a current ejection: with
            // none, the usual case, no clock is read (the time given is not looked at).
            HealthEffect::Success if health.ejected_until.is_none() => Duration::ZERO,
            _ => self.clock.now(),
        };
        match effect {
            HealthEffect::Success => health.reset(now, false),
            HealthEffect::CheckPassed => health.reset(now, true),
            HealthEffect::Failure => {
                if let Some(length) = health.fail(now, upstream, by) {
                    drop(health);
                    let request_id = match by {
                        Witness::Request { request_id, .. } | Witness::Connect { request_id } => {
                            request_id
                        }
                        Witness::Check => "health-check",
                    };
                    metrics
                        .upstream_ejections
                        .with_label_values(&[&upstream.name])
                        .inc();
                    log::warn!(target: "sluice::upstream", request_id = request_id, upstream = upstream.name.as_str(), ejected_for_ms = length.as_millis() as u64; "upstream ejected after consecutive failures");
                }
            }
            HealthEffect::CoolDown(asked) => {
                let wait = asked.unwrap_or(upstream.policy.rate_limit_cooldown);
                health.cool_down(now, wait, upstream);
                drop(health);
                metrics
                    .upstream_cooldowns
                    .with_label_values(&[&upstream.name])
                    .inc();
            }
            HealthEffect::Unchanged => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::test_upstream;

    const S: Duration = Duration::from_secs(1);
    const CHECK: Witness<'static> = Witness::Check;

    fn by(tenant: &'static str) -> Witness<'static> {
        Witness::Request {
            request_id: "r",
            tenant,
        }
    }

    /// A clock that counts its reads, at a time set by the test.
    #[derive(Default)]
    struct CountingClock {
        reads: std::sync::atomic::AtomicU32,
        now_secs: std::sync::atomic::AtomicU64,
    }

    impl crate::clock::Clock for CountingClock {
        fn now(&self) -> Duration {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Duration::from_secs(self.now_secs.load(std::sync::atomic::Ordering::Relaxed))
        }
    }

    #[test]
    fn a_healthy_upstream_is_chosen_and_answers_without_a_clock_read_and_an_ejected_one_is_timed() {
        use std::sync::atomic::Ordering;
        let clock = std::sync::Arc::new(CountingClock::default());
        let upstreams = Upstreams::new(clock.clone());
        let metrics = crate::metrics::Metrics::new();
        let upstream = test_upstream(1, S, 4 * S);
        let tenant = by("a");
        assert_eq!(upstreams.availability("u"), Availability::Available);
        upstreams.record(&upstream, HealthEffect::Success, &metrics, tenant);
        assert_eq!(upstreams.availability("u"), Availability::Available);
        assert_eq!(
            clock.reads.load(Ordering::Relaxed),
            0,
            "nothing to time: no clock read"
        );
        upstreams.record(&upstream, HealthEffect::Failure, &metrics, CHECK);
        assert_eq!(
            upstreams.availability("u"),
            Availability::Ejected { until: S },
            "one confirmed failure ejects for eject_duration from now"
        );
        upstreams.record(&upstream, HealthEffect::Success, &metrics, tenant);
        assert_eq!(
            upstreams.availability("u"),
            Availability::Ejected { until: S },
            "a success (a request that started before) keeps a current ejection"
        );
        clock.now_secs.store(2, Ordering::Relaxed);
        assert_eq!(
            upstreams.availability("u"),
            Availability::Available,
            "the ejection ends with its time"
        );
        upstreams.record(&upstream, HealthEffect::Success, &metrics, tenant);
        upstreams.record(&upstream, HealthEffect::CoolDown(Some(S)), &metrics, tenant);
        assert_eq!(
            upstreams.availability("u"),
            Availability::CoolingDown { until: 3 * S },
            "a cooldown runs from the time read"
        );
    }

    #[test]
    fn one_tenants_streak_ejects_only_once_another_tenant_or_a_check_confirms_it() {
        let upstream = test_upstream(2, S, 4 * S);
        let mut health = Health::default();
        for _ in 0..10 {
            assert_eq!(
                health.fail(Duration::ZERO, &upstream, by("a")),
                None,
                "one tenant's failures never eject"
            );
        }
        assert_eq!(
            health.fail(Duration::ZERO, &upstream, by("b")),
            Some(S),
            "a second tenant's failure in the streak does"
        );
        health.reset(2 * S, false);
        assert_eq!(health.fail(2 * S, &upstream, by("a")), None);
        assert_eq!(
            health.fail(2 * S, &upstream, CHECK),
            Some(S),
            "so does a failed check"
        );
        health.reset(4 * S, true);
        assert_eq!(health.fail(4 * S, &upstream, by("a")), None);
        health.reset(4 * S, false);
        assert_eq!(health.fail(4 * S, &upstream, by("b")), None);
        assert_eq!(
            health.fail(4 * S, &upstream, by("b")),
            None,
            "a success ends the streak and who made it"
        );
    }

    #[test]
    fn consecutive_failures_eject_with_a_doubling_backoff() {
        // eject_after_failures 2, eject_duration 1s, eject_duration_max 4s.
        let upstream = test_upstream(2, S, 4 * S);
        let mut health = Health::default();
        let mut now = Duration::ZERO;
        assert_eq!(
            health.fail(now, &upstream, CHECK),
            None,
            "one failure is not enough"
        );
        assert_eq!(
            health.fail(now, &upstream, CHECK),
            Some(S),
            "the second ejects for 1s"
        );
        assert_eq!(health.availability(now), Availability::Ejected { until: S });
        assert_eq!(
            health.fail(now, &upstream, CHECK),
            None,
            "failures while ejected are ignored"
        );
        now += S;
        assert_eq!(health.availability(now), Availability::Available);
        assert_eq!(
            health.fail(now, &upstream, CHECK),
            Some(2 * S),
            "back, one failure re-ejects, twice as long"
        );
        now += 2 * S;
        assert_eq!(health.fail(now, &upstream, CHECK), Some(4 * S));
        now += 4 * S;
        assert_eq!(
            health.fail(now, &upstream, CHECK),
            Some(4 * S),
            "capped at eject_duration_max"
        );
    }

    #[test]
    fn success_forgets_past_ejections_but_does_not_end_a_current_one() {
        let upstream = test_upstream(1, S, 8 * S);
        let mut health = Health::default();
        assert_eq!(health.fail(Duration::ZERO, &upstream, CHECK), Some(S));
        health.reset(Duration::ZERO, false);
        assert!(
            health.ejected_at(Duration::ZERO),
            "a request's success does not end an ejection"
        );
        health.reset(Duration::ZERO, true);
        assert_eq!(
            health.availability(Duration::ZERO),
            Availability::Available,
            "a passing check does"
        );
        assert_eq!(
            health.fail(Duration::ZERO, &upstream, CHECK),
            Some(S),
            "and the backoff starts over"
        );
    }

    #[test]
    fn cooldown_keeps_the_later_end_and_is_capped() {
        let upstream = test_upstream(1, S, 10 * S);
        let mut health = Health::default();
        health.cool_down(Duration::ZERO, 3 * S, &upstream);
        health.cool_down(Duration::ZERO, S, &upstream);
        assert_eq!(
            health.availability(Duration::ZERO),
            Availability::CoolingDown { until: 3 * S }
        );
        health.cool_down(Duration::ZERO, 3600 * S, &upstream);
        assert_eq!(
            health.availability(Duration::ZERO),
            Availability::CoolingDown { until: 10 * S }
        );
    }
}
