//! One event loop's keep-alive connections to the upstreams, and the connector that makes
//! new ones (TCP, TLS by rustls).
//!
//! Each event loop has its own pool (one per `Proxy`), so a connection is only ever used by
//! the thread that made it. pingora's pool does more than a loop needs: it spawns a task per
//! connection given back, to watch it while it sits idle, and checks the socket's peer
//! address (`getpeername`) on every reuse. Here a connection given back is only put in a
//! list; one taken is checked with a single read poll (`exchange::still_open`), which also
//! finds the ones the upstream closed while they were idle. The list is bounded: past
//! [`IDLE_CONNECTIONS`], the least recently used is closed, and one idle longer than its
//! peer's idle timeout is closed then, by a sweeper task that runs on the pool's event loop
//! while the pool holds connections (a gateway that goes quiet keeps none open).

use crate::peer::PoolPeer;
use pingora_core::connectors::{ConnectorOptions, TransportConnector};
use pingora_core::protocols::Stream;
use pingora_core::upstreams::peer::{HttpPeer, Peer};
use pingora_core::Result;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
// Tokio's, so that a test's paused clock moves idle times too.
use tokio::time::Instant;

/// Idle connections a pool keeps, all upstreams together.
pub const IDLE_CONNECTIONS: usize = 128;

/// Keep-alive connections to every upstream, least recently used first.
pub struct Pool {
    connector: TransportConnector,
    idle: Arc<Mutex<Shelf>>,
    capacity: usize,
}

/// The idle connections, and whether a sweeper watches them.
#[derive(Default)]
struct Shelf {
    connections: VecDeque<Idle>,
    sweeping: bool,
}

/// A connection waiting for its next request.
struct Idle {
    /// Which peer it leads to (`Peer::reuse_hash`: address, TLS settings, SNI).
    peer: u64,
    stream: Stream,
    /// When it may no longer be used.
    expires: Option<Instant>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(IDLE_CONNECTIONS)
    }
}

impl Pool {
    /// A pool that keeps at most `capacity` idle connections.
    pub fn new(capacity: usize) -> Self {
        Pool {
            connector: connector(),
            idle: Arc::new(Mutex::new(Shelf {
                connections: VecDeque::with_capacity(capacity),
                sweeping: false,
            })),
            capacity,
        }
    }

    fn shelf(&self) -> std::sync::MutexGuard<'_, Shelf> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used idle connection to `peer`, if one has not expired by `now`
    /// (the caller's reading of the clock as it starts the exchange: microseconds before
    /// this call on the same event loop, where the sweeper cannot run in between).
    pub fn take(&self, peer: &PoolPeer, now: Instant) -> Option<Stream> {
        let hash = peer.key();
        let mut shelf = self.shelf();
        let idle = &mut shelf.connections;
        drop_expired(idle, now);
        loop {
            let at = idle.iter().rposition(|c| c.peer == hash)?;
            let found = idle.remove(at)?;
            if found.expires.is_none_or(|at| at > now) {
                return Some(found.stream);
            }
        }
    }

    /// Keeps a connection whose exchange ended cleanly for the next request to `peer`.
    pub fn give_back(&self, peer: &PoolPeer, stream: Stream) {
        if self.capacity == 0 {
            return;
        }
        let now = Instant::now();
        let expires = peer.idle_timeout().map(|t| now + t);
        let (oldest, sweep) = {
            let mut shelf = self.shelf();
            let idle = &mut shelf.connections;
            drop_expired(idle, now);
            let oldest = (idle.len() >= self.capacity)
                .then(|| idle.pop_front())
                .flatten();
            idle.push_back(Idle {
                peer: peer.key(),
                stream,
                expires,
            });
            // One sweeper per pool, on the event loop that uses it; none outside a runtime.
            let sweep = expires.is_some()
                && !shelf.sweeping
                && tokio::runtime::Handle::try_current().is_ok();
            shelf.sweeping |= sweep;
            (oldest, sweep)
        };
        // Closed outside the lock.
        drop(oldest);
        if sweep {
            tokio::spawn(sweep_expired(Arc::downgrade(&self.idle)));
        }
    }

    /// A new connection to `peer` (plain TCP of our own, TLS by the connector).
    pub async fn connect(&self, peer: &HttpPeer) -> Result<Stream> {
        super::connect::connect(&self.connector, peer).await
    }

    /// Idle connections held now.
    pub fn idle_count(&self) -> usize {
        self.shelf().connections.len()
    }
}

/// A connector that opens TLS connections (rustls) and keeps none: pingora's own pool stays
/// empty, only `new_stream` is used (plain TCP is `connect.rs`'s).
pub fn connector() -> TransportConnector {
    TransportConnector::new(Some(ConnectorOptions::new(0)))
}

/// Closes idle connections as their idle time runs out, while the pool has any that
/// expire and the pool itself lives.
async fn sweep_expired(shelf: Weak<Mutex<Shelf>>) {
    loop {
        let next = {
            let Some(shelf) = shelf.upgrade() else {
                return;
            };
            let mut shelf = shelf.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            // Taken out under the lock, closed outside it.
            let mut expired = Vec::new();
            let mut kept = VecDeque::with_capacity(shelf.connections.len());
            for idle in shelf.connections.drain(..) {
                if idle.expires.is_some_and(|at| at <= now) {
                    expired.push(idle);
                } else {
                    kept.push_back(idle);
                }
            }
            shelf.connections = kept;
            let next = shelf.connections.iter().filter_map(|c| c.expires).min();
            if next.is_none() {
                shelf.sweeping = false;
            }
            drop(shelf);
            drop(expired);
            next
        };
        let Some(next) = next else {
            return;
        };
        tokio::time::sleep_until(next).await;
    }
}

/// Closes the connections at the front of the list whose idle time is over. The list is in
/// the order connections were given back, so with one idle timeout for every peer (the
/// catalog's) the expired ones are all at the front; `take` skips any other.
fn drop_expired(idle: &mut VecDeque<Idle>, now: Instant) {
    while idle
        .front()
        .is_some_and(|c| c.expires.is_some_and(|at| at <= now))
    {
        idle.pop_front();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::net::{TcpListener, TcpStream};

    /// A connected stream to a listener on loopback (kept open by the returned listener's
    /// accepted side).
    pub(crate) async fn stream(listener: &TcpListener) -> (Stream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let client: Stream = Box::new(crate::listener::PlainStream::new(client.unwrap()));
        (client, accepted.unwrap().0)
    }

    fn peer(listener: &TcpListener, idle: Option<Duration>) -> PoolPeer {
        let mut peer = HttpPeer::new(listener.local_addr().unwrap(), false, String::new());
        peer.options.idle_timeout = idle;
        PoolPeer::new(peer)
    }

    #[tokio::test]
    async fn a_connection_given_back_is_taken_by_its_own_peer_only() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (peer_a, peer_b) = (peer(&a, None), peer(&b, None));
        let pool = Pool::new(4);
        let (stream, _server) = stream(&a).await;
        pool.give_back(&peer_a, stream);
        assert!(
            pool.take(&peer_b, Instant::now()).is_none(),
            "not another peer's"
        );
        assert!(pool.take(&peer_a, Instant::now()).is_some());
        assert!(pool.take(&peer_a, Instant::now()).is_none(), "taken once");
    }

    #[tokio::test]
    async fn past_its_capacity_the_least_recently_used_is_closed() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (peer_a, peer_b) = (peer(&a, None), peer(&b, None));
        let pool = Pool::new(2);
        let (first, _s1) = stream(&a).await;
        let (second, _s2) = stream(&b).await;
        let (third, _s3) = stream(&b).await;
        pool.give_back(&peer_a, first);
        pool.give_back(&peer_b, second);
        pool.give_back(&peer_b, third);
        assert_eq!(pool.idle_count(), 2);
        assert!(
            pool.take(&peer_a, Instant::now()).is_none(),
            "the oldest went"
        );
        assert!(pool.take(&peer_b, Instant::now()).is_some());
        assert!(pool.take(&peer_b, Instant::now()).is_some());
    }

    #[tokio::test]
    async fn a_connection_idle_past_its_timeout_is_not_used() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let expired = peer(&a, Some(Duration::ZERO));
        let pool = Pool::new(4);
        let (stream, _server) = stream(&a).await;
        pool.give_back(&expired, stream);
        assert!(pool.take(&expired, Instant::now()).is_none());
        assert_eq!(pool.idle_count(), 0, "closed, not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_when_its_idle_time_is_over_without_another_use() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let idle = Duration::from_secs(60);
        let peer = peer(&a, Some(idle));
        let pool = Pool::new(4);
        let (early, mut early_server) = stream(&a).await;
        pool.give_back(&peer, early);
        tokio::time::advance(Duration::from_secs(30)).await;
        let (late, mut late_server) = stream(&a).await;
        pool.give_back(&peer, late);
        // Nothing uses the pool from here on; the clock moves only as timers wait.
        async fn closed(server: &mut TcpStream) -> Option<usize> {
            let mut byte = [0u8; 1];
            let read = tokio::io::AsyncReadExt::read(server, &mut byte);
            tokio::time::timeout(Duration::from_secs(600), read)
                .await
                .ok()?
                .ok()
        }
        assert_eq!(
            closed(&mut early_server).await,
            Some(0),
            "the upstream sees the close once the idle time is over"
        );
        assert_eq!(
            pool.idle_count(),
            1,
            "the later one is kept until its own time"
        );
        assert_eq!(closed(&mut late_server).await, Some(0));
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn a_pool_of_no_capacity_keeps_nothing() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = peer(&a, None);
        let pool = Pool::new(0);
        let (stream, _server) = stream(&a).await;
        pool.give_back(&peer, stream);
        assert!(pool.take(&peer, Instant::now()).is_none());
    }
}
