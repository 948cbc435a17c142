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
        None,
    )
    .unwrap();
    let get = |n: &str| sent.get(n);
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
        request_header(&client, &upstream(None), "/v1/x", "rid", 0, None, None).unwrap();
    assert!(
        without_credential.get("authorization").is_none(),
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
    let sent = request_header(&client, &azure, "/p", "rid", 0, None, None).unwrap();
    let get = |n: &str| sent.get(n);
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
    assert_eq!(check.read_back().0, "/v1/models?api-version=2024-06-01");
    assert!(check.get("api-key").is_some(), "checks are authorized too");

    let x_api_key = styled(ProviderStyle {
        auth_header: http::HeaderName::from_static("x-api-key"),
        auth_scheme: "Token".into(),
        ..ProviderStyle::default()
    });
    let sent = request_header(&client, &x_api_key, "/p", "rid", 0, None, None).unwrap();
    assert_eq!(
        sent.get("x-api-key").as_deref(),
        Some("Token upstream-secret")
    );
}

#[test]
fn the_head_is_written_as_it_goes_on_the_wire() {
    let mut client = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    client
        .append_header("content-type", "application/json")
        .unwrap();
    client.append_header("traceparent", "00-client-01").unwrap();
    client.append_header("tracestate", "client=1").unwrap();
    client.append_header("x-b3", "client").unwrap();
    let sent = request_header(
        &client,
        &upstream(Some("secret")),
        "/v1/chat/completions?a=1",
        "rid",
        42,
        None,
        None,
    )
    .unwrap();
    let wire = String::from_utf8(sent.wire().to_vec()).unwrap();
    assert!(
        wire.starts_with("POST /v1/chat/completions?a=1 HTTP/1.1\r\n"),
        "{wire}"
    );
    assert!(wire.ends_with("\r\n\r\n"), "{wire}");
    for line in [
        "\r\nContent-Type: application/json\r\n",
        "\r\nHost: backend:8000\r\n",
        "\r\nContent-Length: 42\r\n",
        "\r\nx-request-id: rid\r\n",
        "\r\nauthorization: Bearer secret\r\n",
    ] {
        assert!(wire.contains(line), "{line:?} in {wire}");
    }
    assert!(!sent.is_head());
    assert_eq!(
        sent.get("traceparent").as_deref(),
        Some("00-client-01"),
        "an untraced request passes the client's context on"
    );

    let ours = TraceFields {
        traceparent: b"00-ours-01",
        tracestate: b"",
    };
    let traced = request_header(
        &client,
        &upstream(None),
        "/v1/x",
        "rid",
        0,
        None,
        Some(&ours),
    )
    .unwrap();
    assert_eq!(traced.get("traceparent").as_deref(), Some("00-ours-01"));
    assert_eq!(
        traced.get("tracestate"),
        None,
        "an empty field is not sent, and the client's is not passed on"
    );
    assert_eq!(traced.get("x-b3").as_deref(), Some("client"));
}

#[test]
fn what_cannot_be_written_is_refused() {
    let client = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    let plain = upstream(None);
    for target in ["/v1/x y", "/v1/\r\nx", "v1/x", ""] {
        assert!(
            request_header(&client, &plain, target, "rid", 0, None, None).is_err(),
            "{target:?}"
        );
    }
    assert!(request_header(&client, &plain, "/v1/x", "r\nid", 0, None, None).is_err());
    let broken = upstream(Some("secret\r\nx-injected: 1"));
    assert!(request_header(&client, &broken, "/v1/x", "rid", 0, None, None).is_err());
    assert!(check_header(&broken).is_err());
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

#[test]
fn no_client_query_parameter_shadows_the_operators() {
    let mut azure = upstream(None);
    azure.style.query = "api-version=2024-06-01&q=a%20b".into();
    for client in [
        "api-version=evil",
        "api%2Dversion=evil",
        "API-Version=evil",
        "api%2dVERSION",
        "q=x",
        "Q=x",
        "%71=x",
        "a%20b=1&q+=2",
    ] {
        let target = upstream_target(&azure, "/x", Some(client));
        let kept: Vec<&str> = target
            .split_once('?')
            .map_or(vec![], |(_, q)| q.split('&').collect());
        let expected_rest: Vec<&str> = if client.starts_with("a%20b") {
            vec!["a%20b=1", "q+=2"]
        } else {
            vec![]
        };
        assert_eq!(
            kept,
            [&["api-version=2024-06-01", "q=a%20b"][..], &expected_rest].concat(),
            "client query {client:?}"
        );
    }
}

#[test]
fn fields_with_an_underscore_in_their_name_stay_behind() {
    let mut client = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    client
        .insert_header("transfer_encoding", "chunked")
        .unwrap();
    client.insert_header("content_length", "5").unwrap();
    client.insert_header("x_custom", "1").unwrap();
    client.insert_header("x-custom", "2").unwrap();
    let head = request_header(&client, &upstream(None), "/v1/x", "rid", 3, None, None).unwrap();
    let (_, fields) = head.read_back();
    assert!(
        fields.iter().all(|(name, _)| !name.contains('_')),
        "{fields:?}"
    );
    assert_eq!(head.get("x-custom").as_deref(), Some("2"));
    assert_eq!(head.get("content-length").as_deref(), Some("3"));
}
