//! A JSON answer held whole before it is sent (one with a declared length) has its usage
//! read by serde_json in one pass: the last `usage` counts, and an answer serde_json does
//! not accept as JSON has none, so its reservation stands. One relayed in pieces (no
//! declared length) is followed as it passes, without checking that it is JSON.

mod common;
use common::*;

#[tokio::test]
async fn a_whole_answer_counts_its_last_usage_and_passes_byte_for_byte() {
    let mock = MockUpstream::start().await;
    let answer = r#"{"id":"c","usage":{"prompt_tokens":1,"completion_tokens":1},"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30}}"#;
    mock.push(Reply::json(200, answer));
    let gw = TestGateway::start(&config(&mock.url())).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.text(), answer, "relayed as is");
    let line = &gw.log_lines(1).await[0];
    assert_eq!(
        (&line["input_tokens"], &line["output_tokens"]),
        (&12.into(), &30.into()),
        "the last usage counts"
    );
}

#[tokio::test]
async fn a_whole_answer_that_is_not_json_keeps_its_reservation() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&limited_config(&mock.url(), "    tokens_per_minute: 1000")).await;
    let body = body_estimating(300);
    let missing = r#"sluice_usage_missing_total{upstream="mock"}"#;
    // Text after the document: with a declared length, it is read whole and not believed.
    let answer =
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}} and more"#;
    mock.push(Reply::json(200, answer));
    let first = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.text(), answer, "relayed as is");
    assert_eq!(
        first.header("x-ratelimit-remaining-tokens"),
        Some("700"),
        "held while in flight"
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["input_tokens"], serde_json::Value::Null, "{line}");
    assert_eq!(gw.metric(missing), 1.0, "no usage: the reservation stands");
    // The same bytes relayed in pieces (close-delimited, no declared length): the scan
    // follows them as they pass and reads the usage.
    mock.push(Reply::Raw(
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{answer}").into_bytes(),
    ));
    let second = chat(gw.addr(), LIMITED, &body).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.text(), answer, "relayed as is");
    let line = &gw.log_lines(2).await[1];
    assert_eq!(
        (&line["input_tokens"], &line["output_tokens"]),
        (&1.into(), &1.into())
    );
    assert_eq!(gw.metric(missing), 1.0, "this one had a usage");
}
