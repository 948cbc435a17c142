//! Around an answer: the request header slimmed once an answer's head is out (for answers
//! that last minutes).

use pingora_http::RequestHeader;

/// Lets the request's header go but for what its access record reads once the answer is
/// over (method, target, version, Host), for an answer that may last minutes (a stream).
///
/// The session keeps the request's header, a map of all its fields, until the connection
/// reads its next request. The answer's head is out by the time this is called: the
/// session has decided the response's framing and keep-alive, and reads the request header
/// again only for the next request's parse (which replaces it). Slimmed, the header keeps
/// one field, copied out of the head's bytes.
pub fn slim_request_header(request: &mut RequestHeader) {
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
