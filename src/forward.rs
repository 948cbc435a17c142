//! One upstream exchange, by hand over pingora's connection pool: send the request, wait for
//! the response header, relay the body chunk by chunk as it arrives.
//!
//! Every chat completion takes this path, whatever its size (pingora's own body replay stops
//! at 64 KiB). Doing it here also puts the failure rules in one place: a dead pooled
//! connection is retried once on a fresh one, timeouts are ours, a 429 can be handed back
//! unsent so another target takes the request, and a stream cut after it started ends with
//! an SSE error event.

use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::health::upstream_retry_after;
use crate::respond::stream_error_event;
use crate::transport::BufferedStream;
use crate::upstream::{is_event_stream, response_header};
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::HttpSession as UpstreamSession;
use pingora::proxy::Session;
use pingora::upstreams::peer::Peer;
use pingora::{Error, ErrorType, RetryType};
use std::time::{Duration, Instant};

/// What the exchange measured, for the access log, metrics and `server-timing`.
#[derive(Debug, Default)]
pub struct Exchange {
    pub status: Option<u16>,
    pub ttfb: Option<Duration>,
    /// Time spent waiting on the upstream (response header and body reads).
    pub upstream_wait: Duration,
    pub bytes_out: usize,
    /// The response was an SSE stream.
    pub event_stream: bool,
    /// How long an upstream 429 asked to wait.
    pub upstream_retry_after: Option<Duration>,
}

/// Why an exchange did not deliver a whole response.
#[derive(Debug)]
pub enum ForwardError {
    /// Nothing was sent to the client yet. `unsent`: the request provably never reached
    /// the upstream (no connection), so it may be sent again.
    BeforeResponse { error: RequestError, unsent: bool },
    /// The upstream answered 429 and, as asked, nothing was relayed: the request was not
    /// processed and may go to another target.
    Throttled { retry_after: Option<Duration> },
    /// The response had started; it was ended as well as it could be (an error event on an
    /// SSE stream). With `close`, the client connection must be dropped.
    AfterResponse { error: RequestError, close: bool },
    /// The client went away; the upstream request was abandoned.
    ClientGone(Box<Error>),
}

enum Attempt {
    Failed {
        error: RequestError,
        unsent: bool,
    },
    /// A reused connection failed before any response byte: resend on a fresh one.
    DeadReused,
    ClientGone(Box<Error>),
}

/// One request to send upstream.
pub struct Call<'a> {
    pub upstream: &'a Upstream,
    pub header: RequestHeader,
    pub body: Bytes,
    /// When the client's request arrived (for `server-timing`).
    pub request_started: Instant,
    pub request_id: &'a str,
    /// Gateway headers added to the response (the key's rate-limit position).
    pub extra_headers: Vec<(&'static str, String)>,
    /// Hand a 429 back instead of relaying it (another target can take the request).
    pub hand_back_429: bool,
}

/// Sends the call upstream and relays the answer to the client.
pub async fn forward(
    session: &mut Session,
    gateway: &Gateway,
    call: Call<'_>,
    exchange: &mut Exchange,
) -> Result<(), ForwardError> {
    let Call {
        upstream,
        header,
        body,
        request_started,
        request_id,
        extra_headers,
        hand_back_429,
    } = call;
    let peer = &upstream.peer;
    let sent_at = Instant::now();
    let deadline = upstream.policy.total_timeout.map(|total| sent_at + total);
    let first_byte_by = bounded(sent_at + upstream.first_byte_timeout, deadline);
    let attempts = match attempt(
        session,
        gateway,
        upstream,
        &header,
        &body,
        false,
        first_byte_by,
    )
    .await
    {
        Err(Attempt::DeadReused) => {
            attempt(
                session,
                gateway,
                upstream,
                &header,
                &body,
                true,
                first_byte_by,
            )
            .await
        }
        first => first,
    };
    // Time spent on the upstream counts as upstream time, failed attempts included.
    let ttfb = sent_at.elapsed();
    exchange.upstream_wait += ttfb;
    let (mut connection, response) = attempts.map_err(before_response)?;
    exchange.ttfb = Some(ttfb);
    let status = response.status.as_u16();
    exchange.status = Some(status);
    gateway
        .metrics
        .upstream_ttfb
        .with_label_values(&[&upstream.name])
        .observe(ttfb.as_secs_f64());

    if matches!(status, 401 | 403) {
        // The upstream refused our credential: the client's key is not the problem.
        return Err(ForwardError::BeforeResponse {
            error: RequestError::UpstreamAuthFailed,
            unsent: false,
        });
    }
    if status == 429 {
        let header = |name: &str| response.headers.get(name).and_then(|v| v.to_str().ok());
        let now = std::time::SystemTime::now();
        let retry_after =
            upstream_retry_after(header("retry-after-ms"), header("retry-after"), now);
        exchange.upstream_retry_after = retry_after;
        if hand_back_429 {
            connection.shutdown().await;
            return Err(ForwardError::Throttled { retry_after });
        }
    }
    let gateway_ms = (sent_at - request_started).as_secs_f64() * 1000.0;
    let timing = format!(
        "gateway;dur={gateway_ms:.3}, upstream;dur={:.3}",
        ttfb.as_secs_f64() * 1000.0
    );
    let mut to_client = response_header(&response, request_id, &timing).map_err(|_| {
        ForwardError::BeforeResponse {
            error: RequestError::UpstreamProtocolError,
            unsent: false,
        }
    })?;
    if status == 500 {
        to_client.insert_header("x-should-retry", "false").ok();
    }
    for (name, value) in extra_headers {
        to_client.insert_header(name, value).ok();
    }
    exchange.event_stream = is_event_stream(&to_client);
    session
        .write_response_header(Box::new(to_client), false)
        .await
        .map_err(ForwardError::ClientGone)?;

    relay_body(session, &mut connection, upstream, deadline, exchange).await?;
    session
        .write_response_body(None, true)
        .await
        .map_err(ForwardError::ClientGone)?;
    connection.respect_keepalive();
    if let Some(stream) = connection.reuse().await {
        gateway
            .connector
            .release_stream(stream, peer.reuse_hash(), peer.idle_timeout());
    }
    Ok(())
}

/// The earlier of `at` and the total deadline, if any.
fn bounded(at: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}

fn before_response(attempt: Attempt) -> ForwardError {
    match attempt {
        Attempt::Failed { error, unsent } => ForwardError::BeforeResponse { error, unsent },
        Attempt::DeadReused => ForwardError::BeforeResponse {
            error: RequestError::UpstreamUnavailable,
            unsent: false,
        },
        Attempt::ClientGone(e) => ForwardError::ClientGone(e),
    }
}

/// Connects (pooled, or `fresh`), sends the request and reads the response header.
async fn attempt(
    session: &mut Session,
    gateway: &Gateway,
    upstream: &Upstream,
    header: &RequestHeader,
    body: &Bytes,
    fresh: bool,
    first_byte_by: Instant,
) -> Result<(UpstreamSession, Box<ResponseHeader>), Attempt> {
    let peer = &upstream.peer;
    let connected = if fresh {
        gateway.connector.new_stream(peer).await.map(|s| (s, false))
    } else {
        gateway.connector.get_stream(peer).await
    };
    let (stream, reused) = connected.map_err(|e| {
        log::warn!(target: "sluice::forward", upstream = upstream.name.as_str(), error:? = e.etype(); "upstream connect failed");
        // Nothing was sent on a connection that never opened.
        Attempt::Failed { error: upstream_failure(&e), unsent: true }
    })?;
    // Header and body leave together: pingora flushes the header on its own otherwise.
    let (stream, coalesce) = BufferedStream::wrap(stream);
    let mut connection = UpstreamSession::new_with_options(stream, peer);
    // Our own timeouts apply (first byte, idle gap, total), not a per-read one.
    connection.read_timeout = None;

    let sent = async {
        coalesce.hold();
        let header_written = connection
            .write_request_header(Box::new(header.clone()))
            .await;
        let body_written = match header_written {
            Ok(_) => connection.write_body(body).await.map(|_| ()),
            Err(e) => Err(e),
        };
        coalesce.release();
        body_written?;
        connection.finish_body().await
    };
    // Sending is bounded by the same deadline as the first byte: a stalled upstream that
    // stops reading must not hold the request forever.
    let deadline = tokio::time::Instant::from_std(first_byte_by);
    match tokio::time::timeout_at(deadline, sent).await {
        Err(_elapsed) => {
            return Err(Attempt::Failed {
                error: RequestError::UpstreamTimeout,
                unsent: false,
            })
        }
        Ok(Err(_)) if reused => return Err(Attempt::DeadReused),
        Ok(Err(e)) => {
            return Err(Attempt::Failed {
                error: upstream_failure(&e),
                unsent: false,
            })
        }
        Ok(Ok(_)) => {}
    }

    let read_before_answer = coalesce.bytes_read();
    loop {
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline, connection.read_response()) => read,
            gone = session.as_downstream_mut().read_body_or_idle(true) => {
                connection.shutdown().await;
                return Err(Attempt::ClientGone(gone.err().unwrap_or_else(|| Error::new(ErrorType::ConnectionClosed))));
            }
        };
        match read {
            Err(_elapsed) => {
                return Err(Attempt::Failed {
                    error: RequestError::UpstreamTimeout,
                    unsent: false,
                })
            }
            // Dead only if not one byte of answer came: after a partial answer the request
            // may have been processed, and is not sent again.
            Ok(Err(e))
                if reused
                    && coalesce.bytes_read() == read_before_answer
                    && !matches!(e.retry, RetryType::Decided(false))
                    && e.etype() != &ErrorType::InvalidHTTPHeader =>
            {
                return Err(Attempt::DeadReused)
            }
            Ok(Err(e)) => {
                return Err(Attempt::Failed {
                    error: upstream_failure(&e),
                    unsent: false,
                })
            }
            Ok(Ok(_)) => {}
        }
        let Some(response) = connection.resp_header() else {
            return Err(Attempt::Failed {
                error: RequestError::UpstreamProtocolError,
                unsent: false,
            });
        };
        // Skip interim answers (100 Continue and the like); 101 is not something we asked for.
        if response.status.is_informational() {
            if response.status.as_u16() == 101 {
                return Err(Attempt::Failed {
                    error: RequestError::UpstreamProtocolError,
                    unsent: false,
                });
            }
            continue;
        }
        let response = Box::new(response.clone());
        return Ok((connection, response));
    }
}

fn upstream_failure(error: &Error) -> RequestError {
    match error.etype() {
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error => RequestError::UpstreamProtocolError,
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            RequestError::UpstreamTimeout
        }
        _ => RequestError::UpstreamUnavailable,
    }
}

/// Relays body chunks as they come; watches for the client leaving and the upstream stalling
/// (no chunk within `idle_timeout`) or running past its total deadline.
async fn relay_body(
    session: &mut Session,
    connection: &mut UpstreamSession,
    upstream: &Upstream,
    deadline: Option<Instant>,
    exchange: &mut Exchange,
) -> Result<(), ForwardError> {
    let mut tail = [b'\n'; 2];
    loop {
        let waited_from = Instant::now();
        let next_by =
            tokio::time::Instant::from_std(bounded(waited_from + upstream.idle_timeout, deadline));
        let read = tokio::select! {
            read = tokio::time::timeout_at(next_by, connection.read_body_bytes()) => read,
            gone = session.as_downstream_mut().read_body_or_idle(true) => {
                connection.shutdown().await;
                return Err(ForwardError::ClientGone(gone.err().unwrap_or_else(|| Error::new(ErrorType::ConnectionClosed))));
            }
        };
        exchange.upstream_wait += waited_from.elapsed();
        let chunk = match read {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => {
                log::warn!(target: "sluice::forward", upstream = upstream.name.as_str(), error:? = e.etype(); "upstream failed during the response body");
                return Err(end_cut_stream(
                    session,
                    exchange,
                    RequestError::UpstreamUnavailable,
                    tail,
                )
                .await);
            }
            Err(_elapsed) => {
                return Err(
                    end_cut_stream(session, exchange, RequestError::UpstreamTimeout, tail).await,
                )
            }
        };
        if chunk.is_empty() {
            continue;
        }
        remember_tail(&mut tail, &chunk);
        exchange.bytes_out += chunk.len();
        session
            .write_response_body(Some(chunk), false)
            .await
            .map_err(ForwardError::ClientGone)?;
    }
}

fn remember_tail(tail: &mut [u8; 2], chunk: &[u8]) {
    if chunk.len() >= 2 {
        tail.copy_from_slice(&chunk[chunk.len() - 2..]);
    } else {
        *tail = [tail[1], chunk[0]];
    }
}

/// Ends a response whose upstream failed after it started. An SSE stream gets one error
/// event and a clean end, then the connection closes; any other body can only be cut.
async fn end_cut_stream(
    session: &mut Session,
    exchange: &mut Exchange,
    error: RequestError,
    tail: [u8; 2],
) -> ForwardError {
    if !exchange.event_stream {
        return ForwardError::AfterResponse { error, close: true };
    }
    let event = stream_error_event(&error);
    // Skip the separating blank line when the last event already ended cleanly.
    let event = if tail == *b"\n\n" {
        event.slice(2..)
    } else {
        event
    };
    exchange.bytes_out += event.len();
    session.set_keepalive(None);
    let written = session.write_response_body(Some(event), false).await;
    let ended = session.write_response_body(None, true).await;
    ForwardError::AfterResponse {
        error,
        close: written.is_err() || ended.is_err(),
    }
}
