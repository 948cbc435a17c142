//! What comes back from an upstream: the response header passed to the client (its status
//! checked, origin-scoped and connection-level fields removed, framing set by the gateway),
//! whether it is an event stream, and what an upstream's 429 asks us to wait.

use crate::http1::client::Head;
use crate::http1::connection_tokens::ConnectionTokens;
use crate::http1::framing::Framing;
use http::header::{self, HeaderName};
use http::HeaderValue;
use pingora_http::ResponseHeader;
use std::time::Duration;

/// The gateway's timing of a request, on every answer from an upstream.
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// Fields never passed back to the client: those that describe one connection, framing
/// (the gateway sets its own), and what would act on the gateway's origin rather than the
/// upstream's (cookies, alternative services, HSTS).
fn not_forwarded_down(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "trailer"
            | "upgrade"
            | "te"
            | "content-length"
            | "transfer-encoding"
            | "set-cookie"
            | "alt-svc"
            | "strict-transport-security"
    )
}

/// Why an upstream's response header cannot be passed on.
#[derive(Debug, PartialEq, Eq)]
pub enum InvalidResponse {
    /// The status is not one HTTP defines (100-599).
    Status(u16),
    /// A gateway header value that cannot be sent.
    Framing,
}

/// The response header passed to the client: the upstream's status and end-to-end fields,
/// with framing set by the gateway (a close-delimited body becomes chunked, so the client
/// connection survives) and the upstream's `x-request-id` kept as `x-upstream-request-id`,
/// plus the gateway's own `headers` (request ID, rate position) and `timing`
/// (`server-timing`, last).
///
/// The upstream's field map becomes the client's, edited in place: copying every field
/// into a new map cost more than the few removals (benches/README.md, eighth session).
pub fn response_header(
    upstream: Head,
    headers: &[(HeaderName, String)],
    timing: Option<HeaderValue>,
) -> Result<ResponseHeader, InvalidResponse> {
    let status = upstream.status.as_u16();
    if !(100..=599).contains(&status) {
        return Err(InvalidResponse::Status(status));
    }
    let Head {
        status: code,
        headers: mut fields,
        framing,
        connection,
        ..
    } = upstream;
    // The tokens noted as the head was read: the values are looked up again only when
    // one may name a field.
    let named_by_connection = ConnectionTokens::with_facts(&fields, connection);
    let unwanted: Vec<HeaderName> = fields
        .keys()
        .filter(|name| {
            let lower = name.as_str();
            not_forwarded_down(lower) || named_by_connection.contains(lower)
        })
        .cloned()
        .collect();
    for name in &unwanted {
        fields.remove(name);
    }
    if let http::header::Entry::Occupied(ids) = fields.entry(crate::request_id::HEADER) {
        let (_, values) = ids.remove_entry_mult();
        let renamed: Vec<HeaderValue> = values.collect();
        for value in renamed {
            fields.append(HeaderName::from_static("x-upstream-request-id"), value);
        }
    }
    let bodiless = matches!(status, 204 | 304) || code.is_informational();
    match framing {
        Framing::Length(n) => {
            fields.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        Framing::Chunked | Framing::Close if !bodiless => {
            fields.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }
        Framing::Chunked | Framing::Close => {}
    }
    for (name, value) in headers {
        // The caller logs the refusal with the request's ID.
        let value = HeaderValue::from_str(value).map_err(|_| InvalidResponse::Framing)?;
        fields.insert(name.clone(), value);
    }
    if let Some(timing) = timing {
        // Into the map itself: pingora's `insert_header` title-cases a name and parses it
        // back on every call (~0.5k instructions a request, benches/README.md).
        fields.insert(SERVER_TIMING, timing);
    }
    // No case map (a header made from parts has none): names go out title-cased when
    // standard, lower-case otherwise, and a stream that stays open for minutes does not
    // keep a second map of every name (~1 KB, benches/README.md).
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = code;
    parts.headers = fields;
    Ok(ResponseHeader::from(parts))
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn close_delimited_responses_become_chunked() {
        let upstream = from_upstream(
            200,
            &[
                ("content-type", "text/event-stream"),
                ("x-request-id", "up-1"),
                ("connection", "close"),
            ],
        );
        assert_eq!(upstream.framing, Framing::Close);
        let sent =
            response_header(upstream, &[(crate::request_id::HEADER, "rid".into())], None).unwrap();
        assert_eq!(sent.headers.get("transfer-encoding").unwrap(), "chunked");
        assert_eq!(sent.headers.get("x-request-id").unwrap(), "rid");
        assert_eq!(sent.headers.get("x-upstream-request-id").unwrap(), "up-1");
        assert!(sent.headers.get("connection").is_none());
        assert!(is_event_stream(&sent));
    }

    fn fields(headers: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    /// A head as the upstream connection reads it (a valid framing).
    fn from_upstream(status: u16, headers: &[(&str, &str)]) -> Head {
        let headers = fields(headers);
        let read = crate::http1::framing::FramingFields::of(&headers);
        Head {
            status: http::StatusCode::from_u16(status).unwrap(),
            version: http::Version::HTTP_11,
            framing: crate::http1::framing::response_framing(&read).unwrap(),
            connection: read.connection,
            headers,
        }
    }

    #[test]
    fn origin_scoped_fields_stay_behind_and_framing_is_the_gateways() {
        let upstream = from_upstream(
            200,
            &[
                ("set-cookie", "a=1"),
                ("alt-svc", "h3=\":443\""),
                ("strict-transport-security", "max-age=1"),
                ("content-length", "5, 5"),
                ("content-type", "application/json"),
            ],
        );
        let sent = response_header(upstream, &[], None).unwrap();
        for gone in ["set-cookie", "alt-svc", "strict-transport-security"] {
            assert!(
                sent.headers.get(gone).is_none(),
                "{gone} is not passed back"
            );
        }
        assert_eq!(
            sent.headers.get("content-length").unwrap(),
            "5",
            "agreeing lengths collapse"
        );
        assert_eq!(
            sent.headers.get("content-type").unwrap(),
            "application/json"
        );
    }

    #[test]
    fn invalid_statuses_and_framing_are_refused() {
        assert_eq!(
            response_header(from_upstream(999, &[]), &[], None).unwrap_err(),
            InvalidResponse::Status(999)
        );
        let chunked = from_upstream(
            200,
            &[("transfer-encoding", "Chunked"), ("content-length", "9")],
        );
        let sent = response_header(chunked, &[], None).unwrap();
        assert_eq!(sent.headers.get("transfer-encoding").unwrap(), "chunked");
        assert!(
            sent.headers.get("content-length").is_none(),
            "chunked wins over a length"
        );
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
