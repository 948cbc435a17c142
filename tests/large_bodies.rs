//! Request bodies larger than one read (a long prompt): read straight into one buffer of
//! their declared size, they reach the upstream byte for byte however they arrive, an
//! `Expect: 100-continue` is answered first, and a body cut short reaches no upstream.

mod common;
use common::*;
use std::time::Duration;

/// A chat body of about `size` bytes whose length is `size` exactly: a long system message
/// and a short user turn, with the model renamed on its way (so the body is edited too).
fn long_chat(size: usize) -> Vec<u8> {
    let head = r#"{"model":"renamed","messages":[{"role":"system","content":""#;
    let tail = r#""},{"role":"user","content":"hello"}]}"#;
    let filler: String = (0..size - head.len() - tail.len())
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    format!("{head}{filler}{tail}").into_bytes()
}

#[tokio::test]
async fn a_long_prompt_sent_in_pieces_reaches_the_upstream_whole() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 2MiB")).await;
    let auth = format!("Bearer {ALPHA}");
    for (size, piece) in [(700 << 10, 7_000), (100 << 10, 100 << 10), (16_385, 1)] {
        let body = long_chat(size);
        let request = request_bytes(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            &body,
        );
        let mut conn = Conn::open(gw.addr()).await;
        // The head, then the body in pieces with a pause between some: reads of every size.
        let head_end = request.len() - body.len();
        conn.write(&request[..head_end]).await;
        for (i, part) in body.chunks(piece).enumerate() {
            conn.write(part).await;
            if i % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let response = conn.read_response().await.expect("an answer");
        assert_eq!(response.status, 200, "{size} bytes: {}", response.text());
        let sent = mock.requests().pop().expect("the upstream was called").body;
        let expected = String::from_utf8(body).unwrap().replacen(
            r#""model":"renamed""#,
            r#""model":"org/real-name""#,
            1,
        );
        assert_eq!(
            sent.len(),
            expected.len(),
            "{size} bytes: the upstream got the whole body"
        );
        assert!(
            sent == expected.as_bytes(),
            "{size} bytes: byte for byte, the model renamed"
        );
    }
}

#[tokio::test]
async fn a_request_pipelined_after_a_long_prompt_is_read_as_the_next() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 2MiB")).await;
    let auth = format!("Bearer {ALPHA}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let mut both = request_bytes(
        "POST",
        "/v1/chat/completions",
        &headers,
        &long_chat(400 << 10),
    );
    let second = chat_body("chat-model");
    both.extend(request_bytes(
        "POST",
        "/v1/chat/completions",
        &headers,
        second.as_bytes(),
    ));
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&both).await;
    for n in 0..2 {
        let response = conn.read_response().await.expect("an answer");
        assert_eq!(response.status, 200, "answer {n}: {}", response.text());
    }
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].body,
        second.as_bytes(),
        "the long body's read stopped at its end: the next request is whole"
    );
}

#[tokio::test]
async fn a_long_prompt_with_expect_continue_is_told_to_go_on() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 2MiB")).await;
    let body = long_chat(300 << 10);
    let request = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {ALPHA}")),
            ("content-type", "application/json"),
            ("expect", "100-continue"),
        ],
        &body,
    );
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request[..request.len() - body.len()]).await;
    let (status, _) = conn.read_head(true).await.expect("an interim answer");
    assert_eq!(status, 100, "the client is told to send its body");
    conn.write(&body).await;
    let response = conn.read_response().await.expect("an answer");
    assert_eq!(response.status, 200, "{}", response.text());
    let renamed = "org/real-name".len() - "renamed".len();
    assert_eq!(
        mock.requests()[0].body.len(),
        body.len() + renamed,
        "the whole body, the model renamed"
    );
}

#[tokio::test]
async fn a_long_prompt_cut_short_reaches_no_upstream() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), "max_body_bytes: 2MiB")).await;
    let body = long_chat(200 << 10);
    let request = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {ALPHA}")),
            ("content-type", "application/json"),
        ],
        &body,
    );
    let mut conn = Conn::open(gw.addr()).await;
    // Half the body, then the client's side closes.
    conn.write(&request[..request.len() - body.len() / 2]).await;
    conn.shutdown_write().await;
    assert!(
        conn.read_response().await.is_none(),
        "no answer is made of half a body: the connection closes"
    );
    // The gateway still serves, and nothing reached the upstream.
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        mock.requests().len(),
        1,
        "only the whole request reached the upstream"
    );
}
