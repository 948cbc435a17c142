use super::*;
use serde_json::json;

fn as_messages(answer: Value) -> Value {
    serde_json::from_slice(&chat_answer_to_messages(answer.to_string().as_bytes()).unwrap())
        .unwrap()
}

fn as_chat(answer: Value) -> Value {
    serde_json::from_slice(&messages_answer_to_chat(answer.to_string().as_bytes(), 7).unwrap())
        .unwrap()
}

#[test]
fn a_chat_answer_becomes_a_messages_answer() {
    // (choice, expected content, stop_reason, stop_sequence)
    let table = [
        (
            json!({"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}),
            json!([{"type": "text", "text": "hi"}]),
            "end_turn",
            json!(null),
        ),
        (
            json!({"message": {"content": "hi", "reasoning_content": "think"}, "finish_reason": "length"}),
            json!([{"type": "thinking", "thinking": "think", "signature": ""}, {"type": "text", "text": "hi"}]),
            "max_tokens",
            json!(null),
        ),
        (
            json!({"message": {"content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
            ]}, "finish_reason": "tool_calls"}),
            json!([
                {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "call_2", "name": "g", "input": {"arguments": "not json"}},
            ]),
            "tool_use",
            json!(null),
        ),
        (
            json!({"message": {"content": "x"}, "finish_reason": "stop", "stop_reason": "END"}),
            json!([{"type": "text", "text": "x"}]),
            "stop_sequence",
            json!("END"),
        ),
        (
            json!({"message": {"content": "x"}, "finish_reason": "stop", "stop_reason": 128001}),
            json!([{"type": "text", "text": "x"}]),
            "end_turn",
            json!(null),
        ),
    ];
    for (choice, content, stop_reason, stop_sequence) in table {
        let answer = json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "model": "up", "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}},
        });
        let out = as_messages(answer);
        assert_eq!(out["content"], content, "{choice}");
        assert_eq!(out["stop_reason"], stop_reason, "{choice}");
        assert_eq!(out["stop_sequence"], stop_sequence, "{choice}");
        assert_eq!(out["id"], "msg_abc");
        assert_eq!(out["type"], "message");
        assert_eq!(out["role"], "assistant");
        assert_eq!(
            out["usage"],
            json!({"input_tokens": 6, "output_tokens": 3, "cache_read_input_tokens": 4})
        );
    }
    assert!(chat_answer_to_messages(b"{\"choices\":[]}").is_none());
}

#[test]
fn a_messages_answer_becomes_a_chat_answer() {
    // (content, stop_reason, expected message, finish_reason)
    let table = [
        (
            json!([{"type": "text", "text": "hi"}]),
            "end_turn",
            json!({"role": "assistant", "content": "hi"}),
            "stop",
        ),
        (
            json!([{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            "max_tokens",
            json!({"role": "assistant", "content": "ab", "reasoning_content": "t"}),
            "length",
        ),
        (
            json!([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]),
            "tool_use",
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            ]}),
            "tool_calls",
        ),
        (
            json!([]),
            "stop_sequence",
            json!({"role": "assistant", "content": ""}),
            "stop",
        ),
        (
            json!([]),
            "refusal",
            json!({"role": "assistant", "content": ""}),
            "content_filter",
        ),
    ];
    for (content, stop_reason, message, finish) in table {
        let answer = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": content,
            "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 5, "output_tokens": 2, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 1},
        });
        let out = as_chat(answer);
        assert_eq!(out["choices"][0]["message"], message, "{content}");
        assert_eq!(out["choices"][0]["finish_reason"], finish, "{stop_reason}");
        assert_eq!(out["object"], "chat.completion");
        assert_eq!(out["created"], 7);
        assert_eq!(
            out["usage"],
            json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 1}})
        );
    }
}

#[test]
fn messages_usage_counts_cache_tokens_as_input() {
    let table = [
        (
            json!({"input_tokens": 5, "output_tokens": 2}),
            Some((5, 2, None)),
        ),
        (
            json!({"input_tokens": 5, "output_tokens": 2, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 20}),
            Some((35, 2, Some(20))),
        ),
        (json!({"input_tokens": 5}), Some((5, 0, None))),
        (json!({"output_tokens": 5}), None),
        (json!({"input_tokens": "5"}), None),
    ];
    for (usage, expected) in table {
        let read = messages_usage(&usage).map(|u| (u.input, u.output, u.cached));
        assert_eq!(read, expected, "{usage}");
    }
}

#[test]
fn error_bodies_change_envelope_and_keep_their_message() {
    let table = [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
    ];
    for (status, kind) in table {
        let body = br#"{"error":{"message":"nope","type":"x","param":null,"code":"y"}}"#;
        let out: Value = serde_json::from_slice(&error_to_messages(body, status)).unwrap();
        assert_eq!(
            out,
            json!({"type": "error", "error": {"type": kind, "message": "nope"}}),
            "{status}"
        );
    }
    let plain: Value = serde_json::from_slice(&error_to_messages(b"bad gateway", 502)).unwrap();
    assert_eq!(plain["error"]["message"], "bad gateway");
    let back: Value = serde_json::from_slice(&error_to_chat(
        br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
    ))
    .unwrap();
    assert_eq!(
        back,
        json!({"error": {"message": "busy", "type": "overloaded_error", "param": null, "code": null}})
    );
}
