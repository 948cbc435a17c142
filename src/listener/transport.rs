//! A write buffer in front of a pingora transport stream, so a response's header and body,
//! or a request's header and body, leave in one system call instead of one each.
//!
//! pingora's own listener gives accepted streams a small write buffer; ours (see
//! `accept.rs`) cannot set it. On loopback each extra `sendto` costs a full trip through
//! the TCP stack, which was the largest single cost of a proxied request
//! (benches/README.md). Writes collect here until a flush.
//!
//! The same wrapper keeps two other things that only the stream can see:
//! - on a client connection, the bounds of `connection.rs` (the head deadline, the idle
//!   deadline);
//! - on an upstream connection, an answer that arrives while the request is still being
//!   written (an upstream refusing a large body with 413 before reading it): a write that
//!   cannot go on is given up as soon as answer bytes can be read, and those bytes are kept
//!   for the next read, so the caller can relay the answer instead of timing out.

use super::connection::ClientConnection;
use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType,
};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Past this many buffered bytes, a write goes out before more are taken.
const BUFFER_BYTES: usize = 64 << 10;
/// What an empty buffer takes on its first write: a header and a small body fit.
const FIRST_CAPACITY: usize = 4 << 10;

/// A handle on a [`BufferedStream`] boxed as a pingora stream: counts the bytes read from
/// it, read-ahead included (so a caller knows whether any answer arrived).
#[derive(Clone, Default)]
pub struct ReadCount {
    bytes_read: Arc<AtomicU64>,
}

impl ReadCount {
    /// Bytes read from the stream since it was wrapped.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Acquire)
    }
}

/// Most answer bytes read ahead while a request write is blocked.
const READ_AHEAD_BYTES: usize = 16 << 10;

/// A stream whose writes wait in a buffer until flushed.
pub struct BufferedStream {
    inner: Stream,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already written out.
    written: usize,
    read_count: ReadCount,
    /// A client connection's bounds; `None` on an upstream connection.
    client: Option<Arc<ClientConnection>>,
    /// Fires at the client connection's read deadline.
    timer: Option<Pin<Box<Sleep>>>,
    /// Bytes read ahead, served first: on an upstream connection, answer bytes read while
    /// a write was blocked; on a client connection, its first bytes given back.
    read_ahead: Vec<u8>,
}

impl BufferedStream {
    /// An upstream connection's stream.
    pub fn new(inner: Stream) -> Self {
        Self::with_read_count(inner, ReadCount::default())
    }

    /// A client connection's stream, kept to `connection`'s bounds.
    pub fn for_client(inner: Stream, connection: Arc<ClientConnection>) -> Self {
        BufferedStream {
            client: Some(connection),
            ..Self::new(inner)
        }
    }

    /// Bytes already read from the connection (its first, to tell HTTP/2 from HTTP/1)
    /// given back: the next reads return them first.
    pub fn unread(&mut self, bytes: &[u8]) {
        self.read_ahead.splice(0..0, bytes.iter().copied());
    }

    /// The client connection a stream belongs to, if it is one.
    pub fn client_connection(stream: &Stream) -> Option<&Arc<ClientConnection>> {
        stream
            .as_any()
            .downcast_ref::<BufferedStream>()?
            .client
            .as_ref()
    }

    /// The stream under the buffer.
    pub(in crate::listener) fn inner(&self) -> &Stream {
        &self.inner
    }

    pub fn with_read_count(inner: Stream, read_count: ReadCount) -> Self {
        BufferedStream {
            inner,
            buffer: Vec::new(),
            written: 0,
            read_count,
            client: None,
            timer: None,
            read_ahead: Vec::new(),
        }
    }

    /// Whether `deadline` has passed (`now`: the time read for this read), arming the
    /// timer to wake this task when it does.
    fn poll_deadline(&mut self, cx: &mut Context<'_>, now: Instant, deadline: Instant) -> bool {
        if now >= deadline {
            return true;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// Upstream connection, a write that cannot go on: is an answer already there? Reads it
    /// ahead (kept for the next read) and gives the write up, so the caller reads the answer.
    fn poll_answer_while_blocked(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.client.is_some() || self.read_ahead.len() >= READ_AHEAD_BYTES {
            return Poll::Pending;
        }
        let mut chunk = [0u8; 4096];
        let mut read = ReadBuf::new(&mut chunk);
        match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(e),
            Poll::Ready(Ok(())) if read.filled().is_empty() => {
                Poll::Ready(io::ErrorKind::BrokenPipe.into())
            }
            Poll::Ready(Ok(())) => {
                let filled = read.filled();
                self.read_count
                    .bytes_read
                    .fetch_add(filled.len() as u64, Ordering::AcqRel);
                self.read_ahead.extend_from_slice(filled);
                Poll::Ready(io::Error::other(
                    "the upstream answered before the request was written",
                ))
            }
        }
    }

    /// A write to the inner stream that gives up, on an upstream connection, once an
    /// answer has arrived.
    fn poll_write_inner(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Pending => self.poll_answer_while_blocked(cx).map(Err),
            ready => ready,
        }
    }

    /// The stream, boxed, and the handle that counts its reads. A stream
    /// that is already buffered (back from the connection pool) keeps its buffer and handle.
    pub fn wrap(inner: Stream) -> (Stream, ReadCount) {
        let existing = inner
            .as_any()
            .downcast_ref::<BufferedStream>()
            .map(|b| b.read_count.clone());
        match existing {
            Some(read_count) => (inner, read_count),
            None => {
                let read_count = ReadCount::default();
                (
                    Box::new(Self::with_read_count(inner, read_count.clone())),
                    read_count,
                )
            }
        }
    }

    /// Writes out the whole buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            let pending = std::mem::take(&mut self.buffer);
            let wrote = self.poll_write_inner(cx, &pending[self.written..]);
            self.buffer = pending;
            let n = ready!(wrote)?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        // Let go once written: an open stream waits with no buffer (a few hundred bytes
        // each way, for as long as it lasts), and the next write's allocation is cheap.
        self.buffer = Vec::new();
        Poll::Ready(Ok(()))
    }
}

impl fmt::Debug for BufferedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferedStream")
            .field("inner", &self.inner)
            .field("buffered", &self.buffer.len())
            .finish()
    }
}

impl AsyncRead for BufferedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.read_ahead.is_empty() {
            let n = this.read_ahead.len().min(buf.remaining());
            buf.put_slice(&this.read_ahead[..n]);
            this.read_ahead.drain(..n);
            return Poll::Ready(Ok(()));
        }
        // One clock read a read, and none while a request is served.
        let bound = this.client.as_ref().and_then(|c| c.read_bound());
        if let Some((now, deadline)) = bound {
            if now >= deadline {
                // The head (or the next request) is late: read as the end of the stream.
                return Poll::Ready(Ok(()));
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let count = (buf.filled().len() - before) as u64;
        if count > 0 {
            this.read_count
                .bytes_read
                .fetch_add(count, Ordering::AcqRel);
            if let (Some(client), Some((now, _))) = (&this.client, bound) {
                client.bytes_read(now);
            }
        }
        match (read, bound) {
            (Poll::Pending, Some((now, deadline))) if this.poll_deadline(cx, now, deadline) => {
                Poll::Ready(Ok(()))
            }
            (read, _) => read,
        }
    }
}

impl AsyncWrite for BufferedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.buffer.len() + data.len() > BUFFER_BYTES {
            ready!(self.poll_drain(cx))?;
            if data.len() > BUFFER_BYTES {
                return self.poll_write_inner(cx, data);
            }
        }
        if self.buffer.capacity() == 0 {
            // One allocation per flush, not a series of doublings.
            self.buffer.reserve_exact(FIRST_CAPACITY.max(data.len()));
        }
        self.buffer.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for BufferedStream {
    async fn shutdown(&mut self) {
        let _ = std::future::poll_fn(|cx| self.poll_drain(cx)).await;
        self.inner.shutdown().await
    }
}

impl UniqueID for BufferedStream {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for BufferedStream {
    fn get_ssl(&self) -> Option<&pingora_core::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<pingora_core::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<pingora_core::protocols::ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for BufferedStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for BufferedStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for BufferedStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for BufferedStream {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}
