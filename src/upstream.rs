//! The upstream half of a request: which target serves it, whether that target is well, the
//! queue in front of it, the exchange over the connection pool, and the rules for sending a
//! request again.
//!
//! [`Upstreams`] owns the state kept per upstream name beside the catalog (so a reload keeps
//! it) and the pool of connections; [`dispatch`] is the one entry the request path calls.
//! Nothing in this folder knows the proxy or the gateway: it takes `&Upstreams` and
//! `&Metrics`.
//!
//! | file          | what it owns                                                        |
//! |---------------|---------------------------------------------------------------------|
//! | `body.rs`     | a request's body as each target receives it (renamed, spooled)      |
//! | `dispatch.rs` | the attempt loop: choose, take a slot, exchange, verdict, resend    |
//! | `verdict.rs`  | pure decisions: what a failure means, whether to send again        |
//! | `choose.rs`   | weighted power of two choices among available targets               |
//! | `health.rs`   | availability; the one place that ejects, cools down, counts and logs|
//! | `gate.rs`     | an upstream's `max_concurrent` and its bounded queue                |
//! | `request.rs`  | the request header sent up: the one use of a credential             |
//! | `response.rs` | the response header passed back: status, framing, `Retry-After`     |
//! | `pool.rs`     | one event loop's idle connections to the upstreams, and the connector |
//! | `connect.rs`  | a new connection: plain TCP of our own, TLS by pingora's connector  |
//! | `call.rs`     | one request's call to an upstream, and what its exchanges measured |
//! | `exchange.rs` | one exchange over the pool: send, first byte, then the answer       |
//! | `send.rs`     | the request out and the answer's head back, on a pooled or fresh connection |
//! | `relay.rs`    | the answer body as it passes: held, deadlines, cuts, stream edits  |
//! | `error_record.rs` | what the access log keeps of an upstream's own error answer     |
//! | `redaction.rs` | the upstream's credential taken out of an error answer it echoes   |
//! | `probe.rs`    | active health checks                                                |
//! | `translated.rs` | an answer in the other API than the client's: what it gets instead |

mod body;
mod call;
mod choose;
mod connect;
mod dispatch;
mod error_record;
mod exchange;
mod gate;
mod health;
mod pool;
mod probe;
mod redaction;
mod relay;
mod request;
mod response;
mod send;
mod translated;
mod verdict;

pub use body::RequestBody;
pub use call::Exchange;
pub use dispatch::{dispatch, Called, Delivery, Dispatch, Stored};
pub use error_record::UpstreamErrorRecord;
pub use health::Availability;
pub use pool::Pool;
pub use probe::{run as run_checks, CheckContext};
pub use translated::AnswerTranslation;
pub use verdict::AfterCut;

use crate::catalog::Held;
use crate::clock::Clock;
use dashmap::DashMap;
use pingora_core::connectors::TransportConnector;
use prometheus::{Histogram, IntGauge};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every upstream's state, by name, and the connection pool of the health checks.
pub struct Upstreams {
    clock: Arc<dyn Clock>,
    states: DashMap<String, Arc<UpstreamState>>,
    /// The health checks' connector: every check connects afresh and closes after, so it
    /// keeps nothing. Requests use the pool of the event loop that serves them (one per
    /// `Proxy`), so a connection is only ever polled by the thread that made it.
    checks: TransportConnector,
}

/// One upstream's state.
#[derive(Default)]
struct UpstreamState {
    in_flight: AtomicU32,
    health: Mutex<health::Health>,
    gate: Mutex<Option<gate::Gate>>,
    /// Its `sluice_upstream_in_flight_requests` and `sluice_upstream_ttfb_seconds`,
    /// resolved on first use and kept with the state (`metrics/held.rs`).
    in_flight_gauge: Held<IntGauge>,
    ttfb: Held<Histogram>,
}

/// Counts a request as in flight to an upstream (for balancing, and in its gauge) while
/// it lives.
pub struct InFlightToUpstream(Arc<UpstreamState>, IntGauge);

impl InFlightToUpstream {
    /// The upstream's `sluice_upstream_ttfb_seconds`, once resolved.
    pub fn ttfb(&self) -> &Held<Histogram> {
        &self.0.ttfb
    }
}

impl Drop for InFlightToUpstream {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.1.dec();
    }
}

impl Upstreams {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Upstreams {
            clock,
            states: DashMap::new(),
            checks: pool::connector(),
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

    /// Requests in flight to the upstream now.
    pub fn in_flight(&self, name: &str) -> u32 {
        self.states
            .get(name)
            .map_or(0, |s| s.in_flight.load(Ordering::Acquire))
    }

    /// Counts one more request in flight to `name` until the guard drops, in the gauge
    /// `gauge` resolves the first time.
    pub fn start_request(
        &self,
        name: &str,
        gauge: impl FnOnce() -> IntGauge,
    ) -> InFlightToUpstream {
        let state = self.state(name);
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        let gauge = state.in_flight_gauge.get(gauge).clone();
        gauge.inc();
        InFlightToUpstream(state, gauge)
    }

    /// After a reload: forget upstreams that are gone and idle.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.states
            .retain(|name, state| exists(name) || state.in_flight.load(Ordering::Acquire) > 0);
    }
}

/// An upstream on a closed port for unit tests, with the given ejection policy.
#[cfg(test)]
pub(crate) fn test_upstream(
    eject_after_failures: u32,
    eject_duration: Duration,
    eject_duration_max: Duration,
) -> crate::catalog::Upstream {
    use crate::peer::PoolPeer;
    use pingora_core::upstreams::peer::HttpPeer;
    crate::catalog::Upstream {
        name: "u".into(),
        peer: PoolPeer::new(HttpPeer::new(
            std::net::SocketAddr::from(([127, 0, 0, 1], 9)),
            false,
            String::new(),
        )),
        host_header: "backend:8000".into(),
        base_path: "/v1".into(),
        origin: "http://backend:8000".into(),
        credential: None,
        style: crate::config::ProviderStyle::default(),
        first_byte_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        policy: crate::config::UpstreamPolicy {
            total_timeout: None,
            max_concurrent: None,
            max_queue: 0,
            queue_timeout: Duration::from_secs(1),
            rate_limit_cooldown: Duration::from_secs(1),
            retry_on: crate::config::RetryOn::DEFAULT.to_vec(),
            eject_after_failures,
            eject_duration,
            eject_duration_max,
            health_check_interval: None,
            stream_usage: crate::config::StreamUsage::Inject,
        },
    }
}
