//! What crosses to and from an upstream: the request header we send (credential injected,
//! client credential and hop-by-hop fields removed) and the response header we pass back.

use crate::catalog::Upstream;
use http::header::{self, HeaderName};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::Result;

/// Fields that describe one connection, never forwarded (RFC 9110 §7.6.1), plus the ones
/// the gateway sets itself.
const NOT_FORWARDED_UP: [&str; 12] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
    "authorization",
];

const NOT_FORWARDED_DOWN: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "trailer",
    "upgrade",
    "te",
];

/// The path of `route` (e.g. `/chat/completions`) under the upstream's base URL.
pub fn upstream_path(upstream: &Upstream, route: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{}{route}?{q}", upstream.base_path),
        None => format!("{}{route}", upstream.base_path),
    }
}

/// The request header sent upstream for a POST of `body_len` bytes.
pub fn request_header(
    client: &RequestHeader,
    upstream: &Upstream,
    path: &str,
    request_id: &str,
    body_len: usize,
) -> Result<RequestHeader> {
    let mut header = RequestHeader::build(
        client.method.clone(),
        path.as_bytes(),
        Some(client.headers.len() + 4),
    )?;
    let named_by_connection = connection_tokens(client.headers.get_all(header::CONNECTION));
    for (name, value) in client.headers.iter() {
        let lower = name.as_str();
        if NOT_FORWARDED_UP.contains(&lower)
            || lower == "x-request-id"
            || named_by_connection.iter().any(|t| t == lower)
        {
            continue;
        }
        header.append_header(name.clone(), value.clone())?;
    }
    header.insert_header(header::HOST, upstream.host_header.as_str())?;
    header.insert_header(header::CONTENT_LENGTH, body_len.to_string())?;
    header.insert_header("x-request-id", request_id)?;
    if let Some(credential) = &upstream.credential {
        header.insert_header(
            header::AUTHORIZATION,
            format!("Bearer {}", credential.expose()),
        )?;
    }
    Ok(header)
}

/// The response header passed to the client: the upstream's, minus connection-level fields,
/// with the gateway's request ID (the upstream's own kept as `x-upstream-request-id`).
pub fn response_header(
    upstream: &ResponseHeader,
    request_id: &str,
    server_timing: &str,
) -> Result<ResponseHeader> {
    let mut header = ResponseHeader::build(upstream.status, Some(upstream.headers.len() + 3))?;
    let named_by_connection = connection_tokens(upstream.headers.get_all(header::CONNECTION));
    let mut framed = false;
    for (name, value) in upstream.headers.iter() {
        let lower = name.as_str();
        if NOT_FORWARDED_DOWN.contains(&lower) || named_by_connection.iter().any(|t| t == lower) {
            continue;
        }
        if lower == "x-request-id" {
            header.append_header(
                HeaderName::from_static("x-upstream-request-id"),
                value.clone(),
            )?;
            continue;
        }
        framed |= lower == "content-length" || lower == "transfer-encoding";
        header.append_header(name.clone(), value.clone())?;
    }
    if !framed && !matches!(upstream.status.as_u16(), 204 | 304) {
        // A close-delimited upstream body becomes chunked, so the client connection survives.
        header.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    header.insert_header("x-request-id", request_id)?;
    header.insert_header("server-timing", server_timing)?;
    Ok(header)
}

/// Whether a response is an SSE stream (the only kind an error event may be appended to).
pub fn is_event_stream(header: &ResponseHeader) -> bool {
    let uncompressed = header
        .headers
        .get(header::CONTENT_ENCODING)
        .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let event_stream = header.headers.get(header::CONTENT_TYPE).is_some_and(|v| {
        v.as_bytes().len() >= 17 && v.as_bytes()[..17].eq_ignore_ascii_case(b"text/event-stream")
    });
    uncompressed && event_stream
}

fn connection_tokens<'a>(values: impl IntoIterator<Item = &'a http::HeaderValue>) -> Vec<String> {
    values
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use pingora::upstreams::peer::HttpPeer;
    use std::time::Duration;

    fn upstream(credential: Option<&str>) -> Upstream {
        Upstream {
            name: "u".into(),
            peer: HttpPeer::new(
                "127.0.0.1:9".parse::<std::net::SocketAddr>().unwrap(),
                false,
                String::new(),
            ),
            host_header: "backend:8000".into(),
            base_path: "/v1".into(),
            origin: "http://backend:8000".into(),
            credential: credential.map(|c| Secret::new(c.into())),
            first_byte_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            policy: crate::config::UpstreamPolicy {
                total_timeout: None,
                max_concurrent: None,
                max_queue: 0,
                queue_timeout: Duration::from_secs(1),
                rate_limit_cooldown: Duration::from_secs(1),
                eject_after_failures: 1,
                eject_duration: Duration::from_secs(1),
                eject_duration_max: Duration::from_secs(1),
                health_check_interval: None,
            },
        }
    }

    #[test]
    fn the_client_credential_and_connection_fields_stay_behind() {
        let mut client = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        for (name, value) in [
            ("authorization", "Bearer client-key"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("expect", "100-continue"),
            ("transfer-encoding", "chunked"),
            ("x-request-id", "spoofed"),
            ("x-custom", "kept"),
            ("accept", "application/json"),
        ] {
            client.append_header(name, value).unwrap();
        }
        let sent = request_header(
            &client,
            &upstream(Some("upstream-secret")),
            "/v1/chat/completions",
            "rid",
            42,
        )
        .unwrap();
        let get = |n: &str| sent.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            get("authorization").as_deref(),
            Some("Bearer upstream-secret")
        );
        assert_eq!(get("host").as_deref(), Some("backend:8000"));
        assert_eq!(get("content-length").as_deref(), Some("42"));
        assert_eq!(get("x-request-id").as_deref(), Some("rid"));
        assert_eq!(get("x-custom").as_deref(), Some("kept"));
        for gone in ["connection", "x-private", "expect", "transfer-encoding"] {
            assert_eq!(get(gone), None, "{gone} is not forwarded");
        }
        let without_credential =
            request_header(&client, &upstream(None), "/v1/x", "rid", 0).unwrap();
        assert!(
            without_credential.headers.get("authorization").is_none(),
            "the client's key never goes upstream"
        );
    }

    #[test]
    fn close_delimited_responses_become_chunked() {
        let mut from_upstream = ResponseHeader::build(200, None).unwrap();
        from_upstream
            .append_header("content-type", "text/event-stream")
            .unwrap();
        from_upstream.append_header("x-request-id", "up-1").unwrap();
        from_upstream.append_header("connection", "close").unwrap();
        let sent = response_header(&from_upstream, "rid", "gateway;dur=1").unwrap();
        assert_eq!(sent.headers.get("transfer-encoding").unwrap(), "chunked");
        assert_eq!(sent.headers.get("x-request-id").unwrap(), "rid");
        assert_eq!(sent.headers.get("x-upstream-request-id").unwrap(), "up-1");
        assert!(sent.headers.get("connection").is_none());
        assert!(is_event_stream(&sent));
    }
}
