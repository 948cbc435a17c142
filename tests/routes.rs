//! Routes beyond chat: each endpoint type on its routes, with the model rename, streaming
//! where it applies, binary answers passed through, and a model used on a route it does
//! not serve refused with 404 `endpoint_not_supported`.

mod common;
use common::*;
use std::time::Duration;

/// A catalog with one model of each endpoint type on one mock upstream.
fn catalog(upstream_url: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - name: mock
    url: {upstream_url}
    first_byte_timeout: 2s
    idle_timeout: 1s
models:
  - id: chat-model
    upstream: mock
    capabilities: [streaming]
  - id: text-model
    upstream: mock
    upstream_model: org/text
    endpoint_type: completions
    endpoints: [chat]
    capabilities: [streaming]
  - id: embedder
    upstream: mock
    upstream_model: org/embedder
    endpoint_type: embeddings
  - id: reranker
    upstream: mock
    endpoint_type: rerank
  - id: guard
    upstream: mock
    endpoint_type: moderation
  - id: voice
    upstream: mock
    endpoint_type: audio_speech
  - id: agent
    upstream: mock
    endpoint_type: responses
    capabilities: [streaming, tool_calling]
keys:
  - name: alpha
    sha256: {alpha}
"#,
        alpha = key_hash(ALPHA),
    )
}

async fn gateway() -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&catalog(&mock.url())).await;
    (mock, gw)
}

async fn post(gw: &TestGateway, path: &str, body: &str) -> Response {
    let auth = format!("Bearer {ALPHA}");
    send(
        gw.addr(),
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
    .await
}

#[tokio::test]
async fn embeddings_reach_the_upstream_renamed() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::json(
        200,
        r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"org/embedder","usage":{"prompt_tokens":2,"total_tokens":2}}"#,
    ));
    let response = post(
        &gw,
        "/v1/embeddings",
        r#"{"model":"embedder","input":"hello"}"#,
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.json()["data"][0]["embedding"][1], 0.2);
    let sent = &mock.requests()[0];
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(
        String::from_utf8_lossy(&sent.body),
        r#"{"model":"org/embedder","input":"hello"}"#
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["path"], "/v1/embeddings");
    assert_eq!(line["model"], "embedder");
}

#[tokio::test]
async fn completions_stream_like_chat() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::stream(3, Duration::ZERO));
    let body = r#"{"model":"text-model","prompt":"once upon","stream":true}"#;
    let auth = format!("Bearer {ALPHA}");
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request_bytes(
        "POST",
        "/v1/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    ))
    .await;
    let response = conn.read_response().await.expect("an answer");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/event-stream"),
        "the stream passes through"
    );
    assert!(response.text().ends_with("data: [DONE]\n\n"));
    assert_eq!(mock.requests()[0].path, "/v1/completions");
    assert!(String::from_utf8_lossy(&mock.requests()[0].body).contains(r#""model":"org/text""#));
}

#[tokio::test]
async fn a_model_serves_its_endpoints_and_no_other_route() {
    let (mock, gw) = gateway().await;
    // text-model is a completions model that also takes chat.
    let chat = post(&gw, "/v1/chat/completions", &chat_body("text-model")).await;
    assert_eq!(chat.status, 200, "endpoints adds chat: {}", chat.text());
    let refused = post(
        &gw,
        "/v1/embeddings",
        r#"{"model":"chat-model","input":"x"}"#,
    )
    .await;
    let (status, kind, code, param) = refused.error();
    assert_eq!(
        (status, kind.as_str(), code.as_str(), param.as_str()),
        (
            404,
            "invalid_request_error",
            "endpoint_not_supported",
            Some("model")
        )
    );
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/chat/completions"),
        "the message names the route the model serves: {}",
        refused.text()
    );
    assert_eq!(
        mock.requests().len(),
        1,
        "nothing was sent for the refused request"
    );
}

#[tokio::test]
async fn the_models_list_shows_each_endpoint_type_and_its_endpoints() {
    let (_mock, gw) = gateway().await;
    let list = get(gw.addr(), "/v1/models", Some(ALPHA)).await.json();
    let entry = |id: &str| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(entry("embedder")["endpoint_type"], "embeddings");
    assert_eq!(
        entry("embedder")["endpoints"],
        serde_json::json!(["embeddings"])
    );
    assert_eq!(
        entry("text-model")["endpoints"],
        serde_json::json!(["completions", "chat"])
    );
}

#[tokio::test]
async fn rerank_and_moderations_need_their_fields_and_pass_through() {
    let (mock, gw) = gateway().await;
    let missing = post(&gw, "/v1/rerank", r#"{"model":"reranker","query":"q"}"#).await;
    let (status, _, code, param) = missing.error();
    assert_eq!(
        (status, code.as_str(), param.as_str()),
        (400, "missing_required_parameter", Some("documents"))
    );
    mock.push(Reply::json(
        200,
        r#"{"results":[{"index":1,"relevance_score":0.9}]}"#,
    ));
    let ranked = post(
        &gw,
        "/v1/rerank",
        r#"{"model":"reranker","query":"q","documents":["a","b"]}"#,
    )
    .await;
    assert_eq!(ranked.status, 200);
    assert_eq!(ranked.json()["results"][0]["index"], 1);
    mock.push(Reply::json(
        200,
        r#"{"id":"modr-1","results":[{"flagged":false}]}"#,
    ));
    let moderated = post(&gw, "/v1/moderations", r#"{"model":"guard","input":"hi"}"#).await;
    assert_eq!(moderated.status, 200);
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/rerank", "/v1/moderations"]);
}

#[tokio::test]
async fn speech_comes_back_as_the_binary_it_is() {
    let (mock, gw) = gateway().await;
    let mut audio =
        b"HTTP/1.1 200 OK\r\ncontent-type: audio/mpeg\r\ncontent-length: 6\r\n\r\n".to_vec();
    audio.extend_from_slice(&[0xff, 0xfb, 0x00, 0x01, 0x80, 0x7f]);
    mock.push(Reply::Raw(audio));
    let response = post(
        &gw,
        "/v1/audio/speech",
        r#"{"model":"voice","input":"hello","voice":"alloy"}"#,
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("audio/mpeg"));
    assert_eq!(response.body, vec![0xff, 0xfb, 0x00, 0x01, 0x80, 0x7f]);
}

#[tokio::test]
async fn tools_and_streams_need_their_capabilities_on_every_route_that_has_them() {
    let (_mock, gw) = gateway().await;
    let refused = post(
        &gw,
        "/v1/completions",
        r#"{"model":"text-model","prompt":"x","stream":"yes"}"#,
    )
    .await;
    assert_eq!(refused.error().2, "invalid_parameter");
    let embed_stream = post(
        &gw,
        "/v1/embeddings",
        r#"{"model":"embedder","input":"x","stream":true}"#,
    )
    .await;
    assert_eq!(
        embed_stream.status,
        200,
        "stream means nothing to embeddings: no capability is asked: {}",
        embed_stream.text()
    );
}
