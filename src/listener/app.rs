//! What a listener serves: the gateway's HTTP apps (the proxy, the admin listener, the
//! echo backend), each called once per request with the request's session.

use super::session::Session;
use pingora_core::server::ShutdownWatch;
use std::future::Future;

/// An application served by our listener, one request at a time on a connection.
///
/// Not pingora's `HttpServerApp`: that trait takes the session by value and returns a
/// boxed future, so every request allocated its whole future (about 9 KB for the proxy)
/// and kept a second copy of the session in it. Here the connection's task owns the
/// session and the request's future lives inside the task.
pub trait App: Send + Sync + 'static {
    /// Serves the next request on `session` (its head not read yet); whether the
    /// connection may carry another (the listener then finishes the session and reads
    /// again; an HTTP/2 stream carries one request, whatever the answer).
    fn serve(
        &self,
        session: &mut Session,
        shutdown: &ShutdownWatch,
    ) -> impl Future<Output = bool> + Send;
}
