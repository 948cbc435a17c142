//! HTTP/2's protections on the client listener (`h2c: true`, DESIGN §5.3): SETTINGS as
//! configured, a header list over `max_header_bytes` refused, CONTINUATION floods and rapid
//! reset (CVE-2023-44487) ended with `GOAWAY ENHANCE_YOUR_CALM` while other connections are
//! served, and a reset stream's concurrency slot given back; raw frames where no client
//! misbehaves on purpose, the `h2` crate's client elsewhere.

mod common;
use common::h2_client::*;
use common::*;

#[tokio::test]
async fn the_settings_sent_are_those_configured() {
    let (_mock, gw) = h2c_gateway("max_streams_per_connection: 7\nmax_header_bytes: 8KiB").await;
    let mut raw = RawH2::connect(gw.addr()).await;
    let settings = raw.server_settings().await;
    let value = |id: u16| settings.iter().find(|(s, _)| *s == id).map(|(_, v)| *v);
    assert_eq!(
        value(0x3),
        Some(7),
        "SETTINGS_MAX_CONCURRENT_STREAMS: {settings:?}"
    );
    assert_eq!(
        value(0x6),
        Some(8192),
        "SETTINGS_MAX_HEADER_LIST_SIZE: {settings:?}"
    );
    assert_eq!(
        value(0x4),
        Some(sluice::http2::STREAM_WINDOW_BYTES),
        "SETTINGS_INITIAL_WINDOW_SIZE: {settings:?}"
    );
}

#[tokio::test]
async fn a_header_list_over_max_header_bytes_is_refused_with_431() {
    let (_mock, gw) = h2c_gateway("max_header_bytes: 8KiB").await;
    let mut client = H2Client::connect(gw.addr()).await;
    let big = "a".repeat(9 << 10);
    let auth = format!("Bearer {ALPHA}");
    let refused = client
        .send(
            "GET",
            "/v1/models",
            &[("authorization", &auth), ("x-big", &big)],
            "",
        )
        .await
        .expect("an answer to the stream");
    assert_eq!(refused.status, 431);
    assert_eq!(
        client.get("/v1/models", Some(ALPHA)).await.status,
        200,
        "the connection is kept"
    );
    let mut other = H2Client::connect(gw.addr()).await;
    assert_eq!(other.get("/v1/models", Some(ALPHA)).await.status, 200);
}

#[tokio::test]
async fn a_continuation_flood_ends_the_connection_with_goaway() {
    let (_mock, gw) = h2c_gateway("max_header_bytes: 8KiB").await;
    let mut raw = RawH2::connect(gw.addr()).await;
    // GET / with a header whose value (100 bytes, never sent whole) is spread over many
    // small CONTINUATION frames.
    let mut block = vec![0x82, 0x86, 0x84, 0x00, 0x01, b'x', 100];
    block.extend_from_slice(b"aaaa");
    raw.write_frame(HEADERS, 0x1, 1, &block).await;
    for _ in 0..20 {
        raw.write_frame(CONTINUATION, 0, 1, b"aaaa").await;
    }
    let code = within("a GOAWAY", raw.goaway()).await;
    assert_eq!(code, Some(0xb), "GOAWAY ENHANCE_YOUR_CALM");
    let mut other = H2Client::connect(gw.addr()).await;
    assert_eq!(other.get("/v1/models", Some(ALPHA)).await.status, 200);
}

/// Opens streams on one connection and resets each once its answer began, until the
/// connection fails; how many were reset, and how the connection ended.
async fn reset_until_refused(client: &mut H2Client) -> (usize, h2::Error) {
    let auth = format!("Bearer {ALPHA}");
    for reset in 0..5_000 {
        let request = client.request(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
        );
        // Each stream's answer has begun (the request was served) when it is reset.
        match client.open(request, STREAM_BODY).await {
            Ok((_, _, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(_) => {
                let connection = client.connection.as_mut().expect("the connecting handle");
                let ended = within("the connection to end", connection).await;
                return (reset, ended.unwrap().expect_err("the server ended it"));
            }
        }
    }
    panic!("5000 streams reset and the connection is still open");
}

#[tokio::test]
async fn rapid_reset_ends_the_connection_and_others_are_served() {
    let (_mock, gw) = h2c_gateway("").await;
    let mut raw = RawH2::connect(gw.addr()).await;
    // 30 streams opened and reset at once (CVE-2023-44487), in one segment.
    let block = get_block(&gw.addr().to_string(), "/v1/models");
    let cancel = 0x8u32.to_be_bytes();
    let mut frames = Vec::new();
    for n in 0..30u32 {
        let stream = 2 * n + 1;
        frames.push((HEADERS, 0x5, stream, block.as_slice()));
        frames.push((RST_STREAM, 0, stream, cancel.as_slice()));
    }
    raw.write_frames(&frames).await;
    let code = within("a GOAWAY", raw.goaway()).await;
    assert_eq!(code, Some(0xb), "GOAWAY ENHANCE_YOUR_CALM");
    let mut other = H2Client::connect(gw.addr()).await;
    assert_eq!(other.get("/v1/models", Some(ALPHA)).await.status, 200);
}

#[tokio::test]
async fn streams_reset_once_answered_count_toward_the_rapid_reset_limit() {
    let (mock, gw) = h2c_gateway("max_streams_per_connection: 10").await;
    mock.set_default(first_event_then_stall());
    let mut client = H2Client::connect(gw.addr()).await;
    let (reset, ended) = reset_until_refused(&mut client).await;
    assert!(
        reset > sluice::http2::MIN_CLIENT_RESETS,
        "a client may reset {} streams first: {reset}",
        sluice::http2::MIN_CLIENT_RESETS
    );
    assert_eq!(
        ended.reason(),
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{ended:?}"
    );
    let mut other = H2Client::connect(gw.addr()).await;
    assert_eq!(other.get("/v1/models", Some(ALPHA)).await.status, 200);
}

#[tokio::test]
async fn a_stream_reset_mid_answer_gives_its_concurrency_slot_back() {
    let (mock, gw) = h2c_gateway("").await;
    mock.push(first_event_then_stall());
    let mut client = H2Client::connect(gw.addr()).await;
    let auth = format!("Bearer {LIMITED}");
    let request = client.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
    );
    let (head, _events, mut stream) = client.open(request, STREAM_BODY).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(gw.gateway().limiter.in_flight("limited"), 1);
    stream.send_reset(h2::Reason::CANCEL);
    gw.until("the reset stream's slot to be given back", |g| {
        g.limiter.in_flight("limited") == 0
    })
    .await;
    mock.push(Reply::completion());
    assert_eq!(
        client.chat(LIMITED, &chat_body("chat-model")).await.status,
        200
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["error_code"], "client_disconnected", "{line}");
}
