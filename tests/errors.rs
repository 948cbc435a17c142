//! Every row of DESIGN's error table that the gateway makes: status, type, code, param,
//! headers, and the JSON-null param.

mod common;
use common::*;
use std::time::Duration;

async fn gateway() -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    (mock, gw)
}

#[tokio::test]
async fn unknown_routes_are_404_with_the_method_and_path_together() {
    let (_mock, gw) = gateway().await;
    for (method, path) in [
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/models"),
        ("GET", "/v2/models"),
        ("GET", "/"),
        ("DELETE", "/v1/models/chat-model"),
    ] {
        let auth = format!("Bearer {ALPHA}");
        let response = send(gw.addr(), method, path, &[("authorization", &auth)], b"").await;
        assert_eq!(
            response.error(),
            (
                404,
                "invalid_request_error".into(),
                "unknown_route".into(),
                serde_json::Value::Null
            ),
            "{method} {path}"
        );
        assert!(
            response.header("x-request-id").is_some(),
            "errors carry x-request-id"
        );
    }
}

#[tokio::test]
async fn a_repeated_prefix_is_named_in_the_message() {
    let (_mock, gw) = gateway().await;
    let response = chat_at(&gw, "/v1/v1/chat/completions").await;
    assert_eq!(response.error().2, "unknown_route");
    assert!(
        response.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("repeats the /v1 prefix"),
        "{}",
        response.text()
    );
}

async fn chat_at(gw: &TestGateway, path: &str) -> Response {
    let auth = format!("Bearer {ALPHA}");
    send(
        gw.addr(),
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        chat_body("chat-model").as_bytes(),
    )
    .await
}

#[tokio::test]
async fn a_host_outside_the_hosts_list_is_404() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "hosts: [api.example.com]")).await;
    let auth = format!("Bearer {ALPHA}");
    let wrong = send(
        gw.addr(),
        "GET",
        "/v1/models",
        &[("authorization", &auth)],
        b"",
    )
    .await;
    assert_eq!(
        wrong.error().2,
        "unknown_route",
        "request for host 'localhost' is refused"
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(
        format!(
            "GET /v1/models HTTP/1.1\r\nhost: API.example.com:443\r\nauthorization: {auth}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        conn.read_response().await.unwrap().status,
        200,
        "a listed host (any case, any port) is served"
    );
}

#[tokio::test]
async fn missing_malformed_unknown_and_disabled_keys_are_401() {
    let (mock, gw) = gateway().await;
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[], "missing_api_key"),
        (
            &[("authorization", "Basic YWxhZGRpbjpvcGVu")],
            "missing_api_key",
        ),
        (&[("authorization", "Bearer")], "missing_api_key"),
        (
            &[("authorization", "Bearer sk-not-a-key")],
            "invalid_api_key",
        ),
        (
            &[("authorization", "Bearer sk-test-disabled-0123456789")],
            "invalid_api_key",
        ),
        (
            &[("authorization", "bearer sk-TEST-alpha-0123456789")],
            "invalid_api_key",
        ),
    ];
    for (headers, code) in cases {
        let mut headers = headers.to_vec();
        headers.push(("content-type", "application/json"));
        let response = send(
            gw.addr(),
            "POST",
            "/v1/chat/completions",
            &headers,
            chat_body("chat-model").as_bytes(),
        )
        .await;
        assert_eq!(
            response.error(),
            (
                401,
                "authentication_error".into(),
                code.into(),
                serde_json::Value::Null
            ),
            "{headers:?}"
        );
        assert_eq!(
            response.header("www-authenticate"),
            Some("Bearer"),
            "401 names the scheme"
        );
    }
    assert!(
        mock.requests().is_empty(),
        "nothing unauthenticated reaches the upstream"
    );
}

#[tokio::test]
async fn body_errors_follow_the_table() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 1KiB")).await;
    let auth = format!("Bearer {ALPHA}");
    let json = ("content-type", "application/json");
    type Case<'a> = (
        Vec<(&'a str, &'a str)>,
        Vec<u8>,
        u16,
        &'a str,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (vec![json], vec![b' '; 2000], 413, "request_too_large", None),
        (vec![("content-type", "text/plain")], chat_body("chat-model").into_bytes(), 415, "unsupported_media_type", None),
        (vec![], chat_body("chat-model").into_bytes(), 415, "unsupported_media_type", None),
        (vec![json], b"{not json".to_vec(), 400, "invalid_json", None),
        (vec![json], b"[1, 2]".to_vec(), 400, "invalid_json", None),
        (vec![json], br#"{"messages":[{"role":"user","content":"x"}]}"#.to_vec(), 400, "missing_required_parameter", Some("model")),
        (vec![json], br#"{"model":"chat-model"}"#.to_vec(), 400, "missing_required_parameter", Some("messages")),
        (vec![json], br#"{"model":7,"messages":[{"role":"user","content":"x"}]}"#.to_vec(), 400, "invalid_parameter", Some("model")),
        (vec![json], br#"{"model":"chat-model","messages":[]}"#.to_vec(), 400, "invalid_parameter", Some("messages")),
        (vec![json], br#"{"model":"chat-model","messages":[{"content":"x"}]}"#.to_vec(), 400, "invalid_parameter", Some("messages[0].role")),
        (vec![json], br#"{"model":"chat-model","messages":[{"role":"user"}]}"#.to_vec(), 400, "invalid_parameter", Some("messages[0].content")),
        (vec![json], br#"{"model":"plain-model","messages":[{"role":"user","content":"x"}],"stream":true}"#.to_vec(), 400, "capability_not_supported", Some("stream")),
        (vec![json], br#"{"model":"plain-model","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}"#.to_vec(), 400, "capability_not_supported", Some("tools")),
        (vec![json], br#"{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}"#.to_vec(), 404, "model_not_found", Some("model")),
    ];
    for (mut headers, body, status, code, param) in cases {
        headers.push(("authorization", &auth));
        let response = send(gw.addr(), "POST", "/v1/chat/completions", &headers, &body).await;
        let (got_status, _, got_code, got_param) = response.error();
        assert_eq!(
            (got_status, got_code.as_str()),
            (status, code),
            "body {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(got_param.as_str(), param, "param of {code}");
    }
    assert!(
        mock.requests().is_empty(),
        "no invalid request reaches the upstream"
    );
}

#[tokio::test]
async fn a_repeated_top_level_key_is_invalid_json_and_reaches_no_upstream() {
    let (mock, gw) = gateway().await;
    // beta may use public-* only: a parser that keeps the first copy would run chat-model.
    let smuggled =
        r#"{"model":"chat-model","messages":[{"role":"user","content":"x"}],"model":"public-one"}"#;
    let padding = "p".repeat(200 << 10);
    let large = format!(
        r#"{{"model":"public-one","stream":true,"messages":[{{"role":"user","content":"{padding}"}}],"stream":false}}"#
    );
    for (body, key) in [(smuggled.to_string(), "model"), (large, "stream")] {
        let response = chat(gw.addr(), BETA, &body).await;
        assert_eq!(
            response.error(),
            (
                400,
                "invalid_request_error".into(),
                "invalid_json".into(),
                serde_json::Value::from(key)
            ),
            "a repeated `{key}` is refused, param names it: {}",
            response.text()
        );
        assert!(
            response.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("'{key}'")),
            "the message names the key: {}",
            response.text()
        );
    }
    assert!(
        mock.requests().is_empty(),
        "no body with a repeated key reaches the upstream"
    );
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_413() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 1KiB")).await;
    let mut conn = Conn::open(gw.addr()).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    conn.write(head.as_bytes()).await;
    for _ in 0..3 {
        conn.write(format!("200\r\n{}\r\n", " ".repeat(512)).as_bytes())
            .await;
    }
    conn.write(b"0\r\n\r\n").await;
    let response = conn.read_response().await.unwrap();
    assert_eq!(response.error().2, "request_too_large");
}

#[tokio::test]
async fn upstream_failures_become_5xx_in_the_envelope() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::json(401, r#"{"error":{"message":"bad key"}}"#));
    let auth_failed = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        auth_failed.error(),
        (
            502,
            "upstream_error".into(),
            "upstream_auth_failed".into(),
            serde_json::Value::Null
        )
    );
    assert_eq!(
        auth_failed.header("x-should-retry"),
        Some("false"),
        "a refused credential stays refused: the SDKs must not send it three times"
    );

    mock.push(Reply::json(403, "{}"));
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .error()
            .2,
        "upstream_auth_failed"
    );

    mock.push(Reply::Garbage);
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .error()
            .2,
        "upstream_protocol_error"
    );

    mock.push(Reply::Silent);
    let started = std::time::Instant::now();
    let timeout = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        timeout.error(),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            serde_json::Value::Null
        )
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "504 only after first_byte_timeout (2s)"
    );
    mock.wait_until("the silent upstream request to be abandoned", |m| {
        m.abandoned() == 1
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_upstream_unavailable() {
    // Bind and drop a listener: nothing accepts on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = TestGateway::start(&config(&format!("http://127.0.0.1:{port}/v1"))).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        response.error(),
        (
            502,
            "upstream_error".into(),
            "upstream_unavailable".into(),
            serde_json::Value::Null
        )
    );
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged_with_gateway_headers() {
    let (mock, gw) = gateway().await;
    let body =
        r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#;
    mock.push(Reply::json(429, body).with_header("retry-after", "7"));
    let limited = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(limited.status, 429);
    assert_eq!(
        limited.text(),
        body,
        "the upstream's body is passed through"
    );
    assert_eq!(
        limited.header("retry-after"),
        Some("7"),
        "the upstream's Retry-After is kept"
    );
    assert!(limited.header("x-request-id").is_some());
    let cooling = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        cooling.error().2,
        "no_healthy_upstream",
        "the throttled upstream gets nothing more"
    );
    assert_eq!(cooling.status, 503);
    assert_eq!(
        cooling.header("retry-after"),
        Some("7"),
        "until the upstream's own Retry-After"
    );
    assert_eq!(mock.requests().len(), 1);

    let (mock, gw) = gateway().await;
    mock.push(Reply::json(500, r#"{"error":{"message":"boom"}}"#));
    let failed = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(failed.status, 500);
    assert_eq!(
        failed.header("x-should-retry"),
        Some("false"),
        "SDKs are told not to retry a 500"
    );
    assert_eq!(mock.requests().len(), 1, "a 500 is attempted exactly once");
}

#[tokio::test]
async fn every_gateway_error_is_counted_and_logged_with_its_code() {
    let (_mock, gw) = gateway().await;
    let response = get(gw.addr(), "/v1/models", Some("sk-wrong")).await;
    assert_eq!(response.status, 401);
    let lines = gw.log_lines(1).await;
    assert_eq!(lines[0]["error_code"], "invalid_api_key");
    assert_eq!(lines[0]["status"], 401);
    assert!(lines[0]["error_message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="invalid_api_key",key="unknown"}"#),
        1.0
    );
}

#[tokio::test]
async fn a_connect_timeout_is_504_upstream_timeout() {
    // A listener with a full accept queue: further connection attempts go unanswered.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(stream);
        }
    }
    let gw = TestGateway::start(&config(&format!("http://{addr}/v1"))).await;
    let started = std::time::Instant::now();
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        response.error(),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            serde_json::Value::Null
        )
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "after connect_timeout (1s)"
    );
    drop(listener);
}

#[tokio::test]
async fn an_upstream_that_stops_reading_the_request_times_out() {
    // Accepts connections and never reads: a large body fills the socket buffers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let gw = TestGateway::start(&config_with(
        &format!("http://{addr}/v1"),
        "max_body_bytes: 64MiB",
    ))
    .await;
    let filler = "x".repeat(48 << 20);
    let body =
        format!(r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{filler}"}}]}}"#);
    let started = std::time::Instant::now();
    let response = chat(gw.addr(), ALPHA, &body).await;
    assert_eq!(response.error().2, "upstream_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded by first_byte_timeout (2s), not forever"
    );
    held.abort();
}

#[tokio::test]
async fn a_malformed_host_is_404_not_a_crash() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "hosts: [api.example.com]")).await;
    for host in ["[x", "[", "[::1", "]:80"] {
        let mut conn = Conn::open(gw.addr()).await;
        conn.write(format!("GET /v1/models HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
            .await;
        let response = conn.read_response().await.expect("an answer, not a reset");
        assert_eq!(response.error().2, "unknown_route", "host {host}");
    }
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(ALPHA)).await.status,
        404,
        "still serving"
    );
}

#[tokio::test]
async fn a_huge_upstream_retry_after_does_not_crash_the_request() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::json(429, "{}").with_header("retry-after", "1e20"));
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 429, "passed through");
    let cooling = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(cooling.error().2, "no_healthy_upstream");
    assert_eq!(
        cooling.header("retry-after"),
        Some("120"),
        "the cooldown is capped at eject_duration_max"
    );
}

/// On paused tokio time: the gateway's body deadline is a tokio timer, so the trickle and
/// the deadline share a virtual clock and no real second passes.
#[tokio::test(start_paused = true)]
async fn a_client_that_trickles_its_body_is_cut_off_at_client_timeout() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "client_timeout: 1s")).await;
    let mut conn = Conn::open(gw.addr()).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    );
    let started = tokio::time::Instant::now();
    conn.write(head.as_bytes()).await;
    // A byte at 0, 400 and 800 ms: no read waits as long as client_timeout, so only the
    // deadline on the whole body (1 s) can end this before 1.8 s.
    for byte in 0..3 {
        if byte > 0 {
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        conn.write(b"{").await;
    }
    assert!(
        conn.closed_by_peer().await,
        "the gateway gives up on the body"
    );
    let cut_after = started.elapsed();
    assert!(
        cut_after >= Duration::from_secs(1),
        "not before client_timeout: cut after {cut_after:?}"
    );
    assert!(
        cut_after < Duration::from_millis(1500),
        "at client_timeout for the whole body, though a byte came every 400 ms: cut after {cut_after:?}"
    );
    // The access log is written by a thread on the real clock.
    tokio::time::resume();
    gw.log_lines(1).await;
    assert_eq!(
        gw.gateway().limiter.gateway_in_flight(),
        0,
        "its slots are back"
    );
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="internal_error",key="alpha"}"#),
        0.0,
        "not our failure"
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn a_malformed_chunked_body_is_not_answered_as_our_500() {
    let (mock, gw) = gateway().await;
    let mut conn = Conn::open(gw.addr()).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n"
    );
    conn.write(head.as_bytes()).await;
    if let Some(response) = conn.read_response().await {
        assert_ne!(
            response.status, 500,
            "a client's broken framing is not our internal error"
        );
    }
    gw.log_lines(1).await;
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="internal_error",key="alpha"}"#),
        0.0
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn a_refused_large_upload_still_gets_its_answer() {
    let (mock, gw) = gateway().await;
    // No `Expect: 100-continue` (the SDKs send none): the whole body is on its way when
    // the key is refused.
    let body = format!(
        r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "q".repeat(6 << 20)
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer sk-wrong"),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    ))
    .await;
    let response = conn.read_response().await.expect("the answer, not a reset");
    assert_eq!(response.error().2, "invalid_api_key");
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn an_upstreams_own_error_is_recorded_with_its_message_code_and_request_id() {
    let (mock, gw) = gateway().await;
    mock.push(
        Reply::json(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        )
        .with_header("x-request-id", "up-req-7"),
    );
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        response.status, 400,
        "the upstream's answer is passed through"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["status"], 400);
    assert_eq!(line["upstream_status"], 400);
    assert_eq!(
        line["error_message"],
        "This model's maximum context length is 8192 tokens."
    );
    assert_eq!(line["upstream_error_code"], "context_length_exceeded");
    assert_eq!(line["upstream_request_id"], "up-req-7");
    assert!(
        line.get("error_code").is_none(),
        "no gateway error code: {line}"
    );
}

#[tokio::test]
async fn a_passed_through_429_has_the_record_of_our_own() {
    let (mock, gw) = gateway().await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    mock.push(
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#).with_header("retry-after", "2"),
    );
    let limited = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(limited.status, 429);
    let lines = gw.log_lines(2).await;
    let line = &lines[1];
    assert_eq!(line["retry_after_ms"], 2000, "{line}");
    assert!(
        line["since_previous_ms"].as_f64().is_some(),
        "the interval since the key's previous request: {line}"
    );
}

#[tokio::test]
async fn the_logged_path_and_host_are_capped() {
    let (_mock, gw) = gateway().await;
    let path = format!("/{}", "a".repeat(20_000));
    let host = "h".repeat(5_000);
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .await;
    assert_eq!(conn.read_response().await.unwrap().status, 404);
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["path"].as_str().unwrap().len(), 1024);
    assert_eq!(line["host"].as_str().unwrap().len(), 256);
}
