//! What the gateway's HTTP apps (the proxy, the admin listener, the echo backend) share:
//! how our listener (`server.rs`) calls them, writing a whole small response, and handing
//! the connection back for the next request.

use crate::http1::server::Session as ServerSession;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::server::ShutdownWatch;
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
    /// again).
    fn serve(
        &self,
        session: &mut ServerSession,
        shutdown: &ShutdownWatch,
    ) -> impl Future<Output = bool> + Send;
}

/// Lets the request's header go but for what its access record reads once the answer is
/// over (method, target, version, Host), for an answer that may last minutes (a stream).
///
/// The session keeps the request's header, a map of all its fields, until the connection
/// reads its next request. The answer's head is out by the time this is called: the
/// session has decided the response's framing and keep-alive, and reads the request header
/// again only for the next request's parse (which replaces it). Slimmed, the header keeps
/// one field, copied out of the head's bytes.
pub fn slim_request_header(session: &mut ServerSession) {
    let request = session.req_header_mut();
    let Ok(mut slim) = RequestHeader::build_no_case(request.method.clone(), b"/", Some(1)) else {
        return;
    };
    // Copies: the parsed target and values share the bytes the head was read into, which
    // may hold more (a body, a pipelined request) for as long as anything refers to them.
    let Ok(uri) = http::Uri::try_from(request.uri.to_string()) else {
        return;
    };
    slim.set_uri(uri);
    slim.set_version(request.version);
    if let Some(host) = request.headers.get(http::header::HOST) {
        let Ok(host) = http::HeaderValue::from_bytes(host.as_bytes()) else {
            return;
        };
        if slim.insert_header(http::header::HOST, host).is_err() {
            return;
        }
    }
    *request = slim;
}

/// Writes a whole small response; `None` when the client is gone.
pub async fn write_simple(
    session: &mut ServerSession,
    status: u16,
    content_type: &str,
    body: Bytes,
) -> Option<()> {
    let mut header = ResponseHeader::build_no_case(status, Some(2)).ok()?;
    header.insert_header("content-type", content_type).ok()?;
    header
        .insert_header("content-length", body.len().to_string())
        .ok()?;
    session.write_response_header(header).await.ok()?;
    session.write_response_body(body, true).await.ok()
}
