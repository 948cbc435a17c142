//! Step 7 of a chat completion: choose a target, send, and decide what a failure means.
//!
//! A request is sent again only when it provably was not processed: no connection could
//! be opened, or the upstream answered 429 while another target was free. Resends are
//! bounded by `retry_attempts` and spaced by a jittered, doubling `retry_backoff`. A 500,
//! a timeout after the request was sent, a 401/403 or anything after the response started
//! is never resent. Every outcome updates the upstream's health (`health.rs`).

use crate::catalog::Model;
use crate::error::RequestError;
use crate::forward::{forward, Call, Exchange, ForwardError};
use crate::gateway::Gateway;
use crate::request_body::{with_model, ChatRequest};
use crate::routing::{another_available, choose, Choice};
use crate::upstream::{request_header, upstream_path};
use bytes::Bytes;
use pingora::proxy::Session;
use rand::Rng;
use std::time::{Duration, Instant};

/// One chat completion to deliver.
pub struct Dispatch<'a> {
    pub model: &'a Model,
    pub request: &'a ChatRequest,
    pub body: Bytes,
    pub request_id: &'a str,
    pub request_started: Instant,
    /// Gateway headers for the response (the key's rate-limit position).
    pub extra_headers: Vec<(&'static str, String)>,
    pub retry_attempts: u32,
    pub retry_backoff: Duration,
}

/// The upstream called last, for the access log.
#[derive(Debug, Default)]
pub struct Called {
    pub upstream: Option<String>,
    pub url: Option<String>,
}

/// Why a request is sent again (the `reason` label of `sluice_upstream_retries_total`).
const CONNECT_FAILED: &str = "connect_failed";
const RATE_LIMITED: &str = "rate_limited";

/// Delivers the request to one of the model's targets, resending where that is safe.
pub async fn dispatch(
    session: &mut Session,
    gateway: &Gateway,
    dispatch: Dispatch<'_>,
    exchange: &mut Exchange,
    called: &mut Called,
) -> Result<(), ForwardError> {
    let states = &gateway.upstreams;
    let model = dispatch.model;
    let mut tried: Vec<usize> = Vec::new();
    let mut resends = 0;
    loop {
        let index = match pick(gateway, model, &tried) {
            Ok(index) => index,
            Err(retry_after) => {
                let error = RequestError::NoHealthyUpstream { retry_after };
                return Err(ForwardError::BeforeResponse {
                    error,
                    unsent: true,
                });
            }
        };
        let target = &model.targets[index];
        let upstream = &target.upstream;
        let body = match &target.upstream_model {
            Some(name) => with_model(&dispatch.body, dispatch.request, name),
            None => dispatch.body.clone(),
        };
        let query = session.req_header().uri.query();
        let path = upstream_path(upstream, "/chat/completions", query);
        called.upstream = Some(upstream.name.clone());
        called.url = Some(format!(
            "{}{}",
            upstream.origin,
            upstream_path(upstream, "/chat/completions", None)
        ));
        let header = request_header(session.req_header(), upstream, &path, dispatch.request_id, body.len()).map_err(|e| {
            log::error!(target: "sluice::dispatch", request_id = dispatch.request_id, error:? = e.etype(); "cannot build the upstream request");
            ForwardError::BeforeResponse { error: RequestError::Internal, unsent: true }
        })?;

        let slot =
            states
                .acquire(upstream)
                .await
                .map_err(|error| ForwardError::BeforeResponse {
                    error,
                    unsent: true,
                })?;
        if slot.permit.is_some() {
            gateway
                .metrics
                .upstream_queue
                .with_label_values(&[&upstream.name])
                .observe(slot.queued.as_secs_f64());
        }
        let in_flight = states.start_request(
            &upstream.name,
            gateway
                .metrics
                .upstream_in_flight
                .with_label_values(&[&upstream.name]),
        );
        let may_resend = resends < dispatch.retry_attempts;
        let call = Call {
            upstream,
            header,
            body,
            request_started: dispatch.request_started,
            request_id: dispatch.request_id,
            extra_headers: dispatch.extra_headers.clone(),
            hand_back_429: may_resend && another_available(model, states, &[index]),
        };
        // A resend starts afresh: the status of a handed-back 429 is not this request's.
        exchange.status = None;
        let result = forward(session, gateway, call, exchange).await;
        drop((slot, in_flight));

        let count_error = |error: &RequestError| {
            gateway
                .metrics
                .upstream_errors
                .with_label_values(&[&upstream.name, error.code()])
                .inc();
        };
        let reason = match &result {
            Ok(()) => {
                match exchange.status {
                    Some(500 | 502 | 503 | 504) => record_failure(gateway, upstream),
                    Some(429) => cool_down(gateway, upstream, exchange.upstream_retry_after),
                    _ => states.record_success(&upstream.name),
                }
                return Ok(());
            }
            Err(ForwardError::Throttled { retry_after }) => {
                cool_down(gateway, upstream, *retry_after);
                RATE_LIMITED
            }
            Err(ForwardError::BeforeResponse { error, unsent }) => {
                count_error(error);
                if *error != RequestError::UpstreamAuthFailed {
                    record_failure(gateway, upstream);
                }
                if !(*unsent && may_resend) {
                    return result;
                }
                CONNECT_FAILED
            }
            Err(ForwardError::AfterResponse { error, .. }) => {
                count_error(error);
                record_failure(gateway, upstream);
                return result;
            }
            Err(ForwardError::ClientGone(_)) => return result,
        };
        gateway
            .metrics
            .upstream_retries
            .with_label_values(&[&upstream.name, reason])
            .inc();
        tried.push(index);
        resends += 1;
        tokio::time::sleep(backoff(dispatch.retry_backoff, resends)).await;
    }
}

/// A target not tried yet if one is free, else any free one (a single-target model retries
/// its target); `Err` with the soonest recovery when none is free.
fn pick(gateway: &Gateway, model: &Model, tried: &[usize]) -> Result<usize, Duration> {
    let mut rng = rand::thread_rng();
    let first = choose(model, &gateway.upstreams, tried, &mut rng);
    let choice = match first {
        Choice::Target(_) => first,
        _ if tried.is_empty() => first,
        _ => choose(model, &gateway.upstreams, &[], &mut rng),
    };
    match choice {
        Choice::Target(index) => Ok(index),
        Choice::Unavailable { retry_after } => Err(retry_after.max(Duration::from_millis(1))),
        Choice::Exhausted => Err(Duration::from_secs(1)),
    }
}

fn record_failure(gateway: &Gateway, upstream: &crate::catalog::Upstream) {
    if let Some(length) = gateway.upstreams.record_failure(upstream) {
        gateway
            .metrics
            .upstream_ejections
            .with_label_values(&[&upstream.name])
            .inc();
        log::warn!(target: "sluice::dispatch", upstream = upstream.name.as_str(), ejected_for:? = length; "upstream ejected after consecutive failures");
    }
}

fn cool_down(
    gateway: &Gateway,
    upstream: &crate::catalog::Upstream,
    retry_after: Option<Duration>,
) {
    let wait = retry_after.unwrap_or(upstream.policy.rate_limit_cooldown);
    gateway.upstreams.cool_down(upstream, wait);
    gateway
        .metrics
        .upstream_cooldowns
        .with_label_values(&[&upstream.name])
        .inc();
}

/// `base` doubled per resend already made, times a random factor in [0.5, 1.5).
fn backoff(base: Duration, resend: u32) -> Duration {
    let doubled = base * 2u32.pow(resend.saturating_sub(1).min(10));
    doubled.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
}
