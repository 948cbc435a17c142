//! A budgeted key's limits and money decided in one store call (a real `redis-server`, a
//! real Redis Cluster): a refusal takes nothing (a budget's no rate step, tokens or lease;
//! a rate limit's no money), every answer to a budgeted key carries what its budget has
//! left (the store's 429s for rate, concurrency and tokens, the replica's own concurrency
//! check and its local gate included), and a key whose owner has a budget keeps all its
//! state on the Cluster node of its owner's slot.

mod common;
use common::budget::*;
use common::redis_server::{RedisCluster, RedisServer};
use common::*;
use sluice::limits::format_usd;

const BUDGET_HEADER: &str = "x-sluice-budget-remaining-usd";

/// `alpha`'s budget line in [`shared`]'s catalog, with `limits` after it.
fn with_limits(yaml: &str, budget: &str, limits: &str) -> String {
    let line = format!("    budget: {budget}\n");
    yaml.replace(&line, &format!("{line}{limits}"))
}

/// Swaps `gw`'s catalog for one built from `yaml` (what a reload does).
fn reload(gw: &TestGateway, yaml: &str) {
    let config = sluice::config::parse("t.yaml", yaml, None, &test_env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_refusal_takes_no_rate_tokens_or_lease_and_a_rate_refusal_no_money() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let limits =
        "    requests_per_minute: 3\n    tokens_per_minute: 100000\n    max_concurrent: 1\n";
    let yaml = with_limits(
        &shared(
            &mock.url(),
            &redis,
            "{usd_per_day: 0.001}",
            "{usd_per_month: 100}",
        ),
        "{usd_per_day: 0.001}",
        limits,
    );
    let gw = TestGateway::start(&yaml).await;
    // Each reserves over the 0.001 of the day: refused by the budget, five times.
    assert!(reserved(300) > 1_000);
    for round in 0..5 {
        let refused = chat(gw.addr(), ALPHA, &body(300)).await;
        assert_eq!(refused.error().2, "insufficient_quota", "round {round}");
        assert_eq!(refused.header(BUDGET_HEADER), Some("0.001"));
        assert_eq!(
            refused.header("x-ratelimit-remaining-requests"),
            Some("3"),
            "round {round}: no rate step taken"
        );
        assert_eq!(
            refused.header("x-ratelimit-remaining-tokens"),
            Some("100000"),
            "round {round}: no tokens reserved"
        );
    }
    assert_eq!(
        redis.leases_after_settling("alpha").await,
        0,
        "no lease held"
    );
    assert!(mock.requests().is_empty(), "nothing sent upstream");

    // A raised budget: the key has its whole request rate, as if never refused.
    let raised = yaml.replace("{usd_per_day: 0.001}", "{usd_per_day: 100}");
    reload(&gw, &raised);
    mock.set_default(usage(1000, 400, 200)); // 0.004 each
    for left in ["2", "1", "0"] {
        // Sent the moment the previous answer ended: its lease went back in the key's
        // queue before its last byte, so `max_concurrent: 1` admits this one.
        let admitted = chat(gw.addr(), ALPHA, &body(300)).await;
        assert_eq!(admitted.status, 200, "{}", admitted.text());
        assert_eq!(
            admitted.header("x-ratelimit-remaining-requests"),
            Some(left)
        );
    }
    until_spent(&gw, "alpha", "key", "day", "0.012").await;

    // Over the rate: refused, and no money reserved for it.
    let limited = chat(gw.addr(), ALPHA, &body(300)).await;
    assert_eq!(limited.error().2, "rate_limit_exceeded");
    assert_eq!(
        limited.header(BUDGET_HEADER),
        Some("99.988"),
        "the budget left without the refused request"
    );
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.012");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_of_a_budgeted_key_carries_its_budget_in_shared_mode() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let limits = "    tokens_per_minute: 500\n    max_concurrent: 1\n";
    let yaml = with_limits(
        &shared(
            &mock.url(),
            &redis,
            "{usd_per_day: 100}",
            "{usd_per_month: 100}",
        ),
        "{usd_per_day: 100}",
        limits,
    );
    let (a, b) = (
        TestGateway::start(&yaml).await,
        TestGateway::start(&yaml).await,
    );
    // One request held upstream on A: the key's one slot is taken, its cost reserved.
    mock.push(Reply::Gated);
    let addr = a.addr();
    let held = tokio::spawn(async move { chat(addr, ALPHA, &body(10)).await });
    mock.wait_until("the request is upstream", |m| m.requests().len() == 1)
        .await;
    let left = format_usd(100_000_000 - reserved(10));

    // B: the store refuses it for concurrency.
    let refused = chat(b.addr(), ALPHA, &body(10)).await;
    assert_eq!(refused.error().2, "concurrency_limit_exceeded");
    assert_eq!(refused.header(BUDGET_HEADER), Some(left.as_str()));
    // A: refused before its body is read, as the store last told A.
    let refused = chat(a.addr(), ALPHA, &body(10)).await;
    assert_eq!(refused.error().2, "concurrency_limit_exceeded");
    assert_eq!(refused.header(BUDGET_HEADER), Some(left.as_str()));

    mock.open_gate();
    let answered = held.await.expect("the held request ran");
    assert_eq!(answered.status, 200);
    assert_eq!(answered.header(BUDGET_HEADER), Some(left.as_str()));
    // The mock's completion used 1 input and 3 output tokens: 0.0000325, rounded up.
    until_spent(&b, "alpha", "key", "day", "0.000033").await;

    // B: more tokens than the minute has left, refused by the store...
    let refused = chat(b.addr(), ALPHA, &body(600)).await;
    assert_eq!(refused.error().2, "rate_limit_exceeded");
    assert!(refused.header("x-ratelimit-remaining-tokens").is_some());
    assert_eq!(refused.header(BUDGET_HEADER), Some("99.999967"));
    // ...then by B's local gate, without a call.
    let gated = chat(b.addr(), ALPHA, &body(10)).await;
    assert_eq!(gated.error().2, "rate_limit_exceeded");
    assert_eq!(gated.header(BUDGET_HEADER), Some("99.999967"));
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_an_owner_budget_works_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let mock = MockUpstream::start().await;
    let store = format!(
        "limits_store:\n  url: {}\n  cluster: true\n  timeout: 2s\n",
        cluster.nodes[0].url()
    );
    let yaml = budget_config(&mock.url(), "{usd_per_day: 100}", "{usd_per_month: 0.005}")
        .replace("environment: test\n", &format!("environment: test\n{store}"))
        .replace(
            "  - name: team-a\n    owner: search\n",
            "  - name: team-a\n    owner: search\n    requests_per_minute: 60\n    max_concurrent: 2\n",
        );
    let (a, b) = (
        TestGateway::start(&yaml).await,
        TestGateway::start(&yaml).await,
    );
    mock.push(usage(1000, 400, 200)); // 0.004
    let first = chat(a.addr(), TEAM_A, &body(300)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("x-ratelimit-remaining-requests"), Some("59"));
    until_spent(&b, "team-b", "owner", "month", "0.004").await;
    // The owner's budget, shared by its two keys across replicas, has 0.001 left.
    let refused = chat(b.addr(), TEAM_B, &body(100)).await;
    assert_eq!(refused.error().2, "insufficient_quota");
    assert!(
        refused.text().contains("month budget of owner 'search'"),
        "{}",
        refused.text()
    );
    assert_eq!(mock.requests().len(), 1);

    // Every piece of team-a's state is on the node of its owner's slot.
    let slot: u16 = ::redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("owner/search")
        .query_async(&mut cluster.nodes[0].client().await)
        .await
        .unwrap();
    let mut node = cluster.node_of(slot).client().await;
    for name in [
        "test:sluice:{owner/search}:key:team-a:requests",
        "test:sluice:{owner/search}:budget:owner",
    ] {
        let held: i64 = ::redis::cmd("EXISTS")
            .arg(name)
            .query_async(&mut node)
            .await
            .unwrap();
        assert_eq!(held, 1, "{name} is on the node of slot {slot}");
    }
    for gw in [&a, &b] {
        assert_eq!(gw.metric("sluice_limits_store_up"), 1.0, "no call failed");
        assert_eq!(
            gw.metric(r#"sluice_limits_store_errors_total{kind="script"}"#),
            0.0
        );
    }
}
