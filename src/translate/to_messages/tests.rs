use super::*;
use serde_json::json;

/// The (event name, data) pairs of translated output; each event's name matches its type.
fn parse(out: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "whole events: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let (name, data) = event.split_once('\n').unwrap();
            let name = name.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name.as_str(), "{event}");
            (name, data)
        })
        .collect()
}

fn chunk(delta: Value, finish: Value) -> Vec<u8> {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
    .into_bytes()
}

/// Feeds chunks one by one; returns all events and the output of each chunk.
fn run(chunks: &[Vec<u8>]) -> (MessagesEvents, Vec<(String, Value)>) {
    let mut stream = MessagesEvents::new();
    let mut all = Vec::new();
    for data in chunks {
        all.extend(parse(&stream.event(data)));
    }
    (stream, all)
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

const USAGE: &str = r#"{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;

#[test]
fn text_streams_as_one_text_block_then_the_stop_with_usage() {
    let (stream, events) = run(&[
        chunk(json!({"role": "assistant", "content": ""}), json!(null)),
        chunk(json!({"content": "Hel"}), json!(null)),
        chunk(json!({"content": "lo"}), json!(null)),
        chunk(json!({}), json!("stop")),
        USAGE.as_bytes().to_vec(),
        b"[DONE]".to_vec(),
    ]);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(
        (start["id"].as_str(), start["model"].as_str()),
        (Some("msg_1"), Some("up"))
    );
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(
        events[3].1["delta"],
        json!({"type": "text_delta", "text": "Hel"})
    );
    assert_eq!(
        events[6].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"input_tokens": 12, "output_tokens": 5}})
    );
    assert!(stream.is_finished());
    assert_eq!(stream.usage().map(|u| (u.input, u.output)), Some((12, 5)));
}

#[test]
fn reasoning_then_text_then_tool_calls_are_separate_blocks() {
    let (_, events) = run(&[
        chunk(json!({"reasoning_content": "let me"}), json!(null)),
        chunk(json!({"reasoning_content": " think"}), json!(null)),
        chunk(json!({"content": "Calling."}), json!(null)),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get", "arguments": ""}}]}),
            json!(null),
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":"}}]}),
            json!(null),
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            json!(null),
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "put", "arguments": "{}"}}]}),
            json!(null),
        ),
        chunk(json!({}), json!("tool_calls")),
        b"[DONE]".to_vec(),
    ]);
    let blocks: Vec<(u64, Value)> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, e)| (e["index"].as_u64().unwrap(), e["content_block"].clone()))
        .collect();
    assert_eq!(
        blocks,
        [
            (
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""})
            ),
            (1, json!({"type": "text", "text": ""})),
            (
                2,
                json!({"type": "tool_use", "id": "call_a", "name": "get", "input": {}})
            ),
            (
                3,
                json!({"type": "tool_use", "id": "call_b", "name": "put", "input": {}})
            ),
        ]
    );
    let deltas: Vec<(u64, Value)> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, e)| (e["index"].as_u64().unwrap(), e["delta"].clone()))
        .collect();
    assert_eq!(
        deltas,
        [
            (0, json!({"type": "thinking_delta", "thinking": "let me"})),
            (0, json!({"type": "thinking_delta", "thinking": " think"})),
            (1, json!({"type": "text_delta", "text": "Calling."})),
            (
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"q\":"})
            ),
            (2, json!({"type": "input_json_delta", "partial_json": "1}"})),
            (3, json!({"type": "input_json_delta", "partial_json": "{}"})),
        ]
    );
    // Every block is closed once, in order, before the message ends.
    let stops: Vec<u64> = events
        .iter()
        .filter(|(n, _)| n == "content_block_stop")
        .map(|(_, e)| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(stops, [0, 1, 2, 3]);
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[test]
fn finish_reasons_map_to_stop_reasons() {
    let table = [
        (json!({"finish_reason": "stop"}), "end_turn", json!(null)),
        (
            json!({"finish_reason": "length"}),
            "max_tokens",
            json!(null),
        ),
        (
            json!({"finish_reason": "tool_calls"}),
            "tool_use",
            json!(null),
        ),
        (
            json!({"finish_reason": "stop", "stop_reason": "###"}),
            "stop_sequence",
            json!("###"),
        ),
    ];
    for (choice, stop_reason, stop_sequence) in table {
        let mut last = json!({"index": 0, "delta": {}});
        for (k, v) in choice.as_object().unwrap() {
            last[k] = v.clone();
        }
        let finishing = json!({"id": "x", "choices": [last]})
            .to_string()
            .into_bytes();
        let (_, events) = run(&[
            chunk(json!({"content": "a"}), json!(null)),
            finishing,
            b"[DONE]".to_vec(),
        ]);
        let delta = &events[events.len() - 2].1["delta"];
        assert_eq!(delta["stop_reason"], stop_reason, "{choice}");
        assert_eq!(delta["stop_sequence"], stop_sequence, "{choice}");
    }
}

#[test]
fn each_chunk_is_answered_at_once() {
    let mut stream = MessagesEvents::new();
    let first = parse(&stream.event(&chunk(json!({"content": "a"}), json!(null))));
    assert_eq!(
        names(&first),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta"
        ]
    );
    let second = parse(&stream.event(&chunk(json!({"content": "b"}), json!(null))));
    assert_eq!(names(&second), ["content_block_delta"]);
    assert!(stream.event(b"not json").is_empty(), "garbage is skipped");
}

#[test]
fn a_stream_ended_without_a_finish_is_cut_and_one_with_a_finish_ends_cleanly() {
    let mut cut = MessagesEvents::new();
    cut.event(&chunk(json!({"content": "a"}), json!(null)));
    assert_eq!(
        cut.finish(),
        None,
        "no finish_reason: the caller reports a cut stream"
    );
    let mut done = MessagesEvents::new();
    done.event(&chunk(json!({"content": "a"}), json!("stop")));
    let tail = parse(&done.finish().expect("finished"));
    assert_eq!(names(&tail), ["message_delta", "message_stop"]);
    assert_eq!(
        done.finish(),
        Some(Vec::new()),
        "message_stop is written once"
    );
}

#[test]
fn an_error_chunk_becomes_an_error_event_and_ends_the_stream() {
    let mut stream = MessagesEvents::new();
    stream.event(&chunk(json!({"content": "a"}), json!(null)));
    let events = parse(&stream.event(br#"{"error":{"message":"boom","type":"server_error"}}"#));
    assert_eq!(
        events,
        [(
            "error".into(),
            json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})
        )]
    );
    assert!(stream.is_finished());
    assert!(stream.event(b"[DONE]").is_empty());
}
