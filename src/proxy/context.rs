//! What a request holds from its first byte to its log line. Dropping the context releases
//! everything in it: limit permits and the in-flight gauge, whether the request finished,
//! failed, lost its client or was cancelled at shutdown.

use crate::catalog::{Catalog, Key, Model};
use crate::error::RequestError;
use crate::http1::Error;
use crate::limits::{Grant, Permit, RateStatus, Reservation, TokenStatus};
use crate::respond::ErrorShape;
use crate::telemetry::RequestTrace;
use crate::upstream::{AfterCut, Called, Exchange};
use prometheus::IntGauge;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-request state.
pub struct RequestContext {
    pub(super) started: Instant,
    pub(super) request_id: String,
    pub(super) catalog: Option<Arc<Catalog>>,
    pub(super) key: Option<Arc<Key>>,
    /// The model ID as the client sent it (for the log), and the catalog ID once known.
    pub(super) model: Option<String>,
    /// The catalog model asked for, once known: its ID labels the request's metrics.
    pub(super) catalog_model: Option<Arc<Model>>,
    /// The catalog ID of the model whose upstream answered: the one asked for, or a
    /// fallback.
    pub(super) served_model: Option<String>,
    /// The upstream called last.
    pub(super) called: Called,
    pub(super) stream: bool,
    /// The status the client was sent (0: none yet).
    pub(super) status: u16,
    pub(super) error: Option<RequestError>,
    pub(super) rate: Option<RateStatus>,
    /// The key's binding token window, for a key with token limits.
    pub(super) tokens: Option<TokenStatus>,
    /// Tokens reserved for this request, until its usage settles them.
    pub(super) reservation: Option<Reservation>,
    pub(super) reserved_tokens: Option<u64>,
    /// The price of the model asked for, when it has one.
    pub(super) price: Option<crate::config::Price>,
    /// Money reserved in the key's and its owner's budgets, until the cost settles it.
    pub(super) budget_hold: Option<super::spend::Hold>,
    /// Micro-dollars left in the key's tightest budget window (a budgeted key only).
    pub(super) budget_remaining: Option<u64>,
    /// What the request cost, once settled (a priced model only).
    pub(super) cost_micros: Option<u64>,
    /// Where the key's limits are decided for this request.
    pub(super) limits: LimitMode,
    /// What the request holds in the shared limits store, until it ends.
    pub(super) grant: Option<Grant>,
    /// The route's answers report usage by contract (chat, completions, responses,
    /// embeddings): one without it is counted in `sluice_usage_missing_total`.
    pub(super) usage_expected: bool,
    /// The output limit the request set, if any: usage beyond it (plus slack) is not
    /// believed.
    pub(super) output_limit: Option<u64>,
    pub(super) since_previous: Option<Duration>,
    /// Still running at the end of `shutdown_grace`, and ended there.
    pub(super) cut_by_shutdown: bool,
    pub(super) exchange: Exchange,
    /// Its tokens, money and concurrency were settled (`Proxy::settle`).
    pub(super) settled: bool,
    /// The key's concurrency slot in this process, given back when the request is settled.
    pub(super) key_slot: Option<Permit>,
    /// The request's gateway-wide slot: kept until the context drops, as it tells a
    /// shutdown that the request is still running (its answer still being written).
    pub(super) gateway_slot: Option<Permit>,
    /// The request counted in its key's in-flight requests while the shared store decides
    /// its limits; given up if the store fails and this process decides them after all.
    pub(super) shared_count: Option<Permit>,
    pub(super) in_flight: Option<InFlight>,
    /// The request's server span, when tracing is configured; it ends at the log line.
    /// Boxed: ~300 bytes that an untraced request, and every idle stream, would carry.
    pub(super) trace: Option<Box<RequestTrace>>,
    /// The envelope of the gateway's own errors: Anthropic's on the Messages routes.
    pub(super) error_shape: ErrorShape,
}

impl RequestContext {
    pub(super) fn new() -> Self {
        RequestContext {
            started: Instant::now(),
            request_id: String::new(),
            catalog: None,
            key: None,
            model: None,
            catalog_model: None,
            served_model: None,
            called: Called::default(),
            stream: false,
            status: 0,
            error: None,
            rate: None,
            tokens: None,
            reservation: None,
            reserved_tokens: None,
            price: None,
            budget_hold: None,
            budget_remaining: None,
            cost_micros: None,
            limits: LimitMode::Open,
            grant: None,
            usage_expected: false,
            output_limit: None,
            since_previous: None,
            cut_by_shutdown: false,
            exchange: Exchange::default(),
            settled: false,
            key_slot: None,
            gateway_slot: None,
            shared_count: None,
            in_flight: None,
            trace: None,
            error_shape: ErrorShape::OpenAi,
        }
    }
}

/// Where a request's key limits are decided.
pub(super) enum LimitMode {
    /// In this process, with these limits (the key's, or its share while the store is down).
    Local(Arc<Key>),
    /// In the shared limits store.
    Shared,
    /// Nowhere: the store is down and `on_error` is `open` (or not decided yet).
    Open,
}

/// Counts a request in `sluice_in_flight_requests` while it lives.
pub(super) struct InFlight(IntGauge);

impl InFlight {
    pub(super) fn new(gauge: IntGauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How a request ended before completing normally.
pub(super) enum Failure {
    /// Answer with this error (nothing was sent yet).
    Answer(RequestError),
    /// The response had started and was ended; `then` says whether the connection survives.
    Ended { error: RequestError, then: AfterCut },
    /// The client is gone, or reading or writing it failed.
    Abort(Error),
}

/// Why a request's connection is closed after it: its answer did not end well.
#[derive(Debug)]
pub(super) enum Broken {
    /// The client is gone, or reading or writing its connection failed: nothing more is
    /// said to it.
    ClientGone(Error),
    /// The upstream broke an answer that had started: it stays cut.
    Cut,
    /// Writing the gateway's own answer failed (before anything was sent, a 500 follows
    /// when the failure is the gateway's own).
    Answer(Error),
}

impl From<RequestError> for Failure {
    fn from(error: RequestError) -> Self {
        Failure::Answer(error)
    }
}
