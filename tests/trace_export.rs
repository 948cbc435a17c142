//! Reaching the collector: a dead or silent one costs requests nothing, and spans that
//! never reached it, or that it said it rejected, are counted as dropped.

mod common;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tracing_section(endpoint: &str, extra: &str) -> String {
    format!("tracing:\n  otlp_endpoint: {endpoint}\n  service_name: sluice-test\n{extra}")
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

/// Median time of `count` chat requests, every status checked.
async fn median_latency(gw: &TestGateway, count: usize) -> Duration {
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
        times.push(started.elapsed());
        assert_eq!(response.status, 200, "tracing never fails a request");
    }
    times.sort();
    times[count / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_collector_changes_neither_status_nor_latency() {
    let mock = MockUpstream::start().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_endpoint = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    // Accepts connections and never answers: every export waits for its timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_endpoint = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let off = TestGateway::start(&config(&mock.url())).await;
    let baseline = median_latency(&off, 40).await;
    for endpoint in [dead_endpoint, silent_endpoint] {
        let on =
            TestGateway::start(&config_with(&mock.url(), &tracing_section(&endpoint, ""))).await;
        let traced = median_latency(&on, 40).await;
        let ratio = traced.as_secs_f64() / baseline.as_secs_f64();
        assert!(
            ratio < 3.0,
            "a collector at {endpoint} that does not answer costs requests nothing: median {traced:?} against {baseline:?} untraced"
        );
    }
}

#[tokio::test]
async fn spans_a_dead_collector_never_took_are_counted_as_dropped() {
    let mock = MockUpstream::start().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let gw = TestGateway::start(&config_with(&mock.url(), &tracing_section(&endpoint, ""))).await;
    assert_eq!(
        gw.metric("sluice_trace_spans_dropped_total"),
        0.0,
        "declared at 0"
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    gw.log_lines(1).await;
    flush(&gw).await;
    assert_eq!(
        gw.metric("sluice_trace_spans_dropped_total"),
        2.0,
        "the request's two spans were dropped after the export failed"
    );
}

#[tokio::test]
async fn spans_a_collector_rejects_in_a_partial_success_are_counted_as_dropped() {
    let mock = MockUpstream::start().await;
    // A collector that takes each export and answers that it rejected one of its spans.
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    tokio::spawn(async move {
        let answer = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 1,
                error_message: "one span too many".into(),
            }),
        }
        .encode_to_vec();
        while let Ok((mut socket, _)) = collector.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                // The head and body of one export: read until the client has sent it all
                // (it then waits for the answer), enough for this test's small batch.
                let mut request = Vec::new();
                let mut buffer = [0; 16 << 10];
                loop {
                    let read = socket.read(&mut buffer).await.unwrap_or(0);
                    request.extend_from_slice(&buffer[..read]);
                    if read == 0 || exported_whole(&request) {
                        break;
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                    answer.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&answer).await;
            });
        }
    });
    let gw = TestGateway::start(&config_with(&mock.url(), &tracing_section(&endpoint, ""))).await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    gw.log_lines(1).await;
    flush(&gw).await;
    assert_eq!(
        gw.metric("sluice_trace_spans_dropped_total"),
        1.0,
        "the span the collector rejected is lost, the other one not"
    );
}

/// Whether `request` holds a whole HTTP request with a `content-length` body.
fn exported_whole(request: &[u8]) -> bool {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    request.len() >= end + 4 + length
}
