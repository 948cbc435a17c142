//! The built-in echo backend: a small OpenAI-compatible server on loopback that answers
//! every route the gateway serves with the real OpenAI response shapes, echoing the
//! request's text back (as JSON or as an SSE stream). The shipped `gateway.yaml` starts it
//! so a newcomer can call the real proxy path with no inference backend installed; the
//! benchmarks use it as their upstream.
//!
//! This file reads a request and writes the answer; each family of routes builds its
//! answer as plain data in `echo/`:
//!
//! | route | file |
//! |---|---|
//! | `POST /v1/chat/completions` | `chat.rs` |
//! | `POST /v1/completions` | `completions.rs` |
//! | `POST /v1/embeddings` | `embeddings.rs` |
//! | `POST /v1/responses`, `/v1/responses/input_tokens` | `responses.rs` |
//! | `GET`, `DELETE /v1/responses/{id}`, `POST .../cancel`, `GET .../input_items` | `response_store.rs` |
//! | `POST /v1/rerank` | `rerank.rs` |
//! | `POST /v1/moderations` | `moderation.rs` |
//! | `POST /v1/audio/speech`, `/transcriptions`, `/translations` | `audio.rs` (forms: `multipart.rs`) |
//! | `POST /v1/messages`, `/v1/messages/count_tokens` (Anthropic's shapes) | `messages.rs` |

mod audio;
mod chat;
mod completions;
mod embeddings;
mod messages;
mod moderation;
mod multipart;
mod reply;
mod rerank;
mod response_store;
mod responses;

use crate::listener::write_simple;
use crate::listener::App;
use crate::listener::Session as ServerSession;
use audio::Task;
use bytes::BytesMut;
use pingora_core::server::ShutdownWatch;
use pingora_http::ResponseHeader;
use reply::{Event, Reply};
use response_store::{ResponseStore, STORED_RESPONSES};
use serde_json::{json, Value};
use std::time::Duration;

/// Longest request body the echo backend reads.
const MAX_BODY_BYTES: usize = 16 << 20;

pub struct Echo {
    /// Pause before each streamed word, to look like generation.
    word_delay: Duration,
    /// Responses created here, for the routes that name one by ID.
    responses: ResponseStore,
}

impl Echo {
    pub fn new(word_delay: Duration) -> Self {
        Echo {
            word_delay,
            responses: ResponseStore::new(STORED_RESPONSES),
        }
    }
}

impl App for Echo {
    async fn serve(&self, session: &mut ServerSession, _shutdown: &ShutdownWatch) -> bool {
        self.serve_one(session).await.is_some()
    }
}

impl Echo {
    /// One request; `None` when the connection cannot carry another.
    async fn serve_one(&self, session: &mut ServerSession) -> Option<()> {
        if !session.read_request().await.ok()? {
            return None;
        }
        let header = session.req_header();
        let method = header.method.to_string();
        let path = header.uri.path().to_string();
        let query = header.uri.query().map(str::to_string);
        let content_type = header
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_request_body().await.ok()? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        let request = Request {
            method: &method,
            path: &path,
            query: query.as_deref(),
            content_type: content_type.as_deref(),
            body: &body,
        };
        let reply = self.answer(&request);
        self.write(session, reply).await
    }
}

/// What a route reads of a request.
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    content_type: Option<&'a str>,
    body: &'a [u8],
}

impl Echo {
    fn answer(&self, request: &Request) -> Reply {
        let json = || serde_json::from_slice::<Value>(request.body);
        let with_json = |route: &dyn Fn(&Value) -> Reply| match json() {
            Ok(value) if value.is_object() => route(&value),
            _ => Reply::error(400, "The body is not a JSON object.", None, None),
        };
        let store = &self.responses;
        match (request.method, request.path) {
            ("POST", "/v1/chat/completions") => with_json(&chat::reply),
            ("POST", "/v1/completions") => with_json(&completions::reply),
            ("POST", "/v1/embeddings") => with_json(&embeddings::reply),
            ("POST", "/v1/responses") => with_json(&|r| responses::create(store, r)),
            ("POST", "/v1/responses/input_tokens") => with_json(&responses::input_tokens),
            ("POST", "/v1/rerank") => with_json(&rerank::reply),
            ("POST", "/v1/moderations") => with_json(&moderation::reply),
            ("POST", "/v1/messages") => with_json(&messages::reply),
            ("POST", "/v1/messages/count_tokens") => with_json(&messages::count_tokens),
            ("POST", "/v1/audio/speech") => with_json(&audio::speech),
            ("POST", "/v1/audio/transcriptions") => {
                audio::transcribe(Task::Transcribe, request.content_type, request.body)
            }
            ("POST", "/v1/audio/translations") => {
                audio::transcribe(Task::Translate, request.content_type, request.body)
            }
            ("GET", "/v1/models") => Reply::json(&json!({"object": "list", "data": [
                {"id": "echo", "object": "model", "created": 0, "owned_by": "sluice"},
            ]})),
            (method, path) => match path.strip_prefix("/v1/responses/") {
                Some(rest) => self.stored_response(method, rest, request.query),
                None => not_found(),
            },
        }
    }

    /// The routes under `/v1/responses/{id}`.
    fn stored_response(&self, method: &str, rest: &str, query: Option<&str>) -> Reply {
        let store = &self.responses;
        match (method, rest.split_once('/')) {
            ("GET", None) => response_store::retrieve(store, rest),
            ("DELETE", None) => response_store::delete(store, rest),
            ("POST", Some((id, "cancel"))) => response_store::cancel(store, id),
            ("GET", Some((id, "input_items"))) => response_store::input_items(store, id, query),
            _ => not_found(),
        }
    }

    async fn write(&self, session: &mut ServerSession, reply: Reply) -> Option<()> {
        let events = match reply {
            Reply::Body {
                status,
                content_type,
                body,
            } => return write_simple(session, status, content_type, body).await,
            Reply::Stream(events) => events,
        };
        let mut header = ResponseHeader::build_no_case(200, Some(3)).ok()?;
        header
            .insert_header("content-type", "text/event-stream")
            .ok()?;
        header.insert_header("cache-control", "no-cache").ok()?;
        header.insert_header("transfer-encoding", "chunked").ok()?;
        session.write_response_header(header).await.ok()?;
        let count = events.len();
        for (i, Event { bytes, paced }) in events.into_iter().enumerate() {
            if paced {
                // A client that leaves while we wait ends the stream at once, instead of
                // holding the task and its socket for the whole delay.
                tokio::select! {
                    _ = tokio::time::sleep(self.word_delay) => {}
                    _ = session.client_gone() => return None,
                }
            }
            session
                .write_response_body(bytes, i + 1 == count)
                .await
                .ok()?;
        }
        Some(())
    }
}

fn not_found() -> Reply {
    Reply::error(404, "No such route on the echo backend.", None, None)
}
