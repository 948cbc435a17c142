//! The shared limits store's local gate (a key the store refused is refused again in this
//! process until its wait is over, without a call): such a refusal is still the key's use,
//! in the admin view's `last_used` and in the 429's `since_previous_ms`. With a real
//! `redis-server`.

mod common;
use common::redis_server::{shared_config, store, RedisServer, SHARED};
use common::*;
use std::time::Duration;

#[tokio::test]
async fn a_429_from_the_local_gate_updates_last_used() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // One request a minute: the store's refusal gates the key for about a minute.
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    requests_per_minute: 1\n    burst: 1",
    );
    let gw = TestGateway::start(&yaml).await;
    let body = chat_body("chat-model");
    let send = || chat(gw.addr(), SHARED, &body);
    assert_eq!(send().await.status, 200);
    gw.clock.advance(Duration::from_secs(2));
    let refused = send().await;
    assert_eq!(refused.status, 429, "the store refuses the second");
    // The gate holds the key for the wait the store named (the limiter's clock moves by
    // hand; the gate's is real, and far less than that wait passes here).
    let wait: u64 = refused.header("retry-after-ms").unwrap().parse().unwrap();
    assert!(wait > 50_000, "about a minute: {wait}");
    gw.clock.advance(Duration::from_secs(3));
    let gated = send().await;
    assert_eq!(gated.status, 429, "the local gate refuses the third");
    assert_eq!(gated.error().2, "rate_limit_exceeded");

    let keys = get(gw.admin(), "/keys/shared", None).await;
    assert_eq!(keys.status, 200, "{}", keys.text());
    assert_eq!(
        keys.json()["last_used_seconds_ago"],
        0.0,
        "the gated request is the key's last use, not the one 3 s before: {}",
        keys.text()
    );
    let lines = gw.log_lines(3).await;
    assert_eq!(
        lines[2]["since_previous_ms"], 3000.0,
        "the gated 429's line carries the interval since the previous request"
    );
}
