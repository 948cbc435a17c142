//! No secret in any output, ever: client keys (valid and rejected), the upstream
//! credential and query strings are sent through every path at the most verbose log level,
//! and none of them appears in anything the process wrote or in any answer.

mod common;
use common::*;
use std::time::Duration;

const UNKNOWN_KEY: &str = "sk-unknown-key-that-must-not-leak-77";
const QUERY_SECRET: &str = "query-secret-value-88";

#[tokio::test]
async fn no_secret_reaches_logs_or_answers() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("secrets");
    let config = dir.join("gateway.yaml");
    let yaml = config_with(&mock.url(), "log_level: trace\nmax_body_bytes: 64KiB")
        .replace("TEST_UPSTREAM_KEY", "SLUICE_SECRET_TEST_KEY");
    std::fs::write(&config, yaml).unwrap();
    let process = GatewayProcess::start(&config, &[("SLUICE_SECRET_TEST_KEY", UPSTREAM_SECRET)]);
    let addr = process.addr;
    let mut answers = Vec::new();
    let stream_body =
        r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

    // Success paths: listing, one model, completion, stream.
    answers.push(get(addr, "/v1/models", Some(ALPHA)).await);
    answers.push(get(addr, "/v1/models/chat-model", Some(ALPHA)).await);
    answers.push(chat(addr, ALPHA, &chat_body("chat-model")).await);
    mock.push(Reply::stream(3, Duration::from_millis(10)));
    let mut stream = EventStream::open(addr, ALPHA, stream_body).await;
    let events = stream.rest().await;
    assert!(events
        .iter()
        .all(|e| !e.contains(ALPHA) && !e.contains(UPSTREAM_SECRET)));

    // Rejected keys: unknown, disabled, malformed, a key in the query string.
    answers.push(get(addr, "/v1/models", Some(UNKNOWN_KEY)).await);
    answers.push(get(addr, "/v1/models", Some(DISABLED)).await);
    let token_only = format!("Token {UNKNOWN_KEY}");
    answers.push(
        send(
            addr,
            "GET",
            "/v1/models",
            &[("authorization", &token_only)],
            b"",
        )
        .await,
    );
    answers.push(
        send(
            addr,
            "GET",
            &format!("/v1/models?api_key={QUERY_SECRET}"),
            &[],
            b"",
        )
        .await,
    );
    answers.push(
        get(
            addr,
            &format!("/v1/models?api_key={QUERY_SECRET}"),
            Some(ALPHA),
        )
        .await,
    );

    // Every other error path.
    answers.push(get(addr, "/v1/v1/models", Some(ALPHA)).await);
    answers.push(
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {ALPHA}"))],
            b"{}",
        )
        .await,
    );
    answers.push(chat(addr, ALPHA, "{broken").await);
    answers.push(chat(addr, ALPHA, r#"{"model":"chat-model"}"#).await);
    answers.push(chat(addr, ALPHA, &chat_body("missing-model")).await);
    answers.push(
        chat(
            addr,
            ALPHA,
            &format!(
                r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{}"}}]}}"#,
                "z".repeat(70_000)
            ),
        )
        .await,
    );
    answers.push(
        chat(
            addr,
            ALPHA,
            r#"{"model":"plain-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#,
        )
        .await,
    );
    answers.push(chat(addr, BETA, &chat_body("chat-model")).await);
    mock.push(Reply::json(401, r#"{"error":"bad credential"}"#));
    answers.push(chat(addr, ALPHA, &chat_body("chat-model")).await);
    mock.push(Reply::json(500, r#"{"error":"boom"}"#));
    answers.push(chat(addr, ALPHA, &chat_body("chat-model")).await);
    mock.push(Reply::Garbage);
    answers.push(chat(addr, ALPHA, &chat_body("chat-model")).await);
    mock.push(Reply::Sse {
        events: vec![(Duration::ZERO, "{}".into())],
        end: StreamEnd::Cut,
        close: false,
    });
    let mut cut = EventStream::open(addr, ALPHA, stream_body).await;
    let cut_events = cut.rest().await;
    assert!(
        cut_events
            .last()
            .is_some_and(|e| e.contains("upstream_unavailable")),
        "{cut_events:?}"
    );
    mock.push(Reply::stream(10, Duration::from_millis(200)));
    let mut leaving = EventStream::open(addr, ALPHA, stream_body).await;
    leaving.next_event().await;
    leaving.disconnect();
    mock.wait_until("the abandoned stream", |m| m.abandoned() >= 1)
        .await;

    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        [
            200, 200, 200, 401, 401, 401, 401, 200, 404, 415, 400, 400, 404, 413, 400, 404, 502,
            500, 502
        ]
    );
    let upstream_saw = mock.requests();
    assert!(
        upstream_saw
            .iter()
            .all(|r| r.headers.iter().all(|(_, v)| !v.contains(ALPHA))),
        "no client key upstream"
    );

    let (code, stdout, stderr) = process.stop();
    assert_eq!(code, Some(0), "a clean exit on SIGTERM");
    assert!(
        stdout.lines().count() >= answers.len() + 2,
        "one access line per request:\n{stdout}"
    );
    assert!(
        stderr.contains("\"level\""),
        "diagnostic logs were written:\n{stderr}"
    );
    let everything = format!(
        "{stdout}\n{stderr}\n{}",
        answers
            .iter()
            .map(Response::text)
            .collect::<Vec<_>>()
            .join("\n")
    );
    for secret in [
        ALPHA,
        BETA,
        DISABLED,
        UNKNOWN_KEY,
        UPSTREAM_SECRET,
        QUERY_SECRET,
    ] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked into output or answers"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An upstream whose error answers echo the credential the gateway sent it: neither the
/// client's answer nor the access log gets it, in any framing, and the answer's
/// `Content-Length` is the redacted body's.
#[tokio::test]
async fn an_upstream_that_echoes_its_credential_has_it_redacted() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let echoed = format!(
        r#"{{"error":{{"message":"bad key: Bearer {UPSTREAM_SECRET} rejected","code":"bad_key"}}}}"#
    );
    mock.push(
        Reply::json(400, &echoed).with_header("x-request-id", &format!("up-{UPSTREAM_SECRET}")),
    );
    // Chunked, the credential bare and cut across two chunks.
    let text = format!(r#"{{"detail":"key {UPSTREAM_SECRET} is over quota"}}"#);
    let (first, second) = text.split_at(20);
    mock.push(Reply::Raw(
        format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
            first.len(),
            second.len()
        )
        .into_bytes(),
    ));
    // An error sent as an event stream.
    mock.push(Reply::Raw(
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/event-stream\r\n\r\ndata: {{\"error\":{{\"message\":\"upstream key Bearer {UPSTREAM_SECRET}\"}}}}\n\n"
        )
        .into_bytes(),
    ));
    let auth = format!("Bearer {ALPHA}");
    let request = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        chat_body("chat-model").as_bytes(),
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request).await;
    let json = conn.read_response().await.expect("an answer");
    assert_eq!(json.status, 400);
    assert_eq!(
        json.json()["error"]["message"],
        "bad key: [redacted] rejected",
        "the upstream's answer is relayed, redacted"
    );
    assert_eq!(
        json.header("content-length"),
        Some(json.body.len().to_string().as_str()),
        "Content-Length is the redacted body's"
    );
    // The same connection carries the next request: the framing was right.
    conn.write(&request).await;
    let chunked = conn.read_response().await.expect("a second answer");
    assert_eq!(chunked.status, 500);
    assert_eq!(
        chunked.json()["detail"],
        "key [redacted] is over quota",
        "redacted across chunks"
    );
    let events = chat(
        gw.addr(),
        ALPHA,
        r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(events.status, 503);
    assert_eq!(
        events.text(),
        "data: {\"error\":{\"message\":\"upstream key [redacted]\"}}\n\n"
    );

    let lines = gw.log_lines(3).await;
    let logged = serde_json::to_string(&lines).unwrap();
    assert!(
        !logged.contains(UPSTREAM_SECRET),
        "the access log never holds the credential: {logged}"
    );
    assert_eq!(lines[0]["error_message"], "bad key: [redacted] rejected");
    assert_eq!(lines[0]["upstream_request_id"], "up-[redacted]");
    assert_eq!(lines[1]["error_message"], "key [redacted] is over quota");
    for answer in [&json, &chunked, &events] {
        assert!(
            !answer.text().contains(UPSTREAM_SECRET)
                && answer
                    .headers
                    .iter()
                    .all(|(_, v)| !v.contains(UPSTREAM_SECRET)),
            "no answer holds the credential: {answer:?}"
        );
    }
}
