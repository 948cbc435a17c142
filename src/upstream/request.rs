//! What crosses to and from an upstream: the request header we send (credential injected,
//! client credential and hop-by-hop fields removed), the response header we pass back, and
//! what an upstream's 429 asks us to wait. [`authorize`] is the one place an upstream
//! credential leaves its `Secret`.

use crate::catalog::Upstream;
use http::header::{self, HeaderName};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::Result;
use std::time::Duration;

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
    authorize(&mut header, upstream)?;
    Ok(header)
}

/// The `GET` an active health check sends to `{url}/models`.
pub fn check_header(upstream: &Upstream) -> Result<RequestHeader> {
    let path = upstream_path(upstream, "/models", None);
    let mut header = RequestHeader::build("GET", path.as_bytes(), Some(3))?;
    header.insert_header(header::HOST, upstream.host_header.as_str())?;
    authorize(&mut header, upstream)?;
    Ok(header)
}

/// Adds the upstream's credential, when it has one: the only place it is exposed.
fn authorize(header: &mut RequestHeader, upstream: &Upstream) -> Result<()> {
    if let Some(credential) = &upstream.credential {
        header.insert_header(
            header::AUTHORIZATION,
            format!("Bearer {}", credential.expose()),
        )?;
    }
    Ok(())
}

/// The response header passed to the client: the upstream's, minus connection-level fields
/// (the upstream's `x-request-id` kept as `x-upstream-request-id`), plus the gateway's own
/// `headers` (request ID, rate position, timing).
pub fn response_header(
    upstream: &ResponseHeader,
    headers: &[(&'static str, String)],
) -> Result<ResponseHeader> {
    let mut header = ResponseHeader::build(
        upstream.status,
        Some(upstream.headers.len() + headers.len()),
    )?;
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
    for (name, value) in headers {
        header.insert_header(*name, value.as_str())?;
    }
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

/// How long an upstream's 429 asks to wait: `retry-after-ms`, else `Retry-After` as seconds
/// (fractions allowed) or as an HTTP-date; `None` when absent or unreadable.
pub fn upstream_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: std::time::SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            // try_: a huge value (1e30) would overflow a Duration and panic.
            return Duration::try_from_secs_f64(ms / 1000.0)
                .ok()
                .or(Some(Duration::MAX));
        }
    }
    let value = retry_after?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
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
    use std::time::{SystemTime, UNIX_EPOCH};

    fn upstream(credential: Option<&str>) -> Upstream {
        let mut upstream =
            crate::upstream::test_upstream(1, Duration::from_secs(1), Duration::from_secs(1));
        upstream.credential = credential.map(|c| Secret::new(c.into()));
        upstream
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
        let sent = response_header(&from_upstream, &[("x-request-id", "rid".into())]).unwrap();
        assert_eq!(sent.headers.get("transfer-encoding").unwrap(), "chunked");
        assert_eq!(sent.headers.get("x-request-id").unwrap(), "rid");
        assert_eq!(sent.headers.get("x-upstream-request-id").unwrap(), "up-1");
        assert!(sent.headers.get("connection").is_none());
        assert!(is_event_stream(&sent));
    }

    #[test]
    fn retry_after_is_read_in_every_form() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            upstream_retry_after(None, Some("7"), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            upstream_retry_after(None, Some("0.5"), now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            upstream_retry_after(Some("1500"), Some("9"), now),
            Some(Duration::from_millis(1500))
        );
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            upstream_retry_after(None, Some("Sun, 06 Nov 1994 08:49:47 GMT"), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            upstream_retry_after(None, Some("Sun, 06 Nov 1994 08:49:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(upstream_retry_after(None, Some("soon"), now), None);
        assert_eq!(
            upstream_retry_after(None, Some("1e20"), now),
            Some(Duration::MAX),
            "huge, not a panic"
        );
        assert_eq!(
            upstream_retry_after(Some("1e30"), None, now),
            Some(Duration::MAX)
        );
        assert_eq!(upstream_retry_after(None, None, SystemTime::now()), None);
    }
}
