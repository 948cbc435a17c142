//! One request's call to an upstream, and what its exchanges measured: shared by the
//! exchange (`exchange.rs`) and the relay of the answer body (`relay.rs`).

use super::body::Body;
use super::error_record::UpstreamErrorRecord;
use super::request::RequestHead;
use super::translated::AnswerTranslation;
use super::verdict::Onward;
use crate::catalog::Held;
use crate::catalog::Upstream;
use crate::respond::ErrorShape;
use crate::response_id::IdRewrite;
use crate::usage::Usage;
use prometheus::Histogram;
use std::time::{Duration, Instant};

/// What a request's exchanges measured, for the access log, metrics and `server-timing`.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The status relayed to the client, if a response started.
    pub status: Option<u16>,
    pub ttfb: Option<Duration>,
    /// Time spent waiting on upstreams (response headers and body reads, every attempt).
    pub upstream_wait: Duration,
    pub bytes_out: usize,
    /// The answer started, then was broken off: the client got part of it.
    pub cut: bool,
    /// The response was an SSE stream.
    pub event_stream: bool,
    /// What a relayed 429 asked to wait.
    pub upstream_retry_after: Option<Duration>,
    /// The upstream's own error answer (a relayed 4xx or 5xx), for the access log.
    pub upstream_error: Option<UpstreamErrorRecord>,
    /// The tokens a successful answer says it used.
    pub usage: Option<Usage>,
    /// The model a successful answer says answered, when tracing reads it.
    pub response_model: Option<String>,
    /// An answer's last bytes, not yet written: they and the body's end go out once the
    /// caller has settled the request, so its limits are free before the client can see
    /// the answer end (counted in `bytes_out` already).
    pub unsent: bytes::Bytes,
}

/// What goes to the upstream: needed until the answer's header comes, not while its
/// body passes.
pub struct Outgoing {
    pub header: RequestHead,
    pub body: Body,
}

/// One request to send upstream.
pub struct Call<'a> {
    pub upstream: &'a Upstream,
    /// The upstream's `sluice_upstream_ttfb_seconds`, resolved at its first answer.
    pub ttfb: &'a Held<Histogram>,
    /// When the client's request arrived (for `server-timing`).
    pub request_started: Instant,
    /// The gateway's headers for the response (request ID, the key's rate position).
    pub response_headers: &'a [(http::HeaderName, String)],
    /// Where the request may go if the answer is one `retry_on` names (then it is held
    /// back from the client).
    pub onward: Onward,
    /// The gateway asked for the usage chunk: a stream gets it taken out again.
    pub strip_usage: bool,
    /// For the diagnostic log lines about this request.
    pub request_id: &'a str,
    /// Stored-response IDs to rewrite in a successful answer (the Responses API).
    pub rewrite: Option<IdRewrite>,
    /// Keep the model a successful answer names (`Exchange::response_model`): tracing.
    pub read_model: bool,
    /// The upstream speaks Anthropic's Messages API (its usage is read in that shape).
    pub messages_api: bool,
    /// The answer is translated to the client's API.
    pub translation: Option<AnswerTranslation>,
    /// The envelope of an error event that ends a cut stream.
    pub error_shape: ErrorShape,
}

/// The earlier of `at` and the total deadline, if any.
pub(super) fn bounded(at: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}
