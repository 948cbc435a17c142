use super::*;
use serde_json::json;

fn to_chat(request: Value) -> Value {
    let body = messages_to_chat(request.to_string().as_bytes()).expect("translates");
    serde_json::from_slice(&body).unwrap()
}

fn to_messages(request: Value) -> Value {
    let body = chat_to_messages(request.to_string().as_bytes(), 1024).expect("translates");
    serde_json::from_slice(&body).unwrap()
}

#[test]
fn messages_fields_map_to_chat_fields() {
    // (Messages request members, chat request members expected among the output's)
    let table = [
        (json!({"max_tokens": 50}), json!({"max_tokens": 50})),
        (
            json!({"temperature": 0.5, "top_p": 0.9, "top_k": 5}),
            json!({"temperature": 0.5, "top_p": 0.9, "top_k": 5}),
        ),
        (json!({"stop_sequences": ["END"]}), json!({"stop": ["END"]})),
        (
            json!({"metadata": {"user_id": "u-1"}}),
            json!({"user": "u-1"}),
        ),
        (
            json!({"stream": true}),
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
        (
            json!({"tool_choice": {"type": "auto"}}),
            json!({"tool_choice": "auto"}),
        ),
        (
            json!({"tool_choice": {"type": "any"}}),
            json!({"tool_choice": "required"}),
        ),
        (
            json!({"tool_choice": {"type": "none"}}),
            json!({"tool_choice": "none"}),
        ),
        (
            json!({"tool_choice": {"type": "tool", "name": "f"}}),
            json!({"tool_choice": {"type": "function", "function": {"name": "f"}}}),
        ),
        (
            json!({"tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}),
            json!({"tool_choice": "auto", "parallel_tool_calls": false}),
        ),
        (
            json!({"tools": [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}]}),
            json!({"tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]}),
        ),
    ];
    for (given, expected) in table {
        let mut request = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in given.as_object().unwrap() {
            request[k] = v.clone();
        }
        let chat = to_chat(request);
        for (k, v) in expected.as_object().unwrap() {
            assert_eq!(&chat[k], v, "{k} for {given}");
        }
        assert_eq!(chat["model"], "m");
    }
}

#[test]
fn messages_content_maps_to_chat_messages() {
    // (system, messages) -> chat messages
    let table = [
        (
            json!("be brief"),
            json!([{"role": "user", "content": "hi"}]),
            json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]),
        ),
        (
            json!([{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}]),
            json!([]),
            json!([{"role": "system", "content": "a\n\nb"}]),
        ),
        (
            json!(null),
            json!([{"role": "user", "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            ]}]),
            json!([{"role": "user", "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ]}]),
        ),
        (
            json!(null),
            json!([
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "no"}], "is_error": true},
                    {"type": "text", "text": "and?"},
                ]},
            ]),
            json!([
                {"role": "assistant", "content": "let me look", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}},
                ]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "42"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no"},
                {"role": "user", "content": [{"type": "text", "text": "and?"}]},
            ]),
        ),
        (
            json!(null),
            json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
            json!([{"role": "assistant", "content": null, "tool_calls": [
                {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ]}]),
        ),
    ];
    for (system, messages, expected) in table {
        let mut request = json!({"model": "m", "max_tokens": 10, "messages": messages});
        if !system.is_null() {
            request["system"] = system;
        }
        assert_eq!(to_chat(request.clone())["messages"], expected, "{request}");
    }
}

#[test]
fn what_chat_completions_cannot_say_is_refused_naming_it() {
    let table = [
        (
            json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tools[0].type",
        ),
        (
            json!({"messages": [], "tool_choice": {"type": "sometimes"}}),
            "tool_choice.type",
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (json!({"messages": "hi"}), "messages"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]}),
            "messages[0].content[0].source",
        ),
    ];
    for (request, param) in table {
        let refused = messages_to_chat(request.to_string().as_bytes()).unwrap_err();
        assert_eq!(refused.param, param, "{request}");
        assert!(!refused.message.is_empty());
    }
}

#[test]
fn chat_fields_map_to_messages_fields() {
    let table = [
        (json!({}), json!({"max_tokens": 1024})),
        (json!({"max_tokens": 7}), json!({"max_tokens": 7})),
        (
            json!({"max_completion_tokens": 9, "max_tokens": 9}),
            json!({"max_tokens": 9}),
        ),
        (json!({"stop": "END"}), json!({"stop_sequences": ["END"]})),
        (
            json!({"stop": ["a", "b"]}),
            json!({"stop_sequences": ["a", "b"]}),
        ),
        (json!({"user": "u"}), json!({"metadata": {"user_id": "u"}})),
        (
            json!({"temperature": 0.2, "top_p": 0.5}),
            json!({"temperature": 0.2, "top_p": 0.5}),
        ),
        (
            json!({"stream": true, "stream_options": {"include_usage": true}}),
            json!({"stream": true, "stream_options": null}),
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "required"}),
            json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}}),
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            json!({"tool_choice": {"type": "tool", "name": "f"}}),
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}], "parallel_tool_calls": false}),
            json!({"tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}),
        ),
        (
            json!({"tool_choice": "none"}),
            json!({"tool_choice": {"type": "none"}}),
        ),
    ];
    for (given, expected) in table {
        let mut request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in given.as_object().unwrap() {
            request[k] = v.clone();
        }
        let out = to_messages(request);
        for (k, v) in expected.as_object().unwrap() {
            assert_eq!(out.get(k).unwrap_or(&Value::Null), v, "{k} for {given}");
        }
    }
}

#[test]
fn chat_messages_map_to_turns() {
    let messages = json!([
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "and kind"}]},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
        ]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "tool", "tool_call_id": "call_2", "content": "43"},
        {"role": "user", "content": "thanks"},
    ]);
    let out = to_messages(json!({"model": "m", "messages": messages}));
    assert_eq!(out["system"], "be brief\n\nand kind");
    assert_eq!(
        out["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "get", "input": {"q": 1}},
                {"type": "tool_use", "id": "call_2", "name": "get", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "42"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "43"},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
}

#[test]
fn what_messages_cannot_say_is_refused_naming_it() {
    let table = [
        (json!({"n": 2, "messages": []}), "n"),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}]}),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
            "messages[0].content[0].type",
        ),
    ];
    for (request, param) in table {
        let refused = chat_to_messages(request.to_string().as_bytes(), 1).unwrap_err();
        assert_eq!(refused.param, param, "{request}");
    }
}
