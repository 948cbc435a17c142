//! Traces (`tracing:`): what the gateway exports over OTLP/HTTP, decoded by a receiver in the
//! test: the server span of a request and the client span of each upstream attempt, their
//! attributes and parentage; the `traceparent` the upstream gets; an incoming one honoured,
//! linked or ignored; sampling at 0. What reaching the collector costs and loses:
//! tests/trace_export.rs.

mod common;
use common::*;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use std::sync::Arc;
use std::time::Duration;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
/// OTLP span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const ERROR: i32 = 2;

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

/// The one server span and the client spans, in the order they started.
fn split(spans: &[Received]) -> (Received, Vec<Received>) {
    let servers: Vec<&Received> = spans.iter().filter(|s| s.span.kind == SERVER).collect();
    assert_eq!(servers.len(), 1, "one server span per request: {spans:?}");
    let mut clients: Vec<Received> = spans
        .iter()
        .filter(|s| s.span.kind == CLIENT)
        .cloned()
        .collect();
    clients.sort_by_key(|s| s.span.start_time_unix_nano);
    (servers[0].clone(), clients)
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
async fn a_request_is_a_server_span_under_the_callers_with_one_attempt_under_it() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let section = tracing_section(
        &receiver.endpoint(),
        "  headers: {x-collector-token: t0ken}\n  trust_incoming: true\n",
    );
    let gw = TestGateway::start(&config_with(&mock.url(), &section)).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let response = chat_with(
        gw.addr(),
        &chat_body("chat-model"),
        &[("traceparent", &traceparent), ("tracestate", "vendor=1")],
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text());

    let (server, clients) = split(&receiver.wait_for(2).await);
    assert_eq!(server.service, "sluice-test");
    assert_eq!(
        server.resource_text("telemetry.sdk.language").as_deref(),
        Some("rust"),
        "the resource describes the SDK too"
    );
    assert_eq!(
        server.scope.as_ref().map(|s| s.name.as_str()),
        Some("sluice")
    );
    assert_eq!(server.name(), "POST /v1/chat/completions");
    assert_eq!(
        server.span.flags, 0x301,
        "sampled, under a remote parent (OTLP's span flags)"
    );
    assert_eq!(
        server.span.trace_state, "vendor=1",
        "the caller's tracestate"
    );
    assert_eq!(server.status_code(), 0, "a 200's status is unset");
    assert!(
        0 < server.span.start_time_unix_nano
            && server.span.start_time_unix_nano <= server.span.end_time_unix_nano
    );
    assert_eq!(server.trace_id(), TRACE_ID, "the caller's trace continues");
    assert_eq!(
        server.parent_id(),
        PARENT_ID,
        "the caller's span is the parent"
    );
    assert_eq!(server.int("http.response.status_code"), Some(200));
    assert_eq!(
        server.text("sluice.request_id").as_deref(),
        response.header("x-request-id")
    );
    assert_eq!(
        server.text("gen_ai.request.model").as_deref(),
        Some("chat-model")
    );
    assert_eq!(server.text("sluice.key").as_deref(), Some("alpha"));
    assert_eq!(server.attribute("error.type"), None, "a 200 has no error");

    assert_eq!(clients.len(), 1, "one attempt");
    let attempt = &clients[0];
    assert_eq!(attempt.name(), "chat chat-model", "{{operation}} {{model}}");
    assert_eq!(
        attempt.span.flags, 0x101,
        "sampled, under a parent of this process"
    );
    assert_eq!(attempt.span.trace_state, "vendor=1");
    assert!(
        server.span.start_time_unix_nano <= attempt.span.start_time_unix_nano
            && attempt.span.start_time_unix_nano <= attempt.span.end_time_unix_nano
            && attempt.span.end_time_unix_nano <= server.span.end_time_unix_nano,
        "the attempt is within its request"
    );
    assert_eq!(attempt.trace_id(), TRACE_ID);
    assert_eq!(
        attempt.parent_id(),
        server.span_id(),
        "the attempt is under the request"
    );
    assert_eq!(
        attempt.text("gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        attempt.text("gen_ai.request.model").as_deref(),
        Some("chat-model")
    );
    assert_eq!(
        attempt.text("gen_ai.response.model").as_deref(),
        Some("mock")
    );
    assert_eq!(attempt.int("gen_ai.usage.input_tokens"), Some(1));
    assert_eq!(attempt.int("gen_ai.usage.output_tokens"), Some(3));
    assert_eq!(attempt.int("http.response.status_code"), Some(200));
    assert_eq!(attempt.text("server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(
        attempt.int("server.port"),
        Some(i64::from(mock.addr.port()))
    );
    assert!(
        matches!(attempt.attribute("gen_ai.response.time_to_first_chunk"), Some(Value::DoubleValue(s)) if s > 0.0),
        "time to first chunk in seconds"
    );
    assert_eq!(attempt.attribute("error.type"), None);

    let sent = &mock.requests()[0];
    assert_eq!(
        sent.header("traceparent"),
        Some(format!("00-{TRACE_ID}-{}-01", attempt.span_id()).as_str()),
        "the upstream joins the trace under the attempt"
    );
    assert_eq!(sent.header("tracestate"), Some("vendor=1"));
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["trace_id"], TRACE_ID, "the access log names the trace");
    assert_eq!(
        receiver.header("x-collector-token").as_deref(),
        Some("t0ken")
    );
}

#[tokio::test]
async fn a_stream_attempt_has_its_time_to_first_chunk() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let gw = TestGateway::start(&config_with(
        &mock.url(),
        &tracing_section(&receiver.endpoint(), ""),
    ))
    .await;
    mock.push(Reply::stream(3, Duration::from_millis(5)));
    let body = r#"{"model":"renamed","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = EventStream::open(gw.addr(), ALPHA, body).await;
    assert_eq!(stream.status, 200);
    let events = stream.rest().await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));

    let (server, clients) = split(&receiver.wait_for(2).await);
    assert_eq!(
        server.attribute("sluice.stream"),
        Some(Value::BoolValue(true))
    );
    let attempt = &clients[0];
    assert_eq!(
        attempt.name(),
        "chat org/real-name",
        "named for the model the upstream is asked for"
    );
    assert_eq!(
        attempt.text("gen_ai.request.model").as_deref(),
        Some("org/real-name")
    );
    assert!(matches!(
        attempt.attribute("gen_ai.response.time_to_first_chunk"),
        Some(Value::DoubleValue(s)) if s > 0.0
    ));
    assert_eq!(attempt.int("http.response.status_code"), Some(200));
    let trace_id = server.trace_id();
    assert_eq!(trace_id.len(), 32, "a trace of its own");
    assert_eq!(server.parent_id(), "", "no caller: a root span");
    let sent = mock.requests()[0]
        .header("traceparent")
        .unwrap()
        .to_string();
    assert_eq!(sent, format!("00-{trace_id}-{}-01", attempt.span_id()));
}

#[tokio::test]
async fn a_resend_is_a_sibling_attempt_with_its_own_traceparent() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    // Two upstreams on one mock: whichever is picked first gets the 503, the other the 200.
    let yaml = format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
retry_backoff: 1ms
{tracing}
upstreams:
  - {{name: a, url: "{url}"}}
  - {{name: b, url: "{url}"}}
models:
  - id: duo
    targets: [{{upstream: a}}, {{upstream: b}}]
keys:
  - {{name: alpha, sha256: {hash}}}
"#,
        tracing = tracing_section(&receiver.endpoint(), ""),
        url = mock.url(),
        hash = key_hash(ALPHA)
    );
    let gw = TestGateway::start(&yaml).await;
    mock.push(Reply::json(503, r#"{"error":{"message":"overloaded"}}"#));
    let response = chat(gw.addr(), ALPHA, &chat_body("duo")).await;
    assert_eq!(response.status, 200, "{}", response.text());

    let (server, clients) = split(&receiver.wait_for(3).await);
    assert_eq!(clients.len(), 2, "two attempts");
    for attempt in &clients {
        assert_eq!(
            attempt.parent_id(),
            server.span_id(),
            "attempts are siblings"
        );
        assert_eq!(attempt.name(), "chat duo");
    }
    let (first, second) = (&clients[0], &clients[1]);
    assert_eq!(first.int("http.response.status_code"), Some(503));
    assert_eq!(first.text("error.type").as_deref(), Some("503"));
    assert_eq!(first.status_code(), ERROR);
    assert_eq!(
        first.attribute("sluice.handed_back"),
        Some(Value::BoolValue(true))
    );
    assert_eq!(second.int("http.response.status_code"), Some(200));
    assert_eq!(second.attribute("error.type"), None);
    assert_ne!(
        first.text("sluice.upstream"),
        second.text("sluice.upstream"),
        "the resend went to the other upstream"
    );
    let sent: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r.header("traceparent").unwrap().to_string())
        .collect();
    let trace_id = server.trace_id();
    assert_eq!(
        sent,
        [
            format!("00-{trace_id}-{}-01", first.span_id()),
            format!("00-{trace_id}-{}-01", second.span_id())
        ],
        "each attempt sends its own span as the parent"
    );
    assert_eq!(server.int("http.response.status_code"), Some(200));
}

#[tokio::test]
async fn an_upstream_that_cannot_be_reached_marks_both_spans_with_the_error() {
    let receiver = OtlpReceiver::start().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let gw = TestGateway::start(&config_with(
        &dead_url,
        &tracing_section(&receiver.endpoint(), ""),
    ))
    .await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    let (status, _, code, _) = response.error();
    assert!(status >= 500, "an unreachable upstream is a 5xx: {status}");

    let (server, clients) = split(&receiver.wait_for(2).await);
    assert_eq!(
        server.int("http.response.status_code"),
        Some(i64::from(status))
    );
    assert_eq!(server.text("error.type"), Some(code.clone()));
    assert_eq!(server.status_code(), ERROR, "a 5xx is a failed request");
    let attempt = &clients[0];
    assert_eq!(attempt.text("error.type"), Some(code));
    assert_eq!(attempt.status_code(), ERROR);
    assert_eq!(
        attempt.attribute("http.response.status_code"),
        None,
        "no answer"
    );
}

#[tokio::test]
async fn an_untrusted_traceparent_is_linked_and_a_malformed_one_ignored() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let section = tracing_section(&receiver.endpoint(), "  trust_incoming: false\n");
    let gw = TestGateway::start(&config_with(&mock.url(), &section)).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let linked = chat_with(
        gw.addr(),
        &chat_body("chat-model"),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(linked.status, 200);
    let (server, _) = split(&receiver.wait_for(2).await);
    assert_ne!(
        server.trace_id(),
        TRACE_ID,
        "an untrusted caller does not choose the trace"
    );
    assert_eq!(server.parent_id(), "");
    let link = &server.span.links[0];
    assert_eq!(
        (hex(&link.trace_id), hex(&link.span_id)),
        (TRACE_ID.into(), PARENT_ID.into())
    );
    assert_eq!(link.flags, 0x301, "a sampled remote span");
    assert_eq!(server.span.flags, 0x101, "a root span");

    let malformed = chat_with(
        gw.addr(),
        &chat_body("chat-model"),
        &[
            ("traceparent", "00-not-a-trace-01"),
            ("tracestate", "vendor=1"),
        ],
    )
    .await;
    assert_eq!(
        malformed.status, 200,
        "a malformed traceparent is never an error"
    );
    let sent = mock.requests()[1]
        .header("traceparent")
        .unwrap()
        .to_string();
    assert_ne!(
        sent, "00-not-a-trace-01",
        "the upstream never gets the malformed header"
    );
    // The second request's spans, found by the trace the upstream got rather than by
    // position: the exporter retries an export the collector was slow to answer (OTLP's
    // retry policy), so a batch of the first request's spans can arrive twice.
    let trace = sent.split('-').nth(1).unwrap_or_default().to_owned();
    let mut wanted = 4;
    let spans = loop {
        let mut spans: Vec<Received> = receiver
            .wait_for(wanted)
            .await
            .into_iter()
            .filter(|s| s.trace_id() == trace)
            .collect();
        spans.sort_by_key(|s| s.span_id());
        spans.dedup_by_key(|s| s.span_id());
        if spans.len() >= 2 {
            break spans;
        }
        wanted = receiver.spans().len() + 1;
    };
    let (server, clients) = split(&spans);
    assert!(server.span.links.is_empty(), "nothing to link");
    assert_eq!(
        sent,
        format!("00-{}-{}-01", server.trace_id(), clients[0].span_id()),
        "the upstream gets the new trace, not the malformed header"
    );
    assert_eq!(
        mock.requests()[1].header("tracestate"),
        None,
        "nor the caller's tracestate"
    );
}

#[tokio::test]
async fn sampling_at_zero_exports_nothing_but_still_propagates() {
    let (mock, receiver) = (MockUpstream::start().await, OtlpReceiver::start().await);
    let section = tracing_section(&receiver.endpoint(), "  sample_ratio: 0\n");
    let gw = TestGateway::start(&config_with(&mock.url(), &section)).await;
    for _ in 0..5 {
        assert_eq!(
            chat(gw.addr(), ALPHA, &chat_body("chat-model"))
                .await
                .status,
            200
        );
    }
    gw.log_lines(5).await;
    flush(&gw).await;
    assert!(
        receiver.spans().is_empty(),
        "nothing sampled, nothing exported"
    );
    let sent = mock.requests()[0]
        .header("traceparent")
        .unwrap()
        .to_string();
    assert!(
        sent.ends_with("-00"),
        "the upstream is told the trace is not sampled: {sent}"
    );
}

#[test]
fn the_tracing_section_is_checked_with_its_paths() {
    let env = |_: &str| None;
    let yaml = "tracing:\n  otlp_endpoint: http://c:4318\n  sample_rate: 1\n";
    let errors = sluice::config::parse("t.yaml", yaml, None, &env).unwrap_err();
    assert!(
        errors.to_string().contains("tracing") && errors.to_string().contains("sample_rate"),
        "an unknown field of tracing: is an error naming it: {errors}"
    );
    let yaml = "tracing:\n  otlp_endpoint: ftp://c\n  sample_ratio: -1\n";
    let errors = sluice::config::parse("t.yaml", yaml, None, &env).unwrap_err();
    let text = errors.to_string();
    assert!(
        text.contains("tracing.otlp_endpoint") && text.contains("tracing.sample_ratio"),
        "{text}"
    );
    let absent = sluice::config::parse("t.yaml", "listen: 127.0.0.1:0\n", None, &env).unwrap();
    assert_eq!(absent.tracing, None, "no section, no tracing");
}
