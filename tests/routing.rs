//! Several targets per model, passive and active health, 429 cooldown, safe resends, the
//! upstream queue and the total timeout.

mod common;
use common::*;
use sluice::upstream::Availability;
use std::time::Duration;

/// Two upstreams `a` and `b` serving `duo`, plus `solo` on `a` alone.
fn two_targets(a: &str, b: &str, policy: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
retry_backoff: 1ms
upstreams:
  - name: a
    url: {a}
    first_byte_timeout: 2s
    idle_timeout: 1s
{policy}
  - name: b
    url: {b}
    first_byte_timeout: 2s
    idle_timeout: 1s
models:
  - id: duo
    targets: [{{upstream: a}}, {{upstream: b}}]
    capabilities: [streaming]
  - id: solo
    upstream: a
    capabilities: [streaming]
keys:
  - {{name: alpha, sha256: {hash}}}
  - {{name: beta, sha256: {beta}}}
"#,
        hash = key_hash(ALPHA),
        beta = key_hash(BETA)
    )
}

fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

#[tokio::test]
async fn a_target_that_refuses_connections_is_failed_over_and_ejected() {
    let b = MockUpstream::start().await;
    let gw = TestGateway::start(&two_targets(
        &dead_url(),
        &b.url(),
        "    eject_after_failures: 2",
    ))
    .await;
    for _ in 0..20 {
        let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
        assert_eq!(
            response.status,
            200,
            "every request is served by the live target: {}",
            response.text()
        );
    }
    assert_eq!(b.requests().len(), 20);
    let retried =
        gw.metric(r#"sluice_upstream_retries_total{reason="connect_failed",upstream="a"}"#);
    assert!(
        (1.0..=2.0).contains(&retried),
        "a is tried until ejected (2 failures), then skipped: {retried}"
    );
    assert_eq!(
        gw.metric(r#"sluice_upstream_ejections_total{upstream="a"}"#),
        1.0
    );
    let ready = get(gw.admin(), "/readyz", None).await.json();
    assert_eq!(ready["upstreams"][0]["name"], "a");
    assert_eq!(ready["upstreams"][0]["state"], "ejected");
    assert_eq!(ready["upstreams"][1]["state"], "available");
}

#[tokio::test]
async fn an_ejected_target_comes_back_after_its_backoff_which_doubles() {
    let a = MockUpstream::start().await;
    let policy = "    eject_after_failures: 2\n    eject_duration: 10s";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    a.set_default(Reply::json(503, r#"{"error":{"message":"overloaded"}}"#));
    // Two tenants' failures: one tenant alone never ejects a shared upstream.
    for key in [ALPHA, BETA] {
        assert_eq!(
            chat(gw.addr(), key, &chat_body("solo")).await.status,
            503,
            "the upstream's 503 passes through"
        );
    }
    let ejected = chat(gw.addr(), ALPHA, &chat_body("solo")).await;
    assert_eq!(ejected.error().2, "no_healthy_upstream");
    assert_eq!(
        ejected.header("retry-after"),
        Some("10"),
        "the soonest recovery"
    );
    assert_eq!(
        a.requests().len(),
        2,
        "an ejected upstream receives nothing"
    );

    gw.clock.advance(Duration::from_secs(10));
    for key in [ALPHA, BETA] {
        assert_eq!(
            chat(gw.addr(), key, &chat_body("solo")).await.status,
            503,
            "back after 10 s, still failing"
        );
    }
    let again = chat(gw.addr(), ALPHA, &chat_body("solo")).await;
    assert_eq!(
        again.header("retry-after"),
        Some("20"),
        "on return, one failure of each tenant ejects it again, for twice as long"
    );
    gw.clock.advance(Duration::from_secs(20));
    a.set_default(Reply::completion());
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("solo")).await.status,
        200,
        "recovered"
    );
    a.set_default(Reply::json(503, "{}"));
    assert_eq!(chat(gw.addr(), ALPHA, &chat_body("solo")).await.status, 503);
    assert_eq!(
        chat(gw.addr(), BETA, &chat_body("solo")).await.status,
        503,
        "a success reset the count: two failures again"
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("solo"))
            .await
            .header("retry-after"),
        Some("10"),
        "and the backoff"
    );
}

#[tokio::test]
async fn a_throttled_target_gets_nothing_until_its_retry_after_has_passed() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&two_targets(&a.url(), &b.url(), "")).await;
    a.set_default(
        Reply::json(429, r#"{"error":{"message":"slow down"}}"#).with_header("retry-after", "30"),
    );
    // Until the balancer happens to pick a, b serves; a's 429 is handed to b.
    for _ in 0..64 {
        let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
        assert_eq!(
            response.status, 200,
            "a 429 with another target free never reaches the client"
        );
        if !a.requests().is_empty() {
            break;
        }
    }
    assert_eq!(a.requests().len(), 1, "a was picked once");
    assert_eq!(
        gw.metric(r#"sluice_upstream_retries_total{reason="rate_limited",upstream="a"}"#),
        1.0
    );
    for _ in 0..20 {
        assert_eq!(chat(gw.addr(), ALPHA, &chat_body("duo")).await.status, 200);
    }
    assert_eq!(a.requests().len(), 1, "nothing more for a during its 30 s");
    gw.clock.advance(Duration::from_secs(29));
    for _ in 0..10 {
        chat(gw.addr(), ALPHA, &chat_body("duo")).await;
    }
    assert_eq!(a.requests().len(), 1, "not a second early");
    gw.clock.advance(Duration::from_secs(1));
    a.set_default(Reply::completion());
    for _ in 0..64 {
        assert_eq!(chat(gw.addr(), ALPHA, &chat_body("duo")).await.status, 200);
        if a.requests().len() > 1 {
            break;
        }
    }
    assert_eq!(
        a.requests().len(),
        2,
        "a takes requests again after its Retry-After"
    );
}

#[tokio::test]
async fn a_500_is_never_sent_to_a_second_target() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let gw = TestGateway::start(&two_targets(&a.url(), &b.url(), "")).await;
    a.set_default(Reply::json(500, r#"{"error":{"message":"boom"}}"#));
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(chat(gw.addr(), ALPHA, &chat_body("duo")).await.status);
    }
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 500),
        "{statuses:?}"
    );
    let answered_500 = statuses.iter().filter(|s| **s == 500).count();
    assert_eq!(
        a.requests().len(),
        answered_500,
        "each 500 went to the client, from one attempt"
    );
    assert_eq!(
        a.requests().len() + b.requests().len(),
        20,
        "no request was sent twice"
    );
}

#[tokio::test]
async fn load_is_spread_by_weight() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let yaml = two_targets(&a.url(), &b.url(), "").replace(
        "[{upstream: a}, {upstream: b}]",
        "[{upstream: a, weight: 3}, {upstream: b, weight: 1}]",
    );
    let gw = TestGateway::start(&yaml).await;
    for _ in 0..200 {
        assert_eq!(chat(gw.addr(), ALPHA, &chat_body("duo")).await.status, 200);
    }
    let (to_a, to_b) = (a.requests().len() as f64, b.requests().len() as f64);
    assert!(
        to_a > to_b * 1.5,
        "weight 3 gets more than weight 1: {to_a} vs {to_b}"
    );
    assert!(to_b > 10.0, "weight 1 still gets its share: {to_b}");
}

#[tokio::test]
async fn an_upstreams_max_concurrent_queues_then_refuses() {
    let a = MockUpstream::start().await;
    let policy = "    max_concurrent: 1\n    max_queue: 1\n    queue_timeout: 300ms";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    a.set_default(Reply::Gated);
    let addr = gw.addr();
    let held = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    a.wait_until("the first request upstream", |m| m.requests().len() == 1)
        .await;
    let queued = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    // The queue holds one; a third request is refused at once.
    let mut refused = chat(addr, ALPHA, &chat_body("solo")).await;
    while refused.status == 200 {
        refused = chat(addr, ALPHA, &chat_body("solo")).await;
    }
    assert_eq!(
        refused.error(),
        (
            503,
            "upstream_error".into(),
            "upstream_saturated".into(),
            serde_json::Value::Null
        )
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    let timed_out = queued.await.unwrap();
    assert_eq!(
        timed_out.error().2,
        "upstream_saturated",
        "the queued request gave up after queue_timeout"
    );
    a.open_gate();
    assert_eq!(held.await.unwrap().status, 200);
    assert_eq!(
        a.requests().len(),
        1,
        "the upstream never had more than one request"
    );
    gw.log_lines(3).await;
    assert!(gw.metric(r#"sluice_upstream_queue_seconds_count{upstream="a"}"#) >= 1.0);
}

#[tokio::test]
async fn a_queued_request_goes_when_a_slot_frees() {
    let a = MockUpstream::start().await;
    let policy = "    max_concurrent: 1\n    queue_timeout: 10s";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    a.push(Reply::Gated);
    let addr = gw.addr();
    let first = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    a.wait_until("the first request upstream", |m| m.requests().len() == 1)
        .await;
    let second = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    // The second request must reach the queue before the first one finishes. Its
    // arrival there has no event: the gate's counter is looked at between yields.
    gw.until("the second request queues behind the first", |g| {
        g.upstreams.waiting("a") >= 1
    })
    .await;
    a.open_gate();
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(
        second.await.unwrap().status,
        200,
        "served once the first one finished"
    );
    assert_eq!(a.requests().len(), 2);
    gw.log_lines(2).await;
    assert!(
        gw.metric(r#"sluice_upstream_queue_seconds_sum{upstream="a"}"#) > 0.0,
        "the wait is in the histogram"
    );
}

#[tokio::test]
async fn a_stream_past_its_total_timeout_ends_with_an_error_event() {
    let a = MockUpstream::start().await;
    let gw = TestGateway::start(&two_targets(
        &a.url(),
        &dead_url(),
        "    total_timeout: 500ms",
    ))
    .await;
    a.push(Reply::stream(20, Duration::from_millis(100)));
    let body = r#"{"model":"solo","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let mut stream = EventStream::open(gw.addr(), ALPHA, body).await;
    let events = stream.rest().await;
    assert!(
        events.len() < 10,
        "cut before the 2 s the stream would take: {} events",
        events.len()
    );
    let error: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn an_active_check_brings_an_ejected_upstream_back() {
    let a = MockUpstream::start().await;
    let policy =
        "    eject_after_failures: 1\n    eject_duration: 1h\n    eject_duration_max: 1h\n    health_check_interval: 100ms";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    a.push(Reply::json(502, "{}"));
    a.push(Reply::json(502, "{}"));
    assert_eq!(chat(gw.addr(), ALPHA, &chat_body("solo")).await.status, 502);
    assert_eq!(chat(gw.addr(), BETA, &chat_body("solo")).await.status, 502);
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("solo")).await.error().2,
        "no_healthy_upstream",
        "ejected for an hour"
    );
    // The next check (GET /v1/models, answered 200 by the mock) clears the ejection.
    a.wait_until("an active check", |m| {
        m.requests()
            .iter()
            .any(|r| r.method == "GET" && r.path == "/v1/models")
    })
    .await;
    // The mock saw the check before it answered; its verdict is recorded when the answer is
    // read, with no event: the upstream's availability is looked at between yields.
    gw.until("a passing check ends the hour-long ejection", |g| {
        g.upstreams.availability("a") == Availability::Available
    })
    .await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("solo")).await.status,
        200,
        "served again without waiting out the hour"
    );
    assert!(gw.metric(r#"sluice_upstream_health_checks_total{result="pass",upstream="a"}"#) >= 1.0);
}

#[tokio::test]
async fn a_client_that_leaves_the_queue_gives_its_place_back() {
    let a = MockUpstream::start().await;
    let policy = "    max_concurrent: 1\n    max_queue: 2\n    queue_timeout: 10s";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    a.push(Reply::Gated);
    let addr = gw.addr();
    let holder = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    a.wait_until("the holder upstream", |m| m.requests().len() == 1)
        .await;
    // Two clients queue, then leave.
    let auth = format!("Bearer {ALPHA}");
    let request = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        chat_body("solo").as_bytes(),
    );
    let mut ghosts = Vec::new();
    for _ in 0..2 {
        let mut conn = Conn::open(addr).await;
        conn.write(&request).await;
        ghosts.push(conn);
    }
    let queued = tokio::time::timeout(Duration::from_secs(10), async {
        while gw.gateway().upstreams.waiting("a") < 2 {
            tokio::task::yield_now().await;
        }
    });
    assert!(queued.await.is_ok(), "both clients queue");
    drop(ghosts);
    let emptied = tokio::time::timeout(Duration::from_secs(10), async {
        while gw.gateway().upstreams.waiting("a") > 0 {
            tokio::task::yield_now().await;
        }
    });
    assert!(
        emptied.await.is_ok(),
        "clients that left are out of the queue"
    );
    // A new client finds room in the queue, not 503 upstream_saturated.
    let late = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("solo")).await });
    a.open_gate();
    assert_eq!(holder.await.unwrap().status, 200);
    assert_eq!(late.await.unwrap().status, 200, "the new client is served");
    assert_eq!(
        a.requests().len(),
        2,
        "nothing is sent upstream for the clients that left"
    );
}

#[tokio::test]
async fn one_tenants_failing_requests_do_not_eject_a_shared_upstream() {
    let a = MockUpstream::start().await;
    let policy = "    eject_after_failures: 2";
    let gw = TestGateway::start(&two_targets(&a.url(), &dead_url(), policy)).await;
    // Requests that make the backend answer 500, or stall after the answer started: one
    // request's doing, not a sign that the upstream is down.
    for _ in 0..4 {
        a.push(Reply::json(
            500,
            r#"{"error":{"message":"this prompt breaks me"}}"#,
        ));
    }
    for _ in 0..4 {
        assert_eq!(chat(gw.addr(), ALPHA, &chat_body("solo")).await.status, 500);
    }
    assert_eq!(
        gw.gateway().upstreams.availability("a"),
        sluice::upstream::Availability::Available,
        "500s count in metrics, never toward ejection"
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("solo")).await.status,
        200,
        "another tenant is still served"
    );
    // 503s are the upstream's own sign: two in a row, from two tenants, eject it.
    for key in [ALPHA, BETA] {
        a.push(Reply::json(503, r#"{"error":{"message":"overloaded"}}"#));
        assert_eq!(chat(gw.addr(), key, &chat_body("solo")).await.status, 503);
    }
    assert!(matches!(
        gw.gateway().upstreams.availability("a"),
        sluice::upstream::Availability::Ejected { .. }
    ));
}
