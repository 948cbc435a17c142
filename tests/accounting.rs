//! Accounting in one process that cannot be dodged: usage is believed only when plausible
//! (every count below 2^24, output within the request's limit plus slack), waits never
//! overflow, and a raised rate never lengthens a wait.

mod common;
use common::*;
use std::time::Duration;

/// A chat body asking for at most `max_tokens` of output.
fn asking(max_tokens: u64) -> String {
    format!(
        r#"{{"model":"chat-model","max_tokens":{max_tokens},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

#[tokio::test]
async fn absurd_usage_is_not_believed_and_waits_stay_sane() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_day: 1000")).await;
    let body = body_estimating(300);
    mock.push(json_with_usage(
        r#"{"prompt_tokens":5,"completion_tokens":1099511627776}"#,
    ));
    assert_eq!(chat(gw.addr(), LIMITED, &body).await.status, 200);
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        line["output_tokens"],
        serde_json::Value::Null,
        "not believed"
    );
    assert_eq!(
        gw.metric(r#"sluice_usage_implausible_total{upstream="mock"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_usage_missing_total{upstream="mock"}"#),
        0.0,
        "counted as implausible, not as missing"
    );
    assert_eq!(
        gw.metric(r#"sluice_tokens_total{key="limited",kind="output",model="chat-model"}"#),
        0.0
    );
    // The reservation stood: 300 of the day's 1000, and 300 more now.
    mock.push(Reply::completion());
    let next = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(next.status, 200, "the key is not in debt for ages");
    assert_eq!(next.header("x-ratelimit-remaining-tokens"), Some("400"));
}

#[tokio::test]
async fn output_beyond_the_requests_limit_and_slack_is_not_believed() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(
        &mock.url(),
        "    tokens_per_minute: 100000",
    ))
    .await;
    // max_tokens 800: the slack is 100, so 900 output tokens are believed, 901 are not.
    for output in [900, 901] {
        mock.push(json_with_usage(&format!(
            r#"{{"prompt_tokens":10,"completion_tokens":{output}}}"#
        )));
        assert_eq!(chat(gw.addr(), LIMITED, &asking(800)).await.status, 200);
    }
    let lines = gw.log_lines(2).await;
    assert_eq!(lines[0]["output_tokens"], 900, "within the slack");
    assert_eq!(lines[1]["output_tokens"], serde_json::Value::Null);
    assert_eq!(
        gw.metric(r#"sluice_usage_implausible_total{upstream="mock"}"#),
        1.0
    );
    // Without a limit in the request, only the size of the counts is checked.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":10,"completion_tokens":50000}"#,
    ));
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert_eq!(gw.log_lines(3).await[2]["output_tokens"], 50000);
}

#[tokio::test]
async fn a_debt_of_any_size_gives_a_bounded_wait() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1")).await;
    // Plausible, yet about 31 years of a one-token-a-minute window.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":16000000,"completion_tokens":1}"#,
    ));
    assert_eq!(
        chat(gw.addr(), LIMITED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    gw.log_lines(1).await;
    let refused = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(refused.status, 429);
    let seconds: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        seconds <= 7 * 86_400 + 60,
        "a debt is held for at most seven days past its window: {seconds} s"
    );
    let reset = refused.header("x-ratelimit-reset-tokens").unwrap();
    assert!(reset.starts_with("168h"), "{reset}");
}

#[tokio::test]
async fn a_raised_rate_never_lengthens_the_wait() {
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // 6 per minute, burst 6: a window of 60 s.
    let yaml = limited_config(&mock.url(), "    requests_per_minute: 6\n    burst: 6");
    let gw = TestGateway::start(&yaml).await;
    for _ in 0..6 {
        let admitted = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
        assert_eq!(admitted.status, 200);
    }
    gw.clock.advance(Duration::from_secs(2));
    let refused = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(refused.header("retry-after-ms"), Some("8000"));
    // Raised to 600 per minute, burst 6: a window of 600 ms, one request per 100 ms.
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let raised = yaml.replace("requests_per_minute: 6\n", "requests_per_minute: 600\n");
    let config = sluice::config::parse("t.yaml", &raised, None, &env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let after = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(after.status, 429, "the burst was used");
    assert_eq!(
        after.header("retry-after-ms"),
        Some("100"),
        "one interval of the new rate, not what is left of the old window"
    );
    assert_eq!(after.header("x-ratelimit-reset-requests"), Some("600ms"));
    gw.clock.advance(Duration::from_millis(100));
    let admitted = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(admitted.status, 200, "admitted after the wait it was given");
    gw.clock.advance(Duration::from_millis(99));
    let early = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
    assert_eq!(
        early.header("retry-after-ms"),
        Some("1"),
        "then one per 100 ms"
    );
}

#[tokio::test]
async fn the_limit_enforce_output_limit_writes_bounds_the_usage_believed() {
    let mock = MockUpstream::start().await;
    let config = limited_config(&mock.url(), "    tokens_per_minute: 100000").replace(
        "  - id: chat-model\n    upstream: mock\n",
        "  - id: chat-model\n    upstream: mock\n    default_max_tokens: 64\n    enforce_output_limit: true\n",
    );
    let gw = TestGateway::start(&config).await;
    // The request sets no limit; the gateway writes 64: the slack is 64 more.
    for output in [128, 129] {
        mock.push(json_with_usage(&format!(
            r#"{{"prompt_tokens":10,"completion_tokens":{output}}}"#
        )));
        let answer = chat(gw.addr(), LIMITED, &chat_body("chat-model")).await;
        assert_eq!(answer.status, 200);
    }
    let lines = gw.log_lines(2).await;
    assert_eq!(
        lines[0]["output_tokens"], 128,
        "within the written limit and slack"
    );
    assert_eq!(lines[1]["output_tokens"], serde_json::Value::Null);
    assert_eq!(
        gw.metric(r#"sluice_usage_implausible_total{upstream="mock"}"#),
        1.0
    );
}
