//! Per-key limits under load: exact concurrency, exact request rate on an injected clock,
//! honest Retry-After, rate headers on every answer, the gateway-wide cap, and slots given
//! back however a request ends.

mod common;
use common::*;
use std::time::Duration;

const LIMITED: &str = "sk-test-limited-0123456789";

async fn next(done: &mut tokio::sync::mpsc::UnboundedReceiver<Response>) -> Response {
    tokio::time::timeout(Duration::from_secs(20), done.recv())
        .await
        .expect("an answer within 20 s")
        .unwrap()
}

fn limited_config(upstream: &str, key_limits: &str, top: &str) -> String {
    config_with(upstream, top).replace(
        "keys:\n",
        &format!(
            "keys:\n  - name: limited\n    sha256: {}\n{key_limits}\n",
            key_hash(LIMITED)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_admits_exactly_the_limit_under_contention() {
    let mock = MockUpstream::start().await;
    // Admitted requests are held by the upstream until every refusal has come back.
    mock.set_default(Reply::Gated);
    let gw = TestGateway::start(&limited_config(&mock.url(), "    max_concurrent: 7", "")).await;
    let addr = gw.addr();
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..200 {
        let done_tx = done_tx.clone();
        tokio::spawn(async move {
            let _ = done_tx.send(chat(addr, LIMITED, &chat_body("chat-model")).await);
        });
    }
    for _ in 0..193 {
        let response = next(&mut done).await;
        assert_eq!(
            response.status,
            429,
            "while 7 are held, every other request is refused: {}",
            response.text()
        );
        assert_eq!(response.error().2, "concurrency_limit_exceeded");
        assert_eq!(response.header("retry-after"), Some("1"));
        assert_eq!(response.header("retry-after-ms"), Some("1000"));
    }
    assert_eq!(
        mock.requests().len(),
        7,
        "exactly min(200, 7) admitted and sent upstream"
    );
    mock.open_gate();
    for _ in 0..7 {
        assert_eq!(next(&mut done).await.status, 200);
    }
    gw.log_lines(200).await;
    assert_eq!(
        gw.gateway().limiter.in_flight("limited"),
        0,
        "every slot is back"
    );
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="concurrency_limit_exceeded",key="limited"}"#),
        193.0
    );
}

#[tokio::test]
async fn a_slot_is_released_when_the_client_leaves_mid_stream() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    max_concurrent: 1", "")).await;
    mock.push(Reply::stream(50, Duration::from_millis(200)));
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let mut stream = EventStream::open(gw.addr(), LIMITED, body).await;
    stream.next_event().await.unwrap();
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        429,
        "the stream holds the only slot"
    );
    stream.disconnect();
    mock.wait_until("the stream to be abandoned", |m| m.abandoned() == 1)
        .await;
    gw.log_lines(2).await;
    assert_eq!(gw.gateway().limiter.in_flight("limited"), 0);
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "the slot is free again"
    );
}

#[tokio::test]
async fn a_slot_is_released_after_an_upstream_error_and_a_timeout() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    max_concurrent: 1", "")).await;
    mock.push(Reply::json(500, "{}"));
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        500
    );
    mock.push(Reply::Garbage);
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        502
    );
    mock.push(Reply::Silent);
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        504
    );
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    mock.push(Reply::Sse {
        events: vec![(Duration::ZERO, "{}".into())],
        end: StreamEnd::Stall,
        close: false,
    });
    let mut stalled = EventStream::open(gw.addr(), LIMITED, body).await;
    assert!(stalled
        .rest()
        .await
        .last()
        .unwrap()
        .contains("upstream_timeout"));
    gw.log_lines(4).await;
    assert_eq!(gw.gateway().limiter.in_flight("limited"), 0);
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn the_rate_is_exact_and_retry_after_is_what_it_takes() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    requests_per_minute: 60\n    burst: 3",
        "",
    ))
    .await;
    for remaining in ["2", "1", "0"] {
        let response = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("x-ratelimit-limit-requests"),
            Some("60"),
            "rate headers on 200s too"
        );
        assert_eq!(
            response.header("x-ratelimit-remaining-requests"),
            Some(remaining)
        );
    }
    let refused = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(
        refused.error(),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            serde_json::Value::Null
        )
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.header("retry-after-ms"),
        Some("1000"),
        "one request per second refills"
    );
    assert_eq!(refused.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(
        refused.header("x-ratelimit-reset-requests"),
        Some("3s"),
        "three intervals until the bucket is full"
    );

    gw.clock.advance(Duration::from_millis(999));
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        429,
        "not a millisecond early"
    );
    gw.clock.advance(Duration::from_millis(1));
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "admitted once Retry-After has passed"
    );
    gw.clock.advance(Duration::from_secs(60));
    for _ in 0..3 {
        assert_eq!(
            chat(gw.addr(), LIMITED, &chat_body("chat-model"))
                .await
                .status,
            200,
            "a full burst after an idle minute"
        );
    }
    let lines = gw.log_lines(9).await;
    let limited: Vec<_> = lines.iter().filter(|l| l["status"] == 429).collect();
    assert_eq!(limited[0]["retry_after_ms"], 1000);
    assert!(
        limited[0]["since_previous_ms"].is_number(),
        "a 429 record carries the interval since the key's previous request"
    );
    assert_eq!(
        mock.requests().len(),
        7,
        "refused requests never reach the upstream"
    );
}

/// The number in "Retry after N ms." taken from a 429's message.
fn wait_in_message(response: &Response) -> u64 {
    let message = response.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let number = message
        .split("Retry after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok());
    number.unwrap_or_else(|| panic!("the message states a wait: {message}"))
}

#[tokio::test]
async fn a_429_states_one_wait_in_its_message_header_and_log_line() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    requests_per_minute: 60\n    burst: 1",
        "",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    // 0.3 ms later the wait is 999.7 ms: not a whole number of milliseconds.
    gw.clock.advance(Duration::from_micros(300));
    let refused = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("retry-after-ms"),
        Some("1000"),
        "rounded up: a client that waits this long is admitted"
    );
    assert_eq!(
        wait_in_message(&refused),
        1000,
        "the message states the header's wait, not one a millisecond short"
    );
    let lines = gw.log_lines(2).await;
    assert_eq!(
        lines[1]["retry_after_ms"], 1000,
        "the log line states it too"
    );
    assert_eq!(
        lines[1]["error_message"],
        refused.json()["error"]["message"],
        "and the same message"
    );
}

#[tokio::test]
async fn rate_is_checked_before_concurrency_and_before_the_body() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    requests_per_minute: 1\n    max_concurrent: 1",
        "",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let auth = format!("Bearer {LIMITED}");
    let refused = send(
        gw.addr(),
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("content-type", "text/plain")],
        b"not json",
    )
    .await;
    assert_eq!(
        refused.error().2,
        "rate_limit_exceeded",
        "the limit answers before the body is looked at"
    );
    assert_eq!(refused.header("retry-after"), Some("60"));
}

#[tokio::test]
async fn the_gateway_wide_cap_sheds_load_with_503() {
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::Gated);
    let gw = TestGateway::start(&config_with(&mock.url(), "max_concurrent: 2")).await;
    let addr = gw.addr();
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..6 {
        let done_tx = done_tx.clone();
        tokio::spawn(async move {
            let _ = done_tx.send(chat(addr, ALPHA, &chat_body("chat-model")).await);
        });
    }
    for _ in 0..4 {
        let response = next(&mut done).await;
        assert_eq!(
            response.error(),
            (
                503,
                "server_error".into(),
                "overloaded".into(),
                serde_json::Value::Null
            )
        );
        assert_eq!(response.header("retry-after"), Some("1"));
    }
    mock.open_gate();
    for _ in 0..2 {
        assert_eq!(next(&mut done).await.status, 200);
    }
}

#[tokio::test]
async fn limit_state_survives_a_reload_for_keys_that_remain() {
    let mock = MockUpstream::start().await;
    let yaml = limited_config(&mock.url(), "    requests_per_minute: 1", "");
    let gw = TestGateway::start(&yaml).await;
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let reload = |text: &str, generation| {
        let config = sluice::config::parse("t.yaml", text, None, &env).unwrap();
        gw.gateway()
            .swap_catalog(sluice::catalog::Catalog::build(&config, generation));
    };
    reload(
        &yaml.replace("environment: test", "environment: reloaded"),
        2,
    );
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        429,
        "the used-up rate is remembered"
    );
    assert_eq!(gw.gateway().limiter.tracked_keys(), 1);
    reload(&config(&mock.url()), 3);
    assert_eq!(
        gw.gateway().limiter.tracked_keys(),
        0,
        "a removed key's state is dropped"
    );
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        401,
        "and the key is gone"
    );
}

#[tokio::test]
async fn a_request_refused_for_concurrency_uses_no_rate() {
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::Gated);
    let limits = "    requests_per_minute: 60\n    burst: 1\n    max_concurrent: 1";
    let gw = TestGateway::start(&limited_config(&mock.url(), limits, "")).await;
    let addr = gw.addr();
    let held = tokio::spawn(async move { chat(addr, LIMITED, &chat_body("chat-model")).await });
    mock.wait_until("the first request upstream", |m| m.requests().len() == 1)
        .await;
    gw.clock.advance(Duration::from_secs(1));
    let refused = chat(addr, LIMITED, &chat_body("chat-model")).await;
    assert_eq!(refused.error().2, "concurrency_limit_exceeded");
    assert_eq!(
        refused.header("x-ratelimit-remaining-requests"),
        Some("1"),
        "the refusal used no rate"
    );
    mock.open_gate();
    assert_eq!(held.await.unwrap().status, 200);
    gw.log_lines(2).await;
    let next = chat(addr, LIMITED, &chat_body("chat-model")).await;
    assert_eq!(
        next.status, 200,
        "the rate the refused request did not use is still there"
    );
}

#[tokio::test]
async fn a_shed_request_still_carries_the_keys_rate_headers() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    requests_per_minute: 60\n    burst: 5",
        "",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    gw.gateway().start_draining();
    let shed = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(shed.error().2, "overloaded");
    assert_eq!(shed.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(
        shed.header("x-ratelimit-remaining-requests"),
        Some("4"),
        "a shed request uses no rate"
    );
}
