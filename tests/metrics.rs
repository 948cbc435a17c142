//! The admin listener and every metric series: each one moves when it should.

mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn admin_endpoints_answer_on_their_own_listener() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    assert_ne!(gw.admin(), gw.addr());
    assert_eq!(get(gw.admin(), "/healthz", None).await.status, 200);
    assert_eq!(get(gw.admin(), "/readyz", None).await.status, 200);
    let metrics = get(gw.admin(), "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        metrics.text().contains("sluice_build_info{version=\""),
        "{}",
        metrics.text()
    );
    assert_eq!(
        get(gw.admin(), "/v1/models", Some(ALPHA)).await.status,
        404,
        "the admin port serves no API"
    );
    assert_eq!(
        get(gw.addr(), "/metrics", None).await.status,
        404,
        "the client port serves no metrics"
    );

    gw.gateway().start_draining();
    assert_eq!(
        get(gw.admin(), "/readyz", None).await.status,
        503,
        "not ready while draining"
    );
    assert_eq!(
        get(gw.admin(), "/healthz", None).await.status,
        200,
        "but alive"
    );
    let refused = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        refused.error().2,
        "overloaded",
        "a draining gateway refuses new work"
    );
}

#[tokio::test]
async fn every_request_series_moves() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    mock.push(Reply::json(200, "{}").delayed(Duration::from_millis(50)));
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert_eq!(
        get(gw.addr(), "/v1/models", Some("sk-nope")).await.status,
        401
    );
    mock.push(Reply::Garbage);
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        502
    );
    gw.log_lines(3).await;

    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="alpha",model="chat-model",status="200"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="unknown",model="unknown",status="401"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="alpha",model="chat-model",status="502"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_request_duration_seconds_count{model="chat-model"}"#),
        2.0
    );
    assert!(gw.metric(r#"sluice_request_duration_seconds_sum{model="chat-model"}"#) >= 0.05);
    assert_eq!(gw.metric("sluice_overhead_seconds_count"), 3.0);
    assert!(
        gw.metric("sluice_overhead_seconds_sum")
            < gw.metric(r#"sluice_request_duration_seconds_sum{model="chat-model"}"#),
        "overhead excludes the upstream's 50 ms"
    );
    assert_eq!(
        gw.metric(r#"sluice_upstream_ttfb_seconds_count{upstream="mock"}"#),
        1.0,
        "a garbage answer has no ttfb"
    );
    assert!(gw.metric(r#"sluice_upstream_ttfb_seconds_sum{upstream="mock"}"#) >= 0.05);
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="invalid_api_key",key="unknown"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="upstream_protocol_error",key="alpha"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(
            r#"sluice_upstream_errors_total{code="upstream_protocol_error",upstream="mock"}"#
        ),
        1.0
    );
    assert_eq!(gw.metric("sluice_config_generation"), 1.0);
    assert!(gw.metric("sluice_config_last_success_timestamp_seconds") > 1.7e9);
}

#[tokio::test]
async fn in_flight_counts_a_request_until_its_last_byte() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    mock.push(Reply::Gated);
    let addr = gw.addr();
    let held = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("chat-model")).await });
    mock.wait_until("the request upstream", |m| m.requests().len() == 1)
        .await;
    assert_eq!(gw.metric(r#"sluice_in_flight_requests{key="alpha"}"#), 1.0);
    mock.open_gate();
    assert_eq!(held.await.unwrap().status, 200);
    gw.log_lines(1).await;
    assert_eq!(gw.metric(r#"sluice_in_flight_requests{key="alpha"}"#), 0.0);
}

#[tokio::test]
async fn reload_series_move() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("metrics-reload");
    let path = dir.join("gateway.yaml");
    let text = config_with(&mock.url(), "watch_interval: 1h")
        .replace("    api_key_env: TEST_UPSTREAM_KEY\n", "");
    std::fs::write(&path, &text).unwrap();
    let gw = TestGateway::start_file(&path).await;
    let reloader = gw.reloader.clone().unwrap();
    let before = gw.metric("sluice_config_last_success_timestamp_seconds");
    let again = reloader.clone();
    assert!(
        tokio::task::spawn_blocking(move || again.reload(sluice::reload::Trigger::Signal))
            .await
            .unwrap()
    );
    std::fs::write(&path, "not: [valid").unwrap();
    assert!(
        !tokio::task::spawn_blocking(move || reloader.reload(sluice::reload::Trigger::Signal))
            .await
            .unwrap()
    );
    assert_eq!(
        gw.metric(r#"sluice_config_reloads_total{result="success"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_config_reloads_total{result="failure"}"#),
        1.0
    );
    assert_eq!(gw.metric("sluice_config_generation"), 2.0);
    assert!(gw.metric("sluice_config_last_success_timestamp_seconds") >= before);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn series_with_known_labels_exist_at_zero_from_the_first_scrape() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let text = String::from_utf8(gw.gateway().render_metrics()).unwrap();
    for series in [
        r#"sluice_config_reloads_total{result="success"} 0"#,
        r#"sluice_config_reloads_total{result="failure"} 0"#,
        r#"sluice_upstream_ejections_total{upstream="mock"} 0"#,
        r#"sluice_upstream_cooldowns_total{upstream="mock"} 0"#,
        r#"sluice_upstream_retries_total{reason="connect_failed",upstream="mock"} 0"#,
        r#"sluice_upstream_errors_total{code="upstream_timeout",upstream="mock"} 0"#,
        r#"sluice_upstream_health_checks_total{result="fail",upstream="mock"} 0"#,
        r#"sluice_rejections_total{code="rate_limit_exceeded",key="alpha"} 0"#,
        r#"sluice_rejections_total{code="invalid_api_key",key="unknown"} 0"#,
        r#"sluice_in_flight_requests{key="beta"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l == series),
            "{series} is exported before it first moves"
        );
    }
}

/// Series handles are kept by the key, the model and the upstream's state: each label set
/// still moves its own series, and a reload (new catalog entries) moves the same ones.
#[tokio::test]
async fn held_series_keep_their_labels_apart_and_survive_a_reload() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let usage = |input: u64| {
        format!(
            r#"{{"prompt_tokens":{input},"completion_tokens":1,"total_tokens":{}}}"#,
            input + 1
        )
    };
    let ask = |model: &'static str, status: u16, input: u64| {
        match status {
            200 => mock.push(json_with_usage(&usage(input))),
            _ => mock.push(Reply::json(status, r#"{"error":{"message":"no"}}"#)),
        }
        model
    };
    for (model, status, input) in [
        ("chat-model", 200, 3),
        ("plain-model", 200, 5),
        ("chat-model", 400, 0),
        ("chat-model", 200, 7),
    ] {
        let model = ask(model, status, input);
        let answer = chat(gw.addr(), ALPHA, &chat_body(model)).await;
        assert_eq!(answer.status, status, "the upstream's status is passed on");
    }
    gw.log_lines(4).await;
    // A reload builds new keys, models and catalog: the same series move on.
    let config = sluice::config::parse("t.yaml", &config(&mock.url()), None, &test_env)
        .expect("the test configuration is valid");
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    let model = ask("chat-model", 200, 11);
    assert_eq!(chat(gw.addr(), ALPHA, &chat_body(model)).await.status, 200);
    mock.push(json_with_usage(&usage(13)));
    assert_eq!(
        chat(gw.addr(), BETA, &chat_body("public-one")).await.status,
        200
    );
    gw.log_lines(6).await;

    for (series, value) in [
        (
            r#"sluice_requests_total{key="alpha",model="chat-model",status="200"}"#,
            3.0,
        ),
        (
            r#"sluice_requests_total{key="alpha",model="chat-model",status="400"}"#,
            1.0,
        ),
        (
            r#"sluice_requests_total{key="alpha",model="plain-model",status="200"}"#,
            1.0,
        ),
        (
            r#"sluice_requests_total{key="beta",model="public-one",status="200"}"#,
            1.0,
        ),
        (
            r#"sluice_tokens_total{key="alpha",kind="input",model="chat-model"}"#,
            21.0,
        ),
        (
            r#"sluice_tokens_total{key="alpha",kind="output",model="chat-model"}"#,
            3.0,
        ),
        (
            r#"sluice_tokens_total{key="alpha",kind="input",model="plain-model"}"#,
            5.0,
        ),
        (
            r#"sluice_tokens_total{key="beta",kind="input",model="public-one"}"#,
            13.0,
        ),
        (
            r#"sluice_request_duration_seconds_count{model="chat-model"}"#,
            4.0,
        ),
        (
            r#"sluice_request_duration_seconds_count{model="plain-model"}"#,
            1.0,
        ),
        (
            r#"sluice_upstream_ttfb_seconds_count{upstream="mock"}"#,
            6.0,
        ),
        (r#"sluice_in_flight_requests{key="alpha"}"#, 0.0),
        (
            r#"sluice_upstream_in_flight_requests{upstream="mock"}"#,
            0.0,
        ),
    ] {
        assert_eq!(gw.metric(series), value, "{series}");
    }
    // Resolved on first use: a label set that never moved has no series.
    let text = String::from_utf8(gw.gateway().render_metrics()).unwrap();
    for absent in [
        r#"sluice_requests_total{key="alpha",model="plain-model",status="400"}"#,
        r#"sluice_request_duration_seconds_count{model="renamed"}"#,
        r#"sluice_tokens_total{key="beta",kind="input",model="chat-model"}"#,
    ] {
        assert!(!text.contains(absent), "{absent} is not exported");
    }
}
