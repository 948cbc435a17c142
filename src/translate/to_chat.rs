//! [`ChatChunks`]: an Anthropic event stream turned into chat completion chunks as it
//! flows, one upstream event in, the client's chunks out at once.
//!
//! `message_start` gives the first chunk (the role); text, thinking and tool input deltas
//! become `content`, `reasoning_content` and `tool_calls` deltas; `message_delta` the
//! chunk with `finish_reason`; `message_stop` the usage chunk when the client asked for
//! it (`stream_options.include_usage`), then `data: [DONE]`.

use super::answer::chat_usage_of_messages;
use super::{finish_reason_for, messages_usage, text, write_data};
use crate::usage::Usage;
use serde_json::{json, Map, Value};

/// Where a translated stream is.
#[derive(Debug, Default)]
pub struct ChatChunks {
    include_usage: bool,
    created: u64,
    id: Value,
    model: Value,
    /// The usage reported so far.
    usage: MessagesStreamUsage,
    /// Per content block index, the tool call index it is (tool calls counted from 0).
    tools: Vec<(u64, u64)>,
    finished: bool,
}

impl ChatChunks {
    /// `include_usage`: the client asked for the usage chunk; `created`: Unix seconds.
    pub fn new(include_usage: bool, created: u64) -> Self {
        ChatChunks {
            include_usage,
            created,
            ..Self::default()
        }
    }

    /// The chunks for one upstream event's data.
    pub fn event(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return out;
        };
        self.usage.observe(&event);
        match text(&event, "type").unwrap_or_default() {
            "message_start" => {
                let message = event.get("message").unwrap_or(&Value::Null);
                self.id = message.get("id").cloned().unwrap_or(Value::Null);
                self.model = message.get("model").cloned().unwrap_or(Value::Null);
                self.chunk(json!({"role": "assistant", "content": ""}), None, &mut out);
            }
            "content_block_start" => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                match text(block, "type") {
                    Some("tool_use") => {
                        let call = self.tools.len() as u64;
                        self.tools.push((index, call));
                        let delta = json!({"tool_calls": [{
                            "index": call,
                            "id": block.get("id").cloned().unwrap_or(Value::Null),
                            "type": "function",
                            "function": {"name": block.get("name").cloned().unwrap_or(Value::Null), "arguments": ""},
                        }]});
                        self.chunk(delta, None, &mut out);
                    }
                    Some("text") => {
                        if let Some(said) = text(block, "text").filter(|t| !t.is_empty()) {
                            self.chunk(json!({"content": said}), None, &mut out);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                match text(delta, "type") {
                    Some("text_delta") => {
                        let said = delta.get("text").cloned().unwrap_or(json!(""));
                        self.chunk(json!({"content": said}), None, &mut out);
                    }
                    Some("thinking_delta") => {
                        let thought = delta.get("thinking").cloned().unwrap_or(json!(""));
                        self.chunk(json!({"reasoning_content": thought}), None, &mut out);
                    }
                    Some("input_json_delta") => {
                        let call = self.tools.iter().find(|(block, _)| *block == index);
                        if let Some(&(_, call)) = call {
                            let partial = delta.get("partial_json").cloned().unwrap_or(json!(""));
                            let delta = json!({"tool_calls": [{"index": call, "function": {"arguments": partial}}]});
                            self.chunk(delta, None, &mut out);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                let stop = event
                    .get("delta")
                    .and_then(|d| text(d, "stop_reason"))
                    .unwrap_or("end_turn");
                self.chunk(json!({}), Some(finish_reason_for(stop)), &mut out);
            }
            "message_stop" => {
                self.finished = true;
                if self.include_usage {
                    let usage = self
                        .usage()
                        .map_or(Value::Null, |u| chat_usage_of_messages(&u));
                    let chunk = json!({
                        "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                        "model": self.model, "choices": [], "usage": usage,
                    });
                    write_data(&mut out, &chunk);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            "error" => {
                self.finished = true;
                let error = event.get("error").unwrap_or(&Value::Null);
                let body = json!({"error": {
                    "message": text(error, "message").unwrap_or("The model's backend failed."),
                    "type": text(error, "type").unwrap_or("api_error"),
                    "param": null,
                    "code": null,
                }});
                write_data(&mut out, &body);
            }
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        out
    }

    /// Whether the stream has ended (`message_stop` or an error event).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The usage the upstream reported, as the gateway counts it.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }

    fn chunk(&self, delta: Value, finish: Option<&str>, out: &mut Vec<u8>) {
        let chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        });
        write_data(out, &chunk);
    }
}

/// The usage of a Messages stream, read event by event: `message_start`'s counts, updated
/// by `message_delta`'s (cumulative; a `null` count is left out).
#[derive(Debug, Default)]
pub struct MessagesStreamUsage {
    usage: Map<String, Value>,
}

impl MessagesStreamUsage {
    /// Reads one event's data.
    pub fn event(&mut self, data: &[u8]) {
        if let Ok(event) = serde_json::from_slice::<Value>(data) {
            self.observe(&event);
        }
    }

    fn observe(&mut self, event: &Value) {
        let usage = match text(event, "type") {
            Some("message_start") => event.get("message").and_then(|m| m.get("usage")),
            Some("message_delta") => event.get("usage"),
            _ => None,
        };
        if let Some(Value::Object(usage)) = usage {
            for (name, value) in usage {
                if value.is_u64() {
                    self.usage.insert(name.clone(), value.clone());
                }
            }
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        messages_usage(&Value::Object(self.usage.clone()))
    }
}

#[cfg(test)]
#[path = "to_chat/tests.rs"]
mod tests;
