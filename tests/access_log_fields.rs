//! The access-log field reference in docs/operations.md is the truth: it lists every field
//! a record can have, in the order they are written, and every field of real log lines (a
//! success, a 429 and an upstream's own error, through real sockets) is in it.

mod common;
use common::*;
use sluice::access_log::{AccessLog, AccessRecord};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The fields of the table under `### Access-log fields` in docs/operations.md, in order.
fn documented_fields() -> Vec<String> {
    let path = format!("{}/docs/operations.md", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("docs/operations.md");
    let section = text
        .split("### Access-log fields")
        .nth(1)
        .expect("operations.md has an access-log field reference");
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect()
}

/// The bytes an access log writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_reference_lists_every_field_a_record_can_have_in_order() {
    let labels = BTreeMap::from([("team".to_string(), "search".to_string())]);
    // Every optional field set: the record writes each of its fields.
    let record = AccessRecord {
        trace_id: Some("0af7651916cd43dd8448eb211c80319c"),
        key: Some("k"),
        key_owner: Some("owner"),
        key_labels: Some(&labels),
        model: Some("m"),
        served_model: Some("m"),
        upstream: Some("u"),
        upstream_url: Some("http://u/v1/chat/completions"),
        upstream_ms: Some(1.0),
        ttfb_ms: Some(1.0),
        error_code: Some("rate_limit_exceeded"),
        error_message: Some("x".into()),
        retry_after_ms: Some(1),
        since_previous_ms: Some(1.0),
        upstream_status: Some(500),
        upstream_error_code: Some("boom"),
        upstream_request_id: Some("r"),
        cut: true,
        cut_by_shutdown: true,
        input_tokens: Some(1),
        output_tokens: Some(1),
        reserved_tokens: Some(1),
        cost_usd: Some(1),
        tls_version: Some("TLSv1.3"),
        tls_client_subject: Some("CN=team-a,O=acme"),
        ..Default::default()
    };
    let capture = Capture::default();
    let log = AccessLog::new(Box::new(capture.clone()));
    log.write(&record);
    log.flush();
    let line = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let mut written: Vec<String> = parsed.as_object().unwrap().keys().cloned().collect();
    written.sort();
    let documented = documented_fields();
    let mut sorted = documented.clone();
    sorted.sort();
    assert_eq!(
        sorted, written,
        "the reference lists exactly the fields a line can have"
    );
    // Where each name starts the line (the label's name is none of them).
    let at: Vec<usize> = documented
        .iter()
        .map(|name| line.find(&format!("\"{name}\":")).unwrap())
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "the reference is in the order the fields are written: {documented:?}\n{line}"
    );
}

#[tokio::test]
async fn every_field_of_real_log_lines_is_in_the_reference() {
    let mock = MockUpstream::start().await;
    let yaml = config_with(&mock.url(), "").replace(
        "  - name: alpha\n",
        "  - name: alpha\n    owner: search team\n    labels: {team: search}\n    requests_per_minute: 60\n    burst: 2\n",
    );
    let gw = TestGateway::start(&yaml).await;
    mock.push(Reply::completion());
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    mock.push(
        Reply::json(500, r#"{"error":{"message":"boom","code":"boom_code"}}"#)
            .with_header("x-request-id", "upstream-req-1"),
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        500
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        429
    );
    let lines = gw.log_lines(3).await;
    let documented = documented_fields();
    let mut seen = std::collections::BTreeSet::new();
    for line in &lines {
        for name in line.as_object().unwrap().keys() {
            assert!(
                documented.contains(name),
                "`{name}` is written but not in the reference: {line}"
            );
            seen.insert(name.clone());
        }
    }
    assert!(
        lines.iter().all(|line| line["http_version"] == "1.1"),
        "a request over HTTP/1.1 is logged as such: {lines:#?}"
    );
    for name in [
        "key_owner",
        "key_labels",
        "upstream_status",
        "upstream_error_code",
        "upstream_request_id",
        "retry_after_ms",
        "since_previous_ms",
        "error_code",
    ] {
        assert!(
            seen.contains(name),
            "these lines exercise `{name}`: {lines:#?}"
        );
    }
}
