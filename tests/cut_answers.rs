//! Answers an upstream breaks off are told truthfully: with nothing sent yet the client gets
//! a 502 `upstream_protocol_error`; with part of the answer sent it sees the cut (the
//! connection closes, never a clean end), and the access log says so. An upstream that cuts
//! its answers counts toward its ejection. Idle pooled connections close on their own.

mod common;
use common::*;
use tokio::io::AsyncReadExt;

const JSON_BODY: &str = r#"{"model":"chat-model","messages":[{"role":"user","content":"hi"}]}"#;

/// A JSON answer that declares `declared` bytes, sends `sent` of them, then closes.
fn cut_json(declared: usize, sent: usize) -> Reply {
    let mut bytes = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(b"{\"pad\":\"");
    bytes.resize(bytes.len() + sent - 8, b'x');
    Reply::Raw(bytes)
}

/// Sends a chat completion on a fresh connection and reads every byte until the gateway
/// closes it.
async fn every_byte(gw: &TestGateway) -> Vec<u8> {
    let auth = format!("Bearer {ALPHA}");
    let mut socket = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let request = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        JSON_BODY.as_bytes(),
    );
    use tokio::io::AsyncWriteExt;
    socket.write_all(&request).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(READ_LIMIT, socket.read_to_end(&mut got))
        .await
        .expect("the gateway closes the connection")
        .ok();
    got
}

#[tokio::test]
async fn a_json_answer_cut_before_anything_was_sent_is_a_502() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    mock.push(cut_json(400, 100));
    let response = chat(gw.addr(), ALPHA, JSON_BODY).await;
    let (status, kind, code, _) = response.error();
    assert_eq!(
        (status, kind.as_str(), code.as_str()),
        (502, "upstream_error", "upstream_protocol_error"),
        "nothing of the cut answer reached the client: the gateway answers"
    );
    assert!(response.header("x-request-id").is_some());
    let lines = gw.log_lines(1).await;
    assert_eq!(lines[0]["status"], 502, "logged as what the client got");
    assert_eq!(lines[0]["error_code"], "upstream_protocol_error");
    assert!(lines[0].get("cut").is_none(), "not a cut: nothing was sent");
    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="alpha",model="chat-model",status="502"}"#),
        1.0
    );
    assert_eq!(
        gw.metric(
            r#"sluice_upstream_errors_total{code="upstream_protocol_error",upstream="mock"}"#
        ),
        1.0
    );
}

#[tokio::test]
async fn a_long_json_answer_cut_after_part_was_sent_ends_in_a_cut_the_client_sees() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let (declared, sent) = (400 << 10, 200 << 10);
    mock.push(cut_json(declared, sent));
    let got = every_byte(&gw).await;
    let head_end = find(&got, b"\r\n\r\n").expect("the answer's head reached the client") + 4;
    let head = String::from_utf8_lossy(&got[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {declared}")),
        "{head}"
    );
    let body = got.len() - head_end;
    assert_eq!(
        body, sent,
        "every byte the upstream sent reached the client, then the connection closed"
    );
    let lines = gw.log_lines(1).await;
    assert_eq!(lines[0]["status"], 200, "the status the client saw");
    assert_eq!(lines[0]["cut"], true, "and that the answer was cut");
    assert_eq!(lines[0]["bytes_out"], sent);
}

#[tokio::test]
async fn a_chunked_json_answer_cut_never_gets_a_clean_end() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    mock.push(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n9\r\n{\"id\":\"a\r\n"
            .to_vec(),
    ));
    let got = every_byte(&gw).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("{\"id\":\"a"),
        "what was sent reached the client: {text}"
    );
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "no last chunk: the client cannot take it for whole: {text:?}"
    );
    let lines = gw.log_lines(1).await;
    assert_eq!(lines[0]["cut"], true);
}

#[tokio::test]
async fn an_upstream_that_cuts_its_answers_is_ejected() {
    let mock = MockUpstream::start().await;
    let yaml = config(&mock.url()).replace(
        "    idle_timeout: 1s\n",
        "    idle_timeout: 1s\n    eject_after_failures: 2\n    eject_duration: 30s\n",
    );
    let gw = TestGateway::start(&yaml).await;
    // Two tenants' requests: one tenant alone never ejects a shared upstream.
    let public = JSON_BODY.replace("chat-model", "public-one");
    for (key, body) in [(ALPHA, JSON_BODY), (BETA, public.as_str())] {
        mock.push(cut_json(400, 100));
        assert_eq!(chat(gw.addr(), key, body).await.status, 502);
    }
    let response = chat(gw.addr(), ALPHA, JSON_BODY).await;
    let (status, _, code, _) = response.error();
    assert_eq!(
        (status, code.as_str()),
        (503, "no_healthy_upstream"),
        "two cut answers in a row, from two tenants, eject the upstream"
    );
    assert_eq!(mock.requests().len(), 2, "the third never reached it");
}
