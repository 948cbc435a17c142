//! The bounds every client connection lives under, kept by the connection's own stream
//! (`listener/transport.rs`) and moved along by the listener and the request path:
//!
//! - a request head must arrive whole within `client_header_timeout` (from the accept for
//!   the first request, from its first byte for later ones), so a head trickled a byte at a
//!   time does not hold the connection;
//! - between requests, a keep-alive connection waits at most `client_idle_timeout` for the
//!   next one;
//! - a request head is at most `max_header_bytes` (the session reads no more of it).
//!
//! A head the session refuses is answered by the app that asked for it (the proxy writes
//! its error envelope through the session, `proxy::read_head`); nothing here rewrites an
//! answer.
//!
//! A deadline that passes reads as the end of the stream: the session closes the
//! connection as it would for a client that left.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The settings a listener applies to its connections.
#[derive(Clone)]
pub struct ClientPolicy {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections open at once; past it the listener stops accepting until one closes.
    pub max_connections: usize,
    /// Largest request head (`max_header_bytes`), an HTTP/2 header list's too.
    pub max_header_bytes: usize,
    /// A cleartext connection that opens with the HTTP/2 preface is served as HTTP/2
    /// (`h2c`).
    pub h2c: bool,
    /// How HTTP/2 connections are set (`max_streams_per_connection`, ...).
    pub http2: crate::http2::Settings,
    /// TLS (`tls:`, `admin_tls:`); `None`: cleartext.
    pub tls: Option<Arc<super::tls::Terminator>>,
}

impl ClientPolicy {
    /// The defaults of `client_header_timeout`, `client_idle_timeout`, `max_connections`
    /// and `max_header_bytes`.
    pub fn standard() -> Self {
        let max_header_bytes = crate::http1::server::DEFAULT_MAX_HEAD_BYTES;
        ClientPolicy {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_header_bytes,
            h2c: false,
            http2: crate::http2::Settings::new(
                crate::http2::DEFAULT_MAX_CONCURRENT_STREAMS,
                max_header_bytes,
            ),
            tls: None,
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests: the next one's first byte is due by `until`, set by the first
    /// read after the previous request finished (the next thing the connection does, in
    /// the same turn of its task), so finishing a request reads no clock.
    Idle { until: Option<Instant> },
    /// A request head is being read; it must be whole by `until`.
    Head { until: Instant },
    /// The head was read: the request path's own timeouts apply.
    Request,
    /// HTTP/2, no stream open: the connection closes at `until` unless one opens (bytes
    /// that open none, a `PING` or a window update, do not keep it).
    Quiet { until: Instant },
}

/// One client connection's state, shared by its stream, its listener loop and the request
/// being served on it.
pub struct ClientConnection {
    header_timeout: Duration,
    idle_timeout: Duration,
    /// Largest request head on this connection.
    pub max_header_bytes: usize,
    phase: Mutex<Phase>,
}

impl ClientConnection {
    /// A connection just accepted: its first head is due within `header_timeout`.
    pub fn accepted(policy: &ClientPolicy) -> Arc<Self> {
        Arc::new(ClientConnection {
            header_timeout: policy.header_timeout,
            idle_timeout: policy.idle_timeout,
            max_header_bytes: policy.max_header_bytes,
            phase: Mutex::new(Phase::Head {
                until: Instant::now() + policy.header_timeout,
            }),
        })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time reads must complete by now, if any.
    pub fn read_deadline(&self) -> Option<Instant> {
        self.read_bound().map(|(_, until)| until)
    }

    /// For a read about to be made: the time now and the deadline it must meet, or `None`
    /// while a request is served (then no clock is read). The one clock read of a read:
    /// the caller compares it with the deadline and hands it to [`Self::bytes_read`].
    pub fn read_bound(&self) -> Option<(Instant, Instant)> {
        let mut phase = self.phase();
        let until = match *phase {
            Phase::Request => return None,
            Phase::Head { until } | Phase::Quiet { until } | Phase::Idle { until: Some(until) } => {
                Some(until)
            }
            Phase::Idle { until: None } => None,
        };
        let now = Instant::now();
        let until = until.unwrap_or_else(|| {
            let until = now + self.idle_timeout;
            *phase = Phase::Idle { until: Some(until) };
            until
        });
        Some((now, until))
    }

    /// Bytes arrived (`now`: the time read for that read): an idle connection's next head
    /// starts now.
    pub fn bytes_read(&self, now: Instant) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                until: now + self.header_timeout,
            };
        }
    }

    /// The request head is whole (the request path's first step).
    pub fn request_started(&self) {
        *self.phase() = Phase::Request;
    }

    /// The previous request is done and the connection is kept: wait for the next (the
    /// idle deadline runs from the read that follows at once, [`Self::read_bound`]).
    pub fn request_finished(&self) {
        *self.phase() = Phase::Idle { until: None };
    }
}

/// An HTTP/2 connection's streams move its deadlines: none while a stream is open, the
/// idle timeout while none is (the header timeout, from the accept, until the first).
impl crate::http2::Activity for ClientConnection {
    fn busy(&self) {
        self.request_started();
    }

    fn idle(&self) {
        *self.phase() = Phase::Quiet {
            until: Instant::now() + self.idle_timeout,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ClientPolicy {
        ClientPolicy {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
            max_header_bytes: 1024,
            h2c: false,
            http2: crate::http2::Settings::new(1, 1024),
            tls: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_deadline_runs_from_the_accept_then_from_the_first_byte() {
        let connection = ClientConnection::accepted(&policy());
        let start = Instant::now();
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(10))
        );
        connection.request_started();
        assert_eq!(
            connection.read_deadline(),
            None,
            "a request in progress has no head deadline"
        );
        connection.request_finished();
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(60))
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        connection.bytes_read(Instant::now());
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(15)),
            "the next head is due header_timeout after its first byte"
        );
        connection.bytes_read(Instant::now());
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(15)),
            "more bytes of the same head do not extend it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_deadline_runs_from_the_first_read_after_a_request() {
        let connection = ClientConnection::accepted(&policy());
        connection.request_started();
        connection.request_finished();
        tokio::time::advance(Duration::from_secs(3)).await;
        let read_at = Instant::now();
        assert_eq!(
            connection.read_bound(),
            Some((read_at, read_at + Duration::from_secs(60))),
            "the first read after a request fixes the idle deadline"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            connection.read_bound(),
            Some((
                read_at + Duration::from_secs(2),
                read_at + Duration::from_secs(60)
            )),
            "later reads keep it"
        );
        connection.request_started();
        assert_eq!(
            connection.read_bound(),
            None,
            "no deadline (and no clock read) while a request is served"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_without_streams_closes_at_the_idle_timeout() {
        use crate::http2::Activity;
        let connection = ClientConnection::accepted(&policy());
        let start = Instant::now();
        connection.busy();
        assert_eq!(
            connection.read_deadline(),
            None,
            "no deadline while a stream is open"
        );
        connection.idle();
        tokio::time::advance(Duration::from_secs(5)).await;
        connection.bytes_read(Instant::now());
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(60)),
            "frames that open no stream (a PING) do not keep an idle connection"
        );
    }
}
