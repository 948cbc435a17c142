//! Listeners: our own accept loops, handing each connection to a pingora application.
//!
//! Binding here (rather than in pingora's `Server`) lets a listener take port 0 and report
//! the port it got, so tests run many gateways side by side on ephemeral ports, and lets
//! shutdown wait for requests in flight instead of sleeping a fixed grace period.

use crate::transport::BufferedStream;
use pingora::apps::ServerApp;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::server::ShutdownWatch;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Binds `addr` and serves `app` on it until `shutdown` turns true.
pub async fn listen<A>(
    addr: SocketAddr,
    app: Arc<A>,
    shutdown: ShutdownWatch,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    A: ServerApp + Send + Sync + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, app, shutdown));
    Ok((bound, task))
}

async fn accept_loop<A>(listener: TcpListener, app: Arc<A>, mut shutdown: ShutdownWatch)
where
    A: ServerApp + Send + Sync + 'static,
{
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        match accepted {
            Ok((tcp, _peer)) => {
                // Nagle against delayed ACK stalls small responses by ~40 ms.
                let _ = tcp.set_nodelay(true);
                let digest = SocketDigest::from_raw_fd(tcp.as_raw_fd());
                let mut stream = L4Stream::from(tcp);
                // Addresses are then looked up once per connection, not once per request.
                stream.set_socket_digest(digest);
                let stream: pingora::protocols::Stream =
                    Box::new(BufferedStream::new(Box::new(stream)));
                let app = Arc::clone(&app);
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let mut next = app.process_new(stream, &shutdown).await;
                    while let Some(stream) = next {
                        next = app.process_new(stream, &shutdown).await;
                    }
                });
            }
            Err(e) => {
                // Usually out of file descriptors: back off briefly instead of spinning.
                log::warn!(target: "sluice::server", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
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
    /// Stops the rest (admin, echo, watchers) once the clients are done.
    stop_rest: tokio::sync::watch::Sender<bool>,
}

/// Binds every listener of `config` and starts serving with `gateway`.
pub async fn start(
    config: &crate::config::Config,
    gateway: Arc<crate::gateway::Gateway>,
) -> std::io::Result<Running> {
    let (stop_clients, clients_watch) = tokio::sync::watch::channel(false);
    let (stop_rest, rest_watch) = tokio::sync::watch::channel(false);
    // The echo backend and the admin listener outlive the drain: requests in flight may
    // still need the one, and probes the other.
    let echo_addr = match config.echo_upstream {
        Some(addr) => {
            let echo = Arc::new(crate::echo::Echo {
                word_delay: Duration::from_millis(20),
            });
            let bound = listen(addr, echo, rest_watch.clone()).await;
            Some(
                bound
                    .map_err(|e| bind_error("echo_upstream.listen", addr, e))?
                    .0,
            )
        }
        None => None,
    };
    let server_conf = Arc::new(pingora::server::configuration::ServerConf::default());
    let proxy = crate::proxy::Proxy::new(Arc::clone(&gateway));
    let proxy = Arc::new(pingora::proxy::http_proxy(&server_conf, proxy));
    let (addr, _) = listen(config.listen, proxy, clients_watch)
        .await
        .map_err(|e| bind_error("listen", config.listen, e))?;
    tokio::spawn(crate::upstream::run_checks(
        Arc::clone(&gateway),
        rest_watch.clone(),
    ));
    let admin = Arc::new(crate::admin::Admin::new(Arc::clone(&gateway)));
    let (admin_addr, _) = listen(config.admin_listen, admin, rest_watch)
        .await
        .map_err(|e| bind_error("admin_listen", config.admin_listen, e))?;
    Ok(Running {
        addr,
        admin_addr,
        echo_addr,
        gateway,
        stop_clients,
        stop_rest,
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
    /// Turns true when the gateway has stopped; background tasks (the file watcher) end on it.
    pub fn stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop_rest.subscribe()
    }

    /// Graceful stop: `/readyz` turns 503 and new requests get 503 `overloaded`, the client
    /// listener closes, and requests in flight get up to `grace` to finish. Returns as
    /// soon as none is left (or at `grace`), with how many were still in flight.
    pub async fn shutdown(&self, grace: Duration) -> u32 {
        self.gateway.start_draining();
        let _ = self.stop_clients.send(true);
        let _ = tokio::time::timeout(grace, self.gateway.limiter.wait_idle()).await;
        let _ = self.stop_rest.send(true);
        self.gateway.limiter.gateway_in_flight()
    }
}
