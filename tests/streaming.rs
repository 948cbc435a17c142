//! SSE: events pass through as they are sent, a client that leaves aborts the upstream,
//! and a stream the upstream cuts or stalls ends with an error event.

mod common;
use common::*;
use std::time::Duration;

const STREAM_BODY: &str =
    r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

async fn gateway() -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    (mock, gw)
}

#[tokio::test]
async fn events_arrive_spaced_as_the_upstream_sends_them() {
    let (mock, gw) = gateway().await;
    let gap = Duration::from_millis(200);
    mock.push(Reply::stream(5, gap));
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    assert_eq!(stream.status, 200);
    assert!(stream
        .headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/event-stream")));
    let mut arrivals = Vec::new();
    while let Some((event, at)) = stream.next_event().await {
        arrivals.push((event, at));
    }
    assert_eq!(arrivals.len(), 6, "5 chunks and [DONE]");
    assert_eq!(arrivals[5].0, "[DONE]");
    for pair in arrivals[..5].windows(2) {
        let spacing = pair[1].1 - pair[0].1;
        assert!(
            spacing >= gap / 2,
            "each event arrives on its own, not batched: {spacing:?}"
        );
    }
    assert!(
        arrivals[4].1 - arrivals[0].1 >= gap * 3,
        "the first event came long before the last"
    );
}

#[tokio::test]
async fn a_client_that_leaves_aborts_the_upstream_request() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::stream(20, Duration::from_millis(300)));
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    stream.next_event().await.expect("a first event");
    stream.disconnect();
    mock.wait_until("the upstream connection to be closed by the gateway", |m| {
        m.abandoned() == 1
    })
    .await;
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["error_code"], "client_disconnected");
    assert_eq!(line["stream"], true);
    assert_eq!(
        gw.metric(r#"sluice_in_flight_requests{key="alpha"}"#),
        0.0,
        "the request's slot is released"
    );
}

#[tokio::test]
async fn a_client_that_leaves_before_the_first_byte_aborts_too() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::Silent);
    let stream = EventStream::open_without_head(gw.addr(), ALPHA, STREAM_BODY).await;
    mock.wait_until("the request to reach the upstream", |m| {
        m.requests().len() == 1
    })
    .await;
    drop(stream);
    mock.wait_until("the upstream connection to be closed by the gateway", |m| {
        m.abandoned() == 1
    })
    .await;
}

#[tokio::test]
async fn a_cut_stream_ends_with_an_error_event() {
    let (mock, gw) = gateway().await;
    let events = vec![(
        Duration::ZERO,
        r#"{"choices":[{"delta":{"content":"a"}}]}"#.to_string(),
    )];
    mock.push(Reply::Sse {
        events,
        end: StreamEnd::Cut,
        close: false,
    });
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    let events = stream.rest().await;
    assert_eq!(
        events.len(),
        2,
        "the event sent, then the gateway's error event: {events:?}"
    );
    let error: serde_json::Value =
        serde_json::from_str(&events[1]).expect("the error event is JSON");
    assert_eq!(error["error"]["code"], "upstream_unavailable");
    assert_eq!(error["error"]["type"], "upstream_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("closed the connection")),
        "a backend that was reached is not said to be unreachable: {error}"
    );
    assert!(
        stream.closed_by_peer().await,
        "the connection closes after the error event"
    );
    assert_eq!(
        gw.metric(r#"sluice_upstream_errors_total{code="upstream_unavailable",upstream="mock"}"#),
        1.0
    );
}

#[tokio::test]
async fn a_stalled_stream_ends_with_a_timeout_event_after_idle_timeout() {
    let (mock, gw) = gateway().await;
    let events = vec![(
        Duration::ZERO,
        r#"{"choices":[{"delta":{"content":"a"}}]}"#.to_string(),
    )];
    mock.push(Reply::Sse {
        events,
        end: StreamEnd::Stall,
        close: false,
    });
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    let (_, first) = stream.next_event().await.unwrap();
    let (last, at) = stream.next_event().await.expect("an error event");
    assert!(
        at - first >= Duration::from_millis(900),
        "after the 1 s idle_timeout, not before"
    );
    let error: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(error["error"]["code"], "upstream_timeout");
    assert!(
        stream.next_event().await.is_none(),
        "nothing after the error event"
    );
    mock.wait_until("the stalled upstream connection to be dropped", |m| {
        m.abandoned() == 1
    })
    .await;
}

#[tokio::test]
async fn each_gap_of_a_stream_has_its_own_idle_timeout() {
    let (mock, gw) = gateway().await;
    // Gaps under the 1 s idle_timeout that add up to more than it, then a stall: each
    // wait is bounded on its own (the answer's one timer is moved for each).
    let gap = Duration::from_millis(400);
    let events = (0..5)
        .map(|i| {
            let delay = if i == 0 { Duration::ZERO } else { gap };
            (
                delay,
                format!(r#"{{"choices":[{{"delta":{{"content":"{i}"}}}}]}}"#),
            )
        })
        .collect();
    mock.push(Reply::Sse {
        events,
        end: StreamEnd::Stall,
        close: false,
    });
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    let mut arrivals = Vec::new();
    while let Some(arrival) = stream.next_event().await {
        arrivals.push(arrival);
    }
    assert_eq!(
        arrivals.len(),
        6,
        "the five events, 1.6 s in all, then the timeout event: {arrivals:?}"
    );
    let content = |i: usize| {
        let event: serde_json::Value = serde_json::from_str(&arrivals[i].0).unwrap();
        event["choices"][0]["delta"]["content"]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(content(4).as_deref(), Some("4"), "the last event passed");
    let error: serde_json::Value = serde_json::from_str(&arrivals[5].0).unwrap();
    assert_eq!(error["error"]["code"], "upstream_timeout");
    assert!(
        arrivals[5].1 - arrivals[4].1 >= Duration::from_millis(900),
        "the stall is cut 1 s after the last event, not after the first wait"
    );
}

#[tokio::test]
async fn a_close_delimited_stream_that_stops_inside_an_event_is_a_cut_stream() {
    let (mock, gw) = gateway().await;
    // No length, no chunks: the end of the connection ends the body. It ends halfway
    // through the second event.
    mock.push(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
          data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n\
          data: {\"choices\":[{\"ind"
            .to_vec(),
    ));
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    let events = stream.rest().await;
    let last: serde_json::Value = serde_json::from_str(events.last().expect("events"))
        .unwrap_or_else(|e| panic!("the last event is the gateway's JSON error ({e}): {events:?}"));
    assert_eq!(
        last["error"]["code"], "upstream_unavailable",
        "a client never takes the cut stream for a finished one: {events:?}"
    );
}

#[tokio::test]
async fn a_close_delimited_stream_that_ends_between_events_is_finished() {
    let (mock, gw) = gateway().await;
    mock.push(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
          data: {\"choices\":[]}\n\ndata: [DONE]\n\n"
            .to_vec(),
    ));
    let mut stream = EventStream::open(gw.addr(), ALPHA, STREAM_BODY).await;
    let events = stream.rest().await;
    assert_eq!(
        events,
        vec![r#"{"choices":[]}"#.to_string(), "[DONE]".into()]
    );
}

#[tokio::test]
async fn a_finished_stream_is_logged_whole_and_its_connection_carries_the_next_request() {
    // While a stream passes, the gateway keeps only the request fields its record reads
    // (method, target, Host): the record must still name them, and the connection must
    // still serve the next request.
    let (mock, gw) = gateway().await;
    mock.push(Reply::stream(3, Duration::from_millis(10)));
    let mut conn = Conn::open(gw.addr()).await;
    let authorization = format!("Bearer {ALPHA}");
    let headers = [
        ("authorization", authorization.as_str()),
        ("content-type", "application/json"),
    ];
    let first = request_bytes(
        "POST",
        "/v1/chat/completions?trace=1",
        &headers,
        STREAM_BODY.as_bytes(),
    );
    conn.write(&first).await;
    let streamed = conn.read_response().await.expect("the stream");
    assert_eq!(streamed.status, 200);
    assert!(String::from_utf8_lossy(&streamed.body).contains("data: [DONE]"));
    let second = request_bytes(
        "POST",
        "/v1/chat/completions",
        &headers,
        chat_body("chat-model").as_bytes(),
    );
    conn.write(&second).await;
    let answered = conn
        .read_response()
        .await
        .expect("a second answer on the connection");
    assert_eq!(answered.status, 200);
    assert_eq!(mock.requests().len(), 2);
    let lines = gw.log_lines(2).await;
    let streamed_line = lines
        .iter()
        .find(|l| l["stream"] == true)
        .expect("the stream's record");
    assert_eq!(streamed_line["method"], "POST");
    assert_eq!(streamed_line["path"], "/v1/chat/completions");
    assert_eq!(streamed_line["host"], "localhost");
    assert_eq!(streamed_line["status"], 200);
    assert!(lines
        .iter()
        .any(|l| l["stream"] == false && l["status"] == 200));
}

/// A catalog with a chat model and a Responses model on one upstream, for edited streams.
fn edits_catalog(upstream_url: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: mock, url: "{upstream_url}", first_byte_timeout: 2s, idle_timeout: 5s}}
models:
  - {{id: chat-model, upstream: mock, capabilities: [streaming]}}
  - {{id: agent, upstream: mock, endpoint_type: responses, capabilities: [streaming]}}
keys:
  - {{name: alpha, sha256: {alpha}}}
"#,
        alpha = key_hash(ALPHA),
    )
}

/// An event-stream answer with these bytes as its body, framed by `Content-Length`, then
/// the connection closes.
fn sse_with_length(body: &[u8]) -> Reply {
    let mut bytes = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    Reply::Raw(bytes)
}

/// An event-stream answer with these bytes as its body in one chunk, then its end.
fn sse_chunked(body: &[u8]) -> Reply {
    let mut bytes =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    bytes.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    Reply::Raw(bytes)
}

/// Sends `body` to `path` and reads the answer whole: its head and, for a chunked body,
/// the body and whether it ended with its last chunk (not a close).
async fn post_raw(gw: &TestGateway, path: &str, body: &str) -> (Response, bool) {
    let auth = format!("Bearer {ALPHA}");
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request_bytes(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    ))
    .await;
    let (status, headers) = tokio::time::timeout(READ_LIMIT, conn.read_head(false))
        .await
        .expect("a head in time")
        .expect("a head");
    let mut body = Vec::new();
    let ended = loop {
        match tokio::time::timeout(READ_LIMIT, conn.read_chunk()).await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    (
        Response {
            status,
            headers,
            body,
        },
        ended,
    )
}

const USAGE_CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
const TEXT_CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}"#;

#[tokio::test]
async fn a_stream_whose_usage_is_taken_out_never_keeps_the_upstreams_length() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&edits_catalog(&mock.url())).await;
    let events = format!("data: {TEXT_CHUNK}\n\ndata: {USAGE_CHUNK}\n\ndata: [DONE]\n\n");
    mock.push(sse_with_length(events.as_bytes()));
    let (answer, ended) = post_raw(&gw, "/v1/chat/completions", STREAM_BODY).await;
    assert_eq!(answer.status, 200);
    assert!(
        answer.header("content-length").is_none(),
        "an edited body is not sent with the upstream's length: {:?}",
        answer.headers
    );
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert!(ended, "the body ends with its last chunk");
    let text = answer.text();
    assert!(
        !text.contains("usage"),
        "the injected usage is taken out: {text}"
    );
    assert!(
        text.contains("\"hi\"") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    let lines = gw.log_lines(1).await;
    assert_eq!(lines[0]["output_tokens"], 4, "the usage was still read");
}

#[tokio::test]
async fn a_stream_whose_ids_are_rewritten_never_keeps_the_upstreams_length() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&edits_catalog(&mock.url())).await;
    let events = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\"}}\n\n",
    );
    mock.push(sse_with_length(events.as_bytes()));
    let body = r#"{"model":"agent","input":"hi","stream":true}"#;
    let (answer, ended) = post_raw(&gw, "/v1/responses", body).await;
    assert_eq!(answer.status, 200);
    assert!(
        answer.header("content-length").is_none(),
        "{:?}",
        answer.headers
    );
    assert!(ended, "the body ends with its last chunk");
    let text = answer.text();
    assert!(!text.contains("\"resp_1\""), "IDs are rewritten: {text}");
    assert!(
        text.contains("\"status\":\"completed\"}}\n\n"),
        "nothing is cut off the longer body: {text}"
    );
}

#[tokio::test]
async fn events_ended_by_cr_or_mixed_line_ends_are_edited() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&edits_catalog(&mock.url())).await;
    let events = format!("data: {TEXT_CHUNK}\r\rdata: {USAGE_CHUNK}\n\r\ndata: [DONE]\r\n\n");
    mock.push(sse_chunked(events.as_bytes()));
    let (answer, ended) = post_raw(&gw, "/v1/chat/completions", STREAM_BODY).await;
    assert!(ended);
    let text = answer.text();
    assert!(
        !text.contains("usage"),
        "the usage-only event is found and dropped: {text:?}"
    );
    assert!(
        text.starts_with(&format!("data: {TEXT_CHUNK}\r\r")),
        "{text:?}"
    );
    assert!(text.ends_with("data: [DONE]\r\n\n"), "{text:?}");
}

#[tokio::test]
async fn an_event_over_a_mebibyte_passes_the_rest_of_the_stream_unedited_and_is_counted() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&edits_catalog(&mock.url())).await;
    let skipped = r#"sluice_stream_edits_skipped_total{upstream="mock"}"#;
    let scrape = String::from_utf8(gw.gateway().metrics.render()).unwrap();
    assert!(
        scrape.contains(&format!("{skipped} 0")),
        "the series exists from the first scrape"
    );
    let huge = "x".repeat(3 << 19);
    let events = format!(
        "data: {USAGE_CHUNK}\n\ndata: {{\"pad\":\"{huge}\"}}\n\ndata: {USAGE_CHUNK}\n\ndata: [DONE]\n\n"
    );
    mock.push(sse_chunked(events.as_bytes()));
    let (answer, ended) = post_raw(&gw, "/v1/chat/completions", STREAM_BODY).await;
    assert!(ended);
    let text = answer.text();
    assert!(
        !text.starts_with("data: {\"id\""),
        "events before the big one are still edited"
    );
    assert!(text.contains(&huge), "the big event passes whole");
    assert!(
        text.ends_with(&format!("data: {USAGE_CHUNK}\n\ndata: [DONE]\n\n")),
        "after it, the stream passes unedited"
    );
    assert_eq!(gw.metric(skipped), 1.0);
}
