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
response_ids: {{secret_env: TEST_RESPONSE_ID_SECRET}}
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

/// A `responses` model served by two upstreams.
fn two_responders(a: &str, b: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
response_ids: {{secret_env: TEST_RESPONSE_ID_SECRET}}
upstreams:
  - {{name: a, url: "{a}"}}
  - {{name: b, url: "{b}"}}
models:
  - id: agent
    endpoint_type: responses
    capabilities: [streaming]
    targets:
      - {{upstream: a}}
      - {{upstream: b}}
  - id: other
    upstream: a
    endpoint_type: responses
keys:
  - name: alpha
    sha256: {alpha}
    models: ["agent"]
"#,
        alpha = key_hash(ALPHA),
    )
}

fn stored(id: &str) -> Reply {
    Reply::json(
        200,
        &format!(r#"{{"id":"{id}","object":"response","status":"completed","output":[]}}"#),
    )
}

#[tokio::test]
async fn a_stored_response_is_reached_where_it_was_made_from_any_replica() {
    let a = MockUpstream::start().await;
    let b = MockUpstream::start().await;
    a.set_default(stored("resp_made_on_a"));
    b.set_default(stored("resp_made_on_b"));
    let config = two_responders(&a.url(), &b.url());
    let first = TestGateway::start(&config).await;
    // A second gateway on the same configuration: another replica, or this one restarted.
    let second = TestGateway::start(&config).await;
    let mut made = Vec::new();
    for _ in 0..12 {
        let created = post(&first, "/v1/responses", r#"{"model":"agent","input":"hi"}"#).await;
        assert_eq!(created.status, 200, "{}", created.text());
        let id = created.json()["id"].as_str().unwrap().to_string();
        assert!(
            id.starts_with("resp_") && !id.contains("made_on"),
            "our own ID: {id}"
        );
        made.push(id);
    }
    for id in &made {
        let (a_before, b_before) = (a.requests().len(), b.requests().len());
        let fetched = get(second.addr(), &format!("/v1/responses/{id}"), Some(ALPHA)).await;
        assert_eq!(fetched.status, 200, "{}", fetched.text());
        assert_eq!(
            fetched.json()["id"],
            id.as_str(),
            "the ID comes back as the client knows it"
        );
        let on_a = a.requests().len() > a_before;
        let on_b = b.requests().len() > b_before;
        assert!(on_a != on_b, "one upstream asked");
        let (mock, upstream_id) = if on_a {
            (&a, "resp_made_on_a")
        } else {
            (&b, "resp_made_on_b")
        };
        let asked = mock.requests().last().unwrap().clone();
        assert_eq!(asked.method, "GET");
        assert_eq!(
            asked.path,
            format!("/v1/responses/{upstream_id}"),
            "the upstream's own ID"
        );
    }
    let made_on = |name: &str| {
        made.iter()
            .filter(|id| {
                read_response_id(RESPONSE_ID_SECRET, "alpha", id)
                    .unwrap()
                    .upstream
                    == name
            })
            .count()
    };
    assert!(
        made_on("a") > 0 && made_on("b") > 0,
        "both upstreams made some (balanced by weight): a {}, b {}",
        made_on("a"),
        made_on("b")
    );
}

#[tokio::test]
async fn every_stored_response_route_and_previous_response_id_reach_the_maker() {
    let a = MockUpstream::start().await;
    let b = MockUpstream::start().await;
    a.set_default(stored("resp_a1"));
    b.set_default(stored("resp_b1"));
    let gw = TestGateway::start(&two_responders(&a.url(), &b.url())).await;
    let created = post(&gw, "/v1/responses", r#"{"model":"agent","input":"hi"}"#).await;
    let id = created.json()["id"].as_str().unwrap().to_string();
    let maker = if a.requests().len() == 1 { &a } else { &b };
    let upstream_id = if a.requests().len() == 1 {
        "resp_a1"
    } else {
        "resp_b1"
    };
    let auth = format!("Bearer {ALPHA}");
    let headers = [("authorization", auth.as_str())];
    for (method, path, upstream_path) in [
        (
            "DELETE",
            format!("/v1/responses/{id}"),
            format!("/v1/responses/{upstream_id}"),
        ),
        (
            "POST",
            format!("/v1/responses/{id}/cancel"),
            format!("/v1/responses/{upstream_id}/cancel"),
        ),
        (
            "GET",
            format!("/v1/responses/{id}/input_items?limit=2"),
            format!("/v1/responses/{upstream_id}/input_items?limit=2"),
        ),
    ] {
        let answer = send(gw.addr(), method, &path, &headers, b"").await;
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text());
        let asked = maker.requests().last().unwrap().clone();
        assert_eq!(
            (asked.method.as_str(), asked.path.as_str()),
            (method, upstream_path.as_str())
        );
    }
    // A follow-up names the previous response: it goes to the same upstream, with its ID.
    for _ in 0..6 {
        let body = format!(r#"{{"model":"agent","input":"more","previous_response_id":"{id}"}}"#);
        let follow = post(&gw, "/v1/responses", &body).await;
        assert_eq!(follow.status, 200, "{}", follow.text());
        let sent = maker.requests().last().unwrap().clone();
        assert!(
            String::from_utf8_lossy(&sent.body)
                .contains(&format!(r#""previous_response_id":"{upstream_id}""#)),
            "the upstream gets its own ID: {}",
            String::from_utf8_lossy(&sent.body)
        );
    }
}

#[tokio::test]
async fn an_unknown_tampered_or_foreign_response_id_is_not_found() {
    let a = MockUpstream::start().await;
    let b = MockUpstream::start().await;
    a.set_default(stored("resp_a1"));
    let gw = TestGateway::start(&two_responders(&a.url(), &b.url())).await;
    // Made on model `other`, which this key may not use.
    let foreign = response_id_for(RESPONSE_ID_SECRET, "alpha", "other", "a", "resp_a1");
    let mut tampered = response_id_for(RESPONSE_ID_SECRET, "alpha", "agent", "a", "resp_a1");
    tampered.pop();
    for id in ["resp_unknown", tampered.as_str(), foreign.as_str()] {
        let answer = get(gw.addr(), &format!("/v1/responses/{id}"), Some(ALPHA)).await;
        let (status, _, code, _) = answer.error();
        assert_eq!((status, code.as_str()), (404, "response_not_found"), "{id}");
    }
    let body = r#"{"model":"agent","input":"x","previous_response_id":"resp_unknown"}"#;
    assert_eq!(
        post(&gw, "/v1/responses", body).await.error().2,
        "response_not_found"
    );
    assert!(
        a.requests().is_empty() && b.requests().is_empty(),
        "nothing reached an upstream"
    );
}

#[tokio::test]
async fn a_streamed_response_carries_our_ids_in_every_event() {
    let (mock, gw) = gateway().await;
    let events = [
        r#"{"type":"response.created","response":{"id":"resp_s1","status":"in_progress"}}"#,
        r#"{"type":"response.output_text.delta","delta":"Hel"}"#,
        r#"{"type":"response.completed","response":{"id":"resp_s1","status":"completed","usage":{"input_tokens":3,"output_tokens":2}}}"#,
    ];
    mock.push(Reply::Sse {
        events: events
            .iter()
            .map(|e| (Duration::ZERO, e.to_string()))
            .collect(),
        end: StreamEnd::Done,
        close: false,
    });
    let body = r#"{"model":"agent","input":"hi","stream":true}"#;
    let auth = format!("Bearer {ALPHA}");
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request_bytes(
        "POST",
        "/v1/responses",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    ))
    .await;
    let response = conn.read_response().await.unwrap();
    let text = response.text();
    assert!(
        !text.contains("resp_s1"),
        "no upstream ID reaches the client: {text}"
    );
    let ours = response_id_for(RESPONSE_ID_SECRET, "alpha", "agent", "mock", "resp_s1");
    assert_eq!(
        text.matches(&ours).count(),
        2,
        "both events carry our ID: {text}"
    );
    assert!(
        text.contains(r#""delta":"Hel""#),
        "other events pass untouched"
    );
}

/// A transcription form: the file part, then `stream` and `model` last.
fn transcription_form(boundary: &str, model: &str, file: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\ncontent-type: audio/wav\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\ncontent-disposition: form-data; name=\"response_format\"\r\n\r\njson\r\n--{boundary}\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    body
}

fn audio_catalog(upstream_url: &str, extra: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
{extra}
upstreams:
  - name: mock
    url: {upstream_url}
models:
  - id: whisper
    upstream: mock
    upstream_model: openai/whisper-large-v3
    endpoint_type: audio_transcription
keys:
  - name: alpha
    sha256: {alpha}
"#,
        alpha = key_hash(ALPHA),
    )
}

async fn upload(gw: &TestGateway, path: &str, content_type: &str, body: &[u8]) -> Response {
    let auth = format!("Bearer {ALPHA}");
    send(
        gw.addr(),
        "POST",
        path,
        &[("authorization", &auth), ("content-type", content_type)],
        body,
    )
    .await
}

#[tokio::test]
async fn a_transcription_upload_reaches_the_upstream_renamed_and_otherwise_unchanged() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&audio_catalog(&mock.url(), "")).await;
    mock.push(Reply::json(200, r#"{"text":"hello"}"#));
    let file: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let body = transcription_form("b0undary", "whisper", &file);
    let content_type = "multipart/form-data; boundary=b0undary";
    let response = upload(&gw, "/v1/audio/transcriptions", content_type, &body).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.json()["text"], "hello");
    let sent = &mock.requests()[0];
    assert_eq!(sent.path, "/v1/audio/transcriptions");
    assert_eq!(sent.header("content-type"), Some(content_type));
    let expected = transcription_form("b0undary", "openai/whisper-large-v3", &file);
    assert!(sent.body == expected, "byte-identical but the model name");
    assert_eq!(gw.log_lines(1).await[0]["model"], "whisper");
}

#[tokio::test]
async fn broken_uploads_get_their_error_and_reach_no_upstream() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&audio_catalog(&mock.url(), "max_body_bytes: 100000")).await;
    let form = transcription_form("b0undary", "whisper", b"RIFF....");
    let with_boundary = "multipart/form-data; boundary=b0undary";
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("multipart/form-data", form.clone(), 400, "invalid_request"),
        (with_boundary, form[..form.len() - 12].to_vec(), 400, "invalid_request"),
        (
            with_boundary,
            b"--b0undary\r\ncontent-disposition: form-data; name=\"file\"; filename=\"model\"\r\n\r\nx\r\n--b0undary--\r\n".to_vec(),
            400,
            "missing_required_parameter",
        ),
        ("application/json", form.clone(), 415, "unsupported_media_type"),
        (
            with_boundary,
            transcription_form("b0undary", "whisper", &vec![0u8; 200_000]),
            413,
            "request_too_large",
        ),
    ];
    for (content_type, body, status, code) in cases {
        let response = upload(&gw, "/v1/audio/translations", content_type, &body).await;
        let (got, _, got_code, _) = response.error();
        assert_eq!((got, got_code.as_str()), (status, code), "{content_type}");
    }
    assert!(
        mock.requests().is_empty(),
        "no partial request reached the upstream"
    );
}
