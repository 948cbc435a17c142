//! The client side of HTTP/1.1 is as strict as nginx: `Transfer-Encoding` only as one
//! `chunked` coding (else 501), chunk lines without a bare CR (else 400), request heads
//! within `max_header_bytes` (else 431, read no further), no field with `_` in its name
//! forwarded upstream, and no chunked answer to an HTTP/1.0 client. Every refusal is the
//! error envelope with an `x-request-id`, an access-log line and a count, and closes the
//! connection.

mod common;
use common::*;

async fn gateway_with(extra: &str) -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), extra)).await;
    (mock, gw)
}

/// A chat request head with `fields` and no framing of its own, then `body` as given.
fn chat_with(fields: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\n{fields}\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The chat body as one chunk, with `size_line` (the line end included) before it.
fn one_chunk(size_line: &str) -> Vec<u8> {
    let body = chat_body("chat-model");
    let mut bytes = format!("{:x}{size_line}", body.len()).into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    bytes
}

/// Sends `bytes` on a new connection: the answer, and whether the gateway closed the
/// connection after it.
async fn exchange(gw: &TestGateway, bytes: &[u8]) -> (Response, bool) {
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(bytes).await;
    let response = conn.read_response().await.expect("an answer");
    let closed = response.header("connection") == Some("close") && conn.closed_by_peer().await;
    (response, closed)
}

/// Asserts the refusal's status and code, its request id and the closed connection.
fn assert_refused(case: &str, (response, closed): &(Response, bool), status: u16, code: &str) {
    let (got_status, _, got_code, _) = response.error();
    assert_eq!(
        (got_status, got_code.as_str()),
        (status, code),
        "{case}: {}",
        response.text()
    );
    assert!(
        response.header("x-request-id").is_some(),
        "{case}: a request id"
    );
    assert!(*closed, "{case}: the connection is closed after the answer");
}

#[tokio::test]
async fn transfer_encoding_other_than_one_chunked_is_501_and_closes() {
    let (mock, gw) = gateway_with("").await;
    let refused = [
        "transfer-encoding: gzip, chunked\r\n",
        "transfer-encoding: chunked, chunked\r\n",
        "transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n",
        "transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n",
        "transfer-encoding: identity\r\n",
    ];
    for fields in refused {
        let answer = exchange(&gw, &chat_with(fields, &one_chunk("\r\n"))).await;
        assert_refused(fields, &answer, 501, "unsupported_transfer_encoding");
    }
    assert!(mock.requests().is_empty(), "nothing reaches the upstream");
    let lines = gw.log_lines(refused.len()).await;
    assert!(
        lines.iter().all(|line| line["status"] == 501
            && line["error_code"] == "unsupported_transfer_encoding"
            && line["request_id"].as_str().is_some_and(|id| !id.is_empty())),
        "each refusal logged: {lines:?}"
    );
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="unsupported_transfer_encoding",key="unknown"}"#),
        refused.len() as f64
    );

    // One chunked coding, in any case, is read.
    mock.push(Reply::completion());
    let (response, _) = exchange(
        &gw,
        &chat_with("transfer-encoding: Chunked\r\n", &one_chunk("\r\n")),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text());
}

#[tokio::test]
async fn a_chunk_line_with_a_bare_cr_is_400_and_extensions_must_be_well_formed() {
    let (mock, gw) = gateway_with("").await;
    let chunked = "transfer-encoding: chunked\r\n";
    for size_line in [
        "\r\r\n",
        ";a\rb\r\n",
        ";a=\"b\rc\"\r\n",
        ";a=b c\r\n",
        ";\r\n",
    ] {
        let answer = exchange(&gw, &chat_with(chunked, &one_chunk(size_line))).await;
        assert_refused(&format!("{size_line:?}"), &answer, 400, "invalid_request");
    }
    assert!(mock.requests().is_empty(), "nothing reaches the upstream");

    // Extensions (token or quoted-string values, whitespace around `;` and `=`) and a
    // bare LF are read.
    for size_line in [";a=b\r\n", " ; name = \"x;y \\\" z\"\r\n", "\n"] {
        mock.push(Reply::completion());
        let (response, _) = exchange(&gw, &chat_with(chunked, &one_chunk(size_line))).await;
        assert_eq!(response.status, 200, "{size_line:?}: {}", response.text());
    }
    assert_eq!(
        mock.requests()[0].body,
        chat_body("chat-model").as_bytes(),
        "the body arrives as sent, extensions dropped"
    );
}

#[tokio::test]
async fn fields_whose_name_has_an_underscore_are_not_forwarded() {
    let (mock, gw) = gateway_with("").await;
    mock.push(Reply::completion());
    let body = chat_body("chat-model");
    let fields = format!(
        "content-length: {}\r\ntransfer_encoding: chunked\r\ncontent_length: 5\r\nx_team: search\r\nx-team: kept\r\n",
        body.len()
    );
    let (response, _) = exchange(&gw, &chat_with(&fields, body.as_bytes())).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let seen = &mock.requests()[0];
    assert!(
        seen.headers.iter().all(|(name, _)| !name.contains('_')),
        "no underscore look-alike reaches the upstream: {:?}",
        seen.headers
    );
    assert_eq!(seen.header("x-team"), Some("kept"));
    assert_eq!(seen.body, body.as_bytes());
}

/// A head that never ends: the request line and one field `bytes` long.
fn endless_head(bytes: usize) -> Vec<u8> {
    let mut head = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-pad: ".to_vec();
    head.resize(bytes, b'a');
    head
}

#[tokio::test]
async fn a_head_past_32_kib_is_refused_431_before_it_ends() {
    let (_mock, gw) = gateway_with("").await;
    let mut conn = Conn::open(gw.addr()).await;
    // 40 KiB of a head whose end never comes: the answer does not wait for it.
    conn.write(&endless_head(40 << 10)).await;
    let response = conn
        .read_response()
        .await
        .expect("an answer before the head ends");
    let (status, _, code, _) = response.error();
    assert_eq!((status, code.as_str()), (431, "request_header_too_large"));
    assert!(response.header("x-request-id").is_some());
    assert!(conn.closed_by_peer().await, "the connection is closed");
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["status"], 431);
    assert_eq!(line["error_code"], "request_header_too_large");
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="request_header_too_large",key="unknown"}"#),
        1.0
    );
}

#[tokio::test]
async fn max_header_bytes_sets_the_largest_head() {
    let (_mock, gw) = gateway_with("max_header_bytes: 2KiB").await;
    let auth = format!("Bearer {ALPHA}");
    let within = "a".repeat(1500);
    let response = send(
        gw.addr(),
        "GET",
        "/v1/models",
        &[("authorization", &auth), ("x-pad", &within)],
        b"",
    )
    .await;
    assert_eq!(response.status, 200, "a head within the limit is served");

    let over = "a".repeat(2100);
    let mut head = request_bytes(
        "GET",
        "/v1/models",
        &[("authorization", &auth), ("x-pad", &over)],
        b"",
    );
    let answer = exchange(&gw, &head).await;
    assert_refused(
        "a whole head over the limit",
        &answer,
        431,
        "request_header_too_large",
    );

    // Cut short past the limit: refused all the same, without waiting for its end.
    head.truncate(2100);
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&head).await;
    assert_eq!(conn.read_response().await.expect("an answer").status, 431);
}

#[tokio::test]
async fn an_http_1_0_client_gets_a_stream_delimited_by_the_close_never_chunks() {
    let (mock, gw) = gateway_with("").await;
    mock.push(Reply::stream(3, std::time::Duration::ZERO));
    let body =
        r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.0\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(request.as_bytes()).await;
    let response = conn.read_response().await.expect("an answer");
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("transfer-encoding"),
        None,
        "HTTP/1.0 has no chunked coding"
    );
    assert_eq!(response.header("content-length"), None);
    assert_eq!(response.header("connection"), Some("close"));
    let text = response.text();
    assert!(
        text.starts_with("data: {"),
        "the body is the events themselves, no chunk sizes: {text:?}"
    );
    assert!(
        text.contains("t2 ") && text.ends_with("data: [DONE]\n\n"),
        "{text:?}"
    );
}
