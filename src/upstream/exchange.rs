//! One upstream exchange, by hand over pingora's connection pool: send the request, wait for
//! the response header, relay the body chunk by chunk as it arrives.
//!
//! Every proxied request takes this path, whatever its size (pingora's own body replay stops
//! at 64 KiB). Doing it here also puts the failure rules in one place: a pooled connection
//! the upstream closed is found out before the request goes on it, one that fails while the
//! request is written is replaced by a fresh one (nothing can have been processed), an
//! answer that comes before the whole request went out is relayed, timeouts are ours, an
//! answer whose status `retry_on` names (a 429, a 503) can be handed back unrelayed so
//! another target or a fallback model takes the request, and a stream cut after
//! it started (an SSE stream that ends inside an event included) ends with an SSE error
//! event.

use super::body::Body;
use super::error_record::{UpstreamErrorRecord, KEPT_BODY_BYTES};
use super::http1::{Head, Http1};
use super::pool::Pool;
use super::relay::{model_named, read_whole, relay_body, Edit, Passing, Reading, HEAD_BYTES};
use super::request::RequestHead;
use super::response::{is_event_stream, response_header, upstream_retry_after};
use super::translated::AnswerTranslation;
use super::verdict::{
    failure_of, hands_back, read_failure, send_failed, Connection, EarlyFailure, Onward, Outcome,
    Reached,
};
use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::http1::server::Session;
use crate::metrics::Metrics;
use crate::respond::ErrorShape;
use crate::response_id::IdRewrite;
use crate::transport::BufferedStream;
use crate::usage::Usage;
use pingora::protocols::Stream;
use pingora::Error;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

/// What a request's exchanges measured, for the access log, metrics and `server-timing`.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The status relayed to the client, if a response started.
    pub status: Option<u16>,
    pub ttfb: Option<Duration>,
    /// Time spent waiting on upstreams (response headers and body reads, every attempt).
    pub upstream_wait: Duration,
    pub bytes_out: usize,
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

/// A failure before the response header, with whether the request may have gone out.
struct Early {
    failure: EarlyFailure,
    reached: Reached,
}

/// Whether the upstream took the whole request before it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Whole,
    /// It answered early (a 413 for a large body): the connection cannot be reused.
    CutShort,
}

/// A response head and the connection it came on.
struct Answer {
    connection: Http1,
    response: Head,
    request: Request,
}

/// An attempt that did not produce a response header.
enum NoAnswer {
    Early(Early),
    ClientGone(Box<Error>),
}

/// Sends the call upstream and relays the answer to the client.
///
/// The call is borrowed and the outgoing request's header boxed: an async fn's argument
/// taken by value is stored twice in its future, and a stream keeps this future for as
/// long as it lasts.
pub(super) async fn exchange(
    session: &mut Session,
    pool: &Pool,
    metrics: &Metrics,
    call: &Call<'_>,
    outgoing: Outgoing,
    measured: &mut Exchange,
) -> Outcome {
    let upstream = call.upstream;
    let sent_at = Instant::now();
    let deadline = upstream.policy.total_timeout.map(|total| sent_at + total);
    let first_byte_by = bounded(sent_at + upstream.first_byte_timeout, deadline);
    let mut answer = send(
        session,
        pool,
        call,
        &outgoing,
        Connection::Pooled,
        first_byte_by,
    )
    .await;
    if let Err(NoAnswer::Early(Early {
        failure: EarlyFailure::DeadPooled,
        ..
    })) = answer
    {
        answer = send(
            session,
            pool,
            call,
            &outgoing,
            Connection::Fresh,
            first_byte_by,
        )
        .await;
    }
    // The request went out: its header and body are not kept while the answer passes (a
    // stream may last minutes).
    drop(outgoing);
    // Time spent on the upstream counts as upstream time, failed attempts included.
    let ttfb = sent_at.elapsed();
    measured.upstream_wait += ttfb;
    let Answer {
        mut connection,
        response,
        request,
    } = match answer {
        Ok(answered) => answered,
        Err(NoAnswer::ClientGone(e)) => return Outcome::ClientGone(e),
        Err(NoAnswer::Early(Early { failure, reached })) => {
            let error = match failure {
                EarlyFailure::Failed(error) => error,
                // Dead twice: the fresh connection failed the same way.
                EarlyFailure::DeadPooled => RequestError::UpstreamUnavailable,
            };
            return Outcome::Failed { error, reached };
        }
    };
    measured.ttfb = Some(ttfb);
    let status = response.status.as_u16();
    measured.status = Some(status);
    metrics
        .upstream_ttfb
        .with_label_values(&[&upstream.name])
        .observe(ttfb.as_secs_f64());

    if matches!(status, 401 | 403) {
        // The upstream refused our credential: the client's key is not the problem.
        return Outcome::Failed {
            error: RequestError::UpstreamAuthFailed,
            reached: Reached::Maybe,
        };
    }
    let mut retry_after = None;
    if status == 429 {
        let header = |name: &str| response.headers.get(name).and_then(|v| v.to_str().ok());
        let now = std::time::SystemTime::now();
        retry_after = upstream_retry_after(header("retry-after-ms"), header("retry-after"), now);
    }
    if hands_back(status, &upstream.policy.retry_on, call.onward) {
        connection.shutdown().await;
        return Outcome::HandedBack {
            status,
            retry_after,
        };
    }
    let timing = server_timing(sent_at - call.request_started, ttfb);
    // The upstream's own request id, for the record of an error answer (the one whose
    // bytes are kept). The upstream's header becomes the client's: a stream holds no
    // second copy of it.
    let upstream_id = (status >= 400)
        .then(|| response.headers.get(crate::request_id::HEADER))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut to_client = match response_header(response, call.response_headers) {
        Ok(header) => header,
        Err(invalid) => {
            log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), invalid:? = invalid; "upstream response header refused");
            connection.shutdown().await;
            return Outcome::Failed {
                error: RequestError::UpstreamProtocolError,
                reached: Reached::Maybe,
            };
        }
    };
    const SERVER_TIMING: http::HeaderName = http::HeaderName::from_static("server-timing");
    to_client.insert_header(SERVER_TIMING, timing).ok();
    if status == 500 {
        to_client.insert_header("x-should-retry", "false").ok();
    }
    measured.event_stream = is_event_stream(&to_client);
    measured.upstream_retry_after = retry_after;
    let success = (200..300).contains(&status);
    let edit = match (call.rewrite.clone(), call.strip_usage, call.translation) {
        (_, _, Some(translation)) if success && measured.event_stream => {
            Some(Edit::Translate(Box::new(translation.stream())))
        }
        (Some(rewrite), _, _) if success => Some(Edit::Rewrite(rewrite)),
        (None, true, _) if success && measured.event_stream => Some(Edit::StripUsage),
        _ => None,
    };
    // Boxed: ~480 bytes the request's future would hold for the whole answer.
    let mut passing = Box::new(Passing {
        // An error answer's first bytes are kept as they pass, for the error record.
        kept: (status >= 400).then(Vec::new),
        reading: success.then(|| Reading::for_answer(measured.event_stream, call.messages_api)),
        edit,
        pending: Vec::new(),
        head: (success && call.read_model).then(Vec::new),
    });
    // A JSON answer whose IDs change length is read whole, rewritten, and sent with its
    // new length; anything else is relayed as it comes.
    let rewritten = match (&mut passing.edit, measured.event_stream) {
        // An answer in the other API than the client's, read whole and translated: a
        // successful JSON answer, or an error answer (put in the client's envelope).
        (None, _) if call.translation.is_some() && !(success && measured.event_stream) => {
            let translation = call.translation.unwrap_or(AnswerTranslation::ToMessages);
            match read_whole(session, &mut connection, upstream, deadline, measured).await {
                Ok(body) => {
                    if let Some(reading) = &mut passing.reading {
                        reading.feed(&body);
                        measured.usage = reading.usage();
                    }
                    if let Some(kept) = &mut passing.kept {
                        kept.extend_from_slice(&body[..body.len().min(KEPT_BODY_BYTES)]);
                    }
                    let Some(translated) = translation.body(status, &body) else {
                        log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "upstream answer cannot be translated");
                        connection.shutdown().await;
                        return Outcome::Failed {
                            error: RequestError::UpstreamProtocolError,
                            reached: Reached::Maybe,
                        };
                    };
                    to_client
                        .insert_header(http::header::CONTENT_TYPE, "application/json")
                        .ok();
                    Some(bytes::Bytes::from(translated))
                }
                Err(outcome) => return outcome,
            }
        }
        (Some(Edit::Rewrite(rewrite)), false) => {
            match read_whole(session, &mut connection, upstream, deadline, measured).await {
                Ok(body) => {
                    // Read now: the whole answer is here even if the client leaves before
                    // it is sent.
                    if let Some(reading) = &mut passing.reading {
                        reading.feed(&body);
                        measured.usage = reading.usage();
                    }
                    if call.read_model {
                        measured.response_model = model_named(&body[..body.len().min(HEAD_BYTES)]);
                    }
                    Some(bytes::Bytes::from(rewrite.json(&body)))
                }
                Err(outcome) => return outcome,
            }
        }
        _ => None,
    };
    if let Some(Edit::Translate(_)) = &passing.edit {
        // Translated events have other lengths: the stream is sent chunked.
        to_client.remove_header(&http::header::CONTENT_LENGTH);
        to_client
            .insert_header(http::header::TRANSFER_ENCODING, "chunked")
            .ok();
    }
    if let Some(body) = &rewritten {
        to_client.remove_header(&http::header::TRANSFER_ENCODING);
        to_client
            .insert_header(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            )
            .ok();
    }
    if let Err(e) = session.write_response_header(to_client).await {
        return Outcome::ClientGone(e);
    }
    if measured.event_stream && rewritten.is_none() {
        crate::http_app::slim_request_header(session);
    }
    let relayed = match rewritten {
        Some(body) => {
            measured.bytes_out += body.len();
            match session.write_response_body(body, false).await {
                Ok(()) => Ok(()),
                Err(e) => Err(Outcome::ClientGone(e)),
            }
        }
        None => {
            relay_body(
                session,
                &mut connection,
                call,
                deadline,
                measured,
                &mut passing,
            )
            .await
        }
    };
    if let Some(reading) = &passing.reading {
        measured.usage = reading.usage();
    }
    if let Some(head) = &passing.head {
        measured.response_model = model_named(head);
    }
    if let Some(body) = passing.kept {
        measured.upstream_error = Some(UpstreamErrorRecord::read(&body, upstream_id.as_deref()));
    }
    if let Err(outcome) = relayed {
        return outcome;
    }
    if let Err(e) = session.write_response_body(bytes::Bytes::new(), true).await {
        return Outcome::ClientGone(e);
    }
    match request {
        Request::Whole => release(pool, upstream, connection).await,
        Request::CutShort => connection.shutdown().await,
    }
    Outcome::Answered {
        status,
        retry_after,
    }
}

/// Gives a connection whose exchange is complete back to the pool, if it may be reused.
async fn release(pool: &Pool, upstream: &Upstream, connection: Http1) {
    match connection.reuse() {
        Ok(stream) => pool.give_back(&upstream.peer, stream),
        Err(mut connection) => connection.shutdown().await,
    }
}

/// The earlier of `at` and the total deadline, if any.
pub(super) fn bounded(at: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}

/// Connects (from the pool, or fresh), sends the request and reads the response header.
async fn send(
    session: &mut Session,
    pool: &Pool,
    call: &Call<'_>,
    outgoing: &Outgoing,
    connection: Connection,
    first_byte_by: Instant,
) -> Result<Answer, NoAnswer> {
    let upstream = call.upstream;
    let peer = &upstream.peer;
    let pooled = match connection {
        Connection::Fresh => None,
        // Closed by the upstream while it sat in the pool (llama.cpp's server closes after
        // every stream while announcing keep-alive): found out before the request goes on
        // it, so nothing is sent twice.
        Connection::Pooled => match pool.take(peer) {
            Some(mut stream) => still_open(&mut stream).await.then_some(stream),
            None => None,
        },
    };
    let connected = match pooled {
        Some(stream) => Ok((stream, true)),
        // Boxed: connecting (TCP, TLS) is an 8 KB state machine that most requests, served
        // from the pool, never enter; inline it would be copied with every request's future.
        None => Box::pin(pool.connect(peer)).await.map(|s| (s, false)),
    };
    let (stream, reused) = connected.map_err(|e| {
        log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), error:? = e.etype(); "upstream connect failed");
        // Nothing was sent on a connection that never opened.
        NoAnswer::Early(Early { failure: EarlyFailure::Failed(failure_of(&e)), reached: Reached::No })
    })?;
    let connection = if reused {
        Connection::Pooled
    } else {
        Connection::Fresh
    };
    let failed = |failure| {
        NoAnswer::Early(Early {
            failure,
            reached: Reached::Maybe,
        })
    };
    // Header and body leave together, in one write when they fit the stream's buffer.
    let (stream, read_count) = BufferedStream::wrap(stream);
    let mut upstream_connection = Http1::new(stream);
    let read_before_request = read_count.bytes_read();
    // Sending is bounded by the same deadline as the first byte: a stalled upstream that
    // stops reading must not hold the request forever.
    let deadline = tokio::time::Instant::from_std(first_byte_by);
    let sent = upstream_connection.send(&outgoing.header, &outgoing.body);
    let request = match tokio::time::timeout_at(deadline, sent).await {
        Err(_elapsed) => return Err(failed(EarlyFailure::Failed(RequestError::UpstreamTimeout))),
        Ok(Err(e)) => {
            // The upstream may have answered before taking the whole request (a 413 for a
            // body over its limit) and closed: that answer is what the client gets. With no
            // answer, the request cannot have been processed whole.
            let early = read_header(session, &mut upstream_connection, deadline).await;
            return match early {
                Ok(response) => Ok(Answer {
                    connection: upstream_connection,
                    response,
                    request: Request::CutShort,
                }),
                Err(NoAnswer::ClientGone(gone)) => Err(NoAnswer::ClientGone(gone)),
                Err(NoAnswer::Early(_)) if read_count.bytes_read() == read_before_request => {
                    Err(failed(send_failed(connection, &e)))
                }
                Err(early) => Err(early),
            };
        }
        Ok(Ok(())) => Request::Whole,
    };
    let response = read_header(session, &mut upstream_connection, deadline).await?;
    Ok(Answer {
        connection: upstream_connection,
        response,
        request,
    })
}

/// Whether a pooled connection can carry a request: not closed by the upstream while it
/// sat idle, and with nothing unread on it. One poll, no waiting.
async fn still_open(stream: &mut Stream) -> bool {
    let mut probe = [0u8; 1];
    let mut probe = ReadBuf::new(&mut probe);
    std::future::poll_fn(|cx| {
        Poll::Ready(
            Pin::new(&mut *stream)
                .poll_read(cx, &mut probe)
                .is_pending(),
        )
    })
    .await
}

/// Reads the response head (interim answers skipped) by `deadline`, while watching the
/// client: if it leaves, the upstream connection is shut so the backend stops generating.
/// A read that fails is never sent again: the upstream may have held the request.
async fn read_header(
    session: &mut Session,
    connection: &mut Http1,
    deadline: tokio::time::Instant,
) -> Result<Head, NoAnswer> {
    let read = tokio::select! {
        // The upstream first: once its head is in, a poll of the client (a read of its
        // socket) would be wasted (benches/README.md, ninth session).
        biased;
        read = tokio::time::timeout_at(deadline, connection.read_head()) => read,
        gone = session.client_gone() => {
            connection.shutdown().await;
            return Err(NoAnswer::ClientGone(gone));
        }
    };
    let failure = match read {
        Ok(Ok(head)) => return Ok(head),
        Err(_elapsed) => RequestError::UpstreamTimeout,
        Ok(Err(e)) => read_failure(&e),
    };
    Err(NoAnswer::Early(Early {
        failure: EarlyFailure::Failed(failure),
        reached: Reached::Maybe,
    }))
}

/// `Server-Timing`: the gateway's time before the request went upstream and the
/// upstream's time to its response head, in milliseconds with three decimals. Written
/// from whole microseconds: formatting two floats with a precision was the costliest
/// `format!` of a request.
fn server_timing(gateway: Duration, upstream: Duration) -> String {
    let mut timing = String::with_capacity(48);
    for (name, spent) in [("gateway;dur=", gateway), (", upstream;dur=", upstream)] {
        let micros = (spent.as_nanos() + 500) / 1000;
        timing.push_str(name);
        timing.push_str(itoa::Buffer::new().format(micros / 1000));
        timing.push('.');
        let fraction = (micros % 1000) as u16;
        for digit in [fraction / 100, fraction / 10 % 10, fraction % 10] {
            timing.push(char::from(b'0' + digit as u8));
        }
    }
    timing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_is_in_milliseconds_with_three_decimals_rounded() {
        assert_eq!(
            server_timing(
                Duration::from_nanos(1_234_400),
                Duration::from_nanos(2_000_500)
            ),
            "gateway;dur=1.234, upstream;dur=2.001"
        );
        assert_eq!(
            server_timing(Duration::ZERO, Duration::from_secs(75)),
            "gateway;dur=0.000, upstream;dur=75000.000"
        );
        assert_eq!(
            server_timing(
                Duration::from_micros(999_999),
                Duration::from_nanos(999_600)
            ),
            "gateway;dur=999.999, upstream;dur=1.000"
        );
    }
}
