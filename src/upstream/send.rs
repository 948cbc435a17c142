//! Getting an answer's head from an upstream: a connection (pooled if one is still open,
//! else fresh), the request written within the first-byte deadline, the response head
//! read while the client is watched. An upstream that answers before taking the whole
//! request (a 413 for a large body) has that answer relayed.

use super::call::{Call, Outgoing};
use super::pool::Pool;
use super::verdict::{
    connect_failure, read_failure, send_failed, Connection, EarlyFailure, Reached,
};
use crate::error::RequestError;
use crate::http1::client::{Head, Http1};
use crate::http1::Error;
use crate::listener::BufferedStream;
use crate::listener::Session;
use pingora_core::protocols::Stream;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;
use tokio::io::{AsyncRead, ReadBuf};

/// A failure before the response header, with whether the request may have gone out.
pub(super) struct Early {
    pub failure: EarlyFailure,
    pub reached: Reached,
}

/// Whether the upstream took the whole request before it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    Whole,
    /// It answered early (a 413 for a large body): the connection cannot be reused.
    CutShort,
}

/// A response head and the connection it came on.
pub(super) struct Answer {
    pub connection: Http1,
    pub response: Head,
    pub request: Request,
}

/// An attempt that did not produce a response header.
pub(super) enum NoAnswer {
    Early(Early),
    ClientGone(Error),
}

/// Connects (from the pool, or fresh), sends the request and reads the response header.
/// `sent_at` is the exchange's start, the time a pooled connection's expiry is checked at.
pub(super) async fn send(
    session: &mut Session,
    pool: &Pool,
    call: &Call<'_>,
    outgoing: &Outgoing,
    connection: Connection,
    sent_at: Instant,
    first_byte_by: Instant,
) -> Result<Answer, NoAnswer> {
    let upstream = call.upstream;
    let peer = &upstream.peer;
    let pooled = match connection {
        Connection::Fresh => None,
        // Closed by the upstream while it sat in the pool (llama.cpp's server closes after
        // every stream while announcing keep-alive): found out before the request goes on
        // it, so nothing is sent twice.
        Connection::Pooled => match pool.take(peer, tokio::time::Instant::from_std(sent_at)) {
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
        NoAnswer::Early(Early { failure: EarlyFailure::Failed(connect_failure(&e)), reached: Reached::No })
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
    let sent = upstream_connection.send(
        outgoing.header.wire(),
        outgoing.header.is_head(),
        &outgoing.body,
    );
    let request = match within(session, deadline, sent).await {
        None => return Err(failed(EarlyFailure::Failed(RequestError::UpstreamTimeout))),
        Some(Err(e)) => {
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
        Some(Ok(())) => Request::Whole,
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

/// `future`'s output, or `None` if `deadline` passes first. The future is polled once
/// before the session's timer is set: a write that goes out at once (the request of a
/// plain call) needs no timer.
async fn within<F: Future>(
    session: &mut Session,
    deadline: tokio::time::Instant,
    future: F,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut timer = None;
    let output = std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let timer = timer.get_or_insert_with(|| session.timer_until(deadline));
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await;
    if let Some(timer) = timer {
        session.keep_timer(timer);
    }
    output
}

/// Reads the response head (interim answers skipped) by `deadline`, while watching the
/// client: if it leaves, the upstream connection is shut so the backend stops generating.
/// A read that fails is never sent again: the upstream may have held the request.
///
/// The deadline is the session's timer (`Session::timer_until`): on HTTP/1 one timer
/// for all the requests of a client connection, moved later for each, not one
/// registered and taken out again per request. It stays set after the request; if the
/// connection outlives it, it wakes the connection's task once for nothing.
async fn read_header(
    session: &mut Session,
    connection: &mut Http1,
    deadline: tokio::time::Instant,
) -> Result<Head, NoAnswer> {
    let mut timer = session.timer_until(deadline);
    let read = tokio::select! {
        // The upstream first: once its head is in, a poll of the client (a read of its
        // socket) would be wasted (benches/README.md, ninth session).
        biased;
        read = connection.read_head() => Some(read),
        () = timer.as_mut() => None,
        gone = session.client_gone() => {
            session.keep_timer(timer);
            connection.shutdown().await;
            return Err(NoAnswer::ClientGone(gone));
        }
    };
    session.keep_timer(timer);
    let failure = match read {
        Some(Ok(head)) => return Ok(head),
        None => RequestError::UpstreamTimeout,
        Some(Err(e)) => read_failure(&e),
    };
    Err(NoAnswer::Early(Early {
        failure: EarlyFailure::Failed(failure),
        reached: Reached::Maybe,
    }))
}
