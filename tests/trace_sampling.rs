//! Who decides what is traced: the gateway, by its own `sample_ratio`, whatever a caller's
//! `traceparent` says (trusted or not, authenticated or not); a caller's trace is joined
//! only with `trust_incoming: true`, off by default; text a client wrote is cut in spans.

mod common;
use common::*;
use std::sync::Arc;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn tracing_section(endpoint: &str, extra: &str) -> String {
    format!("tracing:\n  otlp_endpoint: {endpoint}\n  service_name: sluice-test\n{extra}")
}

async fn chat_with(addr: std::net::SocketAddr, body: &str, extra: &[(&str, &str)]) -> Response {
    let auth = format!("Bearer {ALPHA}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    send(
        addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
    )
    .await
}

/// Exports every span ended so far (off the test's runtime: the receiver runs on it).
async fn flush(gw: &TestGateway) {
    let gateway = Arc::clone(&gw.running.gateway);
    tokio::task::spawn_blocking(move || {
        gateway
            .telemetry
            .as_ref()
            .expect("tracing is configured")
            .flush()
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_sampled_traceparent_never_overrides_sample_ratio_zero() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let section = tracing_section(
        &receiver.endpoint(),
        "  sample_ratio: 0\n  trust_incoming: true\n",
    );
    let gw = TestGateway::start(&config_with(&mock.url(), &section)).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    for _ in 0..5 {
        let response = chat_with(
            gw.addr(),
            &chat_body("chat-model"),
            &[("traceparent", &traceparent)],
        )
        .await;
        assert_eq!(response.status, 200, "{}", response.text());
    }
    // Unauthenticated, too.
    let anonymous = send(
        gw.addr(),
        "GET",
        "/v1/models",
        &[("traceparent", &traceparent)],
        b"",
    )
    .await;
    assert_eq!(anonymous.status, 401);
    gw.log_lines(6).await;
    flush(&gw).await;
    assert!(
        receiver.spans().is_empty(),
        "a caller's sampled flag does not make the gateway export: {:?}",
        receiver.spans()
    );
    let sent = mock.requests()[0]
        .header("traceparent")
        .unwrap()
        .to_string();
    assert!(
        sent.starts_with(&format!("00-{TRACE_ID}-")) && sent.ends_with("-00"),
        "a trusted caller's trace ID is kept, with the gateway's decision: {sent}"
    );
}

#[tokio::test]
async fn by_default_a_caller_neither_chooses_the_trace_and_long_paths_are_cut() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let section = tracing_section(&receiver.endpoint(), "");
    let gw = TestGateway::start(&config_with(&mock.url(), &section)).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let path = format!("/v1/models/{}", "m".repeat(2000));
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        gw.addr(),
        "GET",
        &path,
        &[("authorization", &auth), ("traceparent", &traceparent)],
        b"",
    )
    .await;
    assert_eq!(response.status, 404, "{}", response.text());
    let spans = receiver.wait_for(1).await;
    let server = &spans[0];
    assert_ne!(
        server.trace_id(),
        TRACE_ID,
        "trust_incoming is false by default: the gateway starts its own trace"
    );
    assert_eq!(server.span.links.len(), 1, "the caller's span is linked");
    let recorded = server.text("url.path").expect("url.path is recorded");
    assert_eq!(
        recorded.chars().count(),
        512,
        "url.path is cut to 512 characters"
    );
    assert!(path.starts_with(&recorded), "it is the start of the path");
}
