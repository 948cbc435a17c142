//! A plain TCP connection as a pingora transport stream (`Box<dyn IO>`), with nothing
//! between a read or a write and the socket.
//!
//! pingora's `l4::stream::Stream` wraps each socket in its own layers: a read and a write
//! buffer (empty, as we use it, yet passed through on every call), the time every pending
//! read and write waited (two clock reads each), a receive timestamp, an enum over socket
//! kinds, a wall-clock time when it is made and a `getsockopt` when it is dropped. Nothing
//! of ours reads any of that: the client connection's write buffer and deadlines are
//! [`BufferedStream`](super::BufferedStream)'s, the upstream's too, and what is read from
//! the stream itself is its socket digest (the peer's address: the access record,
//! `X-Forwarded-For`). This type keeps that and forwards the rest to the socket: every
//! client connection and every plain upstream connection is one (an upstream over TLS
//! keeps pingora's stream, under pingora's TLS).
//!
//! What it offers, and what it leaves out:
//! - the socket digest, made when the stream is (the addresses looked up once, when first
//!   asked; a connector that knows them may fill them in first);
//! - `shutdown` sends the FIN (`shutdown(SHUT_WR)`) once what was written is with the
//!   kernel: a write here is a `send`, nothing waits in this type, so dropping it closes
//!   the socket with nothing of its own lost;
//! - no timing digest, no proxy digest, no TLS, no peeking (a reader that looked ahead
//!   gives the bytes back to the buffered stream above: `BufferedStream::unread`).

use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    TimingDigest, UniqueID, UniqueIDType,
};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// A plain TCP connection, client or upstream.
#[derive(Debug)]
pub struct PlainStream {
    tcp: TcpStream,
    socket: Arc<SocketDigest>,
}

impl PlainStream {
    /// The stream of a connected socket. Its addresses are looked up when first asked.
    pub fn new(tcp: TcpStream) -> Self {
        let socket = Arc::new(SocketDigest::from_raw_fd(tcp.as_raw_fd()));
        PlainStream { tcp, socket }
    }

    /// The stream of a connected socket whose digest the caller made (its addresses
    /// already known, say).
    pub fn with_digest(tcp: TcpStream, socket: SocketDigest) -> Self {
        PlainStream {
            tcp,
            socket: Arc::new(socket),
        }
    }

    /// The socket.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl AsyncRead for PlainStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for PlainStream {
    async fn shutdown(&mut self) {
        // A peer that already went away cannot be told: nothing to do about it here.
        if let Err(e) = AsyncWriteExt::shutdown(&mut self.tcp).await {
            log::debug!(target: "sluice::server", error:% = e; "shutdown failed");
        }
    }
}

impl UniqueID for PlainStream {
    fn id(&self) -> UniqueIDType {
        self.tcp.as_raw_fd()
    }
}

impl Ssl for PlainStream {}

impl GetTimingDigest for PlainStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        Vec::new()
    }
}

impl GetProxyDigest for PlainStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        None
    }
}

impl GetSocketDigest for PlainStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        Some(Arc::clone(&self.socket))
    }

    fn set_socket_digest(&mut self, socket: SocketDigest) {
        self.socket = Arc::new(socket);
    }
}

#[async_trait]
impl Peek for PlainStream {}

#[cfg(test)]
mod tests;
