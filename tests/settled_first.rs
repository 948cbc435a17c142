//! A key at its limits can send its next request the moment an answer ends: a request's
//! concurrency slot and token reservation are settled before its answer's last byte goes
//! out (in this process, and in the key's next call to the shared store), whatever the
//! answer was: a small JSON answer, one longer than what the gateway holds before
//! sending, a stream, a local answer or an error. The client here never waits: it reads
//! an answer to its end and writes the next request at once, on its other connection.

mod common;
use common::redis_server::{shared_config, store, RedisServer, SHARED};
use common::*;
use std::time::Duration;

/// A request's bytes for `key`: a chat completion with `body`, or a model list.
fn request(key: &str, body: Option<&str>) -> Vec<u8> {
    let auth = format!("Bearer {key}");
    match body {
        Some(body) => request_bytes(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        ),
        None => request_bytes("GET", "/v1/models", &[("authorization", &auth)], b""),
    }
}

/// Sends `requests` in turn over two kept-alive connections, each written the moment the
/// previous answer was read to its end, and checks each answer's status.
async fn back_to_back(gw: &TestGateway, requests: &[(Vec<u8>, u16)]) {
    let mut conns = [Conn::open(gw.addr()).await, Conn::open(gw.addr()).await];
    for (round, (bytes, expected)) in requests.iter().enumerate() {
        let conn = &mut conns[round % 2];
        conn.write(bytes).await;
        let answer = conn.read_response().await.expect("an answer");
        assert_eq!(
            answer.status,
            *expected,
            "request {round}, sent the moment the previous answer ended: {}",
            answer.text()
        );
    }
}

/// A chat completion longer than the 64 KiB the gateway reads before sending, its usage
/// at the end.
fn long_completion() -> Reply {
    let content = "y".repeat(100_000);
    Reply::json(
        200,
        &format!(
            r#"{{"id":"chatcmpl-long","object":"chat.completion","created":1,"model":"mock","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}}}"#
        ),
    )
}

const ROUNDS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_slot_is_free_the_moment_any_answer_ends() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    max_concurrent: 1")).await;
    let chat = request(LIMITED, Some(&chat_body("chat-model")));
    let stream = request(
        LIMITED,
        Some(r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#),
    );
    let bad = request(LIMITED, Some(r#"{"model":"chat-model","messages":3}"#));
    let models = request(LIMITED, None);
    for (round, (what, reply, bytes)) in [
        ("a small JSON answer", Reply::completion(), &chat),
        ("a long JSON answer", long_completion(), &chat),
        ("a stream", Reply::stream(3, Duration::ZERO), &stream),
    ]
    .into_iter()
    .enumerate()
    {
        mock.set_default(reply);
        let requests = vec![(bytes.clone(), 200); ROUNDS];
        back_to_back(&gw, &requests).await;
        assert_eq!(
            mock.requests().len(),
            (round + 1) * ROUNDS,
            "{what}: every one sent upstream"
        );
    }
    // Local answers: a 400 and the model list, each followed at once by a proxied request.
    mock.set_default(Reply::completion());
    let mut requests = Vec::new();
    for _ in 0..ROUNDS / 2 {
        requests.push((bad.clone(), 400));
        requests.push((chat.clone(), 200));
        requests.push((models.clone(), 200));
        requests.push((chat.clone(), 200));
    }
    back_to_back(&gw, &requests).await;
    assert_eq!(gw.gateway().limiter.in_flight("limited"), 0);
}

/// A body whose reservation is 1,000 tokens of output (and a few of input).
fn reserving(model: &str) -> String {
    format!(
        r#"{{"model":"{model}","max_tokens":1000,"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_stores_lease_and_tokens_go_back_in_the_call_before_the_next_admission() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    tokens_per_minute: 1800\n    max_concurrent: 1",
    );
    let gw = TestGateway::start(&yaml).await;
    let reserving = request(SHARED, Some(&reserving("chat-model")));
    let models = request(SHARED, None);
    for reply in [Reply::completion(), long_completion()] {
        mock.set_default(reply);
        back_to_back(&gw, &vec![(reserving.clone(), 200); ROUNDS]).await;
    }
    let mut requests = Vec::new();
    for _ in 0..ROUNDS / 2 {
        requests.push((models.clone(), 200));
        requests.push((reserving.clone(), 200));
    }
    back_to_back(&gw, &requests).await;
    assert_eq!(redis.leases_after_settling("shared").await, 0);
}
