//! Money budgets in this process: the exact cost of each request (cached input at its own
//! price), refusal before the upstream is called, reserve then refund, overage debited,
//! an owner's budget shared by its keys, the reservation standing without usage, a reload
//! that keeps spend, calendar resets on the injected wall clock, and many small requests
//! summing exactly.

mod common;
use common::*;

use common::budget::*;

#[tokio::test]
async fn each_request_costs_exactly_its_usage_with_cached_input_at_its_own_price() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 100}",
        "{usd_per_month: 100}",
    ))
    .await;
    // 600 uncached at 2.50, 400 cached at 1.25, 200 output at 10 (per million).
    mock.push(usage(1000, 400, 200));
    let response = chat(gw.addr(), ALPHA, &body(300)).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["cost_usd"], serde_json::json!(0.004));
    assert_eq!(
        gw.metric(r#"sluice_spend_usd_total{key="alpha",model="chat-model"}"#),
        0.004
    );
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.004");
    // The answer showed what was left once this request's reservation was taken.
    let left = 100_000_000 - reserved(300);
    assert_eq!(
        response.header("x-sluice-budget-remaining-usd"),
        Some(sluice::limits::format_usd(left).as_str())
    );
    let next = chat(gw.addr(), ALPHA, &chat_body("plain-model")).await;
    assert_eq!(
        next.header("x-sluice-budget-remaining-usd"),
        Some("99.996"),
        "an unpriced model reserves nothing; the header shows the spend so far"
    );
    // Prices never reach the catalog.
    let models = get(gw.addr(), "/v1/models", Some(ALPHA)).await.text();
    assert!(
        !models.contains("price") && !models.contains("per_mtok"),
        "{models}"
    );
}

#[tokio::test]
async fn a_request_that_would_go_over_is_refused_before_the_upstream_is_called() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 0.01}",
        "{usd_per_month: 100}",
    ))
    .await;
    gw.wall.set(at("2026-03-10T23:59:00Z"));
    // 2000 output tokens at 10 per million: 0.02, over the 0.01 of the day.
    let response = chat(gw.addr(), ALPHA, &body(2000)).await;
    assert_eq!(response.status, 429, "{}", response.text());
    let error = &response.json()["error"];
    assert_eq!(error["code"], "insufficient_quota");
    assert_eq!(error["type"], "insufficient_quota");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("day budget of key 'alpha' is 0.01 USD and 0 USD is spent"),
        "{message}"
    );
    assert_eq!(response.header("retry-after"), Some("60"), "to 00:00 UTC");
    assert_eq!(response.header("x-should-retry"), Some("false"));
    assert!(response.header("x-request-id").is_some());
    assert_eq!(
        response.header("x-sluice-budget-remaining-usd"),
        Some("0.01")
    );
    assert!(mock.requests().is_empty(), "nothing sent upstream");
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0");
}

#[tokio::test]
async fn a_reservation_is_refunded_down_to_the_real_cost() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 0.01}",
        "{usd_per_month: 100}",
    ))
    .await;
    // Each reserves over 0.009 of the 0.01: the second passes only if the first was
    // refunded to what it used.
    assert!(reserved(900) > 9_000 && 2 * reserved(900) > 10_000);
    mock.set_default(usage(10, 0, 10));
    for round in 0..2 {
        let response = chat(gw.addr(), ALPHA, &body(900)).await;
        assert_eq!(response.status, 200, "round {round}: {}", response.text());
        gw.log_lines(round + 1).await;
    }
    // 10 input at 2.50 and 10 output at 10 per million: 125 micro-dollars each.
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.00025");
}

#[tokio::test]
async fn overage_is_debited_and_a_missing_usage_leaves_the_reservation_standing() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 0.0008}",
        "{usd_per_month: 100}",
    ))
    .await;
    // Asked for 10 output tokens, used 70 (within the plausibility slack): 25 input at
    // 2.50 and 70 at 10 per million, far over what was reserved.
    let input = body(10).len() as u64 / 4;
    mock.push(usage(input, 0, 70));
    assert_eq!(chat(gw.addr(), ALPHA, &body(10)).await.status, 200);
    gw.log_lines(1).await;
    let cost = (input * 2_500_000 + 70 * 10_000_000).div_ceil(1_000_000);
    assert!(cost > reserved(10));
    assert_eq!(
        spent(&gw, "alpha", "key", "day").await,
        sluice::limits::format_usd(cost)
    );
    // What is left no longer holds another reservation.
    assert!(cost + reserved(10) > 800);
    let refused = chat(gw.addr(), ALPHA, &body(10)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(mock.requests().len(), 1);

    // A key of its own: an answer without usage costs what it reserved.
    let gw2 = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 1}",
        "{usd_per_month: 100}",
    ))
    .await;
    mock.push(Reply::json(
        200,
        r#"{"id":"c","object":"chat.completion","model":"m","choices":[]}"#,
    ));
    assert_eq!(chat(gw2.addr(), ALPHA, &body(10)).await.status, 200);
    let line = &gw2.log_lines(1).await[0];
    let stands = reserved(10) as f64 / 1e6;
    assert_eq!(line["cost_usd"], serde_json::json!(stands));
    assert_eq!(
        spent(&gw2, "alpha", "key", "day").await,
        sluice::limits::format_usd(reserved(10))
    );
}

#[tokio::test]
async fn an_owner_budget_is_shared_by_its_keys() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 100}",
        "{usd_per_month: 0.005}",
    ))
    .await;
    gw.wall.set(at("2026-03-10T12:00:00Z"));
    mock.push(usage(1000, 400, 200)); // 0.004
    assert_eq!(chat(gw.addr(), TEAM_A, &body(300)).await.status, 200);
    gw.log_lines(1).await;
    assert_eq!(spent(&gw, "team-b", "owner", "month").await, "0.004");
    // 0.001 is left for the whole owner: team-b's request of 100 output tokens is over.
    let refused = chat(gw.addr(), TEAM_B, &body(100)).await;
    assert_eq!(refused.status, 429);
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("month budget of owner 'search' is 0.005 USD and 0.004 USD is spent"),
        "{message}"
    );
    // Until 2026-04-01T00:00:00Z.
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(
        wait,
        (at("2026-04-01T00:00:00Z") - at("2026-03-10T12:00:00Z")) as u64 / 1000
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn a_reload_keeps_the_spend_and_applies_a_new_budget_and_price_at_once() {
    let mock = MockUpstream::start().await;
    let yaml = budget_config(&mock.url(), "{usd_per_day: 100}", "{usd_per_month: 100}");
    let gw = TestGateway::start(&yaml).await;
    mock.set_default(usage(1000, 400, 200)); // 0.004 at the first price
    assert_eq!(chat(gw.addr(), ALPHA, &body(300)).await.status, 200);
    gw.log_lines(1).await;
    let env = |name: &str| (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string());
    let reloaded = yaml
        .replace("{usd_per_day: 100}", "{usd_per_day: 0.012}")
        .replace("output_per_mtok: 10}", "output_per_mtok: 20}");
    let config = sluice::config::parse("t.yaml", &reloaded, None, &env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let view = budget_view(&gw, "alpha").await;
    assert_eq!(view[0]["limit_usd"], "0.012");
    assert_eq!(view[0]["spent_usd"], "0.004", "the spend is kept");
    // At the new price the same usage costs 0.006: 0.010 in all.
    assert_eq!(chat(gw.addr(), ALPHA, &body(200)).await.status, 200);
    gw.log_lines(2).await;
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.01");
}

#[tokio::test]
async fn day_and_month_windows_start_anew_on_the_utc_calendar() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 0.005, usd_per_month: 0.009}",
        "{usd_per_month: 100}",
    ))
    .await;
    mock.set_default(usage(1000, 400, 200)); // 0.004 each
    let asked = body(200); // reserves a little over 0.002
    let send = || chat(gw.addr(), ALPHA, &asked);
    gw.wall.set(at("2026-03-30T23:59:59Z"));
    assert_eq!(send().await.status, 200);
    gw.log_lines(1).await;
    let refused = send().await;
    assert_eq!(refused.status, 429, "the day is spent");
    assert!(refused.text().contains("day budget"), "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    gw.wall.set(at("2026-03-31T00:00:00Z"));
    assert_eq!(send().await.status, 200, "a new day");
    gw.log_lines(2).await;
    assert_eq!(spent(&gw, "alpha", "key", "day").await, "0.004");
    assert_eq!(spent(&gw, "alpha", "key", "month").await, "0.008");
    gw.wall.set(at("2026-03-31T12:00:00Z"));
    let refused = send().await;
    assert_eq!(refused.status, 429, "the month is spent");
    assert!(
        refused.text().contains("month budget"),
        "{}",
        refused.text()
    );
    assert_eq!(refused.header("retry-after"), Some("43200"));
    gw.wall.set(at("2026-04-01T00:00:00Z"));
    assert_eq!(send().await.status, 200, "a new month");
    gw.log_lines(3).await;
    assert_eq!(spent(&gw, "alpha", "key", "month").await, "0.004");
}

#[tokio::test]
async fn a_thousand_small_requests_sum_exactly() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&budget_config(
        &mock.url(),
        "{usd_per_day: 1000}",
        "{usd_per_month: 1000}",
    ))
    .await;
    // 4 input at 2.50 and 1 output at 10 per million: 20 micro-dollars each.
    mock.set_default(usage(4, 0, 1));
    // Twenty clients at once, fifty requests each: concurrent settlements too.
    let addr = gw.addr();
    let clients: Vec<_> = (0..20)
        .map(|_| {
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
    gw.log_lines(1000).await;
    assert_eq!(spent(&gw, "team-a", "owner", "month").await, "0.02");
    let metric = gw.metric(r#"sluice_spend_usd_total{key="team-a",model="chat-model"}"#);
    assert!((metric - 0.02).abs() < 1e-12, "{metric}");
}

#[test]
fn check_warns_about_a_budgeted_key_that_may_use_an_unpriced_model() {
    let yaml = budget_config(
        "http://127.0.0.1:9",
        "{usd_per_day: 1}",
        "{usd_per_month: 1}",
    );
    let config = sluice::config::parse("t.yaml", &yaml, None, &test_env).unwrap();
    let warned: Vec<String> = config
        .warnings
        .iter()
        .map(|w| format!("{}: {}", w.path, w.message))
        .collect();
    for key in ["alpha", "team-a", "team-b"] {
        assert!(
            warned
                .iter()
                .any(|w| w.contains(&format!("key '{key}'")) && w.contains("plain-model")),
            "{warned:?}"
        );
    }
    assert!(
        !warned.iter().any(|w| w.contains("key 'beta'")),
        "{warned:?}"
    );
    let bad = yaml.replace("{usd_per_day: 1}", "{usd_per_day: -1}");
    let errors = sluice::config::parse("t.yaml", &bad, None, &test_env).unwrap_err();
    assert!(
        errors.to_string().contains("keys[2].budget.usd_per_day"),
        "{errors}"
    );
}
