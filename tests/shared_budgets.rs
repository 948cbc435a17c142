//! Money budgets in a real `redis-server`, shared by two replicas: one spend seen by both,
//! an owner's budget shared by keys used on different replicas, a refusal before the
//! upstream is called, exact costs, reserve then refund, overage, a missing usage, a
//! thousand small requests summing exactly, the day's and the month's resets on the
//! injected wall clock, and a reload that changes a budget and keeps its spend.

mod common;
use common::budget::*;
use common::redis_server::RedisServer;
use common::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_are_refunded_overage_debited_and_a_missing_usage_stands_in_the_store() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 0.01}",
        "{usd_per_month: 100}",
    );
    let (one, two) = (
        TestGateway::start(&yaml).await,
        TestGateway::start(&yaml).await,
    );
    // Each reserves over 0.009 of the 0.01: the second passes only once the first was
    // refunded to what it used (125 micro-dollars).
    assert!(reserved(900) > 9_000 && 2 * reserved(900) > 10_000);
    mock.push(usage(10, 0, 10));
    assert_eq!(chat(one.addr(), ALPHA, &body(900)).await.status, 200);
    until_spent(&two, "alpha", "key", "day", "0.000125").await;
    mock.push(usage(10, 0, 10));
    assert_eq!(chat(two.addr(), ALPHA, &body(900)).await.status, 200);
    until_spent(&one, "alpha", "key", "day", "0.00025").await;

    // Asked for 10 output tokens, used 70 (within the plausibility slack): the overage
    // is debited in full.
    let input = body(10).len() as u64 / 4;
    mock.push(usage(input, 0, 70));
    assert_eq!(chat(one.addr(), ALPHA, &body(10)).await.status, 200);
    let cost = (input * 2_500_000 + 70 * 10_000_000).div_ceil(1_000_000);
    assert!(cost > reserved(10));
    let total = 250 + cost;
    until_spent(
        &two,
        "alpha",
        "key",
        "day",
        &sluice::limits::format_usd(total),
    )
    .await;

    // An answer without usage costs what it reserved.
    mock.push(Reply::json(
        200,
        r#"{"id":"c","object":"chat.completion","model":"m","choices":[]}"#,
    ));
    assert_eq!(chat(two.addr(), ALPHA, &body(10)).await.status, 200);
    // Replica two's second request.
    let line = &two.log_lines(2).await[1];
    assert_eq!(
        line["cost_usd"],
        serde_json::json!(reserved(10) as f64 / 1e6)
    );
    let total = total + reserved(10);
    until_spent(
        &one,
        "alpha",
        "key",
        "day",
        &sluice::limits::format_usd(total),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_small_requests_on_two_replicas_sum_exactly() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 1000}",
        "{usd_per_month: 1000}",
    );
    let (one, two) = (
        TestGateway::start(&yaml).await,
        TestGateway::start(&yaml).await,
    );
    // 4 input at 2.50 and 1 output at 10 per million: 20 micro-dollars each.
    mock.set_default(usage(4, 0, 1));
    // Ten clients on each replica at once, fifty requests each: requests of one key
    // gather behind its calls, settlements travel with admissions.
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let addr = if i % 2 == 0 { one.addr() } else { two.addr() };
            tokio::spawn(async move {
                for _ in 0..50 {
                    assert_eq!(chat(addr, TEAM_A, &body(1)).await.status, 200);
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("the client ran");
    }
    until_spent(&one, "team-a", "owner", "month", "0.02").await;
    let metric =
        |gw: &TestGateway| gw.metric(r#"sluice_spend_usd_total{key="team-a",model="chat-model"}"#);
    let counted = metric(&one) + metric(&two);
    assert!((counted - 0.02).abs() < 1e-12, "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_month_starts_anew_in_the_store_on_the_utc_calendar() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&shared(
        &mock.url(),
        &redis,
        "{usd_per_day: 100, usd_per_month: 0.005}",
        "{usd_per_month: 100}",
    ))
    .await;
    mock.set_default(usage(1000, 400, 200)); // 0.004 each
    gw.wall.set(at("2026-03-31T12:00:00Z"));
    assert_eq!(chat(gw.addr(), ALPHA, &body(200)).await.status, 200);
    until_spent(&gw, "alpha", "key", "month", "0.004").await;
    let refused = chat(gw.addr(), ALPHA, &body(200)).await;
    assert_eq!(refused.status, 429, "the month is spent");
    assert!(
        refused.text().contains("month budget"),
        "{}",
        refused.text()
    );
    assert_eq!(refused.header("retry-after"), Some("43200"));
    gw.wall.set(at("2026-04-01T00:00:00Z"));
    assert_eq!(
        chat(gw.addr(), ALPHA, &body(200)).await.status,
        200,
        "a new month"
    );
    until_spent(&gw, "alpha", "key", "month", "0.004").await;
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.004");
}
