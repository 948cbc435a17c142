//! Tokens: usage read from JSON answers and from every shape of usage chunk in a stream, the
//! usage asked for on the client's behalf and taken out again (byte for byte), token windows
//! that reserve an estimate, answer 429 with an exact Retry-After, refund, go into debt, and
//! keep the reservation when no usage comes.

mod common;
use common::*;
use std::time::Duration;

/// The standard catalog with `setting` added to the mock upstream.
fn upstream_setting(upstream: &str, setting: &str) -> String {
    config(upstream).replace(
        "    idle_timeout: 1s\n",
        &format!("    idle_timeout: 1s\n    {setting}\n"),
    )
}

fn sse(events: &[&str]) -> Reply {
    Reply::Sse {
        events: events
            .iter()
            .map(|e| (Duration::ZERO, e.to_string()))
            .collect(),
        end: StreamEnd::Done,
        close: false,
    }
}

fn stream_body(stream_options: &str) -> String {
    format!(
        r#"{{"model":"chat-model","stream":true{stream_options},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

const CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#;
const LAST: &str = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

/// A chunk with `usage` set (`null` or an object) as its last member.
fn with_usage(chunk: &str, usage: &str) -> String {
    format!("{},\"usage\":{usage}}}", &chunk[..chunk.len() - 1])
}

#[tokio::test]
async fn usage_is_counted_for_json_answers() {
    let mock = MockUpstream::start().await;
    mock.push(json_with_usage(
        r#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8}}"#,
    ));
    let gw = TestGateway::start(&config(&mock.url())).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.json()["usage"]["total_tokens"],
        42,
        "relayed as is"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        (&line["input_tokens"], &line["output_tokens"]),
        (&12.into(), &30.into())
    );
    assert_eq!(
        line["reserved_tokens"],
        serde_json::Value::Null,
        "no token limit"
    );
    let series =
        |kind| format!(r#"sluice_tokens_total{{key="alpha",kind="{kind}",model="chat-model"}}"#);
    assert_eq!(gw.metric(&series("input")), 12.0);
    assert_eq!(gw.metric(&series("output")), 30.0);
}

#[tokio::test]
async fn usage_is_read_from_each_shape_of_stream() {
    let usage = r#"{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}"#;
    let only_usage = with_usage(
        r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[]}"#,
        usage,
    );
    let shapes: Vec<Vec<String>> = vec![
        // OpenAI: `usage: null` on every chunk, then a chunk of its own with no choices.
        vec![
            with_usage(CHUNK, "null"),
            with_usage(LAST, "null"),
            only_usage.clone(),
            "[DONE]".into(),
        ],
        // Without the nulls (vLLM, the echo backend).
        vec![CHUNK.into(), LAST.into(), only_usage, "[DONE]".into()],
        // On the chunk that carries finish_reason (several hosted APIs).
        vec![CHUNK.into(), with_usage(LAST, usage), "[DONE]".into()],
        // No [DONE] at all, usage on the last chunk.
        vec![CHUNK.into(), with_usage(LAST, usage)],
    ];
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let asked = stream_body(r#","stream_options":{"include_usage":true}"#);
    for (i, shape) in shapes.iter().enumerate() {
        let events: Vec<&str> = shape.iter().map(String::as_str).collect();
        mock.push(sse(&events));
        let response = chat(gw.addr(), ALPHA, &asked).await;
        assert_eq!(response.status, 200);
        let expected: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        assert_eq!(
            response.text(),
            expected,
            "shape {i}: the client asked, so nothing changes"
        );
        let line = &gw.log_lines(i + 1).await[i];
        assert_eq!(
            (&line["input_tokens"], &line["output_tokens"]),
            (&3.into(), &4.into()),
            "shape {i}"
        );
    }
}

#[tokio::test]
async fn a_responses_stream_gives_its_usage_from_response_completed() {
    let mock = MockUpstream::start().await;
    let yaml = config(&mock.url()).replace(
        "models:\n",
        "models:\n  - id: responder\n    upstream: mock\n    endpoint_type: responses\n    capabilities: [streaming]\n",
    );
    let gw = TestGateway::start(&yaml).await;
    mock.push(sse(&[
        r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}"#,
        r#"{"type":"response.output_text.delta","delta":"hi"}"#,
        r#"{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":5,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":2}}}}"#,
    ]));
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "POST",
        "/v1/responses",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        br#"{"model":"responder","input":"hi","stream":true}"#,
    )
    .await;
    assert_eq!(response.status, 200);
    let sent: serde_json::Value = serde_json::from_slice(&mock.requests()[0].body).unwrap();
    assert!(
        sent.get("stream_options").is_none(),
        "the Responses API is not asked"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        (&line["input_tokens"], &line["output_tokens"]),
        (&5.into(), &9.into())
    );
}

#[tokio::test]
async fn usage_is_asked_for_and_taken_out_again_byte_for_byte() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    // What the upstream sends when asked for usage, and what it sends when not.
    let asked = [
        with_usage(CHUNK, "null"),
        with_usage(LAST, "null"),
        with_usage(
            r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[]}"#,
            r#"{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}"#,
        ),
        "[DONE]".into(),
    ];
    let plain: String = [CHUNK, LAST, "[DONE]"]
        .iter()
        .map(|e| format!("data: {e}\n\n"))
        .collect();
    mock.push(sse(&asked.iter().map(String::as_str).collect::<Vec<_>>()));
    let body = stream_body(r#","stream_options":{"continuous_usage_stats":false}"#);
    let response = chat(gw.addr(), ALPHA, &body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.text(),
        plain,
        "the client sees exactly the stream it would have had without the gateway"
    );
    let sent: serde_json::Value = serde_json::from_slice(&mock.requests()[0].body).unwrap();
    assert_eq!(
        sent["stream_options"],
        serde_json::json!({"include_usage": true, "continuous_usage_stats": false}),
        "usage asked for, the client's other options kept"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        (&line["input_tokens"], &line["output_tokens"]),
        (&3.into(), &4.into())
    );

    // A client that says include_usage: false is a client that did not ask.
    mock.push(sse(&asked.iter().map(String::as_str).collect::<Vec<_>>()));
    let body = stream_body(r#","stream_options":{"include_usage":false}"#);
    assert_eq!(chat(gw.addr(), ALPHA, &body).await.text(), plain);
    let sent: serde_json::Value = serde_json::from_slice(&mock.requests()[1].body).unwrap();
    assert_eq!(sent["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn passthrough_and_off_leave_the_request_as_the_client_sent_it() {
    for mode in ["passthrough", "off"] {
        let mock = MockUpstream::start().await;
        let gw = TestGateway::start(&upstream_setting(
            &mock.url(),
            &format!("stream_usage: {mode}"),
        ))
        .await;
        mock.push(Reply::stream(2, Duration::ZERO));
        let body = stream_body("");
        assert_eq!(chat(gw.addr(), ALPHA, &body).await.status, 200);
        assert_eq!(
            mock.requests()[0].body,
            body.as_bytes(),
            "{mode}: the body is forwarded untouched"
        );
        // A client that asks gets the usage chunk as the upstream sends it, and it is read.
        let usage_chunk = with_usage(
            r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[]}"#,
            r#"{"prompt_tokens":3,"completion_tokens":4}"#,
        );
        mock.push(sse(&[CHUNK, &usage_chunk, "[DONE]"]));
        let asked = stream_body(r#","stream_options":{"include_usage":true}"#);
        let response = chat(gw.addr(), ALPHA, &asked).await;
        assert!(response.text().contains(&usage_chunk), "{mode}");
        assert_eq!(mock.requests()[1].body, asked.as_bytes(), "{mode}");
        let lines = gw.log_lines(2).await;
        assert_eq!(
            lines[0]["output_tokens"],
            serde_json::Value::Null,
            "{mode}: none sent"
        );
        assert_eq!(lines[1]["output_tokens"], 4, "{mode}");
        assert_eq!(
            gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
            1.0,
            "{mode}: the stream without usage is counted"
        );
    }
}

#[tokio::test]
async fn a_token_window_admits_until_the_estimate_no_longer_fits_then_at_retry_after() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1000")).await;
    let body = body_estimating(300);
    // Each answer uses exactly what was reserved: no refund, no overage.
    mock.set_default(json_with_usage(
        r#"{"prompt_tokens":100,"completion_tokens":200}"#,
    ));
    for (i, remaining) in ["700", "400", "100"].iter().enumerate() {
        let response = chat(gw.addr(), LIMITED, &body).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.header("x-ratelimit-limit-tokens"), Some("1000"));
        assert_eq!(
            response.header("x-ratelimit-remaining-tokens"),
            Some(*remaining)
        );
        gw.log_lines(i + 1).await;
    }
    let refused = chat(gw.addr(), LIMITED, &body).await;
    let (status, kind, code, _) = refused.error();
    assert_eq!(
        (status, kind.as_str(), code.as_str()),
        (429, "rate_limit_error", "rate_limit_exceeded")
    );
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("tokens per minute"), "{message}");
    // 1200 tokens at 60 ms each are 72 s of a 60 s window: 12 s to wait.
    assert_eq!(refused.header("retry-after-ms"), Some("12000"));
    assert_eq!(refused.header("retry-after"), Some("12"));
    assert_eq!(refused.header("x-ratelimit-remaining-tokens"), Some("100"));
    assert_eq!(refused.header("x-ratelimit-reset-tokens"), Some("54s"));

    gw.clock.advance(Duration::from_millis(11_999));
    assert_eq!(
        chat(gw.addr(), LIMITED, &body).await.status,
        429,
        "not a millisecond early"
    );
    gw.clock.advance(Duration::from_millis(1));
    assert_eq!(
        chat(gw.addr(), LIMITED, &body).await.status,
        200,
        "admitted at Retry-After"
    );
    let lines = gw.log_lines(6).await;
    assert_eq!(lines[0]["reserved_tokens"], 300);
    assert_eq!(
        mock.requests().len(),
        4,
        "refused requests never reach the upstream"
    );
    // A request larger than the whole window is capped at it, so it can pass on a full one.
    gw.clock.advance(Duration::from_secs(120));
    assert_eq!(
        chat(gw.addr(), LIMITED, &body_estimating(5000))
            .await
            .status,
        200
    );
    assert_eq!(gw.log_lines(7).await[6]["reserved_tokens"], 1000);
}

#[tokio::test]
async fn a_refund_lets_more_requests_fit_and_overage_puts_the_key_in_debt() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1000")).await;
    let body = body_estimating(300);
    // Ten answers of 10 tokens each: 300 reserved, 290 given back every time.
    mock.set_default(json_with_usage(
        r#"{"prompt_tokens":4,"completion_tokens":6}"#,
    ));
    for i in 0..10 {
        let response = chat(gw.addr(), LIMITED, &body).await;
        assert_eq!(response.status, 200, "request {i} fits after the refunds");
        gw.log_lines(i + 1).await;
    }
    let status = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(
        status.header("x-ratelimit-remaining-tokens"),
        Some("600"),
        "100 used, 300 held"
    );
    gw.log_lines(11).await;

    // An answer that used 2000 tokens against a reservation of 300 (its input was
    // underestimated: the output stays within the request's limit, so it is believed).
    gw.clock.advance(Duration::from_secs(60));
    mock.push(json_with_usage(
        r#"{"prompt_tokens":1900,"completion_tokens":100}"#,
    ));
    assert_eq!(chat(gw.addr(), LIMITED, &body).await.status, 200);
    gw.log_lines(12).await;
    let refused = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(refused.status, 429, "the key is in debt");
    // 2000 tokens owed are 120 s; 300 more make 138 s against a 60 s window.
    assert_eq!(refused.header("retry-after-ms"), Some("78000"));
    assert_eq!(refused.header("x-ratelimit-remaining-tokens"), Some("0"));
}

#[tokio::test]
async fn without_usage_the_reservation_stands_and_an_error_answer_gives_it_back() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1000")).await;
    let body = body_estimating(300);
    // A 200 without usage: the reservation stands, counted as missing.
    mock.push(Reply::json(
        200,
        r#"{"id":"c","object":"chat.completion","choices":[]}"#,
    ));
    assert_eq!(chat(gw.addr(), LIMITED, &body).await.status, 200);
    gw.log_lines(1).await;
    assert_eq!(
        gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
        1.0
    );
    // A usage field the upstream got wrong counts as none, never as a refund.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":-5,"completion_tokens":"many"}"#,
    ));
    let second = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(second.header("x-ratelimit-remaining-tokens"), Some("400"));
    gw.log_lines(2).await;
    assert_eq!(
        gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
        2.0
    );
    // An upstream error answer generated nothing: its reservation is given back.
    mock.push(Reply::json(
        500,
        r#"{"error":{"message":"boom","type":"server_error"}}"#,
    ));
    let failed = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(failed.status, 500);
    assert_eq!(
        failed.header("x-ratelimit-remaining-tokens"),
        Some("100"),
        "held while in flight"
    );
    gw.log_lines(3).await;
    mock.push(Reply::completion());
    let after = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(after.status, 200);
    assert_eq!(
        after.header("x-ratelimit-remaining-tokens"),
        Some("100"),
        "the 500's 300 came back; this request holds 300 of its own"
    );
    assert_eq!(
        gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
        2.0
    );
}

#[tokio::test]
async fn a_cut_stream_keeps_its_reservation() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1000")).await;
    mock.push(Reply::Sse {
        events: vec![(Duration::ZERO, CHUNK.to_string())],
        end: StreamEnd::Cut,
        close: true,
    });
    let body = stream_body(r#","max_tokens":200"#);
    let response = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(response.status, 200);
    let line = &gw.log_lines(1).await[0];
    let reserved = line["reserved_tokens"].as_u64().unwrap();
    assert!(reserved > 200, "input and output reserved: {line}");
    assert_eq!(
        gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
        1.0
    );
    let view = get(gw.admin(), "/keys/limited", None).await.json();
    assert_eq!(
        view["tokens"]["per_minute"]["remaining"],
        1000 - reserved,
        "the cut stream's reservation stands"
    );
}

#[tokio::test]
async fn bad_output_limits_and_stream_options_are_refused_before_anything_is_reserved() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    tokens_per_minute: 1000\n    tokens_per_day: 50000",
    ))
    .await;
    for (extra, param) in [
        (r#","max_tokens":-1"#, "max_tokens"),
        (r#","max_tokens":"ten""#, "max_tokens"),
        (r#","max_completion_tokens":1e12"#, "max_completion_tokens"),
        (r#","stream_options":"usage""#, "stream_options"),
    ] {
        let body = format!(
            r#"{{"model":"chat-model","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#
        );
        let refused = chat(gw.addr(), LIMITED, &body).await;
        assert_eq!(
            refused.error(),
            (
                400,
                "invalid_request_error".into(),
                "invalid_parameter".into(),
                param.into()
            ),
            "{extra}"
        );
        assert_eq!(
            refused.header("x-ratelimit-remaining-tokens"),
            Some("1000"),
            "{extra}"
        );
        assert_eq!(refused.header("x-ratelimit-limit-tokens"), Some("1000"));
    }
    assert!(mock.requests().is_empty());
    // The admin view shows both windows.
    let view = get(gw.admin(), "/keys/limited", None).await.json();
    assert_eq!(view["limits"]["tokens_per_day"], 50000);
    assert_eq!(view["tokens"]["per_minute"]["remaining"], 1000);
    assert_eq!(view["tokens"]["per_day"]["limit"], 50000);
}

#[tokio::test]
async fn token_usage_survives_a_reload_and_a_changed_limit_applies_at_once() {
    let mock = MockUpstream::start().await;
    let yaml = limited_config(&mock.url(), "    tokens_per_minute: 1000");
    let gw = TestGateway::start(&yaml).await;
    mock.set_default(json_with_usage(
        r#"{"prompt_tokens":100,"completion_tokens":400}"#,
    ));
    assert_eq!(
        chat(gw.addr(), LIMITED, &body_estimating(500)).await.status,
        200
    );
    gw.log_lines(1).await;
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let reloaded = yaml.replace("tokens_per_minute: 1000", "tokens_per_minute: 2000");
    let config = sluice::config::parse("t.yaml", &reloaded, None, &env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let response = chat(gw.addr(), LIMITED, &body_estimating(500)).await;
    assert_eq!(
        response.header("x-ratelimit-limit-tokens"),
        Some("2000"),
        "the new limit"
    );
    // The 500 used before the reload still count, at the new rate: a quarter of the
    // window, then 500 more reserved.
    assert_eq!(
        response.header("x-ratelimit-remaining-tokens"),
        Some("1000")
    );
}
