//! Limits shared across replicas in a real `redis-server`: three gateway processes admit the
//! burst once between them, concurrency holds across them and a killed replica's leases
//! expire, Retry-After is exact on another replica, each `on_error` mode while Redis is
//! down, recovery after Redis restarts empty, a slow Redis counts as failed, a reload
//! changes a limit without resetting usage, and a `rediss://` store of its own CA.

mod common;
use common::redis_server::{shared_config, store, RedisServer, SHARED};
use common::*;
use std::time::{Duration, Instant};

fn count_statuses(responses: &[Response]) -> (usize, usize) {
    let ok = responses.iter().filter(|r| r.status == 200).count();
    let limited = responses.iter().filter(|r| r.status == 429).count();
    (ok, limited)
}

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = temp_dir(name);
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_admit_the_burst_once_between_them() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // 6 per minute: one more every 10 s, so the test sees the burst and at most one more.
    let text = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 6\n    burst: 10",
    );
    let path = write_config("shared-burst", &text);
    let env = [("TEST_UPSTREAM_KEY", UPSTREAM_SECRET)];
    let replicas: Vec<GatewayProcess> =
        (0..3).map(|_| GatewayProcess::start(&path, &env)).collect();
    let started = Instant::now();
    let mut sends = Vec::new();
    for i in 0..45 {
        let addr = replicas[i % 3].addr;
        sends.push(tokio::spawn(async move {
            chat(addr, SHARED, &chat_body("chat-model")).await
        }));
    }
    let mut responses = Vec::new();
    for send in sends {
        responses.push(send.await.unwrap());
    }
    let (ok, limited) = count_statuses(&responses);
    let refills = (started.elapsed().as_secs() / 10) as usize;
    assert!(
        (10..=10 + refills + 1).contains(&ok),
        "the burst of 10 is admitted once across three replicas, not three times: {ok} admitted"
    );
    assert_eq!(ok + limited, 45, "every other request is a 429");
    let refused = responses.iter().find(|r| r.status == 429).unwrap();
    assert_eq!(refused.error().2, "rate_limit_exceeded");
    assert_eq!(mock.requests().len(), ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_from_one_replica_is_exact_on_another() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 120\n    burst: 1",
    );
    let clock: std::sync::Arc<dyn sluice::clock::Clock> =
        std::sync::Arc::new(sluice::clock::MonotonicClock::new());
    let a = TestGateway::start_with_clock(&yaml, clock.clone()).await;
    let b = TestGateway::start_with_clock(&yaml, clock).await;
    assert_eq!(
        chat(a.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let refused = chat(b.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(
        refused.status, 429,
        "the other replica knows the burst is used"
    );
    let wait: u64 = refused.header("retry-after-ms").unwrap().parse().unwrap();
    assert!((1..=500).contains(&wait), "half a second at most: {wait}");
    // The local gate answers the same client without asking Redis, with what is left.
    let gated = chat(b.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(gated.status, 429);
    let left: u64 = gated.header("retry-after-ms").unwrap().parse().unwrap();
    assert!(left <= wait, "{left} <= {wait}");
    // With the rate headers the store's own refusal carried: the limit, none left, and a
    // reset counted down from the refusal's.
    assert_eq!(gated.header("x-ratelimit-limit-requests"), Some("120"));
    assert_eq!(
        gated.header("x-ratelimit-remaining-requests"),
        refused.header("x-ratelimit-remaining-requests")
    );
    assert_eq!(gated.header("x-ratelimit-remaining-requests"), Some("0"));
    let reset_ms = |r: &Response| {
        let text = r.header("x-ratelimit-reset-requests").expect("a reset");
        parse_reset_ms(text)
    };
    assert!(
        reset_ms(&gated) <= reset_ms(&refused),
        "{:?} <= {:?}",
        gated.header("x-ratelimit-reset-requests"),
        refused.header("x-ratelimit-reset-requests")
    );
    tokio::time::sleep(Duration::from_millis(wait)).await;
    assert_eq!(
        chat(a.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "a client that waits what one replica said is admitted by another"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_holds_across_replicas_and_a_dead_replicas_leases_expire() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::stream(400, Duration::from_millis(50)));
    let text = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n  lease_lifetime: 2s\n"),
        "    max_concurrent: 4",
    )
    .replace("idle_timeout: 1s", "idle_timeout: 5s");
    let path = write_config("shared-concurrency", &text);
    let env = [("TEST_UPSTREAM_KEY", UPSTREAM_SECRET)];
    let replicas: Vec<GatewayProcess> =
        (0..3).map(|_| GatewayProcess::start(&path, &env)).collect();
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    // Two streams on the first replica, one on each of the others: four in flight.
    let mut streams = Vec::new();
    for replica in [0, 0, 1, 2] {
        let stream = EventStream::open(replicas[replica].addr, SHARED, body).await;
        assert_eq!(stream.status, 200);
        streams.push(stream);
    }
    for (replica, process) in replicas.iter().enumerate() {
        let refused = chat(process.addr, SHARED, body).await;
        assert_eq!(
            refused.error().2,
            "concurrency_limit_exceeded",
            "a fifth stream is refused on replica {replica}"
        );
    }
    // The first replica dies with two streams: its leases stay until they expire.
    replicas[0].signal("KILL");
    let refused_at = Instant::now();
    assert_eq!(chat(replicas[1].addr, SHARED, body).await.status, 429);
    // Leases live 2 s without a refresh; the live replicas keep theirs refreshed.
    let mut admitted = None;
    while refused_at.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let stream = EventStream::open(replicas[1].addr, SHARED, body).await;
        if stream.status == 200 {
            admitted = Some(refused_at.elapsed());
            streams.push(stream);
            break;
        }
    }
    let after = admitted.expect("the dead replica's leases expired");
    assert!(
        after >= Duration::from_millis(1500),
        "not before the lease lifetime: {after:?}"
    );
    let stream = EventStream::open(replicas[2].addr, SHARED, body).await;
    assert_eq!(
        stream.status, 200,
        "both of the dead replica's slots are free again"
    );
    let refused = chat(replicas[2].addr, SHARED, body).await;
    assert_eq!(refused.status, 429, "and the limit holds at four again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_on_error_mode_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let limits = "    requests_per_minute: 60\n    burst: 4";
    let local = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  on_error: local\n  expected_replicas: 2\n"),
        limits,
    ))
    .await;
    let open = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  on_error: open\n"),
        limits,
    ))
    .await;
    let closed = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  on_error: closed\n"),
        limits,
    ))
    .await;
    for gw in [&local, &open, &closed] {
        assert_eq!(
            chat(gw.addr(), SHARED, &chat_body("chat-model"))
                .await
                .status,
            200
        );
    }
    redis.kill();

    // local: this replica's share of the burst, 4 / 2 (the request that found the store
    // dead is the first of them).
    let statuses: Vec<u16> = futures_statuses(&local, 4).await;
    assert_eq!(
        statuses,
        [200, 200, 429, 429],
        "half the burst in this process"
    );
    // open: no limits at all.
    assert_eq!(futures_statuses(&open, 6).await, [200; 6]);
    // closed: 503 limits_unavailable, with a Retry-After.
    let refused = chat(closed.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(
        refused.error(),
        (
            503,
            "server_error".into(),
            "limits_unavailable".into(),
            serde_json::Value::Null
        )
    );
    assert!(refused.header("retry-after").is_some());
    for gw in [&local, &open, &closed] {
        assert_eq!(gw.metric("sluice_limits_store_up"), 0.0);
        let errors: f64 = ["timeout", "connection"]
            .iter()
            .map(|kind| {
                gw.metric(&format!(
                    r#"sluice_limits_store_errors_total{{kind="{kind}"}}"#
                ))
            })
            .sum();
        assert!(errors >= 1.0, "the failed call is counted");
        let ready = get(gw.admin(), "/readyz", None).await;
        let refusing = std::ptr::eq(gw, &closed);
        assert_eq!(
            ready.status,
            if refusing { 503 } else { 200 },
            "a store that is down makes the gateway unready only where on_error: closed refuses every request"
        );
        assert_eq!(ready.json()["limits_store"]["state"], "down");
    }
}

#[tokio::test]
async fn without_a_store_its_series_are_not_exported() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let text = get(gw.admin(), "/metrics", None).await.text();
    assert!(
        !text.contains("sluice_limits_store"),
        "no limits_store, no sluice_limits_store_* series (an alert on the gauge would fire)"
    );
    assert_eq!(
        get(gw.admin(), "/readyz", None).await.json()["limits_store"],
        serde_json::Value::Null
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_unreachable_at_start_is_down_before_the_first_request() {
    let mock = MockUpstream::start().await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!(
        "  url: redis://127.0.0.1:{port}/0
"
    );
    for (on_error, ready_status) in [("closed", 503), ("local", 200)] {
        let yaml = shared_config(
            &mock.url(),
            &format!(
                "{unreachable}  on_error: {on_error}
"
            ),
            "    requests_per_minute: 60",
        );
        let gw = TestGateway::start(&yaml).await;
        let text = get(gw.admin(), "/metrics", None).await.text();
        assert!(
            text.lines().any(|l| l == "sluice_limits_store_up 0"),
            "on_error {on_error}: the gauge says down from the first scrape"
        );
        let ready = get(gw.admin(), "/readyz", None).await;
        assert_eq!(
            ready.status,
            ready_status,
            "on_error {on_error}: {}",
            ready.text()
        );
        assert_eq!(ready.json()["limits_store"]["state"], "down");
    }
}

/// Statuses of `count` requests sent one after another.
async fn futures_statuses(gw: &TestGateway, count: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..count {
        statuses.push(
            chat(gw.addr(), SHARED, &chat_body("chat-model"))
                .await
                .status,
        );
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_limits_resume_after_redis_restarts_empty() {
    let mut redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 60\n    burst: 100",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    redis.kill();
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "admitted by the local fallback"
    );
    let store = gw.gateway().limits_store.clone().expect("a store");
    assert!(!store.is_up());
    // Back, empty: no data, and no loaded script.
    redis.restart();
    tokio::time::timeout(Duration::from_secs(10), store.recovered())
        .await
        .expect("the probe finds the store again");
    assert_eq!(gw.metric("sluice_limits_store_up"), 1.0);
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let mut client = redis.client().await;
    let tat: Option<String> = ::redis::cmd("GET")
        .arg("test:sluice:{shared}:requests")
        .query_async(&mut client)
        .await
        .unwrap();
    assert!(
        tat.is_some(),
        "the request was decided in Redis again, script reloaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_the_timeout_counts_as_failed() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 50ms\n"),
        "    requests_per_minute: 600",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    // Redis holds every client's commands for 600 ms from the moment it says OK: the next
    // admission's call cannot answer within 50 ms.
    let mut client = redis.client().await;
    let _: String = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("ALL")
        .query_async(&mut client)
        .await
        .unwrap();
    let response = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200, "admitted by on_error: local");
    assert_eq!(
        gw.metric(r#"sluice_limits_store_errors_total{kind="timeout"}"#),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_a_shared_limit_without_resetting_usage() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::json(
        200,
        r#"{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":100}}"#,
    ));
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 1\n    burst: 2\n    tokens_per_minute: 100000",
    );
    let gw = TestGateway::start(&yaml).await;
    for _ in 0..2 {
        let response = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.header("x-ratelimit-limit-tokens"), Some("100000"));
    }
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        429
    );
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let config =
        sluice::config::parse("t.yaml", &yaml.replace("burst: 2", "burst: 3"), None, &env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    // The reload also clears the local gate: the new limit applies at once.
    let statuses = futures_statuses(&gw, 2).await;
    assert_eq!(
        statuses,
        [200, 429],
        "one more for the larger burst; the two used still count"
    );
}

/// Milliseconds of a short `x-ratelimit-reset-*` value (`480ms`, `1.5s`).
fn parse_reset_ms(text: &str) -> f64 {
    match text.strip_suffix("ms") {
        Some(ms) => ms.parse().expect("milliseconds"),
        None => {
            let seconds: f64 = text
                .strip_suffix('s')
                .expect("seconds")
                .parse()
                .expect("seconds");
            seconds * 1000.0
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_store_signed_by_its_own_ca_is_shared_over_tls() {
    let dir = temp_dir("rediss");
    let tls = common::redis_server::TlsFiles::generate(&dir);
    let redis = RedisServer::start_tls(tls.clone());
    assert!(redis.url().starts_with("rediss://localhost:"));
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let limits = "    requests_per_minute: 60\n    burst: 1";
    let trusted = format!("  timeout: 2s\n  ca_file: {}\n", tls.ca.display());
    let yaml = shared_config(&mock.url(), &store(&redis, &trusted), limits);
    let a = TestGateway::start(&yaml).await;
    let b = TestGateway::start(&yaml).await;
    assert_eq!(
        chat(a.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert_eq!(
        chat(b.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        429,
        "the burst is shared over TLS"
    );
    assert_eq!(b.metric("sluice_limits_store_up"), 1.0);

    // A gateway that does not trust the store's CA cannot use it: the handshake fails, the
    // store counts as down, and `on_error: local` admits by this replica's own count.
    let untrusted = shared_config(&mock.url(), &store(&redis, "  timeout: 2s\n"), limits);
    let c = TestGateway::start(&untrusted).await;
    assert_eq!(
        chat(c.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "admitted by the local fallback"
    );
    assert_eq!(c.metric("sluice_limits_store_up"), 0.0);
    assert!(!c.gateway().limits_store.clone().expect("a store").is_up());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_survive_a_redis_that_lost_its_scripts() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 600\n    max_concurrent: 4",
    ))
    .await;
    let mut client = redis.client().await;
    for round in 0..2 {
        if round == 1 {
            // Redis forgets every script (as after a failover to a replica that never
            // loaded them): both the admission and the settlement must load theirs again.
            let _: () = ::redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut client)
                .await
                .unwrap();
        }
        assert_eq!(
            chat(gw.addr(), SHARED, &chat_body("chat-model"))
                .await
                .status,
            200
        );
        assert_eq!(
            redis.leases_after_settling("shared").await,
            0,
            "round {round}: the settlement gave the lease back"
        );
    }
    assert_eq!(gw.metric("sluice_limits_store_up"), 1.0, "no call failed");
}
