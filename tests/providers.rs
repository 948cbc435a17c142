//! Provider styles: where an upstream wants its credential (`auth_header`, `auth_scheme`),
//! and the `headers` and `query` every request to it carries, as the upstream sees them.

mod common;
use common::*;

/// One upstream `provider` with the given style lines, serving `m`.
fn styled(url: &str, style: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - name: provider
    url: {url}
    api_key_env: TEST_UPSTREAM_KEY
{style}
models:
  - id: m
    upstream: provider
    capabilities: [streaming]
keys:
  - {{name: alpha, sha256: {hash}}}
"#,
        hash = key_hash(ALPHA)
    )
}

#[tokio::test]
async fn azure_style_sends_the_bare_key_in_api_key_and_its_api_version() {
    let mock = MockUpstream::start().await;
    let style = "    auth_header: api-key\n    auth_scheme: \"\"\n    headers: {x-ms-useragent: sluice}\n    query: {api-version: 2024-06-01}";
    let gw = TestGateway::start(&styled(&mock.url(), style)).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("m")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let seen = &mock.requests()[0];
    assert_eq!(
        seen.header("api-key"),
        Some(UPSTREAM_SECRET),
        "the bare key"
    );
    assert_eq!(
        seen.header("authorization"),
        None,
        "no Authorization: neither ours nor the client's"
    );
    assert_eq!(seen.header("x-ms-useragent"), Some("sluice"));
    assert_eq!(
        seen.path, "/v1/chat/completions?api-version=2024-06-01",
        "the query is in the URL the upstream sees"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        line["upstream_url"],
        format!("http://{}/v1/chat/completions", mock.addr),
        "the log has the URL without its query"
    );
    let log = serde_json::to_string(&gw.log.lines()).unwrap();
    assert!(
        !log.contains(UPSTREAM_SECRET),
        "the credential never reaches the log"
    );
}

#[tokio::test]
async fn a_client_sent_api_key_header_never_reaches_the_upstream() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&styled(&mock.url(), "    auth_header: x-goog-api-key")).await;
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("x-goog-api-key", "client-supplied"),
        ],
        chat_body("m").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 200);
    let seen = &mock.requests()[0];
    assert_eq!(
        seen.header("x-goog-api-key"),
        Some(format!("Bearer {UPSTREAM_SECRET}").as_str()),
        "the gateway's credential, in the scheme by default, in place of the client's"
    );
    assert_eq!(seen.header("authorization"), None);
}

#[tokio::test]
async fn the_default_style_is_bearer_in_authorization() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&styled(&mock.url(), "")).await;
    let response = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions?trace=1",
        &[
            ("authorization", &format!("Bearer {ALPHA}")),
            ("content-type", "application/json"),
        ],
        chat_body("m").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 200);
    let seen = &mock.requests()[0];
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {UPSTREAM_SECRET}").as_str())
    );
    assert_eq!(
        seen.path, "/v1/chat/completions?trace=1",
        "the client's query passes"
    );
}

#[tokio::test]
async fn a_client_query_parameter_never_shadows_the_operators() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&styled(&mock.url(), "    query: {api-version: 2024-06-01}")).await;
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions?api%2Dversion=evil&API-Version=evil&api-version=evil&trace=1",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        chat_body("m").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        mock.requests()[0].path,
        "/v1/chat/completions?api-version=2024-06-01&trace=1",
        "the client's spellings of the operator's parameter are dropped, its others kept"
    );
}
