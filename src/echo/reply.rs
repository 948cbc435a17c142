//! What an echo route answers, as plain data: a whole body, or a list of SSE events that
//! `echo.rs` writes with a pause before each generated piece. The route families build
//! these without a server, so their shapes are unit-tested directly.

use bytes::Bytes;
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most words echoed back by any route.
pub const MAX_WORDS: usize = 256;

/// One answer of the echo backend.
#[derive(Debug)]
pub enum Reply {
    /// A whole body with its status and media type.
    Body {
        status: u16,
        content_type: &'static str,
        body: Bytes,
    },
    /// A `text/event-stream` answer, written event by event.
    Stream(Vec<Event>),
}

/// One SSE event, with its blank line.
#[derive(Debug)]
pub struct Event {
    pub bytes: Bytes,
    /// Whether the backend "generates" it: the word delay passes before it is sent.
    pub paced: bool,
}

impl Reply {
    pub fn json(value: &Value) -> Reply {
        Reply::json_status(200, value)
    }

    pub fn json_status(status: u16, value: &Value) -> Reply {
        Reply::Body {
            status,
            content_type: "application/json",
            body: Bytes::from(value.to_string()),
        }
    }

    /// OpenAI's error envelope; `param` and `code` are `null` when absent.
    pub fn error(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Reply {
        Reply::json_status(
            status,
            &json!({"error": {
                "message": message, "type": "invalid_request_error", "param": param, "code": code,
            }}),
        )
    }

    /// 400 for a field that is missing or of the wrong type.
    pub fn invalid(param: &str, message: &str) -> Reply {
        Reply::error(400, message, Some(param), Some("invalid_value"))
    }
}

impl Event {
    /// `data: {json}`: the events of chat, completions and transcriptions.
    pub fn data(value: &Value, paced: bool) -> Event {
        Event {
            bytes: Bytes::from(format!("data: {value}\n\n")),
            paced,
        }
    }

    /// `event: {type}` then `data: {json}`: the typed events of the Responses API.
    pub fn typed(value: &Value, paced: bool) -> Event {
        let kind = value["type"].as_str().unwrap_or("message");
        Event {
            bytes: Bytes::from(format!("event: {kind}\ndata: {value}\n\n")),
            paced,
        }
    }

    /// `data: [DONE]`, the end of a chat or completions stream.
    pub fn done() -> Event {
        Event {
            bytes: Bytes::from_static(b"data: [DONE]\n\n"),
            paced: false,
        }
    }
}

/// Seconds since the Unix epoch, for `created` fields.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh ID with OpenAI's prefix for the kind of object (`chatcmpl-`, `resp_`, ...).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// The words of a text that the backend echoes, at most `MAX_WORDS`.
pub fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().take(MAX_WORDS).collect()
}

/// The word at `index` of a stream, with the space that separates it from the one before.
pub fn spaced(index: usize, word: &str) -> String {
    if index == 0 {
        word.to_string()
    } else {
        format!(" {word}")
    }
}

/// The `model` of a request, or `echo` when it has none.
pub fn model(request: &Value) -> String {
    request["model"].as_str().unwrap_or("echo").to_string()
}

/// Whether a JSON request asks to be streamed.
pub fn streamed(request: &Value) -> bool {
    request["stream"].as_bool() == Some(true)
}

/// Whether a streamed chat or completions request asked for the final usage chunk.
pub fn usage_requested(request: &Value) -> bool {
    request["stream_options"]["include_usage"].as_bool() == Some(true)
}

/// The texts of a `prompt` or `input`: a string, strings, or token arrays (their IDs
/// written out, so they echo too). `None` for any other shape.
pub(super) fn texts(value: &serde_json::Value) -> Option<Vec<String>> {
    use serde_json::Value;
    let tokens = |items: &[Value]| -> Option<String> {
        let ids: Option<Vec<String>> = items
            .iter()
            .map(|t| t.as_u64().map(|t| t.to_string()))
            .collect();
        Some(ids?.join(" "))
    };
    match value {
        Value::String(text) => Some(vec![text.clone()]),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            Some(vec![tokens(items)?])
        }
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Some(text.clone()),
                Value::Array(ids) => tokens(ids),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The text of the last `user` message (chat and Messages alike): a string, or the text
/// parts of a content array joined by spaces.
pub(super) fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|message| text_of(&message["content"]))
        .unwrap_or_default()
}

/// A string, or the text blocks of a content array joined by spaces.
pub(super) fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// The JSON of every `data:` line of a streamed reply, and whether it ended with
    /// `data: [DONE]`.
    pub fn stream_data(reply: Reply) -> (Vec<Value>, bool) {
        let Reply::Stream(events) = reply else {
            panic!("a stream: {reply:?}");
        };
        let mut done = false;
        let mut values = Vec::new();
        for event in &events {
            let text = std::str::from_utf8(&event.bytes).unwrap();
            assert!(text.ends_with("\n\n"), "an event ends with a blank line");
            for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
                if data == "[DONE]" {
                    done = true;
                } else {
                    values.push(serde_json::from_str(data).unwrap());
                }
            }
        }
        (values, done)
    }

    /// The status and JSON of a whole-body reply.
    pub fn body_json(reply: Reply) -> (u16, Value) {
        let Reply::Body { status, body, .. } = reply else {
            panic!("a whole body: {reply:?}");
        };
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[test]
    fn errors_use_the_openai_envelope() {
        let (status, body) = body_json(Reply::error(404, "gone", None, Some("x")));
        assert_eq!(status, 404);
        assert_eq!(
            body,
            json!({"error": {"message": "gone", "type": "invalid_request_error", "param": null, "code": "x"}})
        );
    }
}
