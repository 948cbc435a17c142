//! Listeners: our own accept loops, handing each connection to a pingora application.
//!
//! Binding here (rather than in pingora's `Server`) lets a listener take port 0 and report
//! the port it got, so tests run many gateways side by side on ephemeral ports, and lets
//! shutdown wait for requests in flight instead of sleeping a fixed grace period.

use crate::connection::{ClientConnection, ClientPolicy};
use crate::http1::server::Session as ServerSession;
use crate::http_app::App;
use crate::transport::BufferedStream;
use crate::workers::Workers;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::server::ShutdownWatch;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// How long requests cut at the end of `shutdown_grace` get to answer 503 (those that had
/// not answered yet) and write their log lines, before the workers stop with them.
const CUT_WAIT: Duration = Duration::from_secs(1);

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
async fn listen_bounded<A>(
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
pub(crate) async fn accept_loop<A>(
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
                let stream: pingora::protocols::Stream = Box::new(BufferedStream::for_client(
                    Box::new(stream),
                    Arc::clone(&connection),
                ));
                let app = Arc::clone(&app);
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
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
    stream: pingora::protocols::Stream,
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

/// A started gateway: its bound addresses and the handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub echo_addr: Option<SocketAddr>,
    pub gateway: Arc<crate::gateway::Gateway>,
    /// Stops the client listener (the first step of a shutdown).
    stop_clients: tokio::sync::watch::Sender<bool>,
    /// Stops the rest (admin, echo, watchers, workers) once the clients are done.
    stop_rest: tokio::sync::watch::Sender<bool>,
    /// The client listener's own event loops, if it has them.
    workers: std::sync::Mutex<Option<Workers>>,
    /// The client listener's bound on open connections.
    clients_bound: ConnectionBound,
}

/// Where the client listener's connections are served.
#[derive(Debug, Clone, Copy)]
pub enum EventLoops {
    /// On the runtime that calls `start` (tests, which run several gateways in one
    /// process and runtime).
    Caller,
    /// On this many workers, each a thread with an event loop, a listener and an upstream
    /// pool of its own (`workers.rs`): how the `sluice` binary serves.
    PerCore(NonZeroUsize),
}

/// Binds every listener of `config` and starts serving with `gateway`, clients on the
/// caller's runtime.
pub async fn start(
    config: &crate::config::Config,
    gateway: Arc<crate::gateway::Gateway>,
) -> std::io::Result<Running> {
    start_on(config, gateway, EventLoops::Caller).await
}

/// Binds every listener of `config` and starts serving with `gateway`, clients on `loops`;
/// the admin and echo listeners and the background tasks run on the caller's runtime.
pub async fn start_on(
    config: &crate::config::Config,
    gateway: Arc<crate::gateway::Gateway>,
    loops: EventLoops,
) -> std::io::Result<Running> {
    let (stop_clients, clients_watch) = tokio::sync::watch::channel(false);
    let (stop_rest, rest_watch) = tokio::sync::watch::channel(false);
    // The echo backend and the admin listener outlive the drain: requests in flight may
    // still need the one, and probes the other.
    let echo_addr = match config.echo_upstream {
        Some(addr) => {
            let echo = Arc::new(crate::echo::Echo::new(Duration::from_millis(20)));
            let bound = listen(addr, echo, ClientPolicy::standard(), rest_watch.clone()).await;
            Some(
                bound
                    .map_err(|e| bind_error("echo_upstream.listen", addr, e))?
                    .0,
            )
        }
        None => None,
    };
    let proxy = || Arc::new(crate::proxy::Proxy::new(Arc::clone(&gateway)));
    let clients = ClientPolicy {
        header_timeout: config.client_header_timeout,
        idle_timeout: config.client_idle_timeout,
        max_connections: config.max_connections.get() as usize,
        max_header_bytes: config.max_header_bytes,
        answer_rejection: Some(crate::proxy::rejection_answer(Arc::clone(&gateway))),
    };
    let clients_bound = ConnectionBound::new(clients.max_connections);
    let (addr, workers) = match loops {
        EventLoops::Caller => listen_bounded(
            config.listen,
            proxy(),
            clients,
            clients_bound.clone(),
            clients_watch,
        )
        .await
        .map(|(addr, _)| (addr, None)),
        EventLoops::PerCore(threads) => {
            let service = crate::workers::Service {
                app: proxy,
                policy: clients,
                open: clients_bound.clone(),
                stop_accepting: clients_watch,
                stop: rest_watch.clone(),
            };
            crate::workers::start(config.listen, threads, service)
                .await
                .map(|(addr, workers)| (addr, Some(workers)))
        }
    }
    .map_err(|e| bind_error("listen", config.listen, e))?;
    tokio::spawn(crate::upstream::run_checks(
        Arc::clone(&gateway),
        rest_watch.clone(),
    ));
    if let Some(store) = &gateway.limits_store {
        store.check().await;
    }
    tokio::spawn(crate::key_switches::keep_fresh(
        Arc::clone(&gateway),
        rest_watch.clone(),
    ));
    let admin = Arc::new(crate::admin::Admin::new(
        Arc::clone(&gateway),
        config.admin_listen.ip().is_loopback(),
    ));
    let (admin_addr, _) = listen(
        config.admin_listen,
        admin,
        ClientPolicy::standard(),
        rest_watch,
    )
    .await
    .map_err(|e| bind_error("admin_listen", config.admin_listen, e))?;
    Ok(Running {
        addr,
        admin_addr,
        echo_addr,
        gateway,
        stop_clients,
        stop_rest,
        workers: std::sync::Mutex::new(workers),
        clients_bound,
    })
}

/// A listener that cannot start, named by its setting and address: the system's own
/// message ("Address already in use") names neither.
fn bind_error(setting: &str, addr: SocketAddr, error: std::io::Error) -> std::io::Error {
    std::io::Error::new(
        error.kind(),
        format!("cannot listen on {addr} (`{setting}`): {error}"),
    )
}

impl Running {
    /// Follows how many accepted client connections wait for a place (`max_connections`).
    pub fn connections_waiting(&self) -> watch::Receiver<usize> {
        self.clients_bound.waiting()
    }

    /// Turns true when the gateway has stopped; background tasks (the file watcher) end on it.
    pub fn stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop_rest.subscribe()
    }

    /// Graceful stop: `/readyz` turns 503 and new requests get 503 `overloaded`, the client
    /// listener closes, and requests in flight get up to `grace` to finish. Returns as
    /// soon as none is left, or once those still in flight at `grace` were cut (each
    /// logged), with how many those were.
    pub async fn shutdown(&self, grace: Duration) -> u32 {
        self.gateway.start_draining();
        let _ = self.stop_clients.send(true);
        let _ = tokio::time::timeout(grace, self.gateway.limiter.wait_idle()).await;
        let abandoned = self.gateway.limiter.gateway_in_flight();
        if abandoned > 0 {
            // Those left end now, each writing its log line: a moment, bounded all the same.
            self.gateway.cut_requests();
            let _ = tokio::time::timeout(CUT_WAIT, self.gateway.limiter.wait_idle()).await;
        }
        let _ = self.stop_rest.send(true);
        let workers = self.workers.lock().map(|mut w| w.take()).unwrap_or(None);
        if let Some(workers) = workers {
            // Their runtimes drop the requests left; none is served after this returns.
            let _ = tokio::task::spawn_blocking(move || workers.join()).await;
        }
        abandoned
    }
}
