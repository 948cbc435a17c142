//! Whole answers: a chat completion as a Messages answer and back, an upstream's error
//! body in the client's API's envelope, and usage in Anthropic's shape.

use super::{count, finish_reason_for, stop_reason_for, text};
use crate::usage::Usage;
use serde_json::{json, Map, Value};

/// A chat completion answer as a Messages answer. `None` for a body that is not one.
pub fn chat_answer_to_messages(body: &[u8]) -> Option<Vec<u8>> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let choice = answer.get("choices")?.as_array()?.first()?;
    let message = choice.get("message")?;
    let mut content = Vec::new();
    if let Some(thinking) = reasoning_of(message).filter(|t| !t.is_empty()) {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    if let Some(said) = text(message, "content").filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": said}));
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        content.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": function.get("name").cloned().unwrap_or(Value::Null),
            "input": tool_input(text(function, "arguments").unwrap_or("{}")),
        }));
    }
    let (stop_reason, stop_sequence) = stop_of(choice);
    let usage = answer
        .get("usage")
        .map_or(json!({"input_tokens": 0, "output_tokens": 0}), |u| {
            messages_usage_of_chat(u)
        });
    let out = json!({
        "id": messages_id(text(&answer, "id").unwrap_or_default()),
        "type": "message",
        "role": "assistant",
        "model": answer.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    });
    serde_json::to_vec(&out).ok()
}

/// The reasoning an OpenAI-compatible server returns beside the answer (`reasoning_content`
/// from vLLM, SGLang, llama.cpp and DeepSeek; `reasoning` from some others).
pub(super) fn reasoning_of(message: &Value) -> Option<&str> {
    text(message, "reasoning_content").or_else(|| text(message, "reasoning"))
}

/// A tool call's arguments as an input object; text that is not JSON is kept as a string
/// under `arguments` rather than lost.
pub(super) fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({"arguments": arguments}),
    }
}

/// A choice's `stop_reason` and `stop_sequence`. vLLM names the stop string that ended an
/// answer in the choice's own `stop_reason`.
pub(super) fn stop_of(choice: &Value) -> (Value, Value) {
    let finish = text(choice, "finish_reason").unwrap_or("stop");
    match choice.get("stop_reason") {
        Some(Value::String(matched)) if finish == "stop" => {
            (json!("stop_sequence"), Value::String(matched.clone()))
        }
        _ => (json!(stop_reason_for(finish)), Value::Null),
    }
}

/// An answer ID in Anthropic's style.
pub(super) fn messages_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_owned()
    } else {
        format!("msg_{}", id.strip_prefix("chatcmpl-").unwrap_or(id))
    }
}

/// An OpenAI `usage` in Anthropic's shape: cached prompt tokens are cache reads, which
/// Anthropic does not count in `input_tokens`.
pub(super) fn messages_usage_of_chat(usage: &Value) -> Value {
    let prompt = count(usage, "prompt_tokens");
    let cached = usage
        .get("prompt_tokens_details")
        .map_or(0, |d| count(d, "cached_tokens"));
    let mut out = json!({
        "input_tokens": prompt.saturating_sub(cached),
        "output_tokens": count(usage, "completion_tokens"),
    });
    if cached > 0 {
        out["cache_read_input_tokens"] = json!(cached);
    }
    out
}

/// A Messages `usage` (an answer's, or a stream's `message_start` and `message_delta`
/// ones merged) as the gateway counts it: every input token, cached or not, is input.
pub fn messages_usage(usage: &Value) -> Option<Usage> {
    let input = usage.get("input_tokens")?.as_u64()?;
    let output = count(usage, "output_tokens");
    let created = count(usage, "cache_creation_input_tokens");
    let read = usage.get("cache_read_input_tokens").and_then(Value::as_u64);
    Some(Usage {
        input: input
            .saturating_add(created)
            .saturating_add(read.unwrap_or(0)),
        output,
        cached: read,
        reasoning: None,
    })
}

/// An OpenAI `usage` object for an Anthropic one.
pub(super) fn chat_usage_of_messages(usage: &Usage) -> Value {
    let mut out = json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input.saturating_add(usage.output),
    });
    if let Some(cached) = usage.cached {
        out["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    out
}

/// A Messages answer as a chat completion answer; `created` is the time it is made, in
/// Unix seconds. `None` for a body that is not one.
pub fn messages_answer_to_chat(body: &[u8], created: u64) -> Option<Vec<u8>> {
    let answer: Value = serde_json::from_slice(body).ok()?;
    let blocks = answer.get("content")?.as_array()?;
    let mut said = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match text(block, "type") {
            Some("text") => said.push_str(text(block, "text").unwrap_or_default()),
            Some("thinking") => thinking.push_str(text(block, "thinking").unwrap_or_default()),
            Some("tool_use") => calls.push(json!({
                "id": block.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": block.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                },
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if said.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(said)
    };
    message.insert("content".into(), content);
    if !thinking.is_empty() {
        message.insert("reasoning_content".into(), Value::String(thinking));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let finish = finish_reason_for(text(&answer, "stop_reason").unwrap_or("end_turn"));
    let mut out = json!({
        "id": answer.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": created,
        "model": answer.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
    });
    if let Some(usage) = answer.get("usage").and_then(messages_usage) {
        out["usage"] = chat_usage_of_messages(&usage);
    }
    serde_json::to_vec(&out).ok()
}

/// An OpenAI-shaped upstream error body in Anthropic's envelope, its message kept; a body
/// that is not one keeps its text as the message.
pub fn error_to_messages(body: &[u8], status: u16) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| text(e, "message").or(e.as_str()))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(512).collect());
    let out = json!({
        "type": "error",
        "error": {"type": messages_error_type(status), "message": message},
    });
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Anthropic's error `type` for an HTTP status.
pub fn messages_error_type(status: u16) -> &'static str {
    match status {
        400 | 413 | 415 | 422 | 431 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An Anthropic-shaped upstream error body in OpenAI's envelope, its message and type kept.
pub fn error_to_chat(body: &[u8]) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| text(e, "message"))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(512).collect());
    let kind = error.and_then(|e| text(e, "type")).unwrap_or("api_error");
    let out = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    serde_json::to_vec(&out).unwrap_or_default()
}

#[cfg(test)]
#[path = "answer/tests.rs"]
mod tests;
