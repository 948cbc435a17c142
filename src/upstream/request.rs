//! What crosses to an upstream: the request header we send (credential injected, client
//! credentials and hop-by-hop fields removed, the client's address appended to
//! `X-Forwarded-For`). [`authorize`] is the one place an upstream credential leaves its
//! `Secret`. The way back is `response.rs`.

use crate::catalog::Upstream;
use http::header;
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

/// The path of `route` (e.g. `/chat/completions`) under the upstream's base URL.
pub fn upstream_path(upstream: &Upstream, route: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{}{route}?{q}", upstream.base_path),
        None => format!("{}{route}", upstream.base_path),
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
    if let Some(forwarded_for) = forwarded_for(client, client_address) {
        header.insert_header("x-forwarded-for", forwarded_for)?;
    }
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
}
