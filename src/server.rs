//! Starting the gateway: binds its listeners (clients, admin, echo backend) with the
//! apps that serve them, starts the health checks, and stops it all in order.

use crate::listener::{listen, listen_bounded, workers, ClientPolicy, ConnectionBound, Workers};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long requests cut at the end of `shutdown_grace` get to answer 503 (those that had
/// not answered yet) and write their log lines, before the workers stop with them.
const CUT_WAIT: Duration = Duration::from_secs(1);

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
    /// pool of its own (`listener/workers.rs`): how the `sluice` binary serves.
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
        h2c: config.h2c,
        http2: crate::http2::Settings::new(
            config.max_streams_per_connection.get(),
            config.max_header_bytes,
        ),
        tls: gateway.tls.client.clone(),
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
            let service = workers::Service {
                app: proxy,
                policy: clients,
                open: clients_bound.clone(),
                stop_accepting: clients_watch,
                stop: rest_watch.clone(),
            };
            workers::start(config.listen, threads, service)
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
    tokio::spawn(crate::gateway::keep_key_switches_fresh(
        Arc::clone(&gateway),
        rest_watch.clone(),
    ));
    let admin = Arc::new(crate::admin::Admin::new(
        Arc::clone(&gateway),
        config.admin_listen.ip().is_loopback(),
    ));
    let admin_policy = ClientPolicy {
        tls: gateway.tls.admin.clone(),
        ..ClientPolicy::standard()
    };
    let (admin_addr, _) = listen(config.admin_listen, admin, admin_policy, rest_watch)
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
