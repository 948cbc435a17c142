//! Event loops, one per core, for the client listener: each worker is a thread with a
//! current-thread tokio runtime, its own `SO_REUSEPORT` listener on the gateway's address
//! and its own `Proxy` (so its own upstream connection pool), as nginx's worker processes
//! are. The kernel spreads new connections over the listeners; a connection, its requests
//! and their upstream connections then live on one thread, so serving them never wakes
//! another thread or moves a task between cores.

use super::accept::{accept_loop, ConnectionBound};
use super::app::App;
use super::connection::ClientPolicy;
use pingora_core::server::ShutdownWatch;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use tokio::net::TcpSocket;
use tokio::sync::{oneshot, watch};

/// Connections the kernel queues per listener before one is accepted.
pub(super) const BACKLOG: u32 = 4096;

/// The running workers' threads.
pub struct Workers {
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What the workers serve and until when.
pub struct Service<F> {
    /// Makes the app a worker serves (called once per worker: each has its own).
    pub app: F,
    pub policy: ClientPolicy,
    /// One bound on open connections for the gateway, not one per worker.
    pub open: ConnectionBound,
    /// Turns true when the listeners close (the start of a drain).
    pub stop_accepting: ShutdownWatch,
    /// Turns true when the workers stop, with whatever connections are left.
    pub stop: watch::Receiver<bool>,
}

/// Binds `threads` listeners on `addr` and starts a worker on each. Returns the bound
/// address (its port when `addr` asks for port 0) once every worker listens.
pub async fn start<A, F>(
    addr: SocketAddr,
    threads: NonZeroUsize,
    service: Service<F>,
) -> std::io::Result<(SocketAddr, Workers)>
where
    A: App,
    F: Fn() -> Arc<A>,
{
    // A plain bind first: a port another process holds is refused here, even when that
    // process also uses SO_REUSEPORT (two gateways must not share a port unknowingly),
    // and port 0 becomes the port every worker then binds.
    let bound = std::net::TcpListener::bind(addr)?.local_addr()?;
    let sockets = (0..threads.get())
        .map(|_| reuse_port_socket(bound))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut started = Vec::with_capacity(sockets.len());
    let mut workers = Workers {
        threads: Vec::with_capacity(sockets.len()),
    };
    for (index, socket) in sockets.into_iter().enumerate() {
        let (listening, listens) = oneshot::channel();
        let worker = Worker {
            app: (service.app)(),
            policy: service.policy.clone(),
            open: service.open.clone(),
            stop_accepting: service.stop_accepting.clone(),
            stop: service.stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sluice-worker-{index}"))
            .spawn(move || worker.run(socket, listening))?;
        workers.threads.push(thread);
        started.push(listens);
    }
    for listens in started {
        listens
            .await
            .map_err(|_| std::io::Error::other("a worker thread ended before listening"))??;
    }
    Ok((bound, workers))
}

fn reuse_port_socket(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// One worker's share of the service.
struct Worker<A> {
    app: Arc<A>,
    policy: ClientPolicy,
    open: ConnectionBound,
    stop_accepting: ShutdownWatch,
    stop: watch::Receiver<bool>,
}

impl<A: App> Worker<A> {
    /// The worker thread: accepts until the drain starts, then serves what it holds until
    /// the stop. Whether it listens is reported on `listening`.
    fn run(self, socket: TcpSocket, listening: oneshot::Sender<std::io::Result<()>>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = listening.send(Err(e));
                return;
            }
        };
        let Worker {
            app,
            policy,
            open,
            stop_accepting,
            mut stop,
        } = self;
        runtime.block_on(async move {
            let listener = match socket.listen(BACKLOG) {
                Ok(listener) => listener,
                Err(e) => {
                    let _ = listening.send(Err(e));
                    return;
                }
            };
            let _ = listening.send(Ok(()));
            accept_loop(listener, app, policy, open, stop_accepting).await;
            let _ = stop.wait_for(|stop| *stop).await;
        });
        // Connections still open at the stop are dropped with the runtime.
    }
}

impl Workers {
    /// Waits for every worker thread to end (after the stop).
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}
