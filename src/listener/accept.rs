//! Listeners: our own accept loops, handing each connection to an [`App`].
//!
//! Binding here (rather than in pingora's `Server`) lets a listener take port 0 and report
//! the port it got, so tests run many gateways side by side on ephemeral ports, and lets
//! shutdown wait for requests in flight instead of sleeping a fixed grace period.

use super::app::App;
use super::connection::{ClientConnection, ClientPolicy};
use super::plain::PlainStream;
use super::session::Session;
use super::tls::{terminate, TlsStream};
use super::transport::BufferedStream;
use crate::http1::server::Session as ServerSession;
use crate::http2;
use pingora_core::protocols::{GetSocketDigest, Ssl, ALPN};
use pingora_core::server::ShutdownWatch;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The bound on a listener's open connections (`max_connections`), one for all the accept
/// loops that serve it, however many threads they run on.
///
/// A connection is accepted first and then waits for a place: a loop that took a place
/// before accepting would hold it while the kernel queued the next connection on another
/// worker's listener (`SO_REUSEPORT`), and fewer than `max_connections` would be served.
/// A loop waiting for a place accepts nothing more, so the kernel holds the rest.
#[derive(Clone)]
pub struct ConnectionBound {
    places: Arc<Semaphore>,
    /// Accepted connections waiting for a place.
    waiting: Arc<watch::Sender<usize>>,
}

impl ConnectionBound {
    pub fn new(max_connections: usize) -> Self {
        ConnectionBound {
            places: Arc::new(Semaphore::new(max_connections)),
            waiting: Arc::new(watch::channel(0).0),
        }
    }

    /// A place for an accepted connection, once one is free (in the order asked).
    async fn place(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(place) = Arc::clone(&self.places).try_acquire_owned() {
            return Some(place);
        }
        /// Counts a wait while it lasts (a shutdown may drop it).
        struct Waiting<'a>(&'a watch::Sender<usize>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.send_modify(|n| *n -= 1);
            }
        }
        self.waiting.send_modify(|n| *n += 1);
        let _waiting = Waiting(&self.waiting);
        Arc::clone(&self.places).acquire_owned().await.ok()
    }

    /// Follows how many accepted connections wait for a place.
    pub fn waiting(&self) -> watch::Receiver<usize> {
        self.waiting.subscribe()
    }
}

/// Binds `addr` and serves `app` on it, each connection under `policy`, until `shutdown`
/// turns true.
pub async fn listen<A>(
    addr: SocketAddr,
    app: Arc<A>,
    policy: ClientPolicy,
    shutdown: ShutdownWatch,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    A: App,
{
    let open = ConnectionBound::new(policy.max_connections);
    listen_bounded(addr, app, policy, open, shutdown).await
}

/// [`listen`], under a bound the caller keeps.
pub async fn listen_bounded<A>(
    addr: SocketAddr,
    app: Arc<A>,
    policy: ClientPolicy,
    open: ConnectionBound,
    shutdown: ShutdownWatch,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    A: App,
{
    // The same queue as the per-core listeners: `TcpListener::bind`'s 128 overflowed when
    // a gateway opened a few hundred connections at once to the echo backend (the kernel
    // dropped them, and their SYNs came back a second later: benches/README.md).
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(super::workers::BACKLOG)?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, app, policy, open, shutdown));
    Ok((bound, task))
}

/// Accepts connections and serves each, once `open` has a place for it, in a task of its
/// own, until `shutdown` turns true.
pub(super) async fn accept_loop<A>(
    listener: TcpListener,
    app: Arc<A>,
    policy: ClientPolicy,
    open: ConnectionBound,
    mut shutdown: ShutdownWatch,
) where
    A: App,
{
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        match accepted {
            Ok((tcp, _peer)) => {
                // At `max_connections`, this one waits for one to close, and nothing more
                // is accepted meanwhile.
                let place = tokio::select! {
                    place = open.place() => place,
                    _ = shutdown.wait_for(|stop| *stop) => return,
                };
                let Some(place) = place else { return };
                // Nagle against delayed ACK stalls small responses by ~40 ms.
                let _ = tcp.set_nodelay(true);
                // Its addresses are looked up once per connection, not once per request.
                let stream = PlainStream::new(tcp);
                let connection = ClientConnection::accepted(&policy);
                let app = Arc::clone(&app);
                let shutdown = shutdown.clone();
                let tls = policy.tls.clone();
                let http2 = Http2Choice {
                    // Prior knowledge is for cleartext: over TLS, ALPN says.
                    h2c: policy.h2c && tls.is_none(),
                    settings: policy.http2.clone(),
                };
                tokio::spawn(async move {
                    // The TLS handshake, if any, runs here: never in the accept loop.
                    let Some(stream) =
                        terminate(tls.as_deref(), Box::new(stream), &connection).await
                    else {
                        return;
                    };
                    let stream = BufferedStream::for_client(stream, Arc::clone(&connection));
                    serve_connection(app, stream, connection, http2, shutdown).await;
                    drop(place);
                });
            }
            Err(e) => {
                // Usually out of file descriptors: back off briefly instead of spinning.
                log::warn!(target: "sluice::server", error:% = e; "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How a listener may serve HTTP/2.
struct Http2Choice {
    /// A cleartext connection that opens with the preface is HTTP/2 (`h2c`).
    h2c: bool,
    settings: http2::Settings,
}

/// Serves one connection: as HTTP/2 when its TLS handshake chose `h2` by ALPN, or, with
/// `h2c`, when it opens with the HTTP/2 preface; else as HTTP/1.1.
async fn serve_connection<A>(
    app: Arc<A>,
    mut stream: BufferedStream,
    connection: Arc<ClientConnection>,
    http2: Http2Choice,
    shutdown: ShutdownWatch,
) where
    A: App,
{
    // A cleartext stream has no ALPN; a TLS one offers `h2` only when `http2` is set.
    let chosen = stream.selected_alpn_proto() == Some(ALPN::H2)
        || (http2.h2c && opens_with_preface(&mut stream).await);
    if chosen {
        return serve_http2(app, stream, connection, &http2.settings, shutdown).await;
    }
    serve(app, Box::new(stream), connection, &shutdown).await;
}

/// Whether the connection's first bytes are the HTTP/2 preface. They are read within the
/// header deadline (a client that sends none reads as closed) and given back for the
/// protocol's own reader: only as many as tell the two apart (an HTTP/1 request differs
/// within its first three).
async fn opens_with_preface(stream: &mut BufferedStream) -> bool {
    let mut first = [0u8; http2::PREFACE.len()];
    let mut read = 0;
    while read < first.len() {
        match stream.read(&mut first[read..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
        if first[..read] != http2::PREFACE[..read] {
            break;
        }
    }
    stream.unread(&first[..read]);
    first == *http2::PREFACE
}

/// Serves an HTTP/2 connection: each stream a request of `app`, on a task of its own.
async fn serve_http2<A>(
    app: Arc<A>,
    stream: BufferedStream,
    connection: Arc<ClientConnection>,
    settings: &http2::Settings,
    shutdown: ShutdownWatch,
) where
    A: App,
{
    let socket = stream.get_socket_digest();
    let tls = TlsStream::details_of(stream.inner()).cloned().map(Arc::new);
    let watch = shutdown.clone();
    http2::serve(stream, settings, socket, connection, watch, |stream| {
        let app = Arc::clone(&app);
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        async move {
            let mut session = Session::Http2(stream, tls);
            app.serve(&mut session, &shutdown).await;
            session.finish().await;
        }
    })
    .await;
}

/// Serves one connection's requests, one after another, while it is kept alive. Pipelined
/// requests are kept in the session's buffer and answered in order.
async fn serve<A>(
    app: Arc<A>,
    stream: pingora_core::protocols::Stream,
    connection: Arc<ClientConnection>,
    shutdown: &ShutdownWatch,
) where
    A: App,
{
    let mut session = Session::Http1(ServerSession::new(stream, connection.max_header_bytes));
    if *shutdown.borrow() {
        session.disable_keepalive();
    }
    while app.serve(&mut session, shutdown).await {
        if !session.finish().await {
            return;
        }
        connection.request_finished();
    }
}
