//! A client connection's HTTP/1.1 session: its requests read one after another (pipelined
//! ones kept in order), each answered with a head and a body, the connection kept for the
//! next request while both sides allow it.
//!
//! Ours rather than pingora's server session, for what a request cost there: pingora
//! filled 256 empty field slots (8 KiB) per parse, built two header maps (values and the
//! names as sent), reparsed `Content-Length` for every answer, inserted `Date` and
//! `Connection` through its generic field map, and made a new session, its digests and
//! the reuse settings for every request on a connection: about 20k instructions a
//! request, of which this keeps less than half (benches/README.md, tenth session). It
//! keeps pingora's types at its edges (`RequestHeader`, `ResponseHeader`), reports the
//! layer's own [`Error`], and keeps pingora's rules, made as strict as nginx's where they
//! were laxer:
//!
//! - a head is at most `max_head_bytes` (`max_header_bytes`, default
//!   [`DEFAULT_MAX_HEAD_BYTES`]) and [`MAX_FIELDS`] fields, else [`Error::HeadTooLarge`],
//!   raised as soon as that many bytes came without the head's end (no more is read); a
//!   `Transfer-Encoding` other than one `chunked` coding is
//!   [`Error::UnsupportedTransferCoding`]; a head that cannot be parsed, or whose framing is
//!   ambiguous, is [`Error::MalformedHead`] (answered 400 by the proxy): differing `Content-Length`
//!   values, any `Transfer-Encoding` on HTTP/1.0, and what pingora's authority check
//!   refuses (two `Host` fields, userinfo, a `Host` that differs from an absolute
//!   target). With both `Transfer-Encoding` and `Content-Length`, the body is read
//!   chunked, `Content-Length` dropped and the connection closed after the answer;
//! - the connection is kept unless the client asks otherwise (`Connection: close`, or
//!   HTTP/1.0 without `keep-alive`), the gateway does ([`Session::disable_keepalive`]),
//!   the answer is delimited by the close, or a request body was left unread when the
//!   answer started;
//! - every answer carries `Date` and `Connection`; a body is written by the answer's own
//!   framing (`Content-Length`, chunked, or until the close), none for `HEAD`, 204, 304;
//!   an HTTP/1.0 client never gets a chunked body (the close ends it instead).

use super::error::{Error, Result};
use super::framing::Writing;
use super::head::{self, worth_parsing};
use crate::http1::reader::{MessageReader, Reading};
use bytes::{BufMut, Bytes, BytesMut};
use http::{header, Method, Version};
use pingora_core::protocols::http::date::get_cached_date;
use pingora_core::protocols::l4::socket::SocketAddr;
use pingora_core::protocols::{Shutdown, SocketDigest, Stream};
use pingora_http::{RequestHeader, ResponseHeader};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Sleep;

/// Largest request head (request line and fields) when `max_header_bytes` is not set:
/// 32 KiB, as nginx's default buffers allow (1 KiB, then 4 × 8 KiB).
pub const DEFAULT_MAX_HEAD_BYTES: usize = 32 << 10;
/// Most fields a request head may have, as pingora allowed.
pub use super::head::MAX_FIELDS;

/// One client connection, between requests or inside one.
pub struct Session {
    reader: MessageReader,
    /// The connection's addresses, looked up once.
    socket: Option<Arc<SocketDigest>>,
    /// The request being served (before the first one, an empty `GET /`).
    request: RequestHeader,
    /// The connection may carry another request after this one.
    keepalive: bool,
    /// The gateway will not take another request on this connection.
    closing: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// The final answer's head went out.
    responded: bool,
    /// How the answer's body is written.
    writing: Writing,
    /// The client closed its side while the answer was pending.
    half_closed: bool,
    /// Bytes of the next request arrived while this one was waiting (kept in the buffer).
    next_request_read: bool,
    /// Largest request head; the buffer of a head being read never holds more.
    max_head_bytes: usize,
    /// A timer lent to each request's waits on this connection (see [`Session::take_timer`]).
    timer: Option<Pin<Box<Sleep>>>,
}

impl Session {
    /// A session on an accepted connection. How long it waits for a request (its first
    /// byte, then the whole head) is bounded by the client transport (`connection.rs`),
    /// whose reads end at the deadline as if the client had closed. A request head is at
    /// most `max_head_bytes` (`max_header_bytes`).
    pub fn new(stream: Stream, max_head_bytes: usize) -> Self {
        Session {
            socket: stream.get_socket_digest(),
            reader: MessageReader::new(stream),
            request: RequestHeader::from(http::Request::new(()).into_parts().0),
            keepalive: false,
            closing: false,
            read_timeout: None,
            write_timeout: None,
            responded: false,
            writing: Writing::Done,
            half_closed: false,
            next_request_read: false,
            max_head_bytes,
            timer: None,
        }
    }

    /// The connection's timer, lent out: a request's wait sets it to its deadline and
    /// gives it back ([`Session::keep_timer`]). Every request of a connection runs on its
    /// task, so one timer serves them all; set to a later deadline than the one it holds,
    /// tokio moves it without taking it out of its wheel, where a timer per wait is
    /// registered and taken out again each time. `None` before the first wait.
    pub fn take_timer(&mut self) -> Option<Pin<Box<Sleep>>> {
        self.timer.take()
    }

    /// Gives the connection's timer back after a wait.
    pub fn keep_timer(&mut self, timer: Pin<Box<Sleep>>) {
        self.timer = Some(timer);
    }

    /// Reads the next request's head: `Ok(false)` when the client closed the connection
    /// (or the transport's deadline passed) before the head began. A head longer than
    /// `max_head_bytes` is [`Error::HeadTooLarge`] as soon as that many bytes came
    /// without its end: the buffer never holds more of it.
    pub async fn read_request(&mut self) -> Result<bool> {
        self.responded = false;
        self.writing = Writing::Done;
        self.half_closed = false;
        self.next_request_read = false;
        self.reader.reading = Reading::Head;
        // Bytes of a pipelined request may be buffered already.
        let mut parse = !self.reader.buffered().is_empty();
        loop {
            let before = self.reader.buffered().len();
            let full = before >= self.max_head_bytes;
            if parse || full {
                if let Some(head) = head::parse(&mut self.reader, self.max_head_bytes)? {
                    self.keepalive = !self.closing && head.keepalive;
                    self.reader.reading = head.reading;
                    self.request = head.request;
                    return Ok(true);
                }
                if full {
                    return Err(Error::HeadTooLarge);
                }
            }
            let began = before > 0;
            let read = self.reader.fill_at_most(self.max_head_bytes - before).await;
            parse = worth_parsing(self.reader.buffered(), before);
            match read {
                Ok(0) | Err(_) if !began => return Ok(false),
                Ok(0) => return Err(Error::Closed("a request head")),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The request being served.
    pub fn req_header(&self) -> &RequestHeader {
        &self.request
    }

    pub fn req_header_mut(&mut self) -> &mut RequestHeader {
        &mut self.request
    }

    /// The client's address.
    pub fn client_addr(&self) -> Option<&SocketAddr> {
        self.socket.as_ref().and_then(|socket| socket.peer_addr())
    }

    /// The connection's stream.
    pub fn stream(&self) -> &Stream {
        &self.reader.stream
    }

    /// Bounds each read of a request body.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// Bounds each write of an answer.
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.write_timeout = timeout;
    }

    /// The connection ends after the current request.
    pub fn disable_keepalive(&mut self) {
        self.keepalive = false;
        self.closing = true;
    }

    /// Whether the request body was read whole (or there is none).
    pub fn is_body_done(&self) -> bool {
        self.reader.body_done()
    }

    /// Whether the answer's head went out.
    pub fn response_started(&self) -> bool {
        self.responded
    }

    /// Bytes left of an answer whose head declared its length; `None` for any other
    /// framing. Writing exactly that many ends the body for the client.
    pub fn response_body_left(&self) -> Option<u64> {
        match self.writing {
            Writing::Length(left) => Some(left),
            _ => None,
        }
    }

    /// The next bytes of the request body, `None` at its end.
    pub async fn read_request_body(&mut self) -> Result<Option<Bytes>> {
        let read = self.reader.read_body();
        match bounded(self.read_timeout, read).await {
            Some(read) => read,
            None => Err(Error::ReadTimeout),
        }
    }

    /// Bytes of a request body framed by its `Content-Length` still to come; `None` for a
    /// chunked body (or none).
    pub fn request_body_left(&self) -> Option<u64> {
        self.reader.body_left()
    }

    /// Appends the next bytes of the request body to `dst`: how many, 0 at its end. A body
    /// framed by its length is read straight into `dst` (see `MessageReader::read_body_into`).
    pub async fn read_request_body_into(&mut self, dst: &mut BytesMut) -> Result<usize> {
        let read = self.reader.read_body_into(dst);
        match bounded(self.read_timeout, read).await {
            Some(read) => read,
            None => Err(Error::ReadTimeout),
        }
    }

    /// Reads and drops the rest of the request body.
    pub async fn drain_request_body(&mut self) -> Result<()> {
        if self.reader.body_done() {
            // Nothing left (the usual case as a request ends): no read set up (~0.2k
            // instructions, benches/README.md, fourteenth session).
            return Ok(());
        }
        while self.read_request_body().await?.is_some() {}
        Ok(())
    }

    /// While an answer is pending: resolves only when the client is gone (it closed its
    /// side, or reading it failed), with why. Bytes of a pipelined next request are kept
    /// for it, and the wait then lasts until the caller stops polling.
    pub async fn client_gone(&mut self) -> Error {
        if self.half_closed {
            return Error::Closed("the wait for an answer");
        }
        if self.next_request_read {
            return std::future::pending().await;
        }
        match self.reader.fill().await {
            Ok(0) => {
                self.half_closed = true;
                self.keepalive = false;
                Error::Closed("the wait for an answer")
            }
            Ok(_) => {
                self.next_request_read = true;
                std::future::pending().await
            }
            Err(e) => e,
        }
    }

    /// Writes `100 Continue`, unless an answer started or the client speaks HTTP/1.0 (which
    /// has no interim answers, RFC 9110 §15.2).
    pub async fn write_continue_response(&mut self) -> Result<()> {
        if self.responded || self.request.version == Version::HTTP_10 {
            return Ok(());
        }
        let timeout = self.write_timeout;
        let stream = &mut self.reader.stream;
        write_bounded(timeout, async {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            stream.flush().await
        })
        .await
    }

    /// Writes the answer's head, with `Date` and `Connection` set by the session. A second
    /// head is ignored.
    pub async fn write_response_header(&mut self, mut header: ResponseHeader) -> Result<()> {
        if self.responded {
            return Ok(());
        }
        if !self.is_body_done() {
            // The unread rest would be taken for the next request.
            self.keepalive = false;
        }
        let bodiless =
            self.request.method == Method::HEAD || matches!(header.status.as_u16(), 204 | 304);
        self.writing = Writing::of(&header.headers, bodiless);
        if self.writing == Writing::Chunked && self.request.version == Version::HTTP_10 {
            // HTTP/1.0 has no chunked coding (RFC 9112 §6.1): the body ends with the
            // connection instead.
            header.remove_header(&header::TRANSFER_ENCODING);
            self.writing = Writing::UntilClose;
        }
        if self.writing == Writing::UntilClose {
            self.keepalive = false;
        }
        // The session writes its own (a look-up each: one that is there is removed by it).
        header.remove_header(&header::DATE);
        header.remove_header(&header::CONNECTION);
        let mut wire = BytesMut::with_capacity(512);
        wire.put_slice(match header.version {
            Version::HTTP_10 => b"HTTP/1.0 ",
            _ => b"HTTP/1.1 ",
        });
        wire.put_slice(header.status.as_str().as_bytes());
        wire.put_u8(b' ');
        wire.put_slice(header.get_reason_phrase().unwrap_or_default().as_bytes());
        wire.put_slice(b"\r\n");
        header.header_to_h1_wire(&mut wire);
        wire.put_slice(b"Date: ");
        wire.put_slice(get_cached_date().as_bytes());
        wire.put_slice(if self.keepalive {
            b"\r\nConnection: keep-alive\r\n\r\n"
        } else {
            b"\r\nConnection: close\r\n\r\n"
        });
        self.responded = true;
        // An answer with a length waits for its body to leave with it; one that streams
        // goes out now.
        let flush = !matches!(self.writing, Writing::Length(left) if left > 0);
        let timeout = self.write_timeout;
        let stream = &mut self.reader.stream;
        write_bounded(timeout, async {
            stream.write_all(&wire).await?;
            if flush {
                stream.flush().await?;
            }
            Ok(())
        })
        .await
    }

    /// Writes body bytes by the answer's framing; `end` ends the body (a chunked one with
    /// its last chunk) and flushes.
    pub async fn write_response_body(&mut self, data: Bytes, end: bool) -> Result<()> {
        if data.is_empty() && !end {
            return Ok(());
        }
        if let Writing::Length(left) = self.writing {
            if data.len() as u64 > left {
                // Never cut to fit: a body longer than its head said is the writer's bug.
                self.writing = Writing::Done;
                self.keepalive = false;
                return Err(Error::Overrun);
            }
        }
        let timeout = self.write_timeout;
        let writing = &mut self.writing;
        let stream = &mut self.reader.stream;
        let written = async {
            if !data.is_empty() {
                writing.write(stream, &data).await?;
            }
            if !end {
                return Ok(false);
            }
            let premature = writing.finish(stream).await?;
            stream.flush().await.map_err(Error::Write)?;
            Ok(premature)
        };
        let premature = match bounded(timeout, written).await {
            Some(written) => written?,
            None => return Err(Error::WriteTimeout),
        };
        if premature {
            self.keepalive = false;
            return Err(Error::PrematureEnd);
        }
        Ok(())
    }

    /// Sends what was written of the answer so far, without ending its body (an answer
    /// cut short: the connection is closed next).
    pub async fn flush(&mut self) -> Result<()> {
        let timeout = self.write_timeout;
        let stream = &mut self.reader.stream;
        write_bounded(timeout, stream.flush()).await
    }

    /// Writes an empty answer with `status` (the client transport turns it into the
    /// gateway's JSON error, `connection.rs`) and ends the connection after it.
    pub async fn respond_error(&mut self, status: u16) -> Result<()> {
        self.disable_keepalive();
        if self.responded {
            return Ok(());
        }
        let unmade = |_| Error::InvalidAnswer("an error status out of range");
        let mut header = ResponseHeader::build_no_case(status, Some(2)).map_err(unmade)?;
        header
            .insert_header(header::CONTENT_LENGTH, 0)
            .map_err(unmade)?;
        header
            .insert_header(header::CACHE_CONTROL, "private, no-store")
            .map_err(unmade)?;
        self.write_response_header(header).await?;
        self.write_response_body(Bytes::new(), true).await
    }

    /// Ends a served request: the answer's body finished and flushed, then whether the
    /// connection may carry another (the rest of an unread request body drained first).
    /// A connection that may not is closed.
    pub async fn finish(&mut self) -> bool {
        let finished = self.writing == Writing::Done
            || self.write_response_body(Bytes::new(), true).await.is_ok();
        if finished
            && self.keepalive
            && !self.half_closed
            && self.drain_request_body().await.is_ok()
        {
            return true;
        }
        self.shutdown().await;
        false
    }

    /// Closes the connection (a TLS one with its close notification).
    pub async fn shutdown(&mut self) {
        Shutdown::shutdown(&mut *self.reader.stream).await;
    }
}

/// `write` within `timeout`, its failure a write error.
async fn write_bounded<T>(
    timeout: Option<Duration>,
    write: impl Future<Output = std::io::Result<T>>,
) -> Result<T> {
    match bounded(timeout, write).await {
        Some(written) => written.map_err(Error::Write),
        None => Err(Error::WriteTimeout),
    }
}

/// What `io` gives within `timeout`; `None` past it. Most reads and writes finish at their
/// first poll (a write lands in the transport's buffer, a body is often read with its
/// head): the timer is only armed for one that has to wait (arming and cancelling it cost
/// ~0.3k instructions each time, benches/README.md, tenth session).
async fn bounded<F: Future>(timeout: Option<Duration>, io: F) -> Option<F::Output> {
    let mut io = std::pin::pin!(io);
    let first = std::future::poll_fn(|cx| Poll::Ready(io.as_mut().poll(cx))).await;
    match (first, timeout) {
        (Poll::Ready(done), _) => Some(done),
        (Poll::Pending, Some(limit)) => tokio::time::timeout(limit, io).await.ok(),
        (Poll::Pending, None) => Some(io.await),
    }
}

#[cfg(test)]
mod tests;
