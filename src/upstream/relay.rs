//! Relaying an upstream's answer body to the client as it arrives: the idle and total
//! deadlines, the client leaving, an event stream cut inside an event, the SSE error event
//! that ends a cut stream, and what the gateway does to an answer as it passes (keeping an
//! error answer's first bytes for the log, reading the usage, rewriting stored-response IDs
//! or taking out a usage the client did not ask for, event by event).

use super::call::{bounded, Call, Exchange};
use super::error_record::KEPT_BODY_BYTES;
use super::verdict::{AfterCut, Outcome, Reached};
use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::http1::client::Http1;
use crate::http1::sse::{EventReader, EventTail, TooLong};
use crate::http1::Error;
use crate::listener::Session;
use crate::respond::stream_error_event_in;
use crate::response_id::IdRewrite;
use crate::translate::StreamTranslation;
use crate::usage::{strip_event, Stripped};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;
use tokio::time::Sleep;

mod reading;

pub(super) use reading::{model_named, Reading, HEAD_BYTES};

/// Largest JSON answer read whole to rewrite its IDs.
pub(super) const MAX_REWRITTEN_BYTES: usize = 64 << 20;
/// How much of an answer with a declared length is read before its head goes out: what the
/// client transport holds before it sends anyway (`listener/transport.rs`), so holding it costs no
/// latency, and an upstream that cuts such an answer leaves nothing sent.
pub(super) const HELD_BYTES: usize = 64 << 10;

/// What happens to an answer's bytes on their way to the client.
pub(super) struct Passing {
    /// An error answer's first bytes, for the error record.
    pub kept: Option<Vec<u8>>,
    /// A successful answer's usage, read as it passes.
    pub reading: Option<Reading>,
    /// What is done to each whole event of a stream.
    pub edit: Option<Edit>,
    /// The stream's events, cut out as they arrive (when editing).
    pub events: EventReader,
    /// An event grew past the bound of what is held: the rest of the stream passed
    /// unedited (`sluice_stream_edits_skipped_total`).
    pub edits_skipped: bool,
    /// A successful answer's first bytes, for the model it names (traces only).
    pub head: Option<Vec<u8>>,
    /// A translated stream had an event past the bound of what is held: it is cut.
    pub untranslatable: bool,
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

impl Passing {
    /// The bytes to send for a chunk read, if any yet: whole edited events when events are
    /// edited, the chunk itself otherwise.
    pub(super) fn pass(&mut self, chunk: Bytes) -> Option<Bytes> {
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
        let mut out = Vec::new();
        let read = self.events.feed(&chunk, |event| match edit {
            Edit::Rewrite(rewrite) => out.extend_from_slice(&rewrite.event(event)),
            Edit::StripUsage => match strip_event(event) {
                Stripped::Unchanged => out.extend_from_slice(event),
                Stripped::Edited(edited) => out.extend_from_slice(&edited),
                Stripped::Dropped => {}
            },
            Edit::Translate(translation) => out.extend_from_slice(&translation.event(event)),
        });
        if let (Err(TooLong(_)), Some(Edit::Translate(_))) = (&read, &self.edit) {
            // An event too large to translate: the stream cannot go on in the client's
            // API (`relay_body` cuts it).
            self.edit = None;
            self.untranslatable = true;
        } else if let Err(TooLong(held)) = read {
            // One event past the bound: it and the rest of the stream pass as they come.
            self.edit = None;
            self.edits_skipped = true;
            out.extend_from_slice(&held);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

/// An answer body read before anything of it went out.
pub(super) enum Held {
    /// All of it.
    Whole(Bytes),
    /// Its first bytes, past the bound: the rest is relayed as it comes.
    Start(Bytes),
}

/// Reads an answer body before anything of it goes out, within the idle and total
/// deadlines, until its end or until more than `limit` bytes came. Nothing reached the
/// client yet, so a failure is an ordinary error answer: an upstream that breaks off its
/// body (closes or resets inside it, or frames it badly) answered garbage, a 502
/// `upstream_protocol_error`.
pub(super) async fn read_held(
    session: &mut Session,
    connection: &mut Http1,
    call: &Call<'_>,
    deadline: Option<Instant>,
    measured: &mut Exchange,
    limit: usize,
) -> Result<Held, Outcome> {
    let upstream = call.upstream;
    let failed = |error| Outcome::Failed {
        error,
        reached: Reached::Maybe,
    };
    // Most answers come in one piece: it is kept as it is, not copied.
    let mut first = Bytes::new();
    let mut more = Vec::new();
    let mut timer = IdleTimer::default();
    loop {
        let next = next_chunk(
            session, connection, upstream, deadline, measured, &mut timer,
        );
        let chunk = match next.await? {
            Next::Chunk(chunk) => chunk,
            Next::End if more.is_empty() => return Ok(Held::Whole(first)),
            Next::End => return Ok(Held::Whole(Bytes::from(more))),
            Next::Failed(e) => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), error:% = e; "upstream cut its answer before it was sent");
                return Err(failed(RequestError::UpstreamProtocolError));
            }
            Next::Stalled => return Err(failed(RequestError::UpstreamTimeout)),
        };
        if first.is_empty() && more.is_empty() {
            first = chunk;
        } else {
            if more.is_empty() {
                more.extend_from_slice(&first);
            }
            more.extend_from_slice(&chunk);
        }
        if first.len().max(more.len()) > limit {
            let start = if more.is_empty() {
                first
            } else {
                Bytes::from(more)
            };
            return Ok(Held::Start(start));
        }
    }
}

/// What the next read of an answer body gave.
enum Next {
    Chunk(Bytes),
    End,
    Failed(Error),
    /// Nothing within `idle_timeout`, or past the total deadline.
    Stalled,
}

/// The next chunk of the answer, within the idle gap and the total deadline, while
/// watching the client: if it leaves, the upstream connection is shut so the backend stops.
///
/// The read is polled once first: a chunk already here (the body read with the head, the
/// end right after the last chunk) was not waited for, so it reads no clock and arms no
/// timer. Only a read that has to wait starts the idle gap, at that moment, and counts as
/// time waiting on the upstream. The answer's waits share one timer (`timer`).
async fn next_chunk(
    session: &mut Session,
    connection: &mut Http1,
    upstream: &Upstream,
    deadline: Option<Instant>,
    measured: &mut Exchange,
    timer: &mut IdleTimer,
) -> Result<Next, Outcome> {
    let waited = {
        let mut read = std::pin::pin!(connection.read_body());
        let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
        match first {
            Poll::Ready(read) => Waited::Read(read),
            Poll::Pending => {
                let waited_from = Instant::now();
                let next_by = tokio::time::Instant::from_std(bounded(
                    waited_from + upstream.idle_timeout,
                    deadline,
                ));
                let timer = timer.until(next_by);
                let waited = tokio::select! {
                    // The upstream first, then its deadline: a poll of the client (a read
                    // of its socket) is made only while the upstream is quiet. A client
                    // that left is still seen: here, or by the next write to it.
                    biased;
                    read = read => Waited::Read(read),
                    () = timer => Waited::Stalled,
                    gone = session.client_gone() => Waited::ClientGone(gone),
                };
                measured.upstream_wait += waited_from.elapsed();
                waited
            }
        }
    };
    Ok(match waited {
        Waited::Read(Ok(Some(chunk))) => Next::Chunk(chunk),
        Waited::Read(Ok(None)) => Next::End,
        Waited::Read(Err(e)) => Next::Failed(e),
        Waited::Stalled => Next::Stalled,
        Waited::ClientGone(gone) => {
            connection.shutdown().await;
            return Err(Outcome::ClientGone(gone));
        }
    })
}

/// How a wait for the next chunk ended.
enum Waited {
    Read(Result<Option<Bytes>, Error>),
    /// The idle gap (or the total deadline) ran out first.
    Stalled,
    ClientGone(Error),
}

/// The one timer of an answer's waits for its body, armed at the first wait that has to
/// wait and moved for each one after: a deadline later than the one armed is only noted
/// (tokio moves a pending timer later without taking it out of its wheel), where a
/// timeout per wait registered a timer and took it out again each time. Boxed, and only
/// when a wait needs it: an answer read at once (a plain chat completion) has none.
#[derive(Default)]
pub(super) struct IdleTimer(Option<Pin<Box<Sleep>>>);

impl IdleTimer {
    /// The timer, set to fire at `at`.
    fn until(&mut self, at: tokio::time::Instant) -> Pin<&mut Sleep> {
        if let Some(timer) = &mut self.0 {
            timer.as_mut().reset(at);
        }
        self.0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
    }
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
    let mut timer = IdleTimer::default();
    loop {
        let next = next_chunk(
            session, connection, upstream, deadline, measured, &mut timer,
        );
        let read = next.await?;
        let sent = match read {
            Next::Chunk(chunk) => passing.pass(chunk),
            Next::End if matches!(passing.edit, Some(Edit::Translate(_))) => {
                // The client's stream ends as its API ends one, unless the upstream's
                // stopped before its answer was finished: then it was cut.
                let Some(Edit::Translate(mut translation)) = passing.edit.take() else {
                    return Ok(());
                };
                let mut end = translation.event(&passing.events.take_rest());
                match translation.finish() {
                    Some(tail_bytes) => end.extend_from_slice(&tail_bytes),
                    None => {
                        if !end.is_empty() {
                            tail.remember(&end);
                            measured.bytes_out += end.len();
                            let written = session.write_response_body(Bytes::from(end), false);
                            if let Err(e) = written.await {
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
            Next::End if !passing.events.is_empty() => {
                // What is left of an edited stream goes out as it is; the next read ends
                // the stream, judged as any other (cut if it stopped inside an event).
                passing.edit = None;
                Some(Bytes::from(passing.events.take_rest()))
            }
            // An event stream that stops inside an event was cut, whatever its framing said.
            Next::End if measured.event_stream && !tail.at_event_end() => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "upstream event stream ended inside an event");
                let error = RequestError::UpstreamClosed;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
            Next::End => return Ok(()),
            Next::Failed(e) => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), error:% = e; "upstream failed during the response body");
                let error = RequestError::UpstreamClosed;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
            Next::Stalled => {
                let error = RequestError::UpstreamTimeout;
                return Err(end_cut_stream(session, call, measured, error, tail).await);
            }
        };
        if passing.untranslatable {
            log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "an event of a translated stream passed the bound of what is held");
            let error = RequestError::UpstreamProtocolError;
            return Err(end_cut_stream(session, call, measured, error, tail).await);
        }
        let Some(chunk) = sent else {
            continue;
        };
        tail.remember(&chunk);
        measured.bytes_out += chunk.len();
        if session.response_body_left() == Some(chunk.len() as u64) {
            // These bytes end the body for the client: the caller sends them with the end.
            measured.unsent = chunk;
            continue;
        }
        if let Err(e) = session.write_response_body(chunk, false).await {
            // The answer's writer refused the bytes (more than its head declared): ours.
            // Otherwise the client is gone.
            let Some(error) = RequestError::from_client(&e) else {
                return Err(Outcome::ClientGone(e));
            };
            log::error!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), error:% = e; "answer body refused by its writer");
            measured.cut = true;
            return Err(Outcome::Cut {
                error,
                then: AfterCut::Close,
            });
        }
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
    measured.cut = true;
    // Bytes held back as the body's last go out first (`Exchange::unsent`).
    let unsent = std::mem::take(&mut measured.unsent);
    if !unsent.is_empty() && session.write_response_body(unsent, false).await.is_err() {
        session.disable_keepalive();
        return Outcome::Cut {
            error,
            then: AfterCut::Close,
        };
    }
    if !measured.event_stream {
        // Only a cut is left to tell it: what was written goes out, then the connection
        // closes without the body's end (its length short, or no last chunk).
        session.disable_keepalive();
        let _ = session.flush().await;
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
