//! One HTTP/2 connection: the `h2` crate's server handshake under our settings, then each
//! stream the client opens served on a task of its own, until the client or a shutdown
//! ends the connection.
//!
//! The protections of DESIGN §5.3 are set here, each explicitly:
//!
//! - at most `max_concurrent_streams` streams open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`);
//!   a stream over it is refused by `h2` (`REFUSED_STREAM`);
//! - a header list is at most `max_header_list_bytes` (`SETTINGS_MAX_HEADER_LIST_SIZE`, as
//!   `h2` counts it: names, values and 32 bytes per field); a larger one is answered by
//!   `h2` with a bare 431 and the stream refused, the connection kept; a header block
//!   spread over more `CONTINUATION` frames than that size needs (a flood) ends the
//!   connection with `GOAWAY ENHANCE_YOUR_CALM`;
//! - flow control: each stream's window and the connection's are [`STREAM_WINDOW_BYTES`]
//!   and [`CONNECTION_WINDOW_BYTES`], so a connection holds at most that much unread
//!   request body; an answer waits for the client's window, and `h2` buffers at most
//!   [`SEND_BUFFER_BYTES`] of it per stream;
//! - rapid reset (CVE-2023-44487): streams the client resets before they are accepted are
//!   bounded by `h2` ([`PENDING_RESET_STREAMS`], then `GOAWAY ENHANCE_YOUR_CALM`); streams
//!   it resets after they were accepted (the request already started) are counted here:
//!   past [`Settings::max_client_resets`], and more of them than streams answered whole,
//!   the connection is ended with `GOAWAY ENHANCE_YOUR_CALM`;
//! - a shutdown sends `GOAWAY` and lets the open streams finish.
//!
//! The deadlines (the preface and the first headers within the header timeout, the idle
//! timeout while no stream is open) are kept by the transport, as on HTTP/1: the
//! [`Activity`] handed in is told when the first stream opens and when the last one ends.

use super::session::Session;
use bytes::Bytes;
use h2::Reason;
use pingora_core::protocols::SocketDigest;
use pingora_core::server::ShutdownWatch;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

/// Streams open at once on a connection when `max_streams_per_connection` is not set.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Each stream's receive window: the request body the client may send ahead of the app.
pub const STREAM_WINDOW_BYTES: u32 = 256 << 10;
/// The connection's receive window, shared by its streams.
pub const CONNECTION_WINDOW_BYTES: u32 = 1 << 20;
/// Most answer bytes `h2` holds for one stream before its writer waits.
pub const SEND_BUFFER_BYTES: usize = 64 << 10;
/// Streams reset by the client before they were accepted, held at once, past which `h2`
/// ends the connection (its own default, set here so it is ours to document).
pub const PENDING_RESET_STREAMS: usize = 20;
/// The least number of accepted streams a client may reset on one connection before it
/// is taken for a rapid-reset attack.
pub const MIN_CLIENT_RESETS: usize = 200;

/// How a listener's HTTP/2 connections are set.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Streams open at once on a connection (`max_streams_per_connection`).
    pub max_concurrent_streams: u32,
    /// Largest header list of a request (`max_header_bytes`).
    pub max_header_list_bytes: u32,
    /// Accepted streams the client may reset before the connection is ended (when they
    /// also outnumber the streams answered whole).
    pub max_client_resets: usize,
}

impl Settings {
    /// The settings for `max_streams_per_connection` and `max_header_bytes`: a client may
    /// reset twice as many streams as it may open at once, and at least
    /// [`MIN_CLIENT_RESETS`].
    pub fn new(max_concurrent_streams: u32, max_header_bytes: usize) -> Self {
        Settings {
            max_concurrent_streams,
            max_header_list_bytes: u32::try_from(max_header_bytes).unwrap_or(u32::MAX),
            max_client_resets: (max_concurrent_streams as usize)
                .saturating_mul(2)
                .max(MIN_CLIENT_RESETS),
        }
    }

    fn builder(&self) -> h2::server::Builder {
        let mut builder = h2::server::Builder::new();
        builder
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_bytes)
            .initial_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_send_buffer_size(SEND_BUFFER_BYTES)
            .max_pending_accept_reset_streams(PENDING_RESET_STREAMS);
        builder
    }
}

/// What the listener learns of a connection's streams, to move its deadlines.
pub trait Activity: Send + Sync {
    /// A stream opened on a connection that had none.
    fn busy(&self);
    /// The last open stream ended.
    fn idle(&self);
}

/// A connection's count of streams the client reset after they were accepted, against
/// the streams it let finish.
pub struct Resets {
    by_client: AtomicUsize,
    completed: AtomicUsize,
    limit: usize,
    /// Wakes the connection's driver when the count passes the limit.
    calm: Notify,
}

impl Resets {
    fn new(limit: usize) -> Self {
        Resets {
            by_client: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            limit,
            calm: Notify::new(),
        }
    }

    /// The client reset a stream that was being served.
    pub(super) fn client_reset(&self) {
        let resets = self.by_client.fetch_add(1, Ordering::AcqRel) + 1;
        if resets > self.limit && resets > self.completed.load(Ordering::Acquire) {
            self.calm.notify_one();
        }
    }

    /// A stream was answered whole.
    pub(super) fn completed(&self) {
        self.completed.fetch_add(1, Ordering::AcqRel);
    }
}

/// The streams open on a connection.
struct Open {
    count: AtomicUsize,
    activity: Arc<dyn Activity>,
}

/// One open stream, counted while it lives.
struct OpenStream(Arc<Open>);

impl OpenStream {
    fn new(open: &Arc<Open>) -> Self {
        if open.count.fetch_add(1, Ordering::AcqRel) == 0 {
            open.activity.busy();
        }
        OpenStream(Arc::clone(open))
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.activity.idle();
        }
    }
}

/// Serves an HTTP/2 connection on `io` (its preface not read yet): each stream becomes a
/// [`Session`] handed to `serve_stream`, whose future runs on a task of its own. Returns
/// when the connection is closed: by the client, by a protocol error, after the `GOAWAY`
/// of a shutdown once the open streams ended, or by a rapid reset.
pub async fn serve<T, F, Fut>(
    io: T,
    settings: &Settings,
    socket: Option<Arc<SocketDigest>>,
    activity: Arc<dyn Activity>,
    mut shutdown: ShutdownWatch,
    serve_stream: F,
) where
    T: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Session) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connection = match settings.builder().handshake::<T, Bytes>(io).await {
        Ok(connection) => connection,
        Err(e) => {
            log::debug!(target: "sluice::http2", error:% = e; "handshake failed");
            return;
        }
    };
    let resets = Arc::new(Resets::new(settings.max_client_resets));
    let open = Arc::new(Open {
        count: AtomicUsize::new(0),
        activity,
    });
    let mut draining = *shutdown.borrow();
    if draining {
        connection.graceful_shutdown();
    }
    let mut calmed = false;
    loop {
        let accepted = tokio::select! {
            accepted = connection.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop), if !draining => {
                draining = true;
                connection.graceful_shutdown();
                continue;
            }
            () = resets.calm.notified(), if !calmed => {
                calmed = true;
                log::warn!(target: "sluice::http2", resets = resets.by_client.load(Ordering::Acquire); "client reset too many streams: connection closed");
                connection.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                continue;
            }
        };
        match accepted {
            Some(Ok((request, respond))) => {
                let stream = OpenStream::new(&open);
                let session = Session::new(request, respond, socket.clone(), Arc::clone(&resets));
                let served = serve_stream(session);
                tokio::spawn(async move {
                    served.await;
                    drop(stream);
                });
            }
            Some(Err(e)) => {
                log::debug!(target: "sluice::http2", error:% = e; "connection ended");
                return;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_may_reset_twice_its_streams_and_at_least_the_floor() {
        assert_eq!(Settings::new(10, 1024).max_client_resets, MIN_CLIENT_RESETS);
        assert_eq!(Settings::new(500, 1024).max_client_resets, 1000);
        assert_eq!(
            Settings::new(1, usize::MAX).max_header_list_bytes,
            u32::MAX,
            "a header cap past u32 saturates"
        );
    }

    #[tokio::test]
    async fn resets_past_the_limit_and_past_the_answers_wake_the_driver() {
        let resets = Resets::new(2);
        resets.completed();
        resets.completed();
        resets.completed();
        for _ in 0..3 {
            resets.client_reset();
        }
        let woken = futures_poll(resets.calm.notified());
        assert!(
            !woken,
            "3 resets against 3 answers: a client that cancels, not an attack"
        );
        resets.client_reset();
        assert!(
            futures_poll(resets.calm.notified()),
            "4 resets, past the limit of 2 and the 3 answers"
        );
    }

    /// Whether `future` is ready at its first poll.
    fn futures_poll(future: impl Future) -> bool {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        future.as_mut().poll(&mut cx).is_ready()
    }
}
