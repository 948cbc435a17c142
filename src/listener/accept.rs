//! Listeners: our own accept loops, handing each connection to an [`App`].
//!
//! Binding here (rather than in pingora's `Server`) lets a listener take port 0 and report
//! the port it got, so tests run many gateways side by side on ephemeral ports, and lets
//! shutdown wait for requests in flight instead of sleeping a fixed grace period.

use super::app::App;
use super::connection::{ClientConnection, ClientPolicy};
use super::tls::terminate;
use super::transport::BufferedStream;
use crate::http1::server::Session as ServerSession;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::{GetSocketDigest, SocketDigest};
use pingora_core::server::ShutdownWatch;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
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
    let listener = TcpListener::bind(addr).await?;
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
                let digest = SocketDigest::from_raw_fd(tcp.as_raw_fd());
                let mut stream = L4Stream::from(tcp);
                // Addresses are then looked up once per connection, not once per request.
                stream.set_socket_digest(digest);
                let connection = ClientConnection::accepted(&policy);
                let app = Arc::clone(&app);
                let shutdown = shutdown.clone();
                let tls = policy.tls.clone();
                tokio::spawn(async move {
                    // The TLS handshake, if any, runs here: never in the accept loop.
                    let Some(stream) =
                        terminate(tls.as_deref(), Box::new(stream), &connection).await
                    else {
                        return;
                    };
                    let stream: pingora_core::protocols::Stream =
                        Box::new(BufferedStream::for_client(stream, Arc::clone(&connection)));
                    serve(app, stream, connection, &shutdown).await;
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
    let mut session = ServerSession::new(stream, connection.max_header_bytes);
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
