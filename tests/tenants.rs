//! Tenants are isolated and accounting cannot be dodged (DESIGN §5.2), through real
//! sockets: stored-response IDs signed and owned (another owner's, a forged or re-wrapped
//! one is 404 and reaches no upstream; a team's keys share theirs; a rotated secret still
//! reads), the route's own output limit in the estimate, `stream_options` replaced
//! whatever its value, no repeated key reaching the upstream, `enforce_output_limit`.

mod common;
use common::*;
use std::time::Duration;

const TEAM_ONE: &str = "sk-test-team-a-one-0000000";
const TEAM_TWO: &str = "sk-test-team-a-two-0000000";
const OUTSIDER: &str = "sk-test-outsider-000000000";
const NARROW: &str = "sk-test-narrow-00000000000";

/// Two Responses models on one upstream; two keys of team `a`, a key of its own, and a
/// key that may use `agent` only. `response_ids` as given.
fn tenants(upstream: &str, response_ids: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
{response_ids}
upstreams:
  - {{name: up, url: "{upstream}", api_key_env: TEST_UPSTREAM_KEY}}
models:
  - {{id: agent, upstream: up, endpoint_type: responses, capabilities: [streaming]}}
  - {{id: secret-model, upstream: up, endpoint_type: responses}}
keys:
  - {{name: team-one, sha256: {one}, owner: team-a}}
  - {{name: team-two, sha256: {two}, owner: team-a}}
  - {{name: outsider, sha256: {outsider}}}
  - {{name: narrow, sha256: {narrow}, models: [agent]}}
"#,
        one = key_hash(TEAM_ONE),
        two = key_hash(TEAM_TWO),
        outsider = key_hash(OUTSIDER),
        narrow = key_hash(NARROW),
    )
}

const SIGNED: &str = "response_ids: {secret_env: TEST_RESPONSE_ID_SECRET}";

fn stored(id: &str) -> Reply {
    Reply::json(
        200,
        &format!(r#"{{"id":"{id}","object":"response","status":"completed","output":[]}}"#),
    )
}

async fn call(gw: &TestGateway, key: &str, method: &str, path: &str, body: &str) -> Response {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("authorization", auth.as_str())];
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
    }
    send(gw.addr(), method, path, &headers, body.as_bytes()).await
}

/// Creates a response on `model` with `key`; its ID as the client sees it.
async fn create(gw: &TestGateway, key: &str, model: &str) -> String {
    let body = format!(r#"{{"model":"{model}","input":"private prompt"}}"#);
    let made = call(gw, key, "POST", "/v1/responses", &body).await;
    assert_eq!(made.status, 200, "{}", made.text());
    made.json()["id"].as_str().unwrap().to_owned()
}

/// Every way a client names a stored response: the four routes and a continuation.
fn every_use(id: &str) -> Vec<(&'static str, String, String)> {
    vec![
        ("GET", format!("/v1/responses/{id}"), String::new()),
        ("DELETE", format!("/v1/responses/{id}"), String::new()),
        ("POST", format!("/v1/responses/{id}/cancel"), String::new()),
        (
            "GET",
            format!("/v1/responses/{id}/input_items"),
            String::new(),
        ),
        (
            "POST",
            "/v1/responses".to_owned(),
            format!(r#"{{"model":"agent","input":"go on","previous_response_id":"{id}"}}"#),
        ),
    ]
}

async fn assert_not_found_anywhere(gw: &TestGateway, mock: &MockUpstream, key: &str, id: &str) {
    let before = mock.requests().len();
    for (method, path, body) in every_use(id) {
        let answer = call(gw, key, method, &path, &body).await;
        let (status, _, code, _) = answer.error();
        assert_eq!(
            (status, code.as_str()),
            (404, "response_not_found"),
            "{method} {path} {body}"
        );
        assert!(
            answer.header("x-request-id").is_some(),
            "the envelope's headers"
        );
    }
    assert_eq!(
        mock.requests().len(),
        before,
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn another_owners_response_is_not_found_and_a_teams_keys_share_theirs() {
    let mock = MockUpstream::start().await;
    mock.set_default(stored("resp_made1"));
    let gw = TestGateway::start(&tenants(&mock.url(), SIGNED)).await;
    let id = create(&gw, TEAM_ONE, "agent").await;
    assert_eq!(
        read_response_id(RESPONSE_ID_SECRET, "team-a", &id).map(|n| n.upstream_id),
        Some("resp_made1".to_owned()),
        "made for the key's owner"
    );

    // Another tenant allowed the same model: reads, deletes, cancels and continues nothing.
    assert_not_found_anywhere(&gw, &mock, OUTSIDER, &id).await;
    assert_not_found_anywhere(&gw, &mock, NARROW, &id).await;

    // The other key of the same team reads it; the upstream gets its own ID.
    for (method, path, body) in every_use(&id) {
        let answer = call(&gw, TEAM_TWO, method, &path, &body).await;
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text());
    }
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert!(
        paths.contains(&"/v1/responses/resp_made1/cancel".to_owned()),
        "{paths:?}"
    );
}

#[tokio::test]
async fn forged_and_rewrapped_ids_reach_no_upstream() {
    let mock = MockUpstream::start().await;
    mock.set_default(stored("resp_made2"));
    let gw = TestGateway::start(&tenants(&mock.url(), SIGNED)).await;
    let made = create(&gw, OUTSIDER, "secret-model").await;
    let upstream_id = read_response_id(RESPONSE_ID_SECRET, "outsider", &made)
        .unwrap()
        .upstream_id;

    // `narrow` may use `agent` (same upstream) but not `secret-model`: an ID that names
    // the upstream's ID under `agent` is not one the gateway made, whatever secret it
    // guesses; nor is the outsider's ID, nor one made for it under a model it may not use.
    let guessed = response_id_for(
        "a guessed secret, also thirty-two bytes or more",
        "narrow",
        "agent",
        "up",
        &upstream_id,
    );
    let for_another_owner =
        response_id_for(RESPONSE_ID_SECRET, "outsider", "agent", "up", &upstream_id);
    let its_own_but_forbidden = response_id_for(
        RESPONSE_ID_SECRET,
        "narrow",
        "secret-model",
        "up",
        &upstream_id,
    );
    for id in [guessed, for_another_owner, made, its_own_but_forbidden] {
        assert_not_found_anywhere(&gw, &mock, NARROW, &id).await;
    }

    // An ID whose upstream part would be a path segment to steer: refused unread.
    let before = mock.requests().len();
    for forged in ["..", "..%2F..%2Fadmin", "a/b"] {
        let id = sluice_id_bytes("agent", "up", forged);
        let answer = call(&gw, NARROW, "DELETE", &format!("/v1/responses/{id}"), "").await;
        assert_eq!(answer.error().2, "response_not_found", "{forged}");
    }
    assert_eq!(
        mock.requests().len(),
        before,
        "nothing reached the upstream"
    );
}

/// An ID in the gateway's layout with any upstream part and a tag of zeros.
fn sluice_id_bytes(model: &str, upstream: &str, upstream_id: &str) -> String {
    use base64::Engine;
    let mut bytes = format!("sl2\n{model}\n{upstream}\n{upstream_id}").into_bytes();
    bytes.extend_from_slice(&[0; 32]);
    format!(
        "resp_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

#[tokio::test]
async fn replicas_with_one_secret_share_ids_and_a_rotation_keeps_the_old_ones_readable() {
    let mock = MockUpstream::start().await;
    mock.set_default(stored("resp_made3"));
    let old = "response_ids: {secret_env: TEST_RESPONSE_ID_PREVIOUS}";
    let before_rotation = TestGateway::start(&tenants(&mock.url(), old)).await;
    let id = create(&before_rotation, TEAM_ONE, "agent").await;

    // Another replica with the same secret reads it.
    let replica = TestGateway::start(&tenants(&mock.url(), old)).await;
    let read = call(
        &replica,
        TEAM_TWO,
        "GET",
        &format!("/v1/responses/{id}"),
        "",
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.text());

    // Rotated: new secret, the old one still accepted; new IDs made with the new one.
    let rotating = "response_ids: {secret_env: TEST_RESPONSE_ID_SECRET, previous_secret_env: TEST_RESPONSE_ID_PREVIOUS}";
    let during = TestGateway::start(&tenants(&mock.url(), rotating)).await;
    let read = call(&during, TEAM_ONE, "GET", &format!("/v1/responses/{id}"), "").await;
    assert_eq!(read.status, 200, "{}", read.text());
    let new_id = create(&during, TEAM_ONE, "agent").await;
    assert!(read_response_id(RESPONSE_ID_SECRET, "team-a", &new_id).is_some());

    // The rotation done: the old secret gone, its IDs are no longer read.
    let after = TestGateway::start(&tenants(&mock.url(), SIGNED)).await;
    assert_not_found_anywhere(&after, &mock, TEAM_ONE, &id).await;
    let read = call(
        &after,
        TEAM_ONE,
        "GET",
        &format!("/v1/responses/{new_id}"),
        "",
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.text());
}

#[tokio::test]
async fn without_a_configured_secret_ids_are_signed_by_the_process_alone() {
    let mock = MockUpstream::start().await;
    mock.set_default(stored("resp_made4"));
    let first = TestGateway::start(&tenants(&mock.url(), "")).await;
    let id = create(&first, TEAM_ONE, "agent").await;
    let read = call(&first, TEAM_TWO, "GET", &format!("/v1/responses/{id}"), "").await;
    assert_eq!(read.status, 200, "the process that made it reads it");
    assert_not_found_anywhere(&first, &mock, OUTSIDER, &id).await;
    let other_process = TestGateway::start(&tenants(&mock.url(), "")).await;
    assert_not_found_anywhere(&other_process, &mock, TEAM_ONE, &id).await;
}

const LIMITED: &str = "sk-test-tokens-limited-0000";

/// A completions and a chat model; a key with 3,000 tokens a minute.
fn limited(upstream: &str, model_extra: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: up, url: "{upstream}"}}
models:
  - {{id: chat, upstream: up, capabilities: [streaming]{model_extra}}}
  - {{id: text, upstream: up, endpoint_type: completions, capabilities: [streaming]}}
  - {{id: agent, upstream: up, endpoint_type: responses}}
keys:
  - {{name: limited, sha256: {key}, tokens_per_minute: 3000}}
"#,
        key = key_hash(LIMITED),
    )
}

/// A completions stream that generates `tokens` output tokens (its usage chunk says so).
fn completion_stream(tokens: u64) -> Reply {
    Reply::Sse {
        events: vec![
            (
                Duration::ZERO,
                r#"{"id":"c","object":"text_completion","model":"text","choices":[{"index":0,"text":"words","finish_reason":"length"}]}"#.to_owned(),
            ),
            (
                Duration::ZERO,
                format!(
                    r#"{{"id":"c","object":"text_completion","model":"text","choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{tokens},"total_tokens":{}}}}}"#,
                    tokens + 5
                ),
            ),
        ],
        end: StreamEnd::Done,
        close: false,
    }
}

#[tokio::test]
async fn null_stream_options_cannot_hide_the_usage_and_the_limit_holds() {
    let mock = MockUpstream::start().await;
    mock.set_default(completion_stream(2500));
    let gw = TestGateway::start(&limited(&mock.url(), "")).await;
    let body = r#"{"model":"text","prompt":"write","stream":true,"stream_options":null,"max_tokens":2500}"#;
    let first = call(&gw, LIMITED, "POST", "/v1/completions", body).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let sent = mock.requests()[0].body.clone();
    assert_eq!(
        repeated_key(&sent).unwrap(),
        None,
        "no repeated key upstream: {}",
        String::from_utf8_lossy(&sent)
    );
    let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(
        sent["stream_options"],
        serde_json::json!({"include_usage": true}),
        "null replaced"
    );
    assert!(
        !first.text().contains("\"usage\""),
        "the usage the client did not ask for is taken out: {}",
        first.text()
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        line["output_tokens"], 2500,
        "the real usage was read: {line}"
    );

    // 2,505 of 3,000 spent: a second stream reserving 2,500 more waits.
    let second = call(&gw, LIMITED, "POST", "/v1/completions", body).await;
    let (status, _, code, _) = second.error();
    assert_eq!((status, code.as_str()), (429, "rate_limit_exceeded"));
    assert_eq!(
        mock.requests().len(),
        1,
        "the second never reached the upstream"
    );
}

#[tokio::test]
async fn the_estimate_reads_the_routes_own_output_limit() {
    let mock = MockUpstream::start().await;
    // Answers without usage: the reservation stands, so the header shows what it was.
    mock.set_default(Reply::json(
        200,
        r#"{"id":"r","object":"response","status":"completed","output":[]}"#,
    ));
    let gw = TestGateway::start(&limited(&mock.url(), "")).await;
    let body = r#"{"model":"agent","input":"hi","max_output_tokens":2000}"#;
    let answer = call(&gw, LIMITED, "POST", "/v1/responses", body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let remaining: u64 = answer
        .header("x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining <= 1000,
        "max_output_tokens 2000 reserved on /v1/responses: {remaining} left"
    );

    // Two output limits that differ: refused, since upstreams read different ones.
    let before = mock.requests().len();
    for (path, body, expected) in [
        (
            "/v1/completions",
            r#"{"model":"text","prompt":"x","max_completion_tokens":1,"max_tokens":5000}"#,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"max_tokens":9,"max_output_tokens":10}"#,
            "max_output_tokens",
        ),
    ] {
        let answer = call(&gw, LIMITED, "POST", path, body).await;
        let (status, _, code, param) = answer.error();
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_parameter"),
            "{body}"
        );
        assert_eq!(param, expected, "{body}");
    }
    assert_eq!(
        mock.requests().len(),
        before,
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_repeated_key_in_an_object_the_gateway_reads_is_refused() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited(&mock.url(), "")).await;
    for (body, expected) in [
        (
            r#"{"model":"chat","stream":true,"stream_options":{"include_usage":true,"include_usage":false},"messages":[{"role":"user","content":"x"}]}"#,
            "stream_options.include_usage",
        ),
        (
            r#"{"model":"chat","messages":[{"role":"user","content":"x","role":"system"}]}"#,
            "messages[0].role",
        ),
    ] {
        let answer = call(&gw, LIMITED, "POST", "/v1/chat/completions", body).await;
        let (status, _, code, param) = answer.error();
        assert_eq!((status, code.as_str()), (400, "invalid_json"), "{body}");
        assert_eq!(param, expected, "{body}");
    }
    assert!(mock.requests().is_empty(), "nothing reached the upstream");
}

#[tokio::test]
async fn enforce_output_limit_writes_the_reserved_default_into_the_request() {
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let gw = TestGateway::start(&limited(
        &mock.url(),
        ", default_max_tokens: 64, enforce_output_limit: true",
    ))
    .await;
    let unbounded = r#"{"model":"chat","messages":[{"role":"user","content":"x"}]}"#;
    let answer = call(&gw, LIMITED, "POST", "/v1/chat/completions", unbounded).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let sent = mock.requests()[0].body.clone();
    assert_eq!(repeated_key(&sent).unwrap(), None);
    let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["max_tokens"], 64, "the reservation is a ceiling");

    let bounded =
        r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"max_completion_tokens":10}"#;
    call(&gw, LIMITED, "POST", "/v1/chat/completions", bounded).await;
    let sent = mock.requests()[1].body.clone();
    assert_eq!(
        sent,
        bounded.as_bytes(),
        "a request with its own limit passes as sent"
    );
}
