//! Failover and fallbacks: a failure an upstream's `retry_on` names moves the request to
//! another target of its model; a model that cannot serve hands the request to its
//! `fallbacks`, and the answer names the model that served.

mod common;
use common::*;
use std::time::Duration;

const STREAM: &str =
    r#"{"model":"first","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `duo` on upstreams `a` and `b` (with `a_policy` under `a`).
fn two_targets(a: &str, b: &str, a_policy: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
retry_backoff: 1ms
upstreams:
  - name: a
    url: {a}
    first_byte_timeout: 2s
{a_policy}
  - name: b
    url: {b}
    first_byte_timeout: 2s
models:
  - id: duo
    targets: [{{upstream: a}}, {{upstream: b}}]
keys:
  - {{name: alpha, sha256: {hash}}}
"#,
        hash = key_hash(ALPHA)
    )
}

/// `first` on `first_url` alone (with `first_policy`), falling back to `plain` (no
/// streaming) then `second`, both on `second_url`. Key `alpha` may use every model; key
/// `beta` only `first`.
fn with_fallbacks(first_url: &str, first_policy: &str, second_url: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
retry_backoff: 1ms
upstreams:
  - name: one
    url: {first_url}
    connect_timeout: 1s
    first_byte_timeout: 2s
{first_policy}
  - name: two
    url: {second_url}
    first_byte_timeout: 2s
models:
  - id: first
    upstream: one
    capabilities: [streaming]
    fallbacks: [plain, second]
  - id: plain
    upstream: two
  - id: second
    upstream: two
    capabilities: [streaming]
keys:
  - {{name: alpha, sha256: {alpha}}}
  - {{name: beta, sha256: {beta}, models: [first]}}
"#,
        alpha = key_hash(ALPHA),
        beta = key_hash(BETA),
    )
}

fn model_sent(request: &Recorded) -> String {
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    body["model"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_503_from_one_target_moves_the_request_and_the_client_gets_200() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&two_targets(&a.url(), &b.url(), "")).await;
    a.set_default(Reply::json(503, r#"{"error":{"message":"overloaded"}}"#));
    for _ in 0..64 {
        let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
        assert_eq!(
            response.status,
            200,
            "a 503 with another target free never reaches the client: {}",
            response.text()
        );
        if !a.requests().is_empty() {
            break;
        }
    }
    assert_eq!(a.requests().len(), 1, "a was picked once");
    assert_eq!(
        gw.metric(r#"sluice_upstream_retries_total{reason="status_503",upstream="a"}"#),
        1.0
    );
}

#[tokio::test]
async fn a_500_is_not_resent_by_default() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&two_targets(&a.url(), &b.url(), "")).await;
    a.set_default(Reply::json(500, r#"{"error":{"message":"boom"}}"#));
    let mut answered_500 = 0;
    for _ in 0..64 {
        let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
        if response.status == 500 {
            answered_500 += 1;
            break;
        }
    }
    assert_eq!(answered_500, 1, "a's 500 reached the client");
    assert_eq!(
        a.requests().len(),
        1,
        "the 500 was sent once, and not again to b"
    );
}

#[tokio::test]
async fn a_500_is_resent_when_retry_on_names_it() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&two_targets(&a.url(), &b.url(), "    retry_on: [500]")).await;
    a.set_default(Reply::json(500, r#"{"error":{"message":"boom"}}"#));
    for _ in 0..64 {
        let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
        assert_eq!(response.status, 200, "opted in: a's 500 goes to b");
        if !a.requests().is_empty() {
            break;
        }
    }
    assert_eq!(a.requests().len(), 1);
    assert_eq!(
        gw.metric(r#"sluice_upstream_retries_total{reason="status_500",upstream="a"}"#),
        1.0
    );
}

#[tokio::test]
async fn nothing_is_resent_after_the_first_byte() {
    let (one, two) = (MockUpstream::start().await, MockUpstream::start().await);
    let everything = "    retry_on: [connect_failure, first_byte_timeout, 429, 500, 502, 503, 504]";
    let gw = TestGateway::start(&with_fallbacks(&one.url(), everything, &two.url())).await;
    let first_event = r#"{"choices":[{"delta":{"content":"a"}}]}"#.to_string();
    one.push(Reply::Sse {
        events: vec![(Duration::ZERO, first_event)],
        end: StreamEnd::Cut,
        close: false,
    });
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM).await;
    assert_eq!(stream.status, 200);
    let events = stream.rest().await;
    assert_eq!(
        events.len(),
        2,
        "the event sent, then the gateway's error event"
    );
    assert!(events[1].contains("upstream_unavailable"), "{events:?}");
    assert!(
        two.requests().is_empty(),
        "once the answer started, neither another target nor a fallback gets the request"
    );
    assert_eq!(
        one.requests().len(),
        1,
        "and it is not sent again to its own"
    );
}

#[tokio::test]
async fn a_model_whose_only_upstream_is_dead_falls_back_and_says_which_model_served() {
    let two = MockUpstream::start().await;
    let gw = TestGateway::start(&with_fallbacks(&dead_url(), "", &two.url())).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("first")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("x-sluice-model"),
        Some("plain"),
        "the first fallback that serves a plain request"
    );
    let seen = two.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        model_sent(&seen[0]),
        "plain",
        "the body names the fallback model"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["model"], "first", "the log keeps the model asked for");
    assert_eq!(line["served_model"], "plain", "and the one that served");
    assert_eq!(line["upstream"], "two");
    assert_eq!(
        gw.metric(r#"sluice_model_fallbacks_total{model="first",served_model="plain"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="alpha",model="first",status="200"}"#),
        1.0,
        "requests are counted under the model asked for"
    );
}

#[tokio::test]
async fn a_fallback_without_streaming_is_skipped_for_a_streamed_request() {
    let two = MockUpstream::start().await;
    two.set_default(Reply::stream(2, Duration::ZERO));
    let gw = TestGateway::start(&with_fallbacks(&dead_url(), "", &two.url())).await;
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM).await;
    assert_eq!(stream.status, 200);
    assert_eq!(
        stream
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("x-sluice-model"))
            .map(|(_, v)| v.as_str()),
        Some("second"),
        "plain does not stream: second serves"
    );
    let events = stream.rest().await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let seen = two.requests();
    assert_eq!(seen.len(), 1, "plain was never tried");
    assert_eq!(model_sent(&seen[0]), "second");
}

#[tokio::test]
async fn a_key_not_allowed_the_fallback_gets_the_first_models_error() {
    let two = MockUpstream::start().await;
    let gw = TestGateway::start(&with_fallbacks(&dead_url(), "", &two.url())).await;
    let response = chat(gw.addr(), BETA, &chat_body("first")).await;
    assert_eq!(
        response.error(),
        (
            502,
            "upstream_error".into(),
            "upstream_unavailable".into(),
            serde_json::Value::Null
        ),
        "the first model's own error, as if it had no fallbacks"
    );
    assert!(two.requests().is_empty(), "no fallback was tried");
}

#[tokio::test]
async fn a_503_falls_back_when_the_model_has_no_other_target() {
    let (one, two) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&with_fallbacks(&one.url(), "", &two.url())).await;
    one.set_default(Reply::json(503, r#"{"error":{"message":"overloaded"}}"#));
    let response = chat(gw.addr(), ALPHA, &chat_body("first")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.header("x-sluice-model"), Some("plain"));
    assert_eq!(one.requests().len(), 1, "the 503 was not sent again to one");
    let direct = chat(gw.addr(), ALPHA, &chat_body("plain")).await;
    assert_eq!(
        direct.header("x-sluice-model"),
        Some("plain"),
        "every proxied answer names its model"
    );
}

#[tokio::test]
async fn the_last_model_in_line_relays_its_upstreams_answer() {
    let (one, two) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&with_fallbacks(&one.url(), "", &two.url())).await;
    one.set_default(Reply::json(503, r#"{"error":{"message":"one is down"}}"#));
    two.set_default(Reply::json(503, r#"{"error":{"message":"two is down"}}"#));
    let response = chat(gw.addr(), ALPHA, &chat_body("first")).await;
    assert_eq!(response.status, 503);
    assert!(
        response.text().contains("two is down"),
        "the last fallback's own answer: {}",
        response.text()
    );
    assert_eq!(response.header("x-sluice-model"), Some("second"));
    assert_eq!(
        (one.requests().len(), two.requests().len()),
        (1, 2),
        "each model tried once, in order"
    );
}

/// `shared` on one upstream that ejects after 2 failures, used by three keys: `alpha` and
/// `beta` of the tenant `team-a` (their `owner`), and `gamma`, a tenant of its own.
fn shared_upstream(url: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - name: shared
    url: {url}
    first_byte_timeout: 250ms
    eject_after_failures: 2
    eject_duration: 1h
    eject_duration_max: 1h
models:
  - id: shared
    upstream: shared
keys:
  - {{name: alpha, owner: team-a, sha256: {alpha}}}
  - {{name: beta, owner: team-a, sha256: {beta}}}
  - {{name: gamma, sha256: {gamma}}}
"#,
        alpha = key_hash(ALPHA),
        beta = key_hash(BETA),
        gamma = key_hash(GAMMA),
    )
}

const GAMMA: &str = "sk-test-gamma-0123456789";

#[tokio::test]
async fn one_tenants_first_byte_timeouts_never_eject_a_shared_upstream_two_tenants_do() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&shared_upstream(&mock.url())).await;
    // Requests the backend takes longer than first_byte_timeout to answer (a long prompt,
    // a large max_tokens): one tenant's, from both of its keys, many in a row.
    mock.set_default(Reply::Silent);
    for key in [ALPHA, ALPHA, BETA, ALPHA, BETA] {
        let response = chat(gw.addr(), key, &chat_body("shared")).await;
        assert_eq!(
            response.error().2,
            "upstream_timeout",
            "{}",
            response.text()
        );
    }
    assert_eq!(
        gw.gateway().upstreams.availability("shared"),
        sluice::upstream::Availability::Available,
        "one tenant's slow requests never eject the upstream"
    );
    assert_eq!(
        gw.metric(r#"sluice_upstream_ejections_total{upstream="shared"}"#),
        0.0
    );
    mock.set_default(Reply::completion());
    let other = chat(gw.addr(), GAMMA, &chat_body("shared")).await;
    assert_eq!(
        other.status,
        200,
        "another tenant is still served: {}",
        other.text()
    );

    // The same failures from two tenants in one streak: the upstream is unwell.
    mock.set_default(Reply::Silent);
    for key in [ALPHA, GAMMA] {
        let response = chat(gw.addr(), key, &chat_body("shared")).await;
        assert_eq!(
            response.error().2,
            "upstream_timeout",
            "{}",
            response.text()
        );
    }
    assert!(
        matches!(
            gw.gateway().upstreams.availability("shared"),
            sluice::upstream::Availability::Ejected { .. }
        ),
        "two tenants' failures eject it"
    );
    let sent = mock.requests().len();
    let refused = chat(gw.addr(), BETA, &chat_body("shared")).await;
    let (status, _, code, _) = refused.error();
    assert_eq!((status, code.as_str()), (503, "no_healthy_upstream"));
    assert_eq!(
        mock.requests().len(),
        sent,
        "nothing reaches an ejected upstream"
    );
}
