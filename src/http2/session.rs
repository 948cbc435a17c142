//! One HTTP/2 stream as the apps see it: the same methods as the HTTP/1 session
//! (`http1::server::Session`), over the `h2` crate's handles of one request.
//!
//! - the request head is pingora's `RequestHeader`: its target in origin form, its
//!   `:authority` as `Host` (unless a `Host` field came too);
//! - the body is read from the stream's `RecvStream`, each chunk's flow-control capacity
//!   released as it is handed to the app, so the client sends no more than the app has
//!   taken plus one window;
//! - the answer goes out through `SendResponse`/`SendStream`: each write waits for send
//!   capacity (the client's window, bounded per stream by `max_send_buffer_size`), so a
//!   slow reader holds its writer back instead of growing a buffer; each write is handed
//!   to the connection at once (server-sent events are not held back);
//! - the fields that belong to an HTTP/1 connection (`Connection`, `Keep-Alive`,
//!   `Transfer-Encoding`, `Upgrade`, `Proxy-Connection`) are never written: HTTP/2 forbids
//!   them (RFC 9113 §8.2.2);
//! - the client is gone when it reset the stream or the connection closed.

use super::connection::Resets;
use crate::http1::error::{Error, Result};
use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{header, HeaderName, Method, Version};
use pingora_core::protocols::http::date::get_cached_date;
use pingora_core::protocols::l4::socket::SocketAddr;
use pingora_core::protocols::SocketDigest;
use pingora_http::{RequestHeader, ResponseHeader};
use std::future::{poll_fn, Future};
use std::io;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Fields of an HTTP/1 connection, which an HTTP/2 answer must not carry.
const CONNECTION_FIELDS: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("proxy-connection"),
];

/// One request on an HTTP/2 connection, and its answer.
pub struct Session {
    request: RequestHeader,
    /// `read_request` has handed the head out (a stream carries one request).
    head_read: bool,
    body: RecvStream,
    respond: SendResponse<Bytes>,
    /// The answer's body, once its head went out.
    send: Option<SendStream<Bytes>>,
    /// The connection's addresses.
    socket: Option<Arc<SocketDigest>>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Body bytes the answer's `Content-Length` still owes; `None` without one.
    owed: Option<u64>,
    /// The answer's body ended (or there is none).
    ended: bool,
    /// The connection's count of streams the client reset.
    resets: Arc<Resets>,
    /// This stream's reset by the client was counted.
    reset_counted: bool,
    /// The gateway reset this stream.
    reset_here: bool,
}

impl Session {
    /// The session of an accepted stream.
    pub(super) fn new(
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        socket: Option<Arc<SocketDigest>>,
        resets: Arc<Resets>,
    ) -> Self {
        let (mut parts, body) = request.into_parts();
        if let Some(authority) = parts.uri.authority() {
            if !parts.headers.contains_key(header::HOST) {
                if let Ok(host) = http::HeaderValue::from_str(authority.as_str()) {
                    parts.headers.insert(header::HOST, host);
                }
            }
        }
        // The target as an HTTP/1 request line carries it: path and query.
        if let Some(origin) = parts
            .uri
            .path_and_query()
            .and_then(|target| target.as_str().parse::<http::Uri>().ok())
        {
            parts.uri = origin;
        }
        parts.version = Version::HTTP_2;
        Session {
            request: RequestHeader::from(parts),
            head_read: false,
            body,
            respond,
            send: None,
            socket,
            read_timeout: None,
            write_timeout: None,
            owed: None,
            ended: false,
            resets,
            reset_counted: false,
            reset_here: false,
        }
    }

    /// The request's head, the first time (it was read before the stream was accepted);
    /// `Ok(false)` after: a stream carries one request.
    pub async fn read_request(&mut self) -> Result<bool> {
        Ok(!std::mem::replace(&mut self.head_read, true))
    }

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

    /// Bounds each read of the request body.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// Bounds each wait to write the answer.
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.write_timeout = timeout;
    }

    /// Whether the request body was read whole (or there is none).
    pub fn is_body_done(&self) -> bool {
        self.body.is_end_stream()
    }

    /// Whether the answer's head went out.
    pub fn response_started(&self) -> bool {
        self.send.is_some() || self.ended
    }

    /// The next bytes of the request body, `None` at its end. The bytes handed out are
    /// given back to the client's window.
    pub async fn read_request_body(&mut self) -> Result<Option<Bytes>> {
        let body = &mut self.body;
        let read = poll_fn(|cx| body.poll_data(cx));
        let data = match bounded(self.read_timeout, read).await {
            None => return Err(Error::ReadTimeout),
            Some(None) => return Ok(None),
            Some(Some(data)) => data,
        };
        match data {
            Ok(data) => {
                let _ = self.body.flow_control().release_capacity(data.len());
                Ok(Some(data))
            }
            Err(e) => {
                self.count_reset(&e);
                Err(Error::Read(io_error(e)))
            }
        }
    }

    /// HTTP/2 frames a body in DATA frames: there is no length to read it by (`None`, as
    /// for a chunked HTTP/1 body).
    pub fn request_body_left(&self) -> Option<u64> {
        None
    }

    /// Appends the next bytes of the request body to `dst`: how many, 0 at its end.
    pub async fn read_request_body_into(&mut self, dst: &mut BytesMut) -> Result<usize> {
        loop {
            match self.read_request_body().await? {
                // An empty DATA frame is not the end.
                Some(data) if data.is_empty() => continue,
                Some(data) => {
                    dst.extend_from_slice(&data);
                    return Ok(data.len());
                }
                None => return Ok(0),
            }
        }
    }

    /// Reads and drops the rest of the request body.
    pub async fn drain_request_body(&mut self) -> Result<()> {
        while self.read_request_body().await?.is_some() {}
        Ok(())
    }

    /// While an answer is pending: resolves only when the client is gone (it reset the
    /// stream, or the connection closed), with why.
    pub async fn client_gone(&mut self) -> Error {
        let reset = match &mut self.send {
            Some(send) => poll_fn(|cx| send.poll_reset(cx)).await,
            None => {
                let respond = &mut self.respond;
                poll_fn(|cx| respond.poll_reset(cx)).await
            }
        };
        match reset {
            Ok(_) => {
                self.count_client_reset();
                Error::Closed("an answer's wait (the stream was reset)")
            }
            Err(e) => Error::Read(io_error(e)),
        }
    }

    /// `100 Continue`, unless an answer started.
    pub async fn write_continue_response(&mut self) -> Result<()> {
        if self.response_started() {
            return Ok(());
        }
        let mut interim = http::Response::new(());
        *interim.status_mut() = http::StatusCode::CONTINUE;
        self.respond
            .send_informational(interim)
            .map_err(|e| Error::Write(io_error(e)))
    }

    /// Writes the answer's head, with `Date` set by the session and the fields of an
    /// HTTP/1 connection left out. A second head is ignored.
    pub async fn write_response_header(&mut self, header: ResponseHeader) -> Result<()> {
        if self.response_started() {
            return Ok(());
        }
        let mut parts: http::response::Parts = header.into();
        for name in &CONNECTION_FIELDS {
            parts.headers.remove(name);
        }
        // `TE` is allowed only as `trailers` (RFC 9113 §8.2.2); an answer has no use for it.
        parts.headers.remove(header::TE);
        parts.headers.insert(header::DATE, get_cached_date());
        parts.version = Version::HTTP_2;
        let bodiless =
            self.request.method == Method::HEAD || matches!(parts.status.as_u16(), 204 | 304);
        self.owed = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .filter(|_| !bodiless);
        let response = http::Response::from_parts(parts, ());
        match self.respond.send_response(response, bodiless) {
            Ok(send) => {
                if bodiless {
                    self.ended = true;
                } else {
                    self.send = Some(send);
                }
                Ok(())
            }
            Err(e) => {
                self.ended = true;
                self.count_reset(&e);
                Err(Error::Write(io_error(e)))
            }
        }
    }

    /// Writes body bytes, each part once the client's window has room for it; `end` ends
    /// the body.
    pub async fn write_response_body(&mut self, mut data: Bytes, end: bool) -> Result<()> {
        if self.ended || (data.is_empty() && !end) {
            return Ok(());
        }
        if let Some(owed) = self.owed {
            if data.len() as u64 > owed {
                // Never cut to fit: a body longer than its head said is the writer's bug.
                self.reset(Reason::INTERNAL_ERROR);
                return Err(Error::Overrun);
            }
            self.owed = Some(owed - data.len() as u64);
        }
        let premature = end && self.owed.is_some_and(|owed| owed > 0);
        if premature {
            // Not ended as if whole: the client sees the stream reset.
            self.write_data(data, false).await?;
            self.reset(Reason::INTERNAL_ERROR);
            return Err(Error::PrematureEnd);
        }
        if data.is_empty() {
            return self.write_data(data, end).await;
        }
        while !data.is_empty() {
            let room = self.capacity(data.len()).await?;
            let part = data.split_to(room.min(data.len()));
            self.write_data(part, end && data.is_empty()).await?;
        }
        Ok(())
    }

    /// Room for up to `wanted` bytes in the client's window (at least one byte).
    async fn capacity(&mut self, wanted: usize) -> Result<usize> {
        let Some(send) = &mut self.send else {
            return Err(Error::InvalidAnswer("a body before its head"));
        };
        send.reserve_capacity(wanted);
        let wait = poll_fn(|cx| loop {
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(0))) => continue,
                other => return other,
            }
        });
        match bounded(self.write_timeout, wait).await {
            None => Err(Error::WriteTimeout),
            Some(Some(Ok(room))) => Ok(room),
            Some(None) => Err(Error::Closed("an answer (the stream closed)")),
            Some(Some(Err(e))) => {
                self.count_reset(&e);
                Err(Error::Write(io_error(e)))
            }
        }
    }

    async fn write_data(&mut self, data: Bytes, end: bool) -> Result<()> {
        let Some(send) = &mut self.send else {
            return Err(Error::InvalidAnswer("a body before its head"));
        };
        let sent = send.send_data(data, end);
        if end {
            self.ended = true;
            self.send = None;
        }
        if let Err(e) = sent {
            self.ended = true;
            self.send = None;
            self.count_reset(&e);
            return Err(Error::Write(io_error(e)));
        }
        Ok(())
    }

    /// Each write is handed to the connection as it is made: nothing to flush.
    pub async fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// An empty answer with `status` (a head the listener refused).
    pub async fn respond_error(&mut self, status: u16) -> Result<()> {
        if self.response_started() {
            return Ok(());
        }
        let built = ResponseHeader::build_no_case(status, Some(2)).and_then(|mut header| {
            header.insert_header(header::CONTENT_LENGTH, 0)?;
            header.insert_header(header::CACHE_CONTROL, "private, no-store")?;
            Ok(header)
        });
        let Ok(header) = built else {
            return Err(Error::InvalidAnswer("a status out of range"));
        };
        self.write_response_header(header).await?;
        self.write_response_body(Bytes::new(), true).await
    }

    /// Ends the served request: an answer whose body was left open is reset (it was cut
    /// short); a stream carries no other request, so always `false`.
    pub async fn finish(&mut self) -> bool {
        // Before any reset of ours, which would read the same.
        self.note_reset_by_client();
        if !self.ended {
            // An answer left open was cut short, and one never started was given up: the
            // client learns so at once.
            self.reset(Reason::INTERNAL_ERROR);
        } else if !self.reset_counted {
            self.resets.completed();
        }
        false
    }

    /// Ends the stream where it is.
    pub async fn shutdown(&mut self) {
        if !self.ended {
            self.reset(Reason::CANCEL);
        }
    }

    /// Resets the stream: no more of the answer will come.
    fn reset(&mut self, reason: Reason) {
        self.ended = true;
        self.reset_here = true;
        match self.send.take() {
            Some(mut send) => send.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    /// Counts a reset the client made, seen in an error.
    fn count_reset(&mut self, e: &h2::Error) {
        if e.is_reset() && e.is_remote() {
            self.count_client_reset();
        }
    }

    /// The stream was reset by the client before its answer ended: seen now, or a reset
    /// that came without the app waiting on it.
    fn note_reset_by_client(&mut self) {
        if self.reset_here {
            return;
        }
        let reset = match &mut self.send {
            Some(send) => poll_once(|cx| send.poll_reset(cx)),
            None => {
                let respond = &mut self.respond;
                poll_once(|cx| respond.poll_reset(cx))
            }
        };
        if let Some(Ok(_)) = reset {
            self.count_client_reset();
        }
    }

    fn count_client_reset(&mut self) {
        if !std::mem::replace(&mut self.reset_counted, true) {
            self.resets.client_reset();
        }
    }
}

/// What `poll` gives at once, without waiting.
fn poll_once<T>(mut poll: impl FnMut(&mut std::task::Context<'_>) -> Poll<T>) -> Option<T> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match poll(&mut cx) {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// An `h2` error as an I/O error (the layer's error carries it as its source).
fn io_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::ErrorKind::ConnectionAborted.into());
    }
    io::Error::other(e)
}

/// What `io` gives within `timeout`; `None` past it.
async fn bounded<F: Future>(timeout: Option<Duration>, io: F) -> Option<F::Output> {
    match timeout {
        Some(limit) => tokio::time::timeout(limit, io).await.ok(),
        None => Some(io.await),
    }
}
