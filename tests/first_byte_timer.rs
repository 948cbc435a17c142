//! The first-byte deadline on a kept-alive client connection: its requests share one timer
//! (the connection's, moved to each request's deadline), and each request is still cut at
//! its own `first_byte_timeout`, no earlier and no later, whatever the requests before it
//! on the connection set the timer to.
//!
//! The first test runs on paused tokio time, as `errors.rs`'s trickled body: the gateway's
//! deadlines are tokio timers, so the waits share a virtual clock and no real second passes.

mod common;
use common::*;
use std::time::Duration;
use tokio::time::Instant;

/// [`config`]'s catalog (`chat-model` on `mock`, `first_byte_timeout: 2s`) with a second
/// upstream that is given 10 s for its first byte, and a model on it.
fn two_deadlines(mock: &str, patient: &str) -> String {
    config(mock).replacen(
        "models:\n",
        &format!(
            "  - name: patient\n    url: {patient}\n    first_byte_timeout: 10s\nmodels:\n  - id: patient-model\n    upstream: patient\n"
        ),
        1,
    )
}

/// A chat request on `conn`, and the answer's status and error code (`None` on a 200),
/// with how long it took on tokio's clock.
async fn ask(conn: &mut Conn, model: &str) -> (u16, Option<String>, Duration) {
    let started = Instant::now();
    conn.write(&chat_request_bytes(ALPHA, model)).await;
    let response = conn.read_response().await.expect("an answer");
    let took = started.elapsed();
    let code = (response.status != 200).then(|| response.error().2);
    (response.status, code, took)
}

#[tokio::test(start_paused = true)]
async fn a_shorter_deadline_after_a_longer_one_on_the_same_connection_is_kept() {
    let mock = MockUpstream::start().await;
    let patient = MockUpstream::start().await;
    let gw = TestGateway::start(&two_deadlines(&mock.url(), &patient.url())).await;
    let mut conn = Conn::open(gw.addr()).await;
    // The connection's timer is left at this request's deadline, 10 s on.
    let (status, _, _) = ask(&mut conn, "patient-model").await;
    assert_eq!(status, 200);
    mock.push(Reply::Silent);
    let (status, code, took) = ask(&mut conn, "chat-model").await;
    assert_eq!(
        (status, code.as_deref()),
        (504, Some("upstream_timeout")),
        "the silent upstream is given up"
    );
    assert!(
        took >= Duration::from_secs(2),
        "not before its own first_byte_timeout (2s): {took:?}"
    );
    assert!(
        took < Duration::from_secs(10),
        "at its own deadline, not at the one the request before it set: {took:?}"
    );
}

/// On real time: after the virtual clock runs ahead of the real one, the gateway's
/// deadlines (read from the real clock) would be behind it.
#[tokio::test]
async fn a_deadline_left_by_an_answered_request_neither_cuts_nor_stretches_the_next_ones() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let mut conn = Conn::open(gw.addr()).await;
    assert_eq!(ask(&mut conn, "chat-model").await.0, 200);
    // Idle past the deadline the answered request left set (it fires, on an idle
    // connection), well within client_idle_timeout (60 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        ask(&mut conn, "chat-model").await.0,
        200,
        "a timer that fired before this request does not cut it"
    );
    // A head that comes 1.2 s in, twice: each request's deadline is 2 s from its own
    // start, though the two add up past the first one's.
    for _ in 0..2 {
        mock.push(Reply::completion().delayed(Duration::from_millis(1200)));
        let (status, code, took) = ask(&mut conn, "chat-model").await;
        assert_eq!((status, code), (200, None), "answered within its 2 s");
        assert!(took >= Duration::from_millis(1200), "{took:?}");
    }
    mock.push(Reply::Silent);
    let (status, code, took) = ask(&mut conn, "chat-model").await;
    assert_eq!((status, code.as_deref()), (504, Some("upstream_timeout")));
    assert!(
        took >= Duration::from_secs(2),
        "not before its own first_byte_timeout (2s): {took:?}"
    );
}
