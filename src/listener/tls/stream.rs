//! An accepted TLS connection as a pingora transport stream, so everything above it (the
//! write buffer, the HTTP/1 session) is the same as on cleartext; and what its handshake
//! settled ([`TlsDetails`]), found again from the session's stream.

use super::subject::rfc4514_subject;
use super::terminator::{ALPN_H2, ALPN_HTTP1};
use crate::listener::transport::BufferedStream;
use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::tls::SslDigest;
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_rustls::rustls;

/// What a connection's handshake settled, read once when it ends.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsDetails {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The application protocol the client and the listener agreed on (ALPN), if any.
    pub alpn: Option<ALPN>,
    /// The client certificate's subject as an RFC 4514 string (`CN=team-a,O=acme`), on a
    /// listener that requires client certificates.
    pub client_subject: Option<String>,
}

/// A TLS connection of a listener.
pub struct TlsStream {
    inner: tokio_rustls::server::TlsStream<Stream>,
    details: TlsDetails,
    /// pingora's summary, for whoever asks the stream through its `Ssl` trait.
    digest: Arc<SslDigest>,
}

impl TlsStream {
    pub(super) fn new(inner: tokio_rustls::server::TlsStream<Stream>) -> Self {
        let connection = inner.get_ref().1;
        let version = match connection.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "TLSv1.3",
        };
        let alpn = match connection.alpn_protocol() {
            Some(ALPN_H2) => Some(ALPN::H2),
            Some(ALPN_HTTP1) => Some(ALPN::H1),
            _ => None,
        };
        let client_subject = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| rfc4514_subject(leaf));
        let cipher = connection
            .negotiated_cipher_suite()
            .and_then(|suite| suite.suite().as_str())
            .unwrap_or("");
        let digest = Arc::new(SslDigest::new(cipher, version, None, None, Vec::new()));
        TlsStream {
            inner,
            details: TlsDetails {
                version,
                alpn,
                client_subject,
            },
            digest,
        }
    }

    pub fn details(&self) -> &TlsDetails {
        &self.details
    }

    /// What the handshake of the connection under `stream` settled, if it is a TLS
    /// connection of ours (bare, or under the client write buffer).
    pub fn details_of(stream: &Stream) -> Option<&TlsDetails> {
        let any = stream.as_any();
        let tls = match any.downcast_ref::<BufferedStream>() {
            Some(buffered) => buffered.inner().as_any().downcast_ref::<TlsStream>(),
            None => any.downcast_ref::<TlsStream>(),
        };
        tls.map(TlsStream::details)
    }

    fn tcp(&self) -> &Stream {
        self.inner.get_ref().0
    }
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", self.tcp())
            .field("details", &self.details)
            .finish()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for TlsStream {
    async fn shutdown(&mut self) {
        // close_notify, then the socket's own shutdown.
        let _ = AsyncWriteExt::shutdown(&mut self.inner).await;
    }
}

impl UniqueID for TlsStream {
    fn id(&self) -> UniqueIDType {
        self.tcp().id()
    }
}

impl Ssl for TlsStream {
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        Some(Arc::clone(&self.digest))
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.details.alpn.clone()
    }
}

impl GetTimingDigest for TlsStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.tcp().get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.tcp().get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.tcp().get_write_pending_time()
    }
}

impl GetProxyDigest for TlsStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.tcp().get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.get_mut().0.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for TlsStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.tcp().get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.get_mut().0.set_socket_digest(digest)
    }
}

/// Peeking is not offered: the socket's bytes are ciphertext.
#[async_trait]
impl Peek for TlsStream {}
