//! The bounds every client connection lives under, kept by the connection's own stream
//! (`transport.rs`) and moved along by the listener and the request path:
//!
//! - a request head must arrive whole within `client_header_timeout` (from the accept for
//!   the first request, from its first byte for later ones), so a head trickled a byte at a
//!   time does not hold the connection;
//! - between requests, a keep-alive connection waits at most `client_idle_timeout` for the
//!   next one;
//! - a request head is at most `max_header_bytes` (the session reads no more of it);
//! - the bare answer the session gives a head it refuses (`400` for one it cannot read,
//!   `405` for `CONNECT`, `431` for one too large, `501` for a transfer coding other than
//!   `chunked`, `http1/server.rs`) is replaced, on its way out, by the gateway's error
//!   envelope with an `x-request-id`, logged and counted.
//!
//! A deadline that passes reads as the end of the stream: the session closes the
//! connection as it would for a client that left.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Renders the gateway's answer (a whole HTTP/1.1 response) to a request head the session
/// refused with the given status, and records it.
pub type RejectionAnswer = Arc<dyn Fn(u16) -> Bytes + Send + Sync>;

/// The settings a listener applies to its connections.
#[derive(Clone)]
pub struct ClientPolicy {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections open at once; past it the listener stops accepting until one closes.
    pub max_connections: usize,
    /// Largest request head (`max_header_bytes`).
    pub max_header_bytes: usize,
    /// `None`: the session's bare answers go out as they are (the admin and echo listeners).
    pub answer_rejection: Option<RejectionAnswer>,
}

impl ClientPolicy {
    /// The defaults of `client_header_timeout`, `client_idle_timeout`, `max_connections`
    /// and `max_header_bytes`.
    pub fn standard() -> Self {
        ClientPolicy {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_header_bytes: crate::http1::server::DEFAULT_MAX_HEAD_BYTES,
            answer_rejection: None,
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests: the next one's first byte is due by `until`.
    Idle { until: Instant },
    /// A request head is being read; it must be whole by `until`.
    Head { until: Instant },
    /// The head was read: the request path's own timeouts apply.
    Request,
    /// The session refused the head and the gateway's answer replaced its own.
    Refused,
}

/// What to do with bytes the session writes to the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// Write them.
    Pass,
    /// Write these instead.
    Replace(Bytes),
    /// Drop them (the rest of an answer already replaced).
    Discard,
}

/// One client connection's state, shared by its stream, its listener loop and the request
/// being served on it.
pub struct ClientConnection {
    header_timeout: Duration,
    idle_timeout: Duration,
    /// Largest request head on this connection.
    pub max_header_bytes: usize,
    answer_rejection: Option<RejectionAnswer>,
    phase: Mutex<Phase>,
}

impl ClientConnection {
    /// A connection just accepted: its first head is due within `header_timeout`.
    pub fn accepted(policy: &ClientPolicy) -> Arc<Self> {
        Arc::new(ClientConnection {
            header_timeout: policy.header_timeout,
            idle_timeout: policy.idle_timeout,
            max_header_bytes: policy.max_header_bytes,
            answer_rejection: policy.answer_rejection.clone(),
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
        match *self.phase() {
            Phase::Idle { until } | Phase::Head { until } => Some(until),
            Phase::Request | Phase::Refused => None,
        }
    }

    /// Bytes arrived: an idle connection's next head starts now.
    pub fn bytes_read(&self) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                until: Instant::now() + self.header_timeout,
            };
        }
    }

    /// The request head is whole (the request path's first step).
    pub fn request_started(&self) {
        *self.phase() = Phase::Request;
    }

    /// The previous request is done and the connection is kept: wait for the next.
    pub fn request_finished(&self) {
        *self.phase() = Phase::Idle {
            until: Instant::now() + self.idle_timeout,
        };
    }

    /// Bytes written while no request is being served are the session refusing a head:
    /// its first write is replaced by the gateway's answer, the rest dropped.
    pub fn outgoing(&self, data: &[u8]) -> Outgoing {
        let Some(answer) = &self.answer_rejection else {
            return Outgoing::Pass;
        };
        let mut phase = self.phase();
        match *phase {
            Phase::Request => Outgoing::Pass,
            Phase::Refused => Outgoing::Discard,
            Phase::Idle { .. } | Phase::Head { .. } => {
                *phase = Phase::Refused;
                drop(phase);
                Outgoing::Replace(answer(status_of(data)))
            }
        }
    }
}

/// The status code of an HTTP/1.x status line (400 when it cannot be read).
fn status_of(response: &[u8]) -> u16 {
    response
        .get(9..12)
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse().ok())
        .unwrap_or(400)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(answer: Option<RejectionAnswer>) -> ClientPolicy {
        ClientPolicy {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
            max_header_bytes: 1024,
            answer_rejection: answer,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_deadline_runs_from_the_accept_then_from_the_first_byte() {
        let connection = ClientConnection::accepted(&policy(None));
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
        connection.bytes_read();
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(15)),
            "the next head is due header_timeout after its first byte"
        );
        connection.bytes_read();
        assert_eq!(
            connection.read_deadline(),
            Some(start + Duration::from_secs(15)),
            "more bytes of the same head do not extend it"
        );
    }

    #[test]
    fn pingoras_own_answer_is_replaced_once_then_dropped() {
        let answer: RejectionAnswer = Arc::new(|status| Bytes::from(format!("ours {status}")));
        let connection = ClientConnection::accepted(&policy(Some(answer)));
        assert_eq!(
            connection.outgoing(b"HTTP/1.1 405 Method Not Allowed\r\n"),
            Outgoing::Replace(Bytes::from("ours 405"))
        );
        assert_eq!(connection.outgoing(b"rest"), Outgoing::Discard);
        assert_eq!(status_of(b"garbage"), 400);

        let serving = ClientConnection::accepted(&policy(Some(Arc::new(|_| Bytes::new()))));
        serving.request_started();
        assert_eq!(serving.outgoing(b"HTTP/1.1 200 OK\r\n"), Outgoing::Pass);
        let plain = ClientConnection::accepted(&policy(None));
        assert_eq!(
            plain.outgoing(b"HTTP/1.1 400 Bad Request\r\n"),
            Outgoing::Pass,
            "listeners without an answer of their own pass pingora's"
        );
    }
}
