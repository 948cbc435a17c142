//! Upload forms the gateway and its upstream could read differently are refused before
//! anything reaches the upstream: the model the gateway authorises is the one that runs.
//! Key `limited` may use `whisper` (which does not stream), not `whisper-secret`.

mod common;
use common::*;

const LIMITED: &str = "sk-test-limited-0123456789";

fn catalog(upstream_url: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - name: mock
    url: {upstream_url}
models:
  - id: whisper
    upstream: mock
    endpoint_type: audio_transcription
  - id: whisper-secret
    upstream: mock
    endpoint_type: audio_transcription
keys:
  - name: limited
    sha256: {limited}
    models: ["whisper"]
"#,
        limited = key_hash(LIMITED),
    )
}

/// A form of a file part then the given parts (head lines, value).
fn form(parts: &[(&str, &str)]) -> Vec<u8> {
    let mut body = b"--b0\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\ncontent-type: audio/wav\r\n\r\nRIFF....WAVE\r\n".to_vec();
    for (head, value) in parts {
        body.extend_from_slice(format!("--b0\r\n{head}\r\n\r\n{value}\r\n").as_bytes());
    }
    body.extend_from_slice(b"--b0--\r\n");
    body
}

async fn upload(gw: &TestGateway, body: &[u8]) -> Response {
    upload_as(gw, "multipart/form-data; boundary=b0", body).await
}

async fn upload_as(gw: &TestGateway, content_type: &str, body: &[u8]) -> Response {
    let auth = format!("Bearer {LIMITED}");
    send(
        gw.addr(),
        "POST",
        "/v1/audio/transcriptions",
        &[("authorization", &auth), ("content-type", content_type)],
        body,
    )
    .await
}

const MODEL: &str = "content-disposition: form-data; name=\"model\"";

#[tokio::test]
async fn ambiguous_forms_get_invalid_request_and_never_reach_the_upstream() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&catalog(&mock.url())).await;
    let stream = "Content-Disposition: form-data; name=stream";
    let cases: [(&str, Vec<u8>, Option<&str>); 6] = [
        (
            "two model parts",
            form(&[(MODEL, "whisper"), (MODEL, "whisper-secret")]),
            Some("model"),
        ),
        (
            "two stream parts",
            form(&[(stream, "false"), (MODEL, "whisper"), (stream, "true")]),
            Some("stream"),
        ),
        (
            "a model part and a file part named model",
            form(&[
                (MODEL, "whisper"),
                (
                    "content-disposition: form-data; name=\"model\"; filename=\"m.txt\"",
                    "whisper-secret",
                ),
            ]),
            Some("model"),
        ),
        (
            "a part with two Content-Disposition fields",
            form(&[(
                "content-disposition: form-data; name=\"model\"\r\ncontent-disposition: form-data; name=\"other\"",
                "whisper",
            )]),
            None,
        ),
        (
            "a name split in RFC 2231 continuations (email-based parsers join them)",
            form(&[
                (MODEL, "whisper"),
                (
                    "content-disposition: form-data; name*0=\"mo\"; name*1=\"del\"",
                    "whisper-secret",
                ),
            ]),
            None,
        ),
        (
            "a name* parameter",
            form(&[
                (MODEL, "whisper"),
                (
                    "content-disposition: form-data; name=\"x\"; name*=UTF-8''model",
                    "whisper-secret",
                ),
            ]),
            None,
        ),
    ];
    let cases_len = cases.len();
    for (what, body, param) in cases {
        let response = upload(&gw, &body).await;
        let (status, kind, code, got_param) = response.error();
        assert_eq!(
            (status, kind.as_str(), code.as_str()),
            (400, "invalid_request_error", "invalid_request"),
            "{what}: refused with the envelope: {}",
            response.text()
        );
        assert_eq!(
            got_param,
            param.map_or(serde_json::Value::Null, Into::into),
            "{what}: the param names the repeated field"
        );
        assert!(
            response.header("x-request-id").is_some(),
            "{what}: the answer carries x-request-id"
        );
    }
    assert_eq!(
        mock.requests().len(),
        0,
        "no ambiguous form reached the upstream"
    );
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="invalid_request",key="limited"}"#),
        cases_len as f64,
        "each refusal is counted"
    );
    let logged = gw.log_lines(cases_len).await;
    assert!(
        logged
            .iter()
            .all(|line| line["status"] == 400 && line["error_code"] == "invalid_request"),
        "each refusal is logged: {logged:?}"
    );
}

#[tokio::test]
async fn a_quoted_semicolon_does_not_hide_the_model_part() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&catalog(&mock.url())).await;
    // The name of the first part is `x;name=model` (a quoted string): the model is the
    // second part's, which this key may not use.
    let body = form(&[
        (
            "content-disposition: form-data; name=\"x;name=model\"",
            "whisper",
        ),
        (MODEL, "whisper-secret"),
    ]);
    let response = upload(&gw, &body).await;
    let (status, _, code, param) = response.error();
    assert_eq!(
        (status, code.as_str(), param),
        (404, "model_not_found", "model".into()),
        "the model read is the one the upstream would run: {}",
        response.text()
    );
    assert_eq!(mock.requests().len(), 0, "nothing reached the upstream");

    // Escapes in quoted strings are undone: this part is `model`, and the form passes.
    mock.push(Reply::json(200, r#"{"text":"ok"}"#));
    let body = form(&[(
        "content-disposition: form-data; name=\"mo\\del\"",
        "whisper",
    )]);
    let response = upload(&gw, &body).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        mock.requests()[0].body,
        body,
        "the form reached the upstream byte for byte"
    );
}

#[tokio::test]
async fn a_second_boundary_or_parts_after_the_end_are_refused() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&catalog(&mock.url())).await;
    // A form on boundary `b0` (the model this key may use), then one on `b1` (the model it
    // may not): a parser that takes the first boundary reads the first form, one that
    // takes the last reads the second.
    let mut body = form(&[(MODEL, "whisper")]);
    body.extend_from_slice(
        b"--b1\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nwhisper-secret\r\n--b1--\r\n",
    );
    let two = upload_as(&gw, "multipart/form-data; boundary=b0; boundary=b1", &body).await;
    let (status, _, code, param) = two.error();
    assert_eq!(
        (status, code.as_str(), param),
        (400, "invalid_request", serde_json::Value::Null),
        "two boundaries: {}",
        two.text()
    );
    // Another part after the closing boundary: a parser that splits at every delimiter
    // reads it.
    let mut body = form(&[(MODEL, "whisper")]);
    body.extend_from_slice(
        b"--b0\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nwhisper-secret\r\n--b0--\r\n",
    );
    let after = upload(&gw, &body).await;
    let (status, _, code, _) = after.error();
    assert_eq!(
        (status, code.as_str()),
        (400, "invalid_request"),
        "a part after the end: {}",
        after.text()
    );
    assert_eq!(mock.requests().len(), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn field_values_are_read_as_the_upstream_reads_them_or_refused() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&catalog(&mock.url())).await;
    // FastAPI (vLLM) reads `stream=1` as true: so does the gateway, and `whisper` does
    // not stream.
    let stream = "content-disposition: form-data; name=\"stream\"";
    let one = upload(&gw, &form(&[(MODEL, "whisper"), (stream, "1")])).await;
    let (status, _, code, param) = one.error();
    assert_eq!(
        (status, code.as_str(), param),
        (400, "capability_not_supported", "stream".into()),
        "{}",
        one.text()
    );
    let odd = upload(&gw, &form(&[(MODEL, "whisper"), (stream, "sometimes")])).await;
    assert_eq!(odd.error().2, "invalid_parameter");
    // A model value is never read in part.
    let long = format!("whisper{}x", " ".repeat(2000));
    let cut = upload(&gw, &form(&[(MODEL, &long)])).await;
    let (status, _, code, param) = cut.error();
    assert_eq!(
        (status, code.as_str(), param),
        (400, "invalid_parameter", "model".into())
    );
    assert_eq!(mock.requests().len(), 0, "nothing reached the upstream");
}
