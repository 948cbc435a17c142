//! Accounting in the shared limits store that cannot be dodged, against a real
//! `redis-server`: a settlement applies however long its request ran, absurd usage is not
//! believed and does not take the store down, one key's script error leaves the store up for
//! the others, key names carry the namespace, a key at its `max_concurrent` is refused
//! before its body is read, a raised rate never lengthens a wait (and its 429s keep their
//! headers), and leases come back after Redis restarts empty.

mod common;
use common::redis_server::{shared_config, store, RedisServer, SHARED};
use common::*;
use std::time::{Duration, Instant};

/// Whether `key` exists in `redis` within 10 s, polled (`exists`: waits for it to
/// exist; otherwise for it to be gone).
async fn until_key(redis: &RedisServer, key: &str, exists: bool) -> bool {
    let mut client = redis.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found: i64 = ::redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut client)
            .await
            .unwrap();
        if (found == 1) == exists {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn remaining_tokens(response: &Response) -> u64 {
    response
        .header("x-ratelimit-remaining-tokens")
        .expect("the token headers")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overage_of_a_request_that_outlived_its_reservation_is_charged() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    // 10,000 tokens a second: a reservation of 300 drains in 30 ms, and the window's
    // state expires about a second later.
    let config = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    tokens_per_minute: 600000",
    )
    .replace("first_byte_timeout: 2s", "first_byte_timeout: 30s");
    let gw = TestGateway::start(&config).await;
    let tokens = "test:sluice:{shared}:tokens";
    // The answer comes only after the window's state has expired in Redis: it used far
    // more input than estimated (its output within the request's limit).
    mock.push(Reply::GatedWith(Box::new(json_with_usage(
        r#"{"prompt_tokens":50000,"completion_tokens":10}"#,
    ))));
    let addr = gw.addr();
    let long = tokio::spawn(async move { chat(addr, SHARED, &body_estimating(300)).await });
    assert!(until_key(&redis, tokens, true).await, "the reservation");
    assert!(
        until_key(&redis, tokens, false).await,
        "drained and expired"
    );
    mock.open_gate();
    assert_eq!(long.await.unwrap().status, 200);
    // The settlement lands after the answer: the window is written again.
    until_key(&redis, tokens, true).await;
    mock.push(Reply::completion());
    let next = chat(gw.addr(), SHARED, &body_estimating(300)).await;
    assert_eq!(next.status, 200);
    let left = remaining_tokens(&next);
    assert!(
        left < 560_000,
        "the 49,710 tokens over the reservation are charged, however late: {left} left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_usage_is_not_believed_and_the_store_stays_up() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    tokens_per_day: 100000\n    max_concurrent: 4",
    ))
    .await;
    mock.push(json_with_usage(
        r#"{"prompt_tokens":5,"completion_tokens":1099511627776}"#,
    ));
    let body = body_estimating(300);
    assert_eq!(chat(gw.addr(), SHARED, &body).await.status, 200);
    assert_eq!(redis.leases_after_settling("shared").await, 0, "settled");
    mock.push(Reply::completion());
    let next = chat(gw.addr(), SHARED, &body).await;
    assert_eq!(next.status, 200, "the key is not put in debt for ages");
    // The reservation stood (300), nothing more: 100,000 - 300 - 300 this time.
    assert_eq!(next.header("x-ratelimit-remaining-tokens"), Some("99400"));
    assert_eq!(
        gw.metric(r#"sluice_usage_implausible_total{upstream="mock"}"#),
        1.0
    );
    assert_eq!(gw.metric("sluice_limits_store_up"), 1.0);
    assert_eq!(
        gw.metric(r#"sluice_limits_store_errors_total{kind="script"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keys_script_error_leaves_the_store_up_for_the_others() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let config = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 600",
    )
    .replace(
        "  - name: alpha\n",
        "  - name: alpha\n    requests_per_minute: 600\n",
    );
    let gw = TestGateway::start(&config).await;
    // A value of the wrong type under one key's name: its script fails on it.
    let mut client = redis.client().await;
    let _: () = ::redis::cmd("SET")
        .arg("test:sluice:{shared}:tokens")
        .arg("not a hash")
        .query_async(&mut client)
        .await
        .unwrap();
    let broken = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(broken.status, 200, "admitted by on_error: local");
    assert_eq!(
        gw.metric(r#"sluice_limits_store_errors_total{kind="script"}"#),
        1.0,
        "the failed call is counted"
    );
    assert_eq!(
        gw.metric("sluice_limits_store_up"),
        1.0,
        "one key's error does not take the store down"
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert!(
        until_key(&redis, "test:sluice:{alpha}:requests", true).await,
        "another key's request is still decided in Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_key_names_start_with_the_namespace() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let limits = "    requests_per_minute: 1\n    burst: 1";
    let staging = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n  namespace: staging\n"),
        limits,
    ))
    .await;
    // Without `namespace`: the configuration's `environment` (`test`).
    let test = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        limits,
    ))
    .await;
    for gw in [&staging, &test] {
        assert_eq!(
            chat(gw.addr(), SHARED, &chat_body("chat-model"))
                .await
                .status,
            200,
            "each deployment has its own burst"
        );
    }
    assert_eq!(
        chat(staging.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        429,
        "and uses it"
    );
    for key in [
        "staging:sluice:{shared}:requests",
        "test:sluice:{shared}:requests",
    ] {
        assert!(until_key(&redis, key, true).await, "{key}");
    }
    // A namespace that would change the hash tag is refused.
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let bad = shared_config(
        &mock.url(),
        &store(&redis, "  namespace: \"a{b}\"\n"),
        limits,
    );
    let errors = sluice::config::parse("t.yaml", &bad, None, &env).unwrap_err();
    assert!(
        format!("{errors:?}").contains("limits_store.namespace"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_at_its_concurrency_is_refused_before_its_body_is_read() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::stream(400, Duration::from_millis(50)));
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 600\n    max_concurrent: 1",
    ))
    .await;
    let stream_body =
        r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let stream = EventStream::open(gw.addr(), SHARED, stream_body).await;
    assert_eq!(stream.status, 200);
    // The key's slot is taken: a request announcing 4 MiB gets its 429 at once, without
    // a `100 Continue` inviting the body.
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {SHARED}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
            4 << 20
        )
        .as_bytes(),
    )
    .await;
    let (status, headers) = conn.read_head(true).await.expect("an answer");
    assert_eq!(status, 429, "refused before the body, no 100 Continue");
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("retry-after"), Some("1"));
    assert_eq!(
        header("x-ratelimit-limit-requests"),
        Some("600"),
        "with the key's rate headers, as the store last gave them"
    );
    assert_eq!(header("x-ratelimit-remaining-requests"), Some("599"));
    // The gateway reads what a client still sends after a refusal, a while, before its log
    // line: this client sends nothing more and leaves.
    drop(conn);
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["error_code"], "concurrency_limit_exceeded");
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="concurrency_limit_exceeded",key="shared"}"#),
        1.0
    );
    assert_eq!(
        mock.requests().len(),
        1,
        "nothing more reached the upstream"
    );
    stream.disconnect();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_rate_never_lengthens_the_wait_in_redis() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // 6 per minute, burst 6: a window of 60 s.
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 6\n    burst: 6",
    );
    let gw = TestGateway::start(&yaml).await;
    for _ in 0..6 {
        let response = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
        assert_eq!(response.status, 200);
    }
    let refused = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(refused.status, 429);
    // Raised to 600 per minute, burst 6: a window of 600 ms, one request per 100 ms.
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let raised = yaml.replace("requests_per_minute: 6\n", "requests_per_minute: 600\n");
    let config = sluice::config::parse("t.yaml", &raised, None, &env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let after = chat(gw.addr(), SHARED, &chat_body("chat-model")).await;
    assert_eq!(after.status, 429, "the burst was used");
    let wait: u64 = after.header("retry-after-ms").unwrap().parse().unwrap();
    assert!(
        wait <= 100,
        "at most one interval of the new rate, not the old window: {wait} ms"
    );
    assert_eq!(after.header("x-ratelimit-limit-requests"), Some("600"));
    assert_eq!(after.header("x-ratelimit-remaining-requests"), Some("0"));
    let reset = after.header("x-ratelimit-reset-requests").unwrap();
    assert!(
        reset.ends_with("ms"),
        "the reset is within the new window of 600 ms: {reset}"
    );
    tokio::time::sleep(Duration::from_millis(wait)).await;
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200,
        "a client that waits what it was told is admitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_come_back_after_redis_restarts_empty() {
    let mut redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::stream(400, Duration::from_millis(50)));
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    max_concurrent: 2",
    );
    let a = TestGateway::start(&yaml).await;
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    // One stream admitted by the store, then Redis dies.
    let first = EventStream::open(a.addr(), SHARED, body).await;
    assert_eq!(first.status, 200);
    redis.kill();
    // Another key's request finds the store dead; from then on the store is down and
    // requests are admitted in process.
    let _ = get(a.addr(), "/v1/models", Some(ALPHA)).await;
    let store = a.gateway().limits_store.clone().expect("a store");
    assert!(!store.is_up());
    let second = EventStream::open(a.addr(), SHARED, body).await;
    assert_eq!(
        second.status, 200,
        "admitted in process: one of two in flight"
    );
    // Redis comes back empty.
    redis.restart();
    tokio::time::timeout(Duration::from_secs(10), store.recovered())
        .await
        .expect("the probe finds the store again");
    let mut client = redis.client().await;
    let held: i64 = ::redis::cmd("ZCARD")
        .arg("test:sluice:{shared}:leases")
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(
        held, 2,
        "the lease Redis lost and the one of the request admitted meanwhile"
    );
    // Another replica, which has nothing in flight, asks the store: the key is full.
    let b = TestGateway::start(&yaml).await;
    let refused = chat(b.addr(), SHARED, body).await;
    assert_eq!(
        refused.error().2,
        "concurrency_limit_exceeded",
        "a key limited to 2 never runs 3 once the store is back"
    );
    first.disconnect();
    second.disconnect();
}
