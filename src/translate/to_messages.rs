//! [`MessagesEvents`]: a chat completion stream turned into Anthropic's event sequence as
//! it flows, one upstream event in, the client's events out at once.
//!
//! `message_start` and a `ping` come with the first chunk; each run of reasoning, text or
//! one tool call's arguments is a content block (`thinking_delta`, `text_delta`,
//! `input_json_delta`), closed when another starts; the `finish_reason` waits for the
//! usage chunk (the request asks for it) and `[DONE]`, then `message_delta` with the stop
//! reason and usage, and `message_stop`.

use super::answer::{messages_id, messages_usage_of_chat, reasoning_of, stop_of};
use super::{messages_usage, text, write_event};
use crate::usage::Usage;
use serde_json::{json, Value};

/// The content block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    /// A tool call, by its `index` among the chunk's `tool_calls`.
    Tool(u64),
}

/// Where a translated stream is.
#[derive(Debug, Default)]
pub struct MessagesEvents {
    started: bool,
    /// The open content block and its index.
    open: Option<(Block, u64)>,
    next_index: u64,
    /// `stop_reason` and `stop_sequence`, once the upstream has finished.
    stop: Option<(Value, Value)>,
    /// The upstream's usage in Anthropic's shape, once sent.
    usage: Option<Value>,
    finished: bool,
}

impl MessagesEvents {
    pub fn new() -> Self {
        Self::default()
    }

    /// The events for one upstream event's data (a chunk, or `[DONE]`).
    pub fn event(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if data.trim_ascii() == b"[DONE]" {
            self.finish_into(&mut out);
            return out;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            return out;
        };
        if let Some(error) = chunk.get("error") {
            let message = text(error, "message").unwrap_or("The model's backend failed.");
            let body = json!({"type": "error", "error": {"type": "api_error", "message": message}});
            write_event(&mut out, "error", &body);
            self.finished = true;
            return out;
        }
        if !self.started {
            self.start(&chunk, &mut out);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(messages_usage_of_chat(usage));
        }
        let choice = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let Some(choice) = choice else {
            return out;
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(thinking) = reasoning_of(delta).filter(|t| !t.is_empty()) {
            self.open_block(Block::Thinking, delta, &mut out);
            self.delta(
                json!({"type": "thinking_delta", "thinking": thinking}),
                &mut out,
            );
        }
        if let Some(said) = text(delta, "content").filter(|t| !t.is_empty()) {
            self.open_block(Block::Text, delta, &mut out);
            self.delta(json!({"type": "text_delta", "text": said}), &mut out);
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            self.open_block(Block::Tool(index), call, &mut out);
            let arguments = call.get("function").and_then(|f| text(f, "arguments"));
            if let Some(partial) = arguments.filter(|a| !a.is_empty()) {
                let delta = json!({"type": "input_json_delta", "partial_json": partial});
                self.delta(delta, &mut out);
            }
        }
        if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
            self.close_block(&mut out);
            self.stop = Some(stop_of(choice));
        }
        out
    }

    /// The events that end the stream when the upstream's ended, or `None` when it ended
    /// without finishing its answer (a cut stream: the caller ends it with an error).
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if self.finished {
            return Some(Vec::new());
        }
        self.stop.as_ref()?;
        let mut out = Vec::new();
        self.finish_into(&mut out);
        Some(out)
    }

    /// Whether `message_stop` (or an error event) has been written.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The usage the upstream reported, as the gateway counts it.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.as_ref().and_then(messages_usage)
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        self.started = true;
        let message = json!({
            "id": messages_id(text(chunk, "id").unwrap_or_default()),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model").cloned().unwrap_or(Value::Null),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        write_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
        write_event(out, "ping", &json!({"type": "ping"}));
    }

    /// Opens `block` unless it is the open one, closing that first.
    fn open_block(&mut self, block: Block, source: &Value, out: &mut Vec<u8>) {
        if self.open.map(|(open, _)| open) == Some(block) {
            return;
        }
        self.close_block(out);
        let content = match block {
            Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::Text => json!({"type": "text", "text": ""}),
            Block::Tool(index) => {
                let id = match text(source, "id") {
                    Some(id) => id.to_owned(),
                    None => format!("toolu_{index}"),
                };
                let name = source.get("function").and_then(|f| f.get("name"));
                json!({"type": "tool_use", "id": id, "name": name.cloned().unwrap_or(json!("")), "input": {}})
            }
        };
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((block, index));
        let start =
            json!({"type": "content_block_start", "index": index, "content_block": content});
        write_event(out, "content_block_start", &start);
    }

    fn delta(&mut self, delta: Value, out: &mut Vec<u8>) {
        let Some((_, index)) = self.open else {
            return;
        };
        let event = json!({"type": "content_block_delta", "index": index, "delta": delta});
        write_event(out, "content_block_delta", &event);
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            let stop = json!({"type": "content_block_stop", "index": index});
            write_event(out, "content_block_stop", &stop);
        }
    }

    /// `message_delta` and `message_stop`, once.
    fn finish_into(&mut self, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if !self.started {
            self.start(&Value::Null, out);
        }
        self.close_block(out);
        let (stop_reason, stop_sequence) = self
            .stop
            .clone()
            .unwrap_or((json!("end_turn"), Value::Null));
        let usage = self
            .usage
            .clone()
            .unwrap_or(json!({"input_tokens": 0, "output_tokens": 0}));
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        });
        write_event(out, "message_delta", &delta);
        write_event(out, "message_stop", &json!({"type": "message_stop"}));
    }
}

#[cfg(test)]
#[path = "to_messages/tests.rs"]
mod tests;
