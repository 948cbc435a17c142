//! The one entry of the upstream half: deliver a request to one of its model's targets,
//! sending it again after a failure its upstream's `retry_on` names (`verdict.rs` decides),
//! and report how it went: delivered, refused, or not served by this model at all (so a
//! fallback model may take it).

use super::body::RequestBody;
use super::call::{Call, Exchange, Outgoing};
use super::choose::{another_available, pick};
use super::exchange::exchange;
use super::health::Witness;
use super::request::{request_header, upstream_target, TraceFields};
use super::translated::AnswerTranslation;
use super::verdict::{verdict, AfterCut, Next, Onward, Outcome, Reached};
use super::{Pool, Upstreams};
use crate::catalog::{Model, Upstream};
use crate::config::StreamUsage;
use crate::endpoint::UpstreamApi;
use crate::error::RequestError;
use crate::listener::Session;
use crate::metrics::Metrics;
use crate::request_body::Edits;
use crate::respond::ErrorShape;
use crate::response_id::{IdIssuer, IdRewrite};
use crate::telemetry::{AttemptEnd, AttemptStart, AttemptTrace, RequestTrace};
use rand::Rng;
use std::time::{Duration, Instant};

/// The header naming the version of Anthropic's API a request is written for.
const ANTHROPIC_VERSION: &str = "anthropic-version";

/// The version a translated chat completion request is written for.
const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// One request to deliver.
pub struct Dispatch<'a> {
    pub model: &'a Model,
    /// The serving event loop's connection pool.
    pub pool: &'a Pool,
    pub body: RequestBody<'a>,
    /// The path under the upstream's base URL, e.g. `/chat/completions`.
    pub path: &'a str,
    /// The stored response the request names, if any: it lives on one target only.
    pub stored: Option<Stored>,
    /// Stored-response IDs in the answer are rewritten to the ones clients see, made for
    /// this owner (the Responses API).
    pub ids: Option<IdIssuer<'a>>,
    /// A stream whose client did not ask for usage: targets whose `stream_usage` is
    /// `inject` are asked for it, and it is taken out of what the client receives.
    pub inject_usage: bool,
    /// The model is a fallback: the body names it in place of the model the client asked
    /// for (unless a target knows it by another name).
    pub renames_model: bool,
    pub request_id: &'a str,
    /// Whose request it is, for the upstream's health: the key's `owner`, else its name.
    pub tenant: &'a str,
    pub request_started: Instant,
    /// The gateway's headers for the response (request ID, the key's rate position).
    pub response_headers: Vec<(http::HeaderName, String)>,
    pub retry_attempts: u32,
    pub retry_backoff: Duration,
    /// A fallback model follows this one: an answer `retry_on` names is held back even
    /// when no other target is left, and the delivery ends [`Delivery::Unserved`].
    pub fallback_follows: bool,
    /// The request's server span, when tracing is configured: each attempt gets a client
    /// span under it.
    pub trace: Option<&'a RequestTrace>,
    /// `gen_ai.operation.name` of the attempts.
    pub operation: &'static str,
    /// The answer is translated to the client's API (the model's upstream speaks the
    /// other one).
    pub translation: Option<AnswerTranslation>,
    /// The envelope the client reads errors in.
    pub error_shape: ErrorShape,
}

/// A stored response a request names (the Responses API).
#[derive(Debug, Clone)]
pub struct Stored {
    /// The model's target that holds it: only this one may serve the request.
    pub target: usize,
    /// The upstream's own ID for it.
    pub upstream_id: String,
    /// Named by `previous_response_id` in the body (else by the path).
    pub in_body: bool,
}

/// How a delivery ended, as the client sees it.
#[derive(Debug)]
pub enum Delivery {
    /// The upstream's answer (whatever its status) reached the client whole.
    Delivered,
    /// Nothing was sent to the client: answer with this error.
    Refused(RequestError),
    /// Nothing was sent to the client, and the model could not serve the request: no
    /// target was available, its queue was full, or every try failed in a way `retry_on`
    /// names. A fallback model may take it; if none does, this error is the answer.
    Unserved(RequestError),
    /// The response had started and was ended as well as it could be.
    Cut { error: RequestError, then: AfterCut },
    /// The client went away; the upstream request was abandoned.
    ClientGone(crate::http1::Error),
}

/// The upstream called last, for the access log.
#[derive(Debug, Default)]
pub struct Called {
    pub upstream: Option<String>,
    pub url: Option<String>,
}

/// Delivers the request to one of the model's targets, resending where that is safe.
/// What it measures and whom it calls go into `measured` (fresh) and `called` as they
/// happen, so a request ended from outside (at the end of `shutdown_grace`) still has them.
pub async fn dispatch(
    session: &mut Session,
    upstreams: &Upstreams,
    metrics: &Metrics,
    // By reference, as every argument of these futures that is larger than a pointer: an
    // async fn's argument taken by value is stored twice in its future.
    dispatch: &Dispatch<'_>,
    measured: &mut Exchange,
    called: &mut Called,
) -> Delivery {
    attempts(session, upstreams, metrics, dispatch, measured, called).await
}

/// The attempt loop: choose, take a slot, exchange, verdict, resend or return.
async fn attempts(
    session: &mut Session,
    upstreams: &Upstreams,
    metrics: &Metrics,
    dispatch: &Dispatch<'_>,
    measured: &mut Exchange,
    called: &mut Called,
) -> Delivery {
    let model = dispatch.model;
    let mut tried: Vec<usize> = Vec::new();
    let mut resends = 0;
    // For `X-Forwarded-For`: the same for every attempt.
    let client_address = session.client_addr().map(|a| match a.as_inet() {
        Some(inet) => address_text(inet.ip()),
        None => a.to_string(),
    });
    loop {
        let picked = match &dispatch.stored {
            Some(stored) => Ok(stored.target),
            None => pick(model, upstreams, &tried, &mut rand::thread_rng()),
        };
        let index = match picked {
            Ok(index) => index,
            Err(retry_after) => {
                return Delivery::Unserved(RequestError::NoHealthyUpstream { retry_after })
            }
        };
        let target = &model.targets[index];
        let upstream = &target.upstream;
        let previous = dispatch.stored.as_ref().filter(|s| s.in_body);
        let name = target
            .upstream_model
            .as_deref()
            .or(dispatch.renames_model.then_some(model.id.as_str()));
        let inject_usage =
            dispatch.inject_usage && upstream.policy.stream_usage == StreamUsage::Inject;
        let body = dispatch.body.for_target(Edits {
            model: name,
            previous_response: previous.map(|s| s.upstream_id.as_str()),
            include_usage: inject_usage,
        });
        *called = Called {
            upstream: Some(upstream.name.clone()),
            url: Some([upstream.origin.as_str(), &upstream.base_path, dispatch.path].concat()),
        };
        // A client that leaves while queued gives its place back at once.
        let acquired = tokio::select! {
            // The slot first: when it is free at once the client is not polled at all.
            biased;
            acquired = upstreams.acquire(upstream) => acquired,
            gone = session.client_gone() => return Delivery::ClientGone(gone),
        };
        let slot = match acquired {
            Ok(slot) => slot,
            Err(error) => return Delivery::Unserved(error),
        };
        if slot.permit.is_some() {
            metrics
                .upstream_queue
                .with_label_values(&[&upstream.name])
                .observe(slot.queued.as_secs_f64());
        }
        // The attempt's span starts with the exchange (a wait for a slot shows as a gap in
        // the request's span), and the upstream is told it is the parent.
        let attempt = dispatch.trace.map(|trace| {
            trace.attempt(AttemptStart {
                operation: dispatch.operation,
                request_model: name.unwrap_or(model.id.as_str()),
                upstream: &upstream.name,
                server: &upstream.host_header,
                number: resends + 1,
            })
        });
        let trace_fields = attempt.as_ref().map(AttemptTrace::upstream_headers);
        let trace_fields = trace_fields.as_ref().map(|fields| TraceFields {
            traceparent: fields.traceparent(),
            tracestate: fields.tracestate(),
        });
        let query = session.req_header().uri.query();
        let path = upstream_target(upstream, dispatch.path, query);
        let header = request_header(
            session.req_header(),
            upstream,
            &path,
            dispatch.request_id,
            body.len(),
            client_address.as_deref(),
            trace_fields.as_ref(),
        )
        .and_then(|mut header| {
            // Anthropic's API requires a version; an OpenAI client sends none.
            let needs_version =
                matches!(dispatch.translation, Some(AnswerTranslation::ToChat { .. }))
                    && !session.req_header().headers.contains_key(ANTHROPIC_VERSION);
            if needs_version {
                header.add_field(ANTHROPIC_VERSION, DEFAULT_ANTHROPIC_VERSION)?;
            }
            Ok(header)
        });
        let header = match header {
            Ok(header) => header,
            Err(e) => {
                log::error!(target: "sluice::upstream", request_id = dispatch.request_id, error:% = e; "cannot build the upstream request");
                return Delivery::Refused(RequestError::Internal);
            }
        };
        let in_flight = upstreams.start_request(&upstream.name, || {
            metrics
                .upstream_in_flight
                .with_label_values(&[&upstream.name])
        });
        // A stored response lives on this target only: it never moves.
        let movable = dispatch.stored.is_none();
        let onward = Onward {
            resend: movable && resends < dispatch.retry_attempts,
            other_target: movable && another_available(model, upstreams, &[index]),
            fallback: movable && dispatch.fallback_follows,
        };
        let call = Call {
            upstream,
            ttfb: in_flight.ttfb(),
            request_started: dispatch.request_started,
            response_headers: &dispatch.response_headers,
            onward,
            strip_usage: inject_usage,
            request_id: dispatch.request_id,
            rewrite: dispatch.ids.map(|issuer| {
                let known: Vec<&str> = dispatch
                    .stored
                    .iter()
                    .map(|s| s.upstream_id.as_str())
                    .collect();
                IdRewrite::new(issuer, &model.id, &upstream.name, &known)
            }),
            read_model: attempt.as_ref().is_some_and(AttemptTrace::is_recording),
            messages_api: model.upstream_api == UpstreamApi::Anthropic,
            translation: dispatch.translation,
            error_shape: dispatch.error_shape,
        };
        // A resend starts afresh: the status of a handed-back 429 is not this request's.
        measured.status = None;
        measured.usage = None;
        measured.response_model = None;
        let outcome = exchange(
            session,
            dispatch.pool,
            metrics,
            &call,
            Outgoing { header, body },
            measured,
        )
        .await;
        drop((slot, in_flight));
        if let Some(attempt) = attempt {
            finish_attempt(attempt, &outcome, measured);
        }

        count_error(metrics, upstream, &outcome);
        let (effect, next) = verdict(&outcome, &upstream.policy.retry_on, onward);
        let request_id = dispatch.request_id;
        let by = match &outcome {
            // Nothing of the request went out: no tenant's doing.
            Outcome::Failed {
                reached: Reached::No,
                ..
            } => Witness::Connect { request_id },
            _ => Witness::Request {
                request_id,
                tenant: dispatch.tenant,
            },
        };
        upstreams.record(upstream, effect, metrics, by);
        let reason = match next {
            Next::Return => return delivery(outcome),
            Next::Fallback => return Delivery::Unserved(unserved(outcome)),
            Next::Resend(reason) => reason,
        };
        metrics
            .upstream_retries
            .with_label_values(&[&upstream.name, reason])
            .inc();
        tried.push(index);
        resends += 1;
        tokio::time::sleep(backoff(dispatch.retry_backoff, resends)).await;
    }
}

/// Ends an attempt's client span with what came of it.
fn finish_attempt(attempt: AttemptTrace, outcome: &Outcome, measured: &Exchange) {
    let (status, error, handed_back) = match outcome {
        Outcome::Answered { status, .. } => (Some(*status), None, false),
        Outcome::HandedBack { status, .. } => (Some(*status), None, true),
        Outcome::Failed { error, .. } | Outcome::Cut { error, .. } => {
            (measured.status, Some(error.code()), false)
        }
        Outcome::ClientGone(_) => (measured.status, Some("client_disconnected"), false),
    };
    attempt.finish(AttemptEnd {
        status,
        error,
        usage: measured.usage,
        time_to_first_chunk: measured.ttfb.filter(|_| status.is_some()),
        response_model: measured.response_model.as_deref(),
        handed_back,
    });
}

/// What the client saw of an attempt that is returned.
fn delivery(outcome: Outcome) -> Delivery {
    match outcome {
        Outcome::Answered { .. } => Delivery::Delivered,
        Outcome::Failed { error, .. } => Delivery::Refused(error),
        Outcome::Cut { error, then } => Delivery::Cut { error, then },
        Outcome::ClientGone(e) => Delivery::ClientGone(e),
        // Never returned: a handed-back answer always goes somewhere.
        Outcome::HandedBack { .. } => Delivery::Refused(RequestError::Internal),
    }
}

/// The error of an attempt after which the model gave up, for the answer if no fallback
/// model serves. A held-back answer was the upstream's; with none left to take the
/// request, the model had no target for it.
fn unserved(outcome: Outcome) -> RequestError {
    match outcome {
        Outcome::Failed { error, .. } => error,
        Outcome::HandedBack { retry_after, .. } => RequestError::NoHealthyUpstream {
            retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
        },
        _ => RequestError::Internal,
    }
}

/// Counts a gateway-made upstream error in `sluice_upstream_errors_total`.
fn count_error(metrics: &Metrics, upstream: &Upstream, outcome: &Outcome) {
    if let Outcome::Failed { error, .. } | Outcome::Cut { error, .. } = outcome {
        if *error == RequestError::Internal {
            // Ours (an answer its writer refused), not the upstream's.
            return;
        }
        metrics
            .upstream_errors
            .with_label_values(&[&upstream.name, error.code()])
            .inc();
    }
}

/// `base` doubled per resend already made, times a random factor in [0.5, 1.5).
fn backoff(base: Duration, resend: u32) -> Duration {
    let doubled = base * 2u32.pow(resend.saturating_sub(1).min(10));
    doubled.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
}

/// An address as `X-Forwarded-For` carries it. An IPv4 address is written by hand:
/// `Display` goes through the formatting machinery, ~1,300 instructions a request
/// (benches/README.md, ninth session).
fn address_text(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut text = String::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text.push('.');
                }
                text.push_str(itoa::Buffer::new().format(octet));
            }
            text
        }
        std::net::IpAddr::V6(_) => ip.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for text in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.20.3.40",
            "::1",
            "2001:db8::7",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(address_text(ip), ip.to_string());
            assert_eq!(address_text(ip), text);
        }
    }
}
