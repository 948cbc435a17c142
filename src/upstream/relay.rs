//! Relaying an upstream's answer body to the client as it arrives: the idle and total
//! deadlines, the client leaving, an event stream cut inside an event, the SSE error event
//! that ends a cut stream, and what the gateway does to an answer as it passes (keeping an
//! error answer's first bytes for the log, reading the usage, rewriting stored-response IDs
//! or taking out a usage the client did not ask for, event by event).

use super::error_record::KEPT_BODY_BYTES;
use super::exchange::{bounded, Call, Exchange};
use super::http1::Http1;
use super::verdict::{AfterCut, Outcome, Reached};
use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::http1::server::Session;
use crate::respond::stream_error_event_in;
use crate::response_id::IdRewrite;
use crate::translate::{MessagesUsageReader, StreamTranslation};
use crate::usage::{strip_event, EventUsage, JsonScan, Stripped, Usage};
use bytes::Bytes;
use pingora::Error;
use std::time::Instant;

/// Largest JSON answer read whole to rewrite its IDs.
const MAX_REWRITTEN_BYTES: usize = 64 << 20;

/// What happens to an answer's bytes on their way to the client.
pub(super) struct Passing {
    /// An error answer's first bytes, for the error record.
    pub kept: Option<Vec<u8>>,
    /// A successful answer's usage, read as it passes.
    pub reading: Option<Reading>,
    /// What is done to each whole event of a stream.
    pub edit: Option<Edit>,
    /// Bytes of an event not yet whole (when editing).
    pub pending: Vec<u8>,
    /// A successful answer's first bytes, for the model it names (traces only).
    pub head: Option<Vec<u8>>,
}

/// A change made to every event of a stream.
pub(super) enum Edit {
    /// Stored-response IDs to rewrite (a JSON answer is rewritten whole instead).
    Rewrite(IdRewrite),
    /// Take out the usage the gateway asked for and the client did not.
    StripUsage,
    /// The stream is in the other API than the client's: each event is translated.
    Translate(Box<StreamTranslation>),
}

/// Reading the usage of an answer: a JSON document, or an event stream (an Anthropic
/// stream's usage is spread over `message_start` and `message_delta`).
pub(super) enum Reading {
    Json(JsonScan),
    Events(EventUsage),
    MessagesEvents(MessagesUsageReader),
}

impl Reading {
    /// `messages_api`: the upstream speaks Anthropic's Messages API.
    pub fn for_answer(event_stream: bool, messages_api: bool) -> Reading {
        match (event_stream, messages_api) {
            (true, true) => Reading::MessagesEvents(MessagesUsageReader::default()),
            (true, false) => Reading::Events(EventUsage::default()),
            (false, _) => Reading::Json(JsonScan::copying()),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        match self {
            Reading::Json(scan) => scan.feed(bytes),
            Reading::Events(events) => events.feed(bytes),
            Reading::MessagesEvents(events) => events.feed(bytes),
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        match self {
            Reading::Json(scan) => scan.usage(),
            Reading::Events(events) => events.last(),
            Reading::MessagesEvents(events) => events.usage(),
        }
    }
}

impl Passing {
    /// The bytes to send for a chunk read, if any yet: whole edited events when events are
    /// edited, the chunk itself otherwise.
    fn pass(&mut self, chunk: Bytes) -> Option<Bytes> {
        if chunk.is_empty() {
            return None;
        }
        if let Some(kept) = &mut self.kept {
            let room = KEPT_BODY_BYTES.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        if let Some(reading) = &mut self.reading {
            reading.feed(&chunk);
        }
        if let Some(head) = &mut self.head {
            let room = HEAD_BYTES.saturating_sub(head.len());
            head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        let Some(edit) = &mut self.edit else {
            return Some(chunk);
        };
        self.pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end).collect();
            match edit {
                Edit::Rewrite(rewrite) => out.extend_from_slice(&rewrite.event(&event)),
                Edit::StripUsage => match strip_event(&event) {
                    Stripped::Unchanged => out.extend_from_slice(&event),
                    Stripped::Edited(edited) => out.extend_from_slice(&edited),
                    Stripped::Dropped => {}
                },
                Edit::Translate(translation) => out.extend_from_slice(&translation.event(&event)),
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

/// How much of a successful answer is kept to find the model it names: OpenAI-shaped
/// answers (and a stream's first chunk) name it before their content.
pub(super) const HEAD_BYTES: usize = 1024;

/// The first `"model": "..."` string in an answer's first bytes: the model that answered
/// (`gen_ai.response.model`). A value with escapes is taken as written.
pub(super) fn model_named(head: &[u8]) -> Option<String> {
    let at = memchr::memmem::find(head, b"\"model\"")? + b"\"model\"".len();
    let rest = &head[at..];
    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = rest.get(colon..)?.strip_prefix(b":")?;
    let quote = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = rest.get(quote..)?.strip_prefix(b"\"")?;
    let mut end = 0;
    while end < rest.len() && rest[end] != b'"' {
        end += if rest[end] == b'\\' { 2 } else { 1 };
    }
    if end >= rest.len() {
        return None;
    }
    let name = std::str::from_utf8(rest.get(..end)?).ok()?;
    (!name.is_empty()).then(|| name.to_owned())
}

/// Where the first whole SSE event of `bytes` ends (after its blank line).
fn event_end(bytes: &[u8]) -> Option<usize> {
    let find = |needle: &[u8]| memchr::memmem::find(bytes, needle).map(|at| at + needle.len());
    [find(b"\n\n"), find(b"\r\n\r\n")]
        .into_iter()
        .flatten()
        .min()
}

/// Reads a whole answer body before anything of it goes out (to rewrite it), within the
/// idle and total deadlines and a size bound. Nothing reached the client yet, so a failure
/// is an ordinary error answer.
pub(super) async fn read_whole(
    session: &mut Session,
    connection: &mut Http1,
    upstream: &Upstream,
    deadline: Option<Instant>,
    measured: &mut Exchange,
) -> Result<Vec<u8>, Outcome> {
    let failed = |error| Outcome::Failed {
        error,
        reached: Reached::Maybe,
    };
    let mut body = Vec::new();
    loop {
        match next_chunk(session, connection, upstream, deadline, measured).await? {
            Next::Chunk(chunk) => body.extend_from_slice(&chunk),
            Next::End => return Ok(body),
            Next::Failed(_) => return Err(failed(RequestError::UpstreamClosed)),
            Next::Stalled => return Err(failed(RequestError::UpstreamTimeout)),
        }
        if body.len() > MAX_REWRITTEN_BYTES {
            connection.shutdown().await;
            return Err(failed(RequestError::UpstreamProtocolError));
        }
    }
}

/// What the next read of an answer body gave.
enum Next {
    Chunk(Bytes),
    End,
    Failed(Box<Error>),
    /// Nothing within `idle_timeout`, or past the total deadline.
    Stalled,
}

/// The next chunk of the answer, within the idle gap and the total deadline, while
/// watching the client: if it leaves, the upstream connection is shut so the backend stops.
async fn next_chunk(
    session: &mut Session,
    connection: &mut Http1,
    upstream: &Upstream,
    deadline: Option<Instant>,
    measured: &mut Exchange,
) -> Result<Next, Outcome> {
    let waited_from = Instant::now();
    let next_by =
        tokio::time::Instant::from_std(bounded(waited_from + upstream.idle_timeout, deadline));
    let read = tokio::select! {
        // The upstream first: body bytes already read with the head need no poll of the
        // client. A client that left is still seen: here when the upstream is quiet, or
        // by the next write to it.
        biased;
        read = tokio::time::timeout_at(next_by, connection.read_body()) => read,
        gone = session.client_gone() => {
            connection.shutdown().await;
            return Err(Outcome::ClientGone(gone));
        }
    };
    measured.upstream_wait += waited_from.elapsed();
    Ok(match read {
        Ok(Ok(Some(chunk))) => Next::Chunk(chunk),
        Ok(Ok(None)) => Next::End,
        Ok(Err(e)) => Next::Failed(e),
        Err(_elapsed) => Next::Stalled,
    })
}

/// Relays body chunks as they come; watches for the client leaving and the upstream stalling
/// (no chunk within `idle_timeout`) or running past its total deadline.
pub(super) async fn relay_body(
    session: &mut Session,
    connection: &mut Http1,
    call: &Call<'_>,
    deadline: Option<Instant>,
    measured: &mut Exchange,
    passing: &mut Passing,
) -> Result<(), Outcome> {
    let upstream = call.upstream;
    let mut tail = EventTail::default();
    loop {
        let read = next_chunk(session, connection, upstream, deadline, measured).await?;
        let sent = match read {
            Next::Chunk(chunk) => passing.pass(chunk),
            Next::End if matches!(passing.edit, Some(Edit::Translate(_))) => {
                // The client's stream ends as its API ends one, unless the upstream's
                // stopped before its answer was finished: then it was cut.
                let Some(Edit::Translate(mut translation)) = passing.edit.take() else {
                    return Ok(());
                };
                let mut end = translation.event(&std::mem::take(&mut passing.pending));
                match translation.finish() {
                    Some(tail_bytes) => end.extend_from_slice(&tail_bytes),
                    None => {
                        if !end.is_empty() {
                            tail.remember(&end);
                            measured.bytes_out += end.len();
                            if let Err(e) =
                                session.write_response_body(Bytes::from(end), false).await
                            {
                                return Err(Outcome::ClientGone(e));
                            }
                        }
                        log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "translated upstream stream ended before its answer was finished");
                        let error = RequestError::UpstreamClosed;
                        return Err(end_cut_stream(session, call, measured, error, tail).await);
                    }
                }
                (!end.is_empty()).then(|| Bytes::from(end))
            }
            Next::End if !passing.pending.is_empty() => {
                // What is left of an edited stream goes out as it is; the next read ends
                // the stream, judged as any other (cut if it stopped inside an event).
                passing.edit = None;
                Some(Bytes::from(std::mem::take(&mut passing.pending)))
            }
            // An event stream that stops inside an event was cut, whatever its framing said.
            Next::End if measured.event_stream && !tail.at_event_end() => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "upstream event stream ended inside an event");
                let error = RequestError::UpstreamClosed;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
            Next::End => return Ok(()),
            Next::Failed(e) => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), error:? = e.etype(); "upstream failed during the response body");
                let error = RequestError::UpstreamClosed;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
            Next::Stalled => {
                let error = RequestError::UpstreamTimeout;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
        };
        let Some(chunk) = sent else {
            continue;
        };
        tail.remember(&chunk);
        measured.bytes_out += chunk.len();
        if let Err(e) = session.write_response_body(chunk, false).await {
            return Err(Outcome::ClientGone(e));
        }
    }
}

/// The last bytes relayed of a body, to tell whether an event stream stopped between events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventTail([u8; 3]);

impl Default for EventTail {
    /// Nothing relayed yet counts as between events.
    fn default() -> Self {
        EventTail(*b"\n\n\n")
    }
}

impl EventTail {
    fn remember(&mut self, chunk: &[u8]) {
        for &byte in chunk.iter().rev().take(3).rev() {
            self.0 = [self.0[1], self.0[2], byte];
        }
    }

    /// Whether the last line relayed was empty, which ends an event (LF, CR or CRLF lines).
    fn at_event_end(&self) -> bool {
        self.0.ends_with(b"\n\n") || self.0.ends_with(b"\r\r") || self.0 == *b"\n\r\n"
    }
}

/// Ends a response whose upstream failed after it started. An SSE stream gets one error
/// event and a clean end, then the connection closes; any other body can only be cut.
async fn end_cut_stream(
    session: &mut Session,
    call: &Call<'_>,
    measured: &mut Exchange,
    error: RequestError,
    tail: EventTail,
) -> Outcome {
    if !measured.event_stream {
        return Outcome::Cut {
            error,
            then: AfterCut::Close,
        };
    }
    let event = stream_error_event_in(call.error_shape, &error);
    // Skip the separating blank line when the last event already ended cleanly.
    let event = if tail.at_event_end() {
        event.slice(2..)
    } else {
        event
    };
    measured.bytes_out += event.len();
    session.disable_keepalive();
    let written = session.write_response_body(event, false).await;
    let ended = session.write_response_body(bytes::Bytes::new(), true).await;
    let then = if written.is_err() || ended.is_err() {
        AfterCut::Close
    } else {
        AfterCut::KeepAlive
    };
    Outcome::Cut { error, then }
}

#[cfg(test)]
mod tests {
    use super::model_named;
    use super::EventTail;

    #[test]
    fn the_model_an_answer_names_is_found_in_its_first_bytes() {
        let answer = br#"{"id":"x","object":"chat.completion","model" : "org/m-1","choices":[]}"#;
        assert_eq!(model_named(answer).as_deref(), Some("org/m-1"));
        let chunk = b"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[]}\n\n";
        assert_eq!(model_named(chunk).as_deref(), Some("m"));
        assert_eq!(
            model_named(br#"{"model":"cut-of"#),
            None,
            "a name cut short is none"
        );
        assert_eq!(model_named(br#"{"model":3}"#), None);
        assert_eq!(model_named(br#"{"content":"the \"model\": \"x\""}"#), None);
    }

    fn tail_of(chunks: &[&[u8]]) -> EventTail {
        let mut tail = EventTail::default();
        for chunk in chunks {
            tail.remember(chunk);
        }
        tail
    }

    #[test]
    fn events_are_cut_at_their_blank_line() {
        assert_eq!(super::event_end(b"data: a\n\ndata: b"), Some(9));
        assert_eq!(super::event_end(b"data: a\r\n\r\n"), Some(11));
        assert_eq!(super::event_end(b"data: a\n"), None);
    }

    #[test]
    fn an_event_stream_ends_cleanly_only_after_a_blank_line() {
        assert!(tail_of(&[]).at_event_end(), "an empty body");
        assert!(tail_of(&[b"data: a\n\n"]).at_event_end());
        assert!(tail_of(&[b"data: a\r\n\r\n"]).at_event_end(), "CRLF lines");
        assert!(tail_of(&[b"data: a\r\r"]).at_event_end(), "CR lines");
        assert!(
            tail_of(&[b"data: a\n", b"\n"]).at_event_end(),
            "across chunks"
        );
        assert!(tail_of(&[b"data: a\r\n\r", b"\n"]).at_event_end());
        assert!(
            !tail_of(&[b"data: a\n\ndata: {\"ch"]).at_event_end(),
            "inside an event"
        );
        assert!(
            !tail_of(&[b"data: a\n"]).at_event_end(),
            "a line but no blank line"
        );
        assert!(!tail_of(&[b"data: a\r\n"]).at_event_end());
    }
}
