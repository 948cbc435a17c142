//! The built-in echo backend: a small OpenAI-compatible server on loopback that answers
//! every chat completion with the last user message, as JSON or as an SSE stream. The
//! shipped `gateway.yaml` starts it so a newcomer can call the real proxy path with no
//! inference backend installed; the benchmarks use it as their upstream.

use crate::http_app::{finish, write_simple};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::{HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest request body the echo backend reads.
const MAX_BODY_BYTES: usize = 16 << 20;
/// Most words echoed back.
const MAX_WORDS: usize = 256;

pub struct Echo {
    /// Pause between streamed words, to look like token generation.
    pub word_delay: Duration,
}

#[async_trait]
impl HttpServerApp for Echo {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        _shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !session.read_request().await.ok()? {
            return None;
        }
        let (method, path) = (
            session.req_header().method.to_string(),
            session.req_header().uri.path().to_string(),
        );
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_request_body().await.ok()? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        match (method.as_str(), path.as_str()) {
            ("POST", "/v1/chat/completions") => self.complete(&mut session, &body).await?,
            ("GET", "/v1/models") => {
                let list = json!({"object": "list", "data": [{"id": "echo", "object": "model", "created": 0, "owned_by": "sluice"}]});
                write_simple(
                    &mut session,
                    200,
                    "application/json",
                    Bytes::from(list.to_string()),
                )
                .await?
            }
            _ => {
                write_simple(
                    &mut session,
                    404,
                    "application/json",
                    error_body("no such route on the echo backend"),
                )
                .await?
            }
        }
        finish(session).await
    }
}

impl Echo {
    async fn complete(&self, session: &mut ServerSession, body: &[u8]) -> Option<()> {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return write_simple(
                session,
                400,
                "application/json",
                error_body("the body is not JSON"),
            )
            .await;
        };
        let model = request["model"].as_str().unwrap_or("echo").to_string();
        let prompt = last_user_text(&request);
        let words: Vec<&str> = prompt.split_whitespace().take(MAX_WORDS).collect();
        let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let prompt_tokens = prompt.split_whitespace().count();
        if request["stream"].as_bool() != Some(true) {
            let answer = json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": words.join(" ")}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": words.len(), "total_tokens": prompt_tokens + words.len()},
            });
            return write_simple(
                session,
                200,
                "application/json",
                Bytes::from(answer.to_string()),
            )
            .await;
        }
        let mut header = ResponseHeader::build(200, Some(3)).ok()?;
        header
            .insert_header("content-type", "text/event-stream")
            .ok()?;
        header.insert_header("cache-control", "no-cache").ok()?;
        header.insert_header("transfer-encoding", "chunked").ok()?;
        session.write_response_header(Box::new(header)).await.ok()?;
        let chunk = |delta: Value, finish: Value| {
            let event = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            });
            Bytes::from(format!("data: {event}\n\n"))
        };
        session
            .write_response_body(
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                false,
            )
            .await
            .ok()?;
        for (i, word) in words.iter().enumerate() {
            // A client that leaves while we wait ends the stream at once, instead of holding
            // the task and its socket for the whole delay.
            tokio::select! {
                _ = tokio::time::sleep(self.word_delay) => {}
                _ = session.read_body_or_idle(true) => return None,
            }
            let text = if i == 0 {
                word.to_string()
            } else {
                format!(" {word}")
            };
            session
                .write_response_body(chunk(json!({"content": text}), Value::Null), false)
                .await
                .ok()?;
        }
        session
            .write_response_body(chunk(json!({}), json!("stop")), false)
            .await
            .ok()?;
        session
            .write_response_body(Bytes::from_static(b"data: [DONE]\n\n"), true)
            .await
            .ok()
    }
}

/// The text of the last `user` message: a string, or the text parts of a content array.
fn last_user_text(request: &Value) -> String {
    let Some(messages) = request["messages"].as_array() else {
        return String::new();
    };
    let Some(message) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn error_body(message: &str) -> Bytes {
    Bytes::from(json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_message_is_echoed() {
        let request = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]},
        ]});
        assert_eq!(last_user_text(&request), "hello there");
        assert_eq!(last_user_text(&json!({})), "");
    }
}
