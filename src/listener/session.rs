//! The session an app serves: one request on an HTTP/1.1 connection or one HTTP/2
//! stream, behind the same methods. An enum rather than a trait object: the apps' request
//! futures stay unboxed, and on HTTP/1 each call costs one match.

use super::tls::{TlsDetails, TlsStream};
use crate::http1::error::{Error, Result};
use crate::http1::server::Session as Http1Session;
use crate::http2::Session as Http2Session;
use bytes::{Bytes, BytesMut};
use pingora_core::protocols::l4::socket::SocketAddr;
use pingora_http::{RequestHeader, ResponseHeader};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// One request being served, on either protocol.
pub enum Session {
    Http1(Http1Session),
    /// A stream, with its connection's TLS (on a TLS listener).
    Http2(Http2Session, Option<Arc<TlsDetails>>),
}

/// The same call on either protocol.
macro_rules! either {
    ($session:expr, $s:ident => $call:expr) => {
        match $session {
            Session::Http1($s) => $call,
            Session::Http2($s, _) => $call,
        }
    };
}

/// The same async call on either protocol, as the protocol's own future (no async
/// wrapper of ours around it: on HTTP/1 a call costs one match when made and one when
/// polled, benches/README.md).
macro_rules! either_future {
    ($session:expr, $s:ident => $call:expr) => {
        match $session {
            Session::Http1($s) => Either::Http1 { future: $call },
            Session::Http2($s, _) => Either::Http2 { future: $call },
        }
    };
}

pin_project_lite::pin_project! {
    /// The future of one protocol's call.
    #[project = EitherProjection]
    pub enum Either<A, B> {
        Http1 { #[pin] future: A },
        Http2 { #[pin] future: B },
    }
}

impl<A: Future, B: Future<Output = A::Output>> Future for Either<A, B> {
    type Output = A::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<A::Output> {
        match self.project() {
            EitherProjection::Http1 { future } => future.poll(cx),
            EitherProjection::Http2 { future } => future.poll(cx),
        }
    }
}

impl Session {
    /// The protocol's version as the access log writes it: `"1.1"` or `"2"`.
    pub fn http_version(&self) -> &'static str {
        match self {
            Session::Http1(_) => "1.1",
            Session::Http2(..) => "2",
        }
    }

    /// What the TLS handshake of the request's connection settled (`None` on cleartext).
    pub fn tls(&self) -> Option<&TlsDetails> {
        match self {
            Session::Http1(s) => TlsStream::details_of(s.stream()),
            Session::Http2(_, tls) => tls.as_deref(),
        }
    }

    /// Reads the next request's head (see `http1::server::Session::read_request`); an
    /// HTTP/2 stream has its one head already.
    pub fn read_request(&mut self) -> impl Future<Output = Result<bool>> + '_ {
        either_future!(self, s => s.read_request())
    }

    /// The request head was read: on HTTP/1 the connection's head deadline ends (on
    /// HTTP/2 the connection's driver follows its streams instead).
    pub fn request_started(&self) {
        if let Session::Http1(s) = self {
            if let Some(connection) = super::BufferedStream::client_connection(s.stream()) {
                connection.request_started();
            }
        }
    }

    pub fn req_header(&self) -> &RequestHeader {
        either!(self, s => s.req_header())
    }

    pub fn req_header_mut(&mut self) -> &mut RequestHeader {
        either!(self, s => s.req_header_mut())
    }

    pub fn client_addr(&self) -> Option<&SocketAddr> {
        either!(self, s => s.client_addr())
    }

    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        either!(self, s => s.set_read_timeout(timeout))
    }

    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        either!(self, s => s.set_write_timeout(timeout))
    }

    /// HTTP/1: the connection ends after this request. HTTP/2: nothing (a stream carries
    /// one request; the connection's driver sends `GOAWAY` on shutdown).
    pub fn disable_keepalive(&mut self) {
        if let Session::Http1(s) = self {
            s.disable_keepalive();
        }
    }

    pub fn is_body_done(&self) -> bool {
        either!(self, s => s.is_body_done())
    }

    pub fn response_started(&self) -> bool {
        either!(self, s => s.response_started())
    }

    /// HTTP/1: bytes left of an answer with a declared length (writing them ends its body
    /// for the client). HTTP/2: `None` (a stream's end is its `END_STREAM`, whatever its
    /// `content-length`).
    pub fn response_body_left(&self) -> Option<u64> {
        match self {
            Session::Http1(s) => s.response_body_left(),
            Session::Http2(..) => None,
        }
    }

    pub fn read_request_body(&mut self) -> impl Future<Output = Result<Option<Bytes>>> + '_ {
        either_future!(self, s => s.read_request_body())
    }

    pub fn request_body_left(&self) -> Option<u64> {
        either!(self, s => s.request_body_left())
    }

    pub fn read_request_body_into<'a>(
        &'a mut self,
        dst: &'a mut BytesMut,
    ) -> impl Future<Output = Result<usize>> + 'a {
        either_future!(self, s => s.read_request_body_into(dst))
    }

    pub fn drain_request_body(&mut self) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.drain_request_body())
    }

    /// A timer for a wait of this request, set to fire at `at`: on HTTP/1 the
    /// connection's own, kept across its requests (`http1::server::Session::take_timer`),
    /// on HTTP/2 a new one. Given back with [`Session::keep_timer`] after the wait.
    pub fn timer_until(&mut self, at: Instant) -> Pin<Box<Sleep>> {
        let kept = match self {
            Session::Http1(s) => s.take_timer(),
            Session::Http2(..) => None,
        };
        match kept {
            Some(mut timer) => {
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
                timer
            }
            None => Box::pin(tokio::time::sleep_until(at)),
        }
    }

    /// Gives back a timer from [`Session::timer_until`] (HTTP/2: dropped).
    pub fn keep_timer(&mut self, timer: Pin<Box<Sleep>>) {
        if let Session::Http1(s) = self {
            s.keep_timer(timer);
        }
    }

    pub fn client_gone(&mut self) -> impl Future<Output = Error> + '_ {
        either_future!(self, s => s.client_gone())
    }

    pub fn write_continue_response(&mut self) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.write_continue_response())
    }

    pub fn write_response_header(
        &mut self,
        header: ResponseHeader,
    ) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.write_response_header(header))
    }

    pub fn write_response_body(
        &mut self,
        data: Bytes,
        end: bool,
    ) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.write_response_body(data, end))
    }

    pub fn flush(&mut self) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.flush())
    }

    pub fn respond_error(&mut self, status: u16) -> impl Future<Output = Result<()>> + '_ {
        either_future!(self, s => s.respond_error(status))
    }

    pub fn finish(&mut self) -> impl Future<Output = bool> + '_ {
        either_future!(self, s => s.finish())
    }

    pub fn shutdown(&mut self) -> impl Future<Output = ()> + '_ {
        either_future!(self, s => s.shutdown())
    }
}

/// Writes a whole small response; `None` when the client is gone.
pub async fn write_simple(
    session: &mut Session,
    status: u16,
    content_type: &str,
    body: Bytes,
) -> Option<()> {
    let mut header = ResponseHeader::build_no_case(status, Some(2)).ok()?;
    header.insert_header("content-type", content_type).ok()?;
    header
        .insert_header("content-length", body.len().to_string())
        .ok()?;
    session.write_response_header(header).await.ok()?;
    session.write_response_body(body, true).await.ok()
}
