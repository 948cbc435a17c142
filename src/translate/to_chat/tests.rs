use super::*;
use serde_json::json;

/// The JSON of each `data:` event of translated output (`[DONE]` as a string).
fn parse(out: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "whole events: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let data = event.strip_prefix("data: ").expect("data-only events");
            if data == "[DONE]" {
                json!("[DONE]")
            } else {
                serde_json::from_str(data).unwrap()
            }
        })
        .collect()
}

fn stream_events() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [],
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 0}}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"q\""}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ":1}"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ]
}

fn run(include_usage: bool) -> (ChatChunks, Vec<Value>) {
    let mut stream = ChatChunks::new(include_usage, 99);
    let mut out = Vec::new();
    for event in stream_events() {
        out.extend(parse(&stream.event(event.to_string().as_bytes())));
    }
    (stream, out)
}

#[test]
fn events_become_chunks_in_order() {
    let (stream, chunks) = run(false);
    let deltas: Vec<(Value, Value)> = chunks
        .iter()
        .filter(|c| c.is_object())
        .map(|c| {
            (
                c["choices"][0]["delta"].clone(),
                c["choices"][0]["finish_reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        deltas,
        [
            (json!({"role": "assistant", "content": ""}), json!(null)),
            (json!({"reasoning_content": "hm"}), json!(null)),
            (json!({"content": "Hi"}), json!(null)),
            (
                json!({"tool_calls": [{"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": ""}}]}),
                json!(null)
            ),
            (
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\""}}]}),
                json!(null)
            ),
            (
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
                json!(null)
            ),
            (json!({}), json!("tool_calls")),
        ]
    );
    for chunk in chunks.iter().filter(|c| c.is_object()) {
        assert_eq!(
            (
                &chunk["id"],
                &chunk["object"],
                &chunk["created"],
                &chunk["model"]
            ),
            (
                &json!("msg_1"),
                &json!("chat.completion.chunk"),
                &json!(99),
                &json!("claude")
            )
        );
    }
    assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    assert!(stream.is_finished());
    let usage = stream.usage().unwrap();
    assert_eq!((usage.input, usage.output, usage.cached), (14, 9, Some(4)));
}

#[test]
fn the_usage_chunk_comes_only_when_asked_for() {
    let (_, without) = run(false);
    assert!(
        without.iter().all(|c| c.get("usage").is_none()),
        "no usage: {without:?}"
    );
    let (_, with) = run(true);
    let usage_chunk = &with[with.len() - 2];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"],
        json!({"prompt_tokens": 14, "completion_tokens": 9, "total_tokens": 23, "prompt_tokens_details": {"cached_tokens": 4}})
    );
}

#[test]
fn stop_reasons_map_to_finish_reasons() {
    for (stop, finish) in [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
    ] {
        let mut stream = ChatChunks::new(false, 0);
        let event = json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 1}});
        let chunks = parse(&stream.event(event.to_string().as_bytes()));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

#[test]
fn an_error_event_becomes_an_error_chunk_and_ends_the_stream() {
    let mut stream = ChatChunks::new(true, 0);
    let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}});
    let chunks = parse(&stream.event(error.to_string().as_bytes()));
    assert_eq!(
        chunks,
        [
            json!({"error": {"message": "busy", "type": "overloaded_error", "param": null, "code": null}})
        ]
    );
    assert!(stream.is_finished());
    assert!(stream.event(br#"{"type":"message_stop"}"#).is_empty());
}

#[test]
fn a_passed_through_stream_reports_its_merged_usage() {
    let mut usage = MessagesStreamUsage::default();
    for event in stream_events() {
        usage.event(event.to_string().as_bytes());
    }
    let read = usage.usage().unwrap();
    assert_eq!((read.input, read.output, read.cached), (14, 9, Some(4)));
    let mut none = MessagesStreamUsage::default();
    none.event(br#"{"type":"ping"}"#);
    assert_eq!(none.usage(), None);
}
