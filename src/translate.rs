//! Translation between Anthropic's Messages API and OpenAI's chat completions, for a model
//! whose upstream speaks the other one (DESIGN §5.4): requests both ways (`request.rs`),
//! whole answers and error bodies both ways (`answer.rs`), and streams both ways, one
//! upstream event in, the client's bytes out at once (`to_messages.rs`, `to_chat.rs`).
//!
//! Plain functions over bytes and JSON values: no session, no I/O. What is translated and
//! what is dropped (and why) is the table in docs/routing.md.

mod answer;
mod request;
mod request_turns;
mod stream;
mod to_chat;
mod to_messages;

pub use answer::{
    chat_answer_to_messages, error_to_chat, error_to_messages, messages_answer_to_chat,
    messages_error_type, messages_usage,
};
pub use request::{chat_to_messages, messages_to_chat};
pub use stream::{MessagesUsageReader, StreamTranslation};
pub use to_chat::{ChatChunks, MessagesStreamUsage};
pub use to_messages::MessagesEvents;

use crate::http1::sse::data_values;
use serde_json::Value;

/// A request that cannot be said in the other API: 400 `invalid_parameter`, naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslatable {
    pub param: String,
    pub message: String,
}

impl Untranslatable {
    fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Untranslatable {
            param: param.into(),
            message: message.into(),
        }
    }
}

/// Anthropic's `stop_reason` for an OpenAI `finish_reason`.
pub fn stop_reason_for(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// OpenAI's `finish_reason` for an Anthropic `stop_reason`.
pub fn finish_reason_for(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// One server-sent event, `event:` line and `data:` line, appended to `out`.
fn write_event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    write_json(out, data);
    out.extend_from_slice(b"\n\n");
}

/// One `data:`-only event, as chat completion streams have them, appended to `out`.
fn write_data(out: &mut Vec<u8>, data: &Value) {
    out.extend_from_slice(b"data: ");
    write_json(out, data);
    out.extend_from_slice(b"\n\n");
}

fn write_json(out: &mut Vec<u8>, value: &Value) {
    // Writing a `Value` to a vector cannot fail: its keys are strings.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The data of one whole server-sent event (its `data:` lines joined by line feeds), or
/// `None` for an event with no data (a comment, a retry hint).
pub fn event_data(event: &[u8]) -> Option<Vec<u8>> {
    let mut data: Option<Vec<u8>> = None;
    for value in data_values(event) {
        let value = &event[value];
        match &mut data {
            Some(joined) => {
                joined.push(b'\n');
                joined.extend_from_slice(value);
            }
            None => data = Some(value.to_vec()),
        }
    }
    data
}

/// A non-negative integer member, 0 when absent or of another type.
fn count(value: &Value, name: &str) -> u64 {
    value.get(name).and_then(Value::as_u64).unwrap_or(0)
}

/// A string member, if it is one.
fn text<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value.get(name).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_and_finish_reasons_map_both_ways() {
        let table = [
            ("stop", "end_turn", "stop"),
            ("length", "max_tokens", "length"),
            ("tool_calls", "tool_use", "tool_calls"),
            ("function_call", "tool_use", "tool_calls"),
            ("content_filter", "refusal", "content_filter"),
        ];
        for (finish, stop, back) in table {
            assert_eq!(stop_reason_for(finish), stop, "{finish}");
            assert_eq!(finish_reason_for(stop), back, "{stop}");
        }
        assert_eq!(finish_reason_for("stop_sequence"), "stop");
        assert_eq!(finish_reason_for("pause_turn"), "stop");
    }

    #[test]
    fn event_data_joins_data_lines_with_any_line_ending() {
        let table: [(&[u8], Option<&[u8]>); 5] = [
            (b"data: {\"a\":1}\n\n", Some(b"{\"a\":1}")),
            (b"event: ping\r\ndata: {}\r\n\r\n", Some(b"{}")),
            (b"data:x\rdata: y\r\r", Some(b"x\ny")),
            (b": keep-alive\n\n", None),
            (b"data: [DONE]\n\n", Some(b"[DONE]")),
        ];
        for (event, data) in table {
            assert_eq!(
                event_data(event).as_deref(),
                data,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }
}
