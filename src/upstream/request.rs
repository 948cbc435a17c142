//! What crosses to an upstream: the request header we send (credential injected in the
//! provider's style, its configured headers and query parameters added, client credentials
//! and hop-by-hop fields removed, the client's address appended to `X-Forwarded-For`).
//! [`authorize`] is the one place an upstream credential leaves its `Secret`. The way back
//! is `response.rs`.

use crate::catalog::Upstream;
use http::{header, HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use pingora::Result;

/// Fields never forwarded upstream: those that describe one connection (RFC 9110 §7.6.1),
/// the ones the gateway sets itself, and the client's credentials in any of the headers
/// clients put them in (a gateway key sent as `x-api-key` must not reach a third party).
const NOT_FORWARDED_UP: [&str; 16] = [
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
    "cookie",
    "x-api-key",
    "api-key",
    "x-forwarded-for",
];

/// The path of `route` (e.g. `/chat/completions`) under the upstream's base URL, without
/// a query string (for the access log).
pub fn upstream_path(upstream: &Upstream, route: &str) -> String {
    [upstream.base_path.as_str(), route].concat()
}

/// The path and query sent upstream: the upstream's `query` parameters first, then the
/// client's, less any the upstream's configuration sets (the operator's `api-version` wins).
pub fn upstream_target(upstream: &Upstream, route: &str, client_query: Option<&str>) -> String {
    let configured = upstream.style.query.as_str();
    let set_here = |pair: &str| {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        configured
            .split('&')
            .any(|ours| ours.split_once('=').is_some_and(|(n, _)| n == name))
    };
    let client = client_query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|pair| !pair.is_empty() && (configured.is_empty() || !set_here(pair)));
    let query: Vec<&str> = std::iter::once(configured)
        .filter(|q| !q.is_empty())
        .chain(client)
        .collect();
    let path = upstream_path(upstream, route);
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// The request header sent upstream for a POST of `body_len` bytes. `client_address` is
/// appended to the client's `X-Forwarded-For`.
pub fn request_header(
    client: &RequestHeader,
    upstream: &Upstream,
    path: &str,
    request_id: &str,
    body_len: usize,
    client_address: Option<&str>,
) -> Result<RequestHeader> {
    // No case map: the client's names come from a parsed map (lower case), so the wire
    // is the same without one (standard names title-cased, the rest as they are) and
    // every header costs one map insert instead of two and no name copy.
    let mut header = RequestHeader::build_no_case(
        client.method.clone(),
        path.as_bytes(),
        Some(client.headers.len() + 4),
    )?;
    let named_by_connection = connection_tokens(client.headers.get_all(header::CONNECTION));
    for (name, value) in client.headers.iter() {
        let lower = name.as_str();
        if NOT_FORWARDED_UP.contains(&lower)
            || lower == "x-request-id"
            || *name == upstream.style.auth_header
            || named_by_connection.iter().any(|t| t == lower)
        {
            continue;
        }
        header.append_header(name.clone(), value.clone())?;
    }
    header.insert_header(header::HOST, upstream.host_header.as_str())?;
    header.insert_header(header::CONTENT_LENGTH, HeaderValue::from(body_len))?;
    header.insert_header(crate::request_id::HEADER, request_id)?;
    if let Some(forwarded_for) = forwarded_for(client, client_address) {
        const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
        header.insert_header(FORWARDED_FOR, forwarded_for)?;
    }
    provider_fields(&mut header, upstream)?;
    Ok(header)
}

/// Puts the attempt's own trace context (`traceparent`, `tracestate`) in place of the
/// client's, so the upstream's spans join the request's trace under this attempt.
pub fn set_trace_context(
    header: &mut RequestHeader,
    fields: &[(&'static str, String)],
) -> Result<()> {
    header.remove_header("traceparent");
    header.remove_header("tracestate");
    for (name, value) in fields {
        header.insert_header(*name, value.as_str())?;
    }
    Ok(())
}

/// The `GET` an active health check sends to `{url}/models`.
pub fn check_header(upstream: &Upstream) -> Result<RequestHeader> {
    let path = upstream_target(upstream, "/models", None);
    let mut header = RequestHeader::build("GET", path.as_bytes(), Some(3))?;
    header.insert_header(header::HOST, upstream.host_header.as_str())?;
    provider_fields(&mut header, upstream)?;
    Ok(header)
}

/// The upstream's configured `headers` (in place of any the client sent), then its
/// credential.
fn provider_fields(header: &mut RequestHeader, upstream: &Upstream) -> Result<()> {
    for (name, value) in &upstream.style.headers {
        header.insert_header(name.clone(), value.clone())?;
    }
    authorize(header, upstream)
}

/// The client's `X-Forwarded-For` chain with the address the gateway saw appended.
fn forwarded_for(client: &RequestHeader, address: Option<&str>) -> Option<String> {
    let chain: Vec<&str> = client
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .chain(address)
        .collect();
    (!chain.is_empty()).then(|| chain.join(", "))
}

/// Adds the upstream's credential, when it has one, in its `auth_header` after its
/// `auth_scheme`: the only place it is exposed.
fn authorize(header: &mut RequestHeader, upstream: &Upstream) -> Result<()> {
    let Some(credential) = &upstream.credential else {
        return Ok(());
    };
    let style = &upstream.style;
    let value = if style.auth_scheme.is_empty() {
        credential.expose().to_owned()
    } else {
        format!("{} {}", style.auth_scheme, credential.expose())
    };
    let mut value = http::HeaderValue::try_from(value).map_err(|_| {
        pingora::Error::explain(
            pingora::ErrorType::InternalError,
            "the upstream credential is not a valid header value",
        )
    })?;
    value.set_sensitive(true);
    header.insert_header(style.auth_header.clone(), value)?;
    Ok(())
}

pub(super) fn connection_tokens<'a>(
    values: impl IntoIterator<Item = &'a http::HeaderValue>,
) -> Vec<String> {
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
    use std::time::Duration;

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
            ("cookie", "session=abc"),
            ("x-api-key", "sk-client"),
            ("api-key", "sk-client"),
            ("proxy-authorization", "Basic x"),
            ("x-forwarded-for", "6.6.6.6"),
        ] {
            client.append_header(name, value).unwrap();
        }
        let sent = request_header(
            &client,
            &upstream(Some("upstream-secret")),
            "/v1/chat/completions",
            "rid",
            42,
            Some("127.0.0.9"),
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
        for gone in [
            "connection",
            "x-private",
            "expect",
            "transfer-encoding",
            "cookie",
            "x-api-key",
            "api-key",
            "proxy-authorization",
        ] {
            assert_eq!(get(gone), None, "{gone} is not forwarded");
        }
        assert_eq!(
            get("x-forwarded-for").as_deref(),
            Some("6.6.6.6, 127.0.0.9"),
            "the address the gateway saw is appended to the client's chain"
        );
        let without_credential =
            request_header(&client, &upstream(None), "/v1/x", "rid", 0, None).unwrap();
        assert!(
            without_credential.headers.get("authorization").is_none(),
            "the client's key never goes upstream"
        );
    }

    fn styled(yaml_style: crate::config::ProviderStyle) -> Upstream {
        let mut upstream = upstream(Some("upstream-secret"));
        upstream.style = yaml_style;
        upstream
    }

    #[test]
    fn the_credential_goes_in_the_providers_header_and_scheme() {
        use crate::config::ProviderStyle;
        let mut client = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        client.append_header("x-team", "client-value").unwrap();
        let azure = styled(ProviderStyle {
            auth_header: http::HeaderName::from_static("api-key"),
            auth_scheme: String::new(),
            headers: vec![(
                http::HeaderName::from_static("x-team"),
                http::HeaderValue::from_static("configured"),
            )],
            query: "api-version=2024-06-01".into(),
        });
        let sent = request_header(&client, &azure, "/p", "rid", 0, None).unwrap();
        let get = |n: &str| sent.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            get("api-key").as_deref(),
            Some("upstream-secret"),
            "a bare key"
        );
        assert_eq!(
            get("authorization"),
            None,
            "no Authorization beside api-key"
        );
        assert_eq!(
            get("x-team").as_deref(),
            Some("configured"),
            "a configured header replaces the client's"
        );
        let check = check_header(&azure).unwrap();
        assert_eq!(check.uri.to_string(), "/v1/models?api-version=2024-06-01");
        assert!(
            check.headers.get("api-key").is_some(),
            "checks are authorized too"
        );

        let x_api_key = styled(ProviderStyle {
            auth_header: http::HeaderName::from_static("x-api-key"),
            auth_scheme: "Token".into(),
            ..ProviderStyle::default()
        });
        let sent = request_header(&client, &x_api_key, "/p", "rid", 0, None).unwrap();
        assert_eq!(
            sent.headers.get("x-api-key").unwrap(),
            "Token upstream-secret"
        );
    }

    #[test]
    fn configured_query_parameters_come_first_and_win() {
        let mut azure = upstream(None);
        azure.style.query = "api-version=2024-06-01".into();
        assert_eq!(
            upstream_target(&azure, "/chat/completions", None),
            "/v1/chat/completions?api-version=2024-06-01"
        );
        assert_eq!(
            upstream_target(&azure, "/x", Some("api-version=old&trace=1")),
            "/v1/x?api-version=2024-06-01&trace=1",
            "the operator's api-version wins; the client's other parameters pass"
        );
        let plain = upstream(None);
        assert_eq!(upstream_target(&plain, "/x", Some("a=1")), "/v1/x?a=1");
        assert_eq!(upstream_target(&plain, "/x", None), "/v1/x");
    }
}
