//! A write buffer in front of a pingora transport stream, so a response's header and body,
//! or a request's header and body, leave in one system call instead of one each.
//!
//! pingora's own listener gives accepted streams a small write buffer; ours (see
//! `server.rs`) cannot set it, and its HTTP/1 client flushes the request header before the
//! body. On loopback each extra `sendto` costs a full trip through the TCP stack, which was
//! the largest single cost of a proxied request (benches/README.md). Writes collect here
//! until a flush; a `Coalesce` handle lets the caller hold flushes back while it writes a
//! request's parts, then release them with the last one.

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType,
};
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Past this many buffered bytes, a write goes out before more are taken.
const BUFFER_BYTES: usize = 64 << 10;
/// A drained buffer keeps its allocation up to this size.
const KEPT_CAPACITY: usize = 8 << 10;

/// A handle on a [`BufferedStream`] inside pingora: holds its flushes back while set, and
/// counts the bytes read from it (so a caller knows whether any answer arrived).
#[derive(Clone, Default)]
pub struct Coalesce {
    held: Arc<AtomicBool>,
    bytes_read: Arc<AtomicU64>,
}

impl Coalesce {
    pub fn hold(&self) {
        self.held.store(true, Ordering::Release);
    }

    pub fn release(&self) {
        self.held.store(false, Ordering::Release);
    }

    fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Bytes read from the stream since it was wrapped.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Acquire)
    }
}

/// A stream whose writes wait in a buffer until flushed.
pub struct BufferedStream {
    inner: Stream,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already written out.
    written: usize,
    coalesce: Coalesce,
}

impl BufferedStream {
    pub fn new(inner: Stream) -> Self {
        Self::with_coalesce(inner, Coalesce::default())
    }

    pub fn with_coalesce(inner: Stream, coalesce: Coalesce) -> Self {
        BufferedStream {
            inner,
            buffer: Vec::new(),
            written: 0,
            coalesce,
        }
    }

    /// The stream to give to pingora, and the handle that holds its flushes back. A stream
    /// that is already buffered (back from the connection pool) keeps its buffer and handle.
    pub fn wrap(inner: Stream) -> (Stream, Coalesce) {
        let existing = inner
            .as_any()
            .downcast_ref::<BufferedStream>()
            .map(|b| b.coalesce.clone());
        match existing {
            Some(coalesce) => (inner, coalesce),
            None => {
                let coalesce = Coalesce::default();
                (
                    Box::new(Self::with_coalesce(inner, coalesce.clone())),
                    coalesce,
                )
            }
        }
    }

    /// Writes out the whole buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        if self.buffer.capacity() > KEPT_CAPACITY {
            // A large body grew it; an idle connection should not keep that much.
            self.buffer = Vec::new();
        } else {
            self.buffer.clear();
        }
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
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        let count = (buf.filled().len() - before) as u64;
        if count > 0 {
            self.coalesce.bytes_read.fetch_add(count, Ordering::AcqRel);
        }
        read
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
                return Pin::new(&mut self.inner).poll_write(cx, data);
            }
        }
        self.buffer.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.coalesce.held() {
            return Poll::Ready(Ok(()));
        }
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
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<pingora::protocols::ALPN> {
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
