//! Client connections are bounded and every answer is the gateway's: the whole head within
//! `client_header_timeout`, idle keep-alive closed after `client_idle_timeout`, at most
//! `max_connections` open, pipelined requests answered in order, and what the HTTP parser
//! refuses answered in the error envelope, logged and counted.

mod common;
use common::*;
use std::time::Duration;

/// The standard catalog with short client timeouts, so a test waits for the gateway to close
/// a connection for a fraction of a second rather than the defaults.
async fn gateway_with(extra: &str) -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), extra)).await;
    (mock, gw)
}

fn models_request() -> Vec<u8> {
    let auth = format!("Bearer {ALPHA}");
    request_bytes("GET", "/v1/models", &[("authorization", &auth)], b"")
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let (_mock, gw) = gateway_with("client_idle_timeout: 300ms").await;
    let mut conn = Conn::open(gw.addr()).await;
    // No key: a 401 kept the connection open before.
    conn.write(&request_bytes("GET", "/v1/models", &[], b""))
        .await;
    let response = conn.read_response().await.expect("an answer");
    assert_eq!(response.status, 401);
    assert!(
        conn.closed_by_peer().await,
        "the gateway closes a keep-alive connection that stays idle past client_idle_timeout"
    );
}

#[tokio::test]
async fn a_connection_still_in_use_stays_open() {
    let (_mock, gw) = gateway_with("client_idle_timeout: 2s").await;
    let mut conn = Conn::open(gw.addr()).await;
    for _ in 0..3 {
        conn.write(&models_request()).await;
        let response = conn.read_response().await.expect("an answer");
        assert_eq!(
            response.status, 200,
            "each request on the kept connection is served"
        );
    }
}

#[tokio::test]
async fn a_trickled_request_head_is_cut_off() {
    let (_mock, gw) = gateway_with("client_header_timeout: 500ms").await;
    let mut conn = Conn::open(gw.addr()).await;
    let head = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-slow: ";
    conn.write(head).await;
    // A byte every 100 ms keeps every single read short; only the whole-head deadline
    // can end it.
    let trickle = async {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if conn.try_write(b"a").await.is_err() {
                return true;
            }
        }
        false
    };
    let cut = tokio::time::timeout(READ_LIMIT, trickle).await;
    assert_eq!(
        cut.ok(),
        Some(true),
        "a head that is not whole within client_header_timeout closes the connection"
    );
}

#[tokio::test]
async fn a_connection_that_never_sends_a_head_is_closed() {
    let (_mock, gw) = gateway_with("client_header_timeout: 300ms").await;
    let mut conn = Conn::open(gw.addr()).await;
    assert!(
        conn.closed_by_peer().await,
        "a silent connection is closed after client_header_timeout"
    );
}

/// `max` connections are each served; one more waits for a place (seen by the gateway's
/// own count, not by a timer) and is served as soon as one of the first closes.
async fn max_connections_is_exact(gw: &TestGateway, max: usize) {
    let mut open = Vec::new();
    for i in 0..max {
        let mut conn = Conn::open(gw.addr()).await;
        conn.write(&models_request()).await;
        let served = tokio::time::timeout(READ_LIMIT, conn.read_response()).await;
        assert_eq!(
            served.ok().flatten().map(|r| r.status),
            Some(200),
            "connection {i} of max_connections {max} is served"
        );
        open.push(conn);
    }
    let mut next = Conn::open(gw.addr()).await;
    next.write(&models_request()).await;
    let mut waiting = gw.running.connections_waiting();
    tokio::time::timeout(READ_LIMIT, waiting.wait_for(|n| *n == 1))
        .await
        .expect("the connection past max_connections waits for a place")
        .unwrap();
    // It is not served while it waits: the first answer it gets comes after a close.
    open.remove(0);
    let served = tokio::time::timeout(READ_LIMIT, next.read_response()).await;
    assert_eq!(
        served.ok().flatten().map(|r| r.status),
        Some(200),
        "served once a place is free"
    );
    assert_eq!(*waiting.borrow(), 0, "nobody waits any more");
}

#[tokio::test]
async fn past_max_connections_the_gateway_waits_for_one_to_close() {
    let (_mock, gw) = gateway_with("max_connections: 2").await;
    max_connections_is_exact(&gw, 2).await;
}

#[tokio::test]
async fn max_connections_is_exact_with_several_worker_threads() {
    let mock = MockUpstream::start().await;
    let yaml = config_with(&mock.url(), "max_connections: 3");
    let workers = std::num::NonZeroUsize::new(4).unwrap();
    let gw = TestGateway::start_on(&yaml, sluice::server::EventLoops::PerCore(workers)).await;
    // Each worker has a listener of its own: before, each took a place before accepting
    // and held it while the kernel queued connections on another worker's listener.
    max_connections_is_exact(&gw, 3).await;
    gw.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (mock, gw) = gateway_with("").await;
    mock.push(Reply::json(200, r#"{"first":true}"#).delayed(Duration::from_millis(200)));
    let auth = format!("Bearer {ALPHA}");
    let body = chat_body("chat-model");
    let mut both = request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    both.extend_from_slice(&models_request());
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&both).await;
    let first = conn.read_response().await.expect("the first answer");
    assert_eq!(
        first.status, 200,
        "the first request is not taken for a disconnect"
    );
    assert_eq!(first.json()["first"], true);
    let second = conn.read_response().await.expect("the second answer");
    assert_eq!(second.status, 200);
    assert_eq!(second.json()["object"], "list");
    let lines = gw.log_lines(2).await;
    assert!(
        lines.iter().all(|l| l["status"] == 200),
        "both logged as served: {lines:?}"
    );
}

/// Sends raw bytes on a new connection and reads the answer.
async fn raw(gw: &TestGateway, bytes: &[u8]) -> Response {
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(bytes).await;
    conn.read_response().await.expect("an answer")
}

#[tokio::test]
async fn what_the_parser_refuses_gets_the_envelope_a_request_id_a_log_line_and_a_count() {
    let (mock, gw) = gateway_with("").await;
    let auth = format!("Bearer {ALPHA}");
    let malformed: [&[u8]; 3] = [
        // Two differing lengths.
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 60\r\ncontent-length: 10\r\n\r\n",
        // A space before the colon.
        b"GET /v1/models HTTP/1.1\r\nhost : x\r\n\r\n",
        // Not HTTP/1.x.
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ];
    for (i, bytes) in malformed.iter().enumerate() {
        let response = raw(&gw, bytes).await;
        let (status, kind, code, _) = response.error();
        assert_eq!(
            (status, kind.as_str(), code.as_str()),
            (400, "invalid_request_error", "invalid_request"),
            "case {i}"
        );
        assert!(
            response.header("x-request-id").is_some(),
            "case {i}: a request id"
        );
        assert!(
            response.header("server").is_none(),
            "case {i}: the gateway's envelope, not a bare answer"
        );
    }
    let lines = gw.log_lines(3).await;
    for line in &lines {
        assert_eq!(line["status"], 400);
        assert_eq!(line["error_code"], "invalid_request");
        assert!(line["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    assert_eq!(
        gw.metric(r#"sluice_rejections_total{code="invalid_request",key="unknown"}"#),
        3.0
    );

    let connect = raw(
        &gw,
        b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com\r\n\r\n",
    )
    .await;
    let (status, _, code, _) = connect.error();
    assert_eq!((status, code.as_str()), (404, "unknown_route"));

    // A chunked body with a chunk size that is not hexadecimal.
    let mut chunked = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: {auth}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    chunked.extend_from_slice(b"zz\r\n{}\r\n0\r\n\r\n");
    let response = raw(&gw, &chunked).await;
    let (status, _, code, _) = response.error();
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    assert!(
        mock.requests().is_empty(),
        "nothing malformed reaches the upstream"
    );
}
