//! Money budgets in a real `redis-server`, shared by two replicas: one spend seen by both,
//! an owner's budget shared by keys used on different replicas, a refusal before the
//! upstream is called, exact costs, the day's reset on the injected wall clock, and a
//! reload that changes a budget and keeps its spend.

mod common;
use common::budget::*;
use common::redis_server::{store, RedisServer};
use common::*;
use std::time::Duration;

/// The budget catalog with the limits store of `redis`.
fn shared(upstream: &str, redis: &RedisServer, alpha: &str, owner: &str) -> String {
    budget_config(upstream, alpha, owner).replace(
        "environment: test\n",
        &format!(
            "environment: test\nlimits_store:\n{}",
            store(redis, "  timeout: 2s\n")
        ),
    )
}

/// Waits (bounded) until `gw`'s admin view shows `expected` spent: settlements in the
/// store are sent off the response path.
async fn until_spent(gw: &TestGateway, key: &str, scope: &str, window: &str, expected: &str) {
    let wait = async {
        loop {
            if spent(gw, key, scope, window).await == expected {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    let last = tokio::time::timeout(Duration::from_secs(10), wait).await;
    assert!(
        last.is_ok(),
        "{key} {scope} {window}: {} spent, not {expected}",
        spent(gw, key, scope, window).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_store_see_one_spend() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 0.01}",
        "{usd_per_month: 0.005}",
    );
    let one = TestGateway::start(&yaml).await;
    let two = TestGateway::start(&yaml).await;
    for gw in [&one, &two] {
        gw.wall.set(at("2026-03-10T23:59:30Z"));
    }
    // 0.004 on replica one (cached input at its own price).
    mock.push(usage(1000, 400, 200));
    let first = chat(one.addr(), ALPHA, &body(300)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(
        first.header("x-sluice-budget-remaining-usd"),
        Some(sluice::limits::format_usd(10_000 - reserved(300)).as_str())
    );
    assert_eq!(
        one.log_lines(1).await[0]["cost_usd"],
        serde_json::json!(0.004)
    );
    until_spent(&two, "alpha", "key", "day", "0.004").await;
    // Replica two sees it: 0.004 spent, so a reservation over 0.006 is refused there,
    // before its upstream is called.
    assert!(reserved(700) > 6_000);
    let refused = chat(two.addr(), ALPHA, &body(700)).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "insufficient_quota");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("day budget of key 'alpha' is 0.01 USD and 0.004 USD is spent"),
        "{error}"
    );
    assert_eq!(refused.header("retry-after"), Some("30"));
    assert_eq!(
        refused.header("x-sluice-budget-remaining-usd"),
        Some("0.006")
    );
    assert_eq!(mock.requests().len(), 1, "nothing sent upstream");
    // A new day on both replicas: the day's spend starts again.
    for gw in [&one, &two] {
        gw.wall.set(at("2026-03-11T00:00:00Z"));
    }
    mock.push(usage(1000, 400, 200));
    assert_eq!(chat(two.addr(), ALPHA, &body(300)).await.status, 200);
    until_spent(&one, "alpha", "key", "day", "0.004").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_budget_holds_across_replicas_and_keys() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 100}",
        "{usd_per_month: 0.005}",
    );
    let one = TestGateway::start(&yaml).await;
    let two = TestGateway::start(&yaml).await;
    mock.push(usage(1000, 400, 200)); // 0.004
    assert_eq!(chat(one.addr(), TEAM_A, &body(300)).await.status, 200);
    until_spent(&two, "team-b", "owner", "month", "0.004").await;
    let refused = chat(two.addr(), TEAM_B, &body(100)).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(
        refused.text().contains("month budget of owner 'search'"),
        "{}",
        refused.text()
    );
    assert_eq!(mock.requests().len(), 1);
    // A refused reservation takes nothing.
    assert_eq!(spent(&one, "team-a", "owner", "month").await, "0.004");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_a_shared_budget_without_forgetting_its_spend() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 100}",
        "{usd_per_month: 100}",
    );
    let gw = TestGateway::start(&yaml).await;
    mock.set_default(usage(1000, 400, 200)); // 0.004
    assert_eq!(chat(gw.addr(), ALPHA, &body(300)).await.status, 200);
    until_spent(&gw, "alpha", "key", "day", "0.004").await;
    let reloaded = yaml.replace("{usd_per_day: 100}", "{usd_per_day: 0.006}");
    let config = sluice::config::parse("t.yaml", &reloaded, None, &test_env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let view = budget_view(&gw, "alpha").await;
    assert_eq!(
        (&view[0]["limit_usd"], &view[0]["spent_usd"]),
        (&"0.006".into(), &"0.004".into())
    );
    // 0.002 left: a reservation over it is refused at once under the new limit.
    assert!(reserved(300) > 2_000);
    let refused = chat(gw.addr(), ALPHA, &body(300)).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(mock.requests().len(), 1);
}
