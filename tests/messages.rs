//! Anthropic's Messages API through real sockets: a pass-through that changes nothing
//! but `model`, the key in `x-api-key`, the gateway's errors in Anthropic's envelope (and
//! an OpenAI upstream's errors put in it), and a translated stream the upstream cuts.

mod common;
use common::*;
use serde_json::{json, Value};

fn messages_config(upstream: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: up, url: "{upstream}", api_key_env: TEST_UPSTREAM_KEY, auth_header: x-api-key, auth_scheme: '', idle_timeout: 1s}}
models:
  - {{id: claude, upstream: up, upstream_model: claude-real, upstream_api: anthropic, endpoint_type: messages, capabilities: [streaming, tool_calling]}}
  - {{id: local, upstream: up, endpoint_type: messages, endpoints: [messages, chat], capabilities: [streaming]}}
keys:
  - {{name: alpha, sha256: {alpha}}}
  - {{name: slow, sha256: {beta}, requests_per_minute: 1, burst: 1}}
"#,
        alpha = key_hash(ALPHA),
        beta = key_hash(BETA),
    )
}

async fn post_messages(gw: &TestGateway, headers: &[(&str, &str)], body: &str) -> Response {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send(gw.addr(), "POST", "/v1/messages", &all, body.as_bytes()).await
}

#[tokio::test]
async fn a_passed_through_request_arrives_byte_identical_but_for_its_model() {
    let upstream = MockUpstream::start().await;
    upstream.push(Reply::json(
        200,
        r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-real","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}"#,
    ));
    let gw = TestGateway::start(&messages_config(&upstream.url())).await;
    // Odd spacing, key order and a cache marker: nothing of it may change.
    let sent = r#"{ "system": [{"type":"text","text":"big prompt","cache_control": {"type": "ephemeral", "ttl":"1h"}}],
  "model" : "claude", "max_tokens":16, "messages":[{"role":"user","content":"hi"}], "x_unknown": [1,2.50,"é"] }"#;
    let answer = post_messages(
        &gw,
        &[
            ("x-api-key", ALPHA),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "prompt-caching-2024-07-31,extended-cache-ttl-2025-04-11",
            ),
        ],
        sent,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("request-id"), answer.header("x-request-id"));
    let received = &upstream.requests()[0];
    assert_eq!(
        String::from_utf8_lossy(&received.body),
        sent.replace(r#""claude""#, r#""claude-real""#),
        "the upstream gets the client's bytes with only the model renamed"
    );
    assert_eq!(received.path, "/v1/messages");
    assert_eq!(
        received.header("anthropic-beta"),
        Some("prompt-caching-2024-07-31,extended-cache-ttl-2025-04-11")
    );
    assert_eq!(received.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        received.header("x-api-key"),
        Some(UPSTREAM_SECRET),
        "the upstream's credential replaces the client's key"
    );
}

#[tokio::test]
async fn the_gateways_errors_on_the_messages_routes_are_in_anthropics_envelope() {
    let upstream = MockUpstream::start().await;
    let gw = TestGateway::start(&messages_config(&upstream.url())).await;
    let body = r#"{"model":"claude","max_tokens":8,"messages":[{"role":"user","content":"x"}]}"#;
    // (headers, status, Anthropic error type)
    let both = format!("Bearer {BETA}");
    type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: [Case; 4] = [
        (vec![], 401, "authentication_error"),
        (
            vec![("x-api-key", ALPHA), ("authorization", &both)],
            401,
            "authentication_error",
        ),
        (
            vec![("x-api-key", "sk-unknown")],
            401,
            "authentication_error",
        ),
        (vec![("x-api-key", BETA)], 200, ""),
    ];
    upstream.push(Reply::json(
        200,
        r#"{"type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}"#,
    ));
    for (headers, status, kind) in cases {
        let answer = post_messages(&gw, &headers, body).await;
        assert_eq!(answer.status, status, "{headers:?}: {}", answer.text());
        assert!(
            answer.header("request-id").is_some(),
            "request-id on every answer"
        );
        if status != 200 {
            let error = answer.json();
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["type"], kind, "{headers:?}: {error}");
            assert!(error["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()));
            assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
        }
    }
    // The same limits, statuses and headers as on every route.
    let limited = post_messages(&gw, &[("x-api-key", BETA)], body).await;
    assert_eq!(limited.status, 429, "{}", limited.text());
    assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
    assert!(limited.header("retry-after").is_some() && limited.header("retry-after-ms").is_some());
    let missing = post_messages(
        &gw,
        &[("x-api-key", ALPHA)],
        r#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(
        (missing.status, missing.json()["error"]["type"].clone()),
        (404, json!("not_found_error"))
    );
    // Other routes keep OpenAI's envelope, and take the key in x-api-key too.
    let chat = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[("x-api-key", ALPHA), ("content-type", "application/json")],
        br#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(chat.error().2, "model_not_found");
    assert_eq!(
        chat.header("request-id"),
        None,
        "request-id is the Messages API's"
    );
}

#[tokio::test]
async fn an_openai_upstreams_error_reaches_a_messages_client_in_its_envelope() {
    let upstream = MockUpstream::start().await;
    upstream.push(Reply::json(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":null}}"#,
    ));
    let gw = TestGateway::start(&messages_config(&upstream.url())).await;
    let answer = post_messages(
        &gw,
        &[("x-api-key", ALPHA)],
        r#"{"model":"local","max_tokens":8,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(answer.status, 400, "the upstream's status");
    assert_eq!(
        answer.json(),
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "This model's maximum context length is 8192 tokens."}})
    );
    assert_eq!(upstream.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn a_translated_stream_the_upstream_cuts_ends_with_an_anthropic_error_event() {
    let upstream = MockUpstream::start().await;
    let chunk =
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"partial"},"finish_reason":null}]}"#;
    upstream.push(Reply::Sse {
        events: vec![(std::time::Duration::ZERO, chunk.into())],
        end: StreamEnd::Cut,
        close: true,
    });
    let gw = TestGateway::start(&messages_config(&upstream.url())).await;
    let answer = post_messages(
        &gw,
        &[("x-api-key", ALPHA)],
        r#"{"model":"local","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(answer.status, 200);
    let text = answer.text();
    let events: Vec<(&str, Value)> = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (name, data) = e.trim_start_matches('\n').split_once('\n').unwrap();
            (
                name.trim_start_matches("event: "),
                serde_json::from_str(data.trim_start_matches("data: ")).unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "error"
        ],
        "no message_stop: the client must not take a cut answer for a whole one: {text}"
    );
    assert_eq!(events[4].1["type"], "error");
    assert_eq!(events[4].1["error"]["type"], "api_error");
}
