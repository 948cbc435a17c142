//! Key lifecycle: `expires_at` and `not_before` take effect at their instants on the
//! injected wall clock, without a reload; `disabled` keys are refused and come back with a
//! reload that keeps their limit state; bad dates and `metric_labels` are errors with their
//! paths, all at once; and the admin view of keys shows live counts and no key material.

mod common;
use common::*;
use sluice::catalog::Catalog;
use sluice::config::parse;
use std::time::Duration;

const TIMED: &str = "sk-test-timed-0123456789";

/// 2030-01-01T00:00:00Z in milliseconds since the Unix epoch.
const Y2030_MS: i64 = 1_893_456_000_000;

fn test_env(name: &str) -> Option<String> {
    (name == "TEST_UPSTREAM_KEY").then(|| UPSTREAM_SECRET.to_string())
}

/// The standard catalog plus a key `timed` with `fields` (indented lines), and `top` at the
/// top level.
fn timed_config(upstream: &str, fields: &str, top: &str) -> String {
    config_with(upstream, top).replace(
        "keys:\n",
        &format!(
            "keys:\n  - name: timed\n    sha256: {}\n{fields}\n",
            key_hash(TIMED)
        ),
    )
}

fn errors_of(text: &str) -> Vec<String> {
    match parse("g.yaml", text, None, &test_env) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors
            .0
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
    }
}

fn warnings_of(text: &str) -> Vec<String> {
    let config = parse("g.yaml", text, None, &test_env)
        .unwrap_or_else(|e| panic!("expected a valid configuration:\n{e}"));
    config.warnings.iter().map(ToString::to_string).collect()
}

/// Reloads the gateway with `text`, as the reloader does after validating the files.
fn swap(gw: &TestGateway, text: &str, generation: u64) {
    let config = parse("t.yaml", text, None, &test_env)
        .unwrap_or_else(|e| panic!("valid reloaded configuration:\n{e}"));
    gw.gateway()
        .swap_catalog(Catalog::build(&config, generation));
}

fn assert_inactive(response: &Response, says: &str) {
    let (status, kind, code, _) = response.error();
    assert_eq!(
        (status, kind.as_str(), code.as_str()),
        (401, "authentication_error", "invalid_api_key"),
        "an inactive key is a 401 invalid_api_key"
    );
    assert_eq!(response.header("www-authenticate"), Some("Bearer"));
    let message = response.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(says),
        "the message says `{says}`: {message}"
    );
}

#[tokio::test]
async fn a_key_expires_at_its_instant_without_a_reload() {
    let mock = MockUpstream::start().await;
    let yaml = timed_config(&mock.url(), "    expires_at: 2030-01-01T00:00:00Z", "");
    let gw = TestGateway::start(&yaml).await;
    gw.wall.set(Y2030_MS - 1);
    let response = chat(gw.addr(), TIMED, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200, "a millisecond before expiry: served");

    gw.wall.set(Y2030_MS);
    let response = chat(gw.addr(), TIMED, &chat_body("chat-model")).await;
    assert_inactive(&response, "expired at 2030-01-01T00:00:00Z");
    let listing = get(gw.addr(), "/v1/models", Some(TIMED)).await;
    assert_inactive(&listing, "expired");
    assert_eq!(gw.gateway().catalog().generation, 1, "no reload happened");
    assert_eq!(
        mock.requests().len(),
        1,
        "the expired request never went upstream"
    );

    let lines = gw.log_lines(3).await;
    assert_eq!(lines[1]["key"], "timed", "the log names the expired key");
    assert_eq!(lines[1]["error_code"], "invalid_api_key");
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="invalid_api_key",key="timed"}"#),
        2.0,
        "refusals of a known key are counted under its name"
    );
    // Another key is untouched, and learns nothing about this one.
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_key_is_refused_before_not_before_and_served_from_it() {
    let mock = MockUpstream::start().await;
    let yaml = timed_config(
        &mock.url(),
        "    not_before: 2030-01-01T01:00:00+01:00\n    expires_at: 2030-01-02T00:00:00Z",
        "",
    );
    let gw = TestGateway::start(&yaml).await;
    gw.wall.set(Y2030_MS - 1);
    let response = get(gw.addr(), "/v1/models", Some(TIMED)).await;
    assert_inactive(&response, "not valid before 2030-01-01T00:00:00Z");

    gw.wall.set(Y2030_MS);
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(TIMED)).await.status,
        200,
        "valid from its not_before on (the offset counted)"
    );
    gw.wall.advance(Duration::from_secs(24 * 3600));
    assert_inactive(&get(gw.addr(), "/v1/models", Some(TIMED)).await, "expired");
}

#[tokio::test]
async fn a_disabled_key_is_refused_and_a_reload_enables_it_with_its_limit_state() {
    let mock = MockUpstream::start().await;
    let limits = "    requests_per_minute: 2";
    let enabled = timed_config(&mock.url(), limits, "");
    let gw = TestGateway::start(&enabled).await;
    assert_eq!(
        chat(gw.addr(), TIMED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let used = chat(gw.addr(), TIMED, &chat_body("chat-model")).await;
    assert_eq!(used.header("x-ratelimit-remaining-requests"), Some("0"));

    swap(
        &gw,
        &timed_config(&mock.url(), &format!("{limits}\n    disabled: true"), ""),
        2,
    );
    let refused = chat(gw.addr(), TIMED, &chat_body("chat-model")).await;
    assert_inactive(&refused, "disabled");
    assert_eq!(
        refused.header("x-ratelimit-remaining-requests"),
        None,
        "a refused key gets no rate headers"
    );
    // The older spelling means the same.
    swap(
        &gw,
        &timed_config(&mock.url(), &format!("{limits}\n    enabled: false"), ""),
        3,
    );
    assert_inactive(&get(gw.addr(), "/v1/models", Some(TIMED)).await, "disabled");

    swap(&gw, &enabled, 4);
    let back = chat(gw.addr(), TIMED, &chat_body("chat-model")).await;
    assert_eq!(
        back.status, 429,
        "enabled again, with the rate it had used up before it was disabled"
    );
    gw.clock.advance(Duration::from_secs(30));
    assert_eq!(
        chat(gw.addr(), TIMED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
}

#[test]
fn bad_dates_contradictions_and_labels_are_errors_all_at_once() {
    let text = timed_config(
        "http://127.0.0.1:1/v1",
        "    expires_at: 2030-02-30T00:00:00Z
    not_before: tomorrow
  - name: backwards
    sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
    not_before: 2030-01-02T00:00:00Z
    expires_at: 2030-01-01T00:00:00Z
    labels: {team: search, bad label: x, empty: ''}
  - name: both
    sha256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
    enabled: true
    disabled: true
    owner: \"line\\nbreak\"",
        "metric_labels: [team, team, key, 2x, nowhere]",
    );
    let errors = errors_of(&text);
    for expected in [
        "g.yaml: keys[0].expires_at: '2030-02-30T00:00:00Z' is not an RFC 3339 date and time",
        "g.yaml: keys[0].not_before: 'tomorrow' is not an RFC 3339 date and time",
        "g.yaml: keys[1].not_before: is not before expires_at",
        "g.yaml: keys[1].labels.bad label: a label name must be",
        "g.yaml: keys[1].labels.empty: is empty",
        "g.yaml: keys[2].disabled: disabled: true contradicts enabled: true",
        "g.yaml: keys[2].owner: must be at most 256 characters on one line",
        "g.yaml: metric_labels[1]: 'team' is listed twice",
        "g.yaml: metric_labels[2]: 'key' is the label that names the key",
        "g.yaml: metric_labels[3]: '2x' is not a Prometheus label name",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "missing `{expected}` in {errors:#?}"
        );
    }
    assert!(
        !errors.iter().any(|e| e.contains("nowhere")),
        "with keys in error, no label is called unused: {errors:#?}"
    );
    let unused = errors_of(&timed_config(
        "http://127.0.0.1:1/v1",
        "    labels: {team: search}",
        "metric_labels: [team, nowhere]",
    ));
    assert_eq!(
        unused,
        ["g.yaml: metric_labels[1]: 'nowhere' is not a label of any key (keys[].labels)"]
    );
}

#[test]
fn agreeing_spellings_load_and_past_or_near_expiry_is_a_warning() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let soon = chrono::DateTime::from_timestamp(now + 3 * 24 * 3600, 0)
        .unwrap()
        .to_rfc3339();
    let text = timed_config(
        "http://127.0.0.1:1/v1",
        &format!(
            "    expires_at: {soon}
    enabled: true
    disabled: false
  - name: lapsed
    sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
    expires_at: 2001-01-01T00:00:00Z
  - name: later
    sha256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
    expires_at: 2999-01-01T00:00:00Z"
        ),
        "",
    );
    let warnings = warnings_of(&text);
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("g.yaml: keys[0].expires_at: the key expires in less than 7 days"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].starts_with("g.yaml: keys[1].expires_at: is in the past"),
        "{warnings:#?}"
    );
}

#[tokio::test]
async fn expiry_and_key_info_series_follow_the_catalog_across_reloads() {
    let mock = MockUpstream::start().await;
    let fields = "    expires_at: 2030-01-01T00:00:00.900Z
    owner: search-team@example.com
    labels: {team: search, cost_center: '42'}";
    let yaml = timed_config(&mock.url(), fields, "metric_labels: [team]");
    let gw = TestGateway::start(&yaml).await;
    let expiry = r#"sluice_key_expiry_timestamp_seconds{key="timed"}"#;
    assert_eq!(
        gw.metric(expiry),
        1_893_456_000.0,
        "set at load, in whole seconds"
    );
    let text = String::from_utf8(gw.gateway().metrics.render()).unwrap();
    assert!(
        !text.contains(r#"sluice_key_expiry_timestamp_seconds{key="alpha"}"#),
        "a key without expires_at has no expiry series"
    );
    assert_eq!(
        gw.metric(r#"sluice_key_info{key="timed",team="search"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(r#"sluice_key_info{key="alpha",team=""}"#),
        1.0,
        "a key without the label has it empty"
    );
    assert!(
        !text.contains("search-team@example.com") && !text.contains("cost_center"),
        "owner and unlisted labels never reach a metric label"
    );

    let later = fields.replace("2030-01-01T00:00:00.900Z", "2031-01-01T00:00:00Z");
    swap(
        &gw,
        &timed_config(&mock.url(), &later, "metric_labels: [team, cost_center]"),
        2,
    );
    assert_eq!(gw.metric(expiry), 1_924_992_000.0, "moved on reload");
    assert_eq!(
        gw.metric(r#"sluice_key_info{key="timed",team="search",cost_center="42"}"#),
        1.0,
        "the info series takes the new metric_labels"
    );
    swap(&gw, &config(&mock.url()), 3);
    let text = String::from_utf8(gw.gateway().metrics.render()).unwrap();
    assert!(
        !text.contains("sluice_key_expiry_timestamp_seconds{"),
        "a removed key's expiry series goes with it"
    );
}

/// `GET /keys` on the admin listener, as text and JSON.
async fn admin_keys(gw: &TestGateway, path: &str) -> (u16, String, serde_json::Value) {
    let response = get(gw.admin(), path, None).await;
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "the admin view of keys is JSON"
    );
    let text = response.text();
    (response.status, text, response.json())
}

fn entry<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["keys"]
        .as_array()
        .expect("a list of keys")
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("{name} is listed: {list}"))
}

/// Nothing of any key's secret or hash: not the key, not its hash (either case), not the
/// leading hex digits a hash's `Debug` would show.
fn assert_no_key_material(text: &str) {
    for key in [ALPHA, BETA, DISABLED, TIMED] {
        let hash = key_hash(key);
        for secret in [
            key.to_string(),
            hash.clone(),
            hash.to_uppercase(),
            hash[..8].to_string(),
        ] {
            assert!(
                !text.contains(&secret),
                "the admin view shows no key material: {text}"
            );
        }
    }
    assert!(!text.contains("sha256"), "no hash field: {text}");
}

#[tokio::test]
async fn the_admin_view_shows_live_counts_and_never_key_material() {
    let mock = MockUpstream::start().await;
    let fields = "    requests_per_minute: 60
    burst: 5
    max_concurrent: 3
    expires_at: 2030-01-01T00:00:00Z
    owner: search-team@example.com
    labels: {team: search}";
    let gw = TestGateway::start(&timed_config(&mock.url(), fields, "")).await;
    gw.wall.set(Y2030_MS - 3_600_000);

    let (status, text, before) = admin_keys(&gw, "/keys").await;
    assert_eq!(status, 200);
    assert_no_key_material(&text);
    let idle = entry(&before, "timed");
    assert_eq!(idle["in_flight"], 0);
    assert_eq!(idle["last_used"], serde_json::Value::Null, "never used yet");
    assert_eq!(idle["requests"]["used"], 0);

    for _ in 0..2 {
        assert_eq!(
            chat(gw.addr(), TIMED, &chat_body("chat-model"))
                .await
                .status,
            200
        );
    }
    mock.push(Reply::stream(50, Duration::from_millis(200)));
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let mut stream = EventStream::open(gw.addr(), TIMED, body).await;
    stream.next_event().await.unwrap();
    gw.clock.advance(Duration::from_millis(500));

    let (_, text, live) = admin_keys(&gw, "/keys").await;
    assert_no_key_material(&text);
    assert_eq!(live["generation"], 1);
    let timed = entry(&live, "timed");
    assert_eq!(timed["owner"], "search-team@example.com");
    assert_eq!(timed["labels"], serde_json::json!({"team": "search"}));
    assert_eq!(
        timed["limits"],
        serde_json::json!({"requests_per_minute": 60, "burst": 5, "max_concurrent": 3,
            "tokens_per_minute": null, "tokens_per_day": null})
    );
    assert_eq!(timed["expires_at"], "2030-01-01T00:00:00Z");
    assert_eq!(timed["expires_in_seconds"], 3600);
    assert_eq!(
        (&timed["active"], &timed["inactive_reason"]),
        (&true.into(), &serde_json::Value::Null)
    );
    assert_eq!(timed["in_flight"], 1, "the open stream is in flight");
    let requests = &timed["requests"];
    assert_eq!(
        (
            &requests["used"],
            &requests["remaining"],
            &requests["limit_per_minute"]
        ),
        (&3.into(), &2.into(), &60.into()),
        "three requests in the window, 500 ms after the last: {requests}"
    );
    assert_eq!(
        timed["tokens"],
        serde_json::Value::Null,
        "a key without token limits has no token windows"
    );
    assert_eq!(timed["last_used_seconds_ago"], 0.5);
    assert_eq!(timed["last_used"], "2029-12-31T22:59:59.500Z");
    let alpha = entry(&live, "alpha");
    assert_eq!(
        alpha["requests"],
        serde_json::Value::Null,
        "no rate limit, no window"
    );
    assert_eq!(alpha["last_used"], serde_json::Value::Null);
    assert_eq!(entry(&live, "disabled")["inactive_reason"], "disabled");

    let (status, text, one) = admin_keys(&gw, "/keys/timed").await;
    assert_eq!(status, 200);
    assert_no_key_material(&text);
    assert_eq!(one["in_flight"], 1);
    assert_eq!(one["name"], "timed");

    stream.disconnect();
    mock.wait_until("the stream to be abandoned", |m| m.abandoned() == 1)
        .await;
    gw.log_lines(3).await;
    gw.wall.set(Y2030_MS);
    let (_, _, after) = admin_keys(&gw, "/keys/timed").await;
    assert_eq!(after["in_flight"], 0, "the stream's slot is given back");
    assert_eq!(
        (&after["active"], &after["inactive_reason"]),
        (&false.into(), &"expired".into())
    );

    let (status, text, missing) = admin_keys(&gw, "/keys/no-such-key").await;
    assert_eq!(status, 404, "{text}");
    assert_eq!(
        missing["error"]["code"], "unknown_key",
        "the gateway's error envelope: {text}"
    );
    assert_eq!(
        get(gw.addr(), "/keys", Some(ALPHA)).await.status,
        404,
        "the client port does not serve the admin view"
    );
}
