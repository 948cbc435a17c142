//! An upstream's address as the connector and the pools see it: pingora's `HttpPeer`
//! (address, TLS settings, SNI, timeouts) with the key its pooled connections are filed
//! under. Built with the catalog, used by every event loop's pool.

use pingora_core::upstreams::peer::{HttpPeer, Peer};

/// A peer with its pool key (`Peer::reuse_hash`: address, TLS settings, SNI), worked out
/// once when the catalog is built: hashing the peer at every take and give-back cost ~150
/// instructions each (benches/README.md, ninth session).
#[derive(Debug)]
pub struct PoolPeer {
    peer: HttpPeer,
    key: u64,
}

impl PoolPeer {
    pub fn new(peer: HttpPeer) -> Self {
        let key = peer.reuse_hash();
        PoolPeer { peer, key }
    }

    /// The key its pooled connections are filed under.
    pub fn key(&self) -> u64 {
        self.key
    }
}

impl std::ops::Deref for PoolPeer {
    type Target = HttpPeer;

    fn deref(&self) -> &HttpPeer {
        &self.peer
    }
}
