//! The proxy path: what reaches the upstream (credential, body, rename, headers) and what
//! comes back (status, headers, server-timing, request ids), pooling and the dead pooled
//! connection retry.

mod common;
use common::*;
use sha2::{Digest, Sha256};

async fn gateway() -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    (mock, gw)
}

#[tokio::test]
async fn the_upstream_gets_its_credential_and_never_the_clients() {
    let (mock, gw) = gateway().await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.json()["choices"][0]["message"]["content"],
        "hello from mock"
    );
    let received = &mock.requests()[0];
    assert_eq!(received.method, "POST");
    assert_eq!(
        received.path, "/v1/chat/completions",
        "{{url}}/chat/completions"
    );
    assert_eq!(
        received.header("authorization"),
        Some(format!("Bearer {UPSTREAM_SECRET}").as_str())
    );
    assert!(
        received.headers.iter().all(|(_, v)| !v.contains(ALPHA)),
        "the client's key is never forwarded"
    );
    assert_eq!(
        received.header("host"),
        Some(mock.addr.to_string().as_str())
    );
}

#[tokio::test]
async fn a_4_mib_body_arrives_byte_identical() {
    let (mock, gw) = gateway().await;
    let filler = "x".repeat(4 << 20);
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"{filler}"}}],"model":"chat-model","temperature":0.5}}"#
    );
    let response = chat(gw.addr(), ALPHA, &body).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let received = &mock.requests()[0];
    assert_eq!(received.body.len(), body.len());
    assert_eq!(
        Sha256::digest(&received.body),
        Sha256::digest(body.as_bytes()),
        "the body is byte-identical upstream"
    );
}

#[tokio::test]
async fn a_chunked_client_body_is_forwarded_whole() {
    let (mock, gw) = gateway().await;
    let body = format!(
        r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "y".repeat(100_000)
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n").as_bytes()).await;
    for piece in body.as_bytes().chunks(30_000) {
        conn.write(format!("{:x}\r\n", piece.len()).as_bytes())
            .await;
        conn.write(piece).await;
        conn.write(b"\r\n").await;
    }
    conn.write(b"0\r\n\r\n").await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);
    assert_eq!(mock.requests()[0].body, body.as_bytes());
}

#[tokio::test]
async fn upstream_model_renames_only_the_model() {
    let (mock, gw) = gateway().await;
    let body = r#"{ "model" : "renamed", "messages":[{"role":"user","content":"model renamed"}], "max_completion_tokens": 5 }"#;
    mock.push(Reply::json(
        200,
        r#"{"object":"chat.completion","model":"org/real-name","choices":[]}"#,
    ));
    let response = chat(gw.addr(), ALPHA, body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.json()["model"],
        "org/real-name",
        "the answer's model is the backend's, as documented: the body is not rewritten"
    );
    let received = String::from_utf8(mock.requests()[0].body.clone()).unwrap();
    assert_eq!(
        received,
        r#"{ "model" : "org/real-name", "messages":[{"role":"user","content":"model renamed"}], "max_completion_tokens": 5 }"#
    );
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body() {
    let (mock, gw) = gateway().await;
    let body = chat_body("chat-model");
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    let (status, _) = conn.read_head(true).await.unwrap();
    assert_eq!(
        status, 100,
        "the gateway says continue before the client sends its body"
    );
    conn.write(body.as_bytes()).await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);
    assert_eq!(
        mock.requests()[0].header("expect"),
        None,
        "Expect is not forwarded"
    );
}

#[tokio::test]
async fn hop_by_hop_headers_stay_on_their_hop() {
    let (mock, gw) = gateway().await;
    mock.push(
        Reply::completion()
            .with_header("x-request-id", "upstream-7")
            .with_header("x-upstream-extra", "kept"),
    );
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("connection", "keep-alive, x-drop-me"),
            ("x-drop-me", "1"),
            ("te", "trailers"),
            ("x-client-extra", "kept"),
        ],
        chat_body("chat-model").as_bytes(),
    )
    .await;
    let received = &mock.requests()[0];
    for gone in ["x-drop-me", "te", "connection"] {
        assert_eq!(received.header(gone), None, "{gone} is not forwarded");
    }
    assert_eq!(received.header("x-client-extra"), Some("kept"));
    assert_eq!(response.header("x-upstream-extra"), Some("kept"));
    assert_eq!(
        response.header("x-upstream-request-id"),
        Some("upstream-7"),
        "the upstream's id is kept under another name"
    );
}

#[tokio::test]
async fn request_ids_are_kept_when_valid_and_sent_upstream() {
    let (mock, gw) = gateway().await;
    let auth = format!("Bearer {ALPHA}");
    let json = ("content-type", "application/json");
    let kept = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            json,
            ("x-request-id", "client-id_1.2:3"),
        ],
        chat_body("chat-model").as_bytes(),
    )
    .await;
    assert_eq!(kept.header("x-request-id"), Some("client-id_1.2:3"));
    assert_eq!(
        mock.requests()[0].header("x-request-id"),
        Some("client-id_1.2:3")
    );

    let replaced = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), json, ("x-request-id", "bad id!")],
        chat_body("chat-model").as_bytes(),
    )
    .await;
    let generated = replaced.header("x-request-id").unwrap();
    assert_ne!(generated, "bad id!");
    assert!(generated.len() >= 16 && generated.chars().all(|c| c.is_ascii_alphanumeric()));
    assert_eq!(
        mock.requests()[1].header("x-request-id"),
        Some(generated),
        "the generated id is sent upstream"
    );

    let error = get(gw.addr(), "/nope", None).await;
    assert!(
        error.header("x-request-id").is_some(),
        "errors carry a request id"
    );
    let lines = gw.log_lines(3).await;
    assert_eq!(
        lines[0]["request_id"], "client-id_1.2:3",
        "the access log names the request id"
    );
}

#[tokio::test]
async fn server_timing_shows_the_gateway_and_upstream_shares() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::Json {
        status: 200,
        headers: vec![],
        body: "{}".into(),
        delay: std::time::Duration::from_millis(300),
        close: false,
    });
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    let timing = response
        .header("server-timing")
        .expect("server-timing on proxied answers");
    let value = |name: &str| -> f64 {
        timing
            .split(", ")
            .find_map(|p| p.strip_prefix(&format!("{name};dur=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    for part in timing.split(", ") {
        let (_, decimals) = part.split_once('.').expect("milliseconds with decimals");
        assert_eq!(decimals.len(), 3, "three decimals: {timing}");
    }
    assert!(
        (300.0..10_000.0).contains(&value("upstream")),
        "the upstream's 300 ms show as upstream time, in milliseconds: {timing}"
    );
    assert!(
        value("gateway") < value("upstream"),
        "the gateway's share is small: {timing}"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["upstream"], "mock");
    assert_eq!(
        line["upstream_url"],
        format!("{}/chat/completions", mock.url())
    );
    assert!(line["ttfb_ms"].as_f64().unwrap() >= 300.0);
}

#[tokio::test]
async fn keep_alive_connections_to_the_upstream_are_pooled() {
    let (mock, gw) = gateway().await;
    for _ in 0..10 {
        assert_eq!(
            chat(gw.addr(), ALPHA, &chat_body("chat-model"))
                .await
                .status,
            200
        );
    }
    assert_eq!(
        mock.connections(),
        1,
        "ten sequential requests share one upstream connection"
    );
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_not_used() {
    let (mock, gw) = gateway().await;
    // The upstream answers, then closes the connection while announcing keep-alive, as
    // llama.cpp's server does after a streamed response.
    mock.push(Reply::completion().closing());
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    mock.wait_until("the first connection to close", |m| m.closed() >= 1)
        .await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        response.status,
        200,
        "the client never sees the closed connection: {}",
        response.text()
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "each request reached the upstream once");
    assert_eq!(
        requests[1].connection, 1,
        "the second went on a fresh connection"
    );
}

#[tokio::test]
async fn a_request_the_upstream_read_then_dropped_is_not_sent_again() {
    let (mock, gw) = gateway().await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    // On the pooled connection, the upstream reads the whole request, then closes without
    // a byte of answer (a crash, an OOM kill): it may have worked on it.
    mock.push(Reply::CloseAfterReading);
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    let (status, _, code, _) = response.error();
    assert_eq!((status, code.as_str()), (502, "upstream_unavailable"));
    assert_eq!(
        mock.requests().len(),
        2,
        "a request the upstream held is never sent a second time"
    );
}

#[tokio::test]
async fn a_fresh_connection_that_dies_is_not_retried() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::CloseAfterReading);
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.error().2, "upstream_unavailable");
    assert_eq!(
        mock.requests().len(),
        1,
        "a request that may have reached the upstream is not resent"
    );
}

#[tokio::test]
async fn llama_cpp_style_close_after_stream_is_invisible() {
    let (mock, gw) = gateway().await;
    // A stream announced keep-alive, then the server closed the connection.
    mock.push(Reply::Sse {
        events: vec![(std::time::Duration::ZERO, "[DONE]".into())],
        end: StreamEnd::Done,
        close: true,
    });
    let mut stream = EventStream::open(
        gw.addr(),
        ALPHA,
        r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(stream.rest().await, ["[DONE]"]);
    for _ in 0..3 {
        assert_eq!(
            chat(gw.addr(), ALPHA, &chat_body("chat-model"))
                .await
                .status,
            200
        );
    }
}

#[tokio::test]
async fn a_reused_connection_that_dies_after_part_of_an_answer_is_not_resent() {
    let (mock, gw) = gateway().await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    mock.push(Reply::PartialThenClose);
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 502, "{}", response.text());
    assert_eq!(
        mock.requests().len(),
        2,
        "part of an answer came back: the request may have been processed"
    );
}

#[tokio::test]
async fn client_credentials_stay_behind_and_the_client_address_is_appended() {
    let (mock, gw) = gateway().await;
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("x-api-key", ALPHA),
            ("api-key", ALPHA),
            ("cookie", "session=abc"),
            ("x-forwarded-for", "6.6.6.6"),
        ],
        chat_body("chat-model").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 200);
    let request = &mock.requests()[0];
    for gone in ["x-api-key", "api-key", "cookie"] {
        assert_eq!(
            request.header(gone),
            None,
            "{gone} never reaches the upstream"
        );
    }
    assert_eq!(
        request.header("x-forwarded-for"),
        Some("6.6.6.6, 127.0.0.1")
    );
}

#[tokio::test]
async fn origin_scoped_upstream_headers_stay_behind() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nset-cookie: a=1\r\n\
          alt-svc: h3=\":443\"\r\nstrict-transport-security: max-age=9\r\n\
          content-length: 2, 2\r\n\r\n{}"
            .to_vec(),
    ));
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.text(), "{}");
    for gone in ["set-cookie", "alt-svc", "strict-transport-security"] {
        assert_eq!(
            response.header(gone),
            None,
            "{gone} is not passed to the client"
        );
    }
    assert_eq!(
        response.header("content-length"),
        Some("2"),
        "framing is the gateway's"
    );
}

#[tokio::test]
async fn an_invalid_status_or_framing_is_a_protocol_error() {
    let (mock, gw) = gateway().await;
    for answer in [
        &b"HTTP/1.1 999 Odd\r\ncontent-length: 2\r\n\r\n{}"[..],
        &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}"[..],
        &b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\n{}"[..],
    ] {
        mock.push(Reply::Raw(answer.to_vec()));
        let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
        let (status, _, code, _) = response.error();
        assert_eq!(
            (status, code.as_str()),
            (502, "upstream_protocol_error"),
            "{}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[tokio::test]
async fn an_answer_sent_before_the_whole_body_is_relayed() {
    let (mock, gw) = gateway().await;
    let refusal = b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"error\":\"large\"}";
    let prompt = "x".repeat(6 << 20);
    let body =
        format!(r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    for _ in 0..6 {
        mock.push(Reply::EarlyAnswer(refusal.to_vec()));
        let response = chat(gw.addr(), ALPHA, &body).await;
        assert_eq!(
            response.status,
            413,
            "the upstream's own answer: {}",
            response.text()
        );
        assert_eq!(response.text(), r#"{"error":"large"}"#);
    }
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200,
        "refusing a body is not a health failure: the upstream is still in service"
    );
}
