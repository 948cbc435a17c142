//! New connections to an upstream: plain TCP as a [`PlainStream`] of our own, TLS by
//! pingora's connector (rustls, over pingora's own TCP stream).
//!
//! A plain connection through pingora's connector would be its `l4::stream::Stream`, whose
//! layers cost every read and write a little (listener/plain.rs says which); ours has none.
//! The connection is made as pingora's connector makes it for the peers the catalog builds
//! (connect with a timeout, `TCP_NODELAY`, keep-alive probes if the peer asks for them) and
//! fails with the same error types, which are what the gateway reads of a failure (its log
//! field, and a timeout told apart from the upstream unavailable). A peer that asks for
//! anything more of its socket (a source address, a proxy, TCP fast open...) is left to
//! pingora's connector.

use crate::listener::PlainStream;
use pingora_core::connectors::TransportConnector;
use pingora_core::protocols::l4::ext::set_tcp_keepalive;
use pingora_core::protocols::l4::socket::SocketAddr;
use pingora_core::protocols::{SocketDigest, Stream};
use pingora_core::upstreams::peer::{HttpPeer, Peer};
use pingora_core::{Error, ErrorType, Result};
use std::io;
use std::os::fd::AsRawFd;
use tokio::net::TcpSocket;

/// A new connection to `peer`: ours when it is plain TCP, else `connector`'s.
pub async fn connect(connector: &TransportConnector, peer: &HttpPeer) -> Result<Stream> {
    match plain_address(peer) {
        Some(addr) => connect_plain(peer, addr).await,
        None => connector.new_stream(peer).await,
    }
}

/// The address of a peer reached over plain TCP with nothing asked of its socket beyond
/// what [`connect_plain`] does; `None` for any other.
fn plain_address(peer: &HttpPeer) -> Option<std::net::SocketAddr> {
    if peer.tls()
        || peer.get_proxy().is_some()
        || peer.tcp_fast_open()
        || peer.tcp_recv_buf().is_some()
        || peer.dscp().is_some()
    {
        return None;
    }
    let options = &peer.options;
    if options.bind_to.is_some()
        || options.custom_l4.is_some()
        || options.upstream_tcp_sock_tweak_hook.is_some()
        || options.tracer.is_some()
    {
        return None;
    }
    match peer.address() {
        SocketAddr::Inet(addr) => Some(*addr),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// A plain TCP connection to `addr`, within the peer's connect timeouts.
async fn connect_plain(peer: &HttpPeer, addr: std::net::SocketAddr) -> Result<Stream> {
    let timeout = match (peer.connection_timeout(), peer.total_connection_timeout()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let connecting = open(addr);
    let tcp = match timeout {
        None => connecting.await?,
        Some(t) => match tokio::time::timeout(t, connecting).await {
            Ok(connected) => connected?,
            Err(_) => {
                return Error::e_explain(
                    ErrorType::ConnectTimedout,
                    format!("timeout {t:?} connecting to server {peer}"),
                )
            }
        },
    };
    if let Some(keepalive) = peer.tcp_keepalive() {
        set_tcp_keepalive(&tcp, keepalive)?;
    }
    tcp.set_nodelay(true)
        .map_err(|e| Error::because(ErrorType::ConnectError, "failed to set_nodelay", e))?;
    let digest = SocketDigest::from_raw_fd(tcp.as_raw_fd());
    // Known already: not asked of the kernel again.
    let _ = digest.peer_addr.set(Some(SocketAddr::Inet(addr)));
    Ok(Box::new(PlainStream::with_digest(tcp, digest)))
}

/// Connects a new socket to `addr`, a failure typed as pingora's connector types it.
async fn open(addr: std::net::SocketAddr) -> Result<tokio::net::TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| {
        Error::because(
            ErrorType::InternalError,
            format!("Fail to connect to {addr}"),
            e,
        )
    })?;
    socket.connect(addr).await.map_err(|e| {
        Error::because(
            connect_error_type(&e),
            format!("Fail to connect to {addr}"),
            e,
        )
    })
}

/// The error type of a failed connect, as pingora's connector gives it (a local address
/// unavailable is the gateway's own failure there, not the upstream's).
fn connect_error_type(error: &io::Error) -> ErrorType {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => ErrorType::ConnectRefused,
        io::ErrorKind::TimedOut => ErrorType::ConnectTimedout,
        io::ErrorKind::AddrNotAvailable
        | io::ErrorKind::PermissionDenied
        | io::ErrorKind::AddrInUse => ErrorType::InternalError,
        io::ErrorKind::NetworkUnreachable | io::ErrorKind::HostUnreachable => {
            ErrorType::ConnectNoRoute
        }
        _ => ErrorType::ConnectError,
    }
}

#[cfg(test)]
mod tests;
