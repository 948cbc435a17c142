//! One upstream exchange, by hand over pingora's connection pool: send the request, wait for
//! the response header, relay the body chunk by chunk as it arrives.
//!
//! Every proxied request takes this path, whatever its size (pingora's own body replay stops
//! at 64 KiB). Doing it here also puts the failure rules in one place: a pooled connection
//! the upstream closed is found out before the request goes on it, one that fails while the
//! request is written is replaced by a fresh one (nothing can have been processed), an
//! answer that comes before the whole request went out is relayed, timeouts are ours, an
//! answer whose status `retry_on` names (a 429, a 503) can be handed back unrelayed so
//! another target or a fallback model takes the request, and a stream cut after
//! it started (an SSE stream that ends inside an event included) ends with an SSE error
//! event. An error answer from an upstream that has a credential is read whole and its
//! credential redacted before the client or the access log sees it.

use super::call::{bounded, Call, Exchange, Outgoing};
use super::error_record::{UpstreamErrorRecord, KEPT_BODY_BYTES};
use super::pool::Pool;
use super::redaction::{redact, redact_fields, redacted};
use super::relay::{
    model_named, read_held, relay_body, Edit, Held, Passing, Reading, HEAD_BYTES, HELD_BYTES,
    MAX_REWRITTEN_BYTES,
};
use super::response::{is_event_stream, response_header, upstream_retry_after};
use super::send::{send, Answer, Early, NoAnswer, Request};
use super::translated::AnswerTranslation;
use super::verdict::{hands_back, Connection, EarlyFailure, Outcome, Reached};
use crate::catalog::Upstream;
use crate::error::RequestError;
use crate::http1::client::Http1;
use crate::http1::framing::Framing;
use crate::http1::sse::EventReader;
use crate::listener::Session;
use crate::metrics::Metrics;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::HeaderValue;
use std::time::{Duration, Instant};

/// Sends the call upstream and relays the answer to the client.
///
/// The call is borrowed and the outgoing request's header boxed: an async fn's argument
/// taken by value is stored twice in its future, and a stream keeps this future for as
/// long as it lasts.
pub(super) async fn exchange(
    session: &mut Session,
    pool: &Pool,
    metrics: &Metrics,
    call: &Call<'_>,
    outgoing: Outgoing,
    measured: &mut Exchange,
) -> Outcome {
    let upstream = call.upstream;
    let sent_at = Instant::now();
    let deadline = upstream.policy.total_timeout.map(|total| sent_at + total);
    let first_byte_by = bounded(sent_at + upstream.first_byte_timeout, deadline);
    // The answer's head in a future of its own, boxed: sending, reading the upstream's
    // head and writing the client's are the largest states of this future (~2 KB, the
    // heads themselves, the send's result), and a stream's future would otherwise keep
    // room for them while the body passes, for as long as it lasts.
    let head = Box::pin(async {
        let mut answer = send(
            session,
            pool,
            call,
            &outgoing,
            Connection::Pooled,
            sent_at,
            first_byte_by,
        )
        .await;
        if let Err(NoAnswer::Early(Early {
            failure: EarlyFailure::DeadPooled,
            ..
        })) = answer
        {
            answer = send(
                session,
                pool,
                call,
                &outgoing,
                Connection::Fresh,
                sent_at,
                first_byte_by,
            )
            .await;
        }
        // The request went out: its header and body are not kept while the answer passes (a
        // stream may last minutes).
        drop(outgoing);
        // Time spent on the upstream counts as upstream time, failed attempts included.
        let ttfb = sent_at.elapsed();
        measured.upstream_wait += ttfb;
        let Answer {
            mut connection,
            response,
            request,
        } = match answer {
            Ok(answered) => answered,
            Err(NoAnswer::ClientGone(e)) => return Err(Outcome::ClientGone(e)),
            Err(NoAnswer::Early(Early { failure, reached })) => {
                let error = match failure {
                    EarlyFailure::Failed(error) => error,
                    // Dead twice: the fresh connection failed the same way.
                    EarlyFailure::DeadPooled => RequestError::UpstreamUnavailable,
                };
                return Err(Outcome::Failed { error, reached });
            }
        };
        measured.ttfb = Some(ttfb);
        let status = response.status.as_u16();
        measured.status = Some(status);
        call.ttfb
            .get(|| metrics.upstream_ttfb.with_label_values(&[&upstream.name]))
            .observe(ttfb.as_secs_f64());

        if matches!(status, 401 | 403) {
            // The upstream refused our credential: the client's key is not the problem.
            return Err(Outcome::Failed {
                error: RequestError::UpstreamAuthFailed,
                reached: Reached::Maybe,
            });
        }
        let mut retry_after = None;
        if status == 429 {
            let header = |name: &str| response.headers.get(name).and_then(|v| v.to_str().ok());
            let now = std::time::SystemTime::now();
            retry_after =
                upstream_retry_after(header("retry-after-ms"), header("retry-after"), now);
        }
        if hands_back(status, &upstream.policy.retry_on, call.onward) {
            connection.shutdown().await;
            return Err(Outcome::HandedBack {
                status,
                retry_after,
            });
        }
        let timing = server_timing(sent_at - call.request_started, ttfb);
        // The upstream's own request id, for the record of an error answer (the one whose
        // bytes are kept). The upstream's header becomes the client's: a stream holds no
        // second copy of it.
        let upstream_id = (status >= 400)
            .then(|| response.headers.get(crate::request_id::HEADER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(|id| redacted(upstream, id.as_bytes()));
        let framing = response.framing;
        let timing = HeaderValue::try_from(timing).ok();
        let mut to_client = match response_header(response, call.response_headers, timing) {
            Ok(header) => header,
            Err(invalid) => {
                log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(), invalid:? = invalid; "upstream response header refused");
                connection.shutdown().await;
                return Err(Outcome::Failed {
                    error: RequestError::UpstreamProtocolError,
                    reached: Reached::Maybe,
                });
            }
        };
        if status == 500 {
            to_client.insert_header("x-should-retry", "false").ok();
        }
        measured.event_stream = is_event_stream(&to_client);
        measured.upstream_retry_after = retry_after;
        let success = (200..300).contains(&status);
        let edit = match (call.rewrite.clone(), call.strip_usage, call.translation) {
            (_, _, Some(translation)) if success && measured.event_stream => {
                Some(Edit::Translate(Box::new(translation.stream())))
            }
            (Some(rewrite), _, _) if success => Some(Edit::Rewrite(rewrite)),
            (None, true, _) if success && measured.event_stream => Some(Edit::StripUsage),
            _ => None,
        };
        // An answer in the other API than the client's that is not a successful stream (a
        // JSON answer, or an error) is read whole and translated.
        let translating = call
            .translation
            .filter(|_| !(success && measured.event_stream));
        // Boxed: ~480 bytes the request's future would hold for the whole answer.
        let mut passing = Box::new(Passing {
            // An error answer's first bytes are kept as they pass, for the error record.
            kept: (status >= 400).then(Vec::new),
            reading: success.then(|| Reading::for_answer(measured.event_stream, call.messages_api)),
            edit,
            events: EventReader::default(),
            edits_skipped: false,
            head: (success && call.read_model).then(Vec::new),
            untranslatable: false,
        });
        // Read before anything of it goes out: a JSON answer whose IDs change length (whole,
        // rewritten, sent with its new length), an error answer that may echo the upstream's
        // credential (whole, redacted, sent with its new length, an event stream included: an
        // error has no reason to stream), and the start of one with a declared length
        // (as much as the client transport would hold before sending anyway), so that an
        // upstream that cuts it short leaves nothing sent: the client gets a 502, not a cut.
        let rewriting = matches!(passing.edit, Some(Edit::Rewrite(_))) && !measured.event_stream;
        let redacts = status >= 400 && upstream.credential.is_some();
        if redacts {
            redact_fields(upstream, &mut to_client);
        }
        let held_limit = match framing {
            _ if rewriting || redacts || translating.is_some() => Some(MAX_REWRITTEN_BYTES),
            Framing::Length(_) if !measured.event_stream => Some(HELD_BYTES),
            _ => None,
        };
        let mut held = None;
        if let Some(limit) = held_limit {
            match read_held(session, &mut connection, call, deadline, measured, limit).await {
                Ok(Held::Start(_)) if rewriting || redacts || translating.is_some() => {
                    connection.shutdown().await;
                    return Err(Outcome::Failed {
                        error: RequestError::UpstreamProtocolError,
                        reached: Reached::Maybe,
                    });
                }
                Ok(read) => held = Some(read),
                Err(outcome) => return Err(outcome),
            }
        }
        let held = match (held, &mut passing.edit) {
            (Some(Held::Whole(body)), _) if translating.is_some() => {
                // An error answer loses the upstream's credential before anything else.
                let body = match redacts.then(|| redact(upstream, &body)) {
                    Some(std::borrow::Cow::Owned(clean)) => Bytes::from(clean),
                    _ => body,
                };
                if let Some(reading) = &mut passing.reading {
                    reading.whole(&body);
                    measured.usage = reading.usage();
                }
                if let Some(kept) = &mut passing.kept {
                    kept.extend_from_slice(&body[..body.len().min(KEPT_BODY_BYTES)]);
                }
                let translation = translating.unwrap_or(AnswerTranslation::ToMessages);
                let Some(body) = translation.body(status, &body) else {
                    log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "upstream answer cannot be translated");
                    connection.shutdown().await;
                    return Err(Outcome::Failed {
                        error: RequestError::UpstreamProtocolError,
                        reached: Reached::Maybe,
                    });
                };
                let body = Bytes::from(body);
                to_client.remove_header(&TRANSFER_ENCODING);
                to_client
                    .insert_header(CONTENT_LENGTH, HeaderValue::from(body.len()))
                    .ok();
                to_client
                    .insert_header(http::header::CONTENT_TYPE, "application/json")
                    .ok();
                Some(Held::Whole(body))
            }
            (Some(Held::Whole(body)), Some(Edit::Rewrite(rewrite))) if rewriting => {
                // Read now: the whole answer is here even if the client leaves before it is
                // sent.
                if let Some(reading) = &mut passing.reading {
                    reading.whole(&body);
                    measured.usage = reading.usage();
                }
                if call.read_model {
                    measured.response_model = model_named(&body[..body.len().min(HEAD_BYTES)]);
                }
                // Read once: what passes next is the rewrite, which names no other model.
                passing.head = None;
                let body = Bytes::from(rewrite.json(&body));
                to_client.remove_header(&TRANSFER_ENCODING);
                to_client
                    .insert_header(CONTENT_LENGTH, HeaderValue::from(body.len()))
                    .ok();
                passing.edit = None;
                Some(Held::Whole(body))
            }
            (Some(Held::Whole(body)), _) if redacts => {
                let body = match redact(upstream, &body) {
                    std::borrow::Cow::Owned(clean) => Bytes::from(clean),
                    std::borrow::Cow::Borrowed(_) => body,
                };
                to_client.remove_header(&TRANSFER_ENCODING);
                to_client
                    .insert_header(CONTENT_LENGTH, HeaderValue::from(body.len()))
                    .ok();
                // Kept for the error record as it passes: redacted.
                passing.pass(body).map(Held::Whole)
            }
            (Some(Held::Whole(body)), _) => {
                if let Some(reading) = &mut passing.reading {
                    reading.whole(&body);
                }
                passing.pass(body).map(Held::Whole)
            }
            (Some(Held::Start(start)), _) => passing.pass(start).map(Held::Start),
            (None, _) => None,
        };
        if passing.edit.is_some() && status != 204 {
            // Events edited as they pass change the body's length: never the upstream's.
            to_client.remove_header(&CONTENT_LENGTH);
            to_client
                .insert_header(TRANSFER_ENCODING, HeaderValue::from_static("chunked"))
                .ok();
        }
        if let Err(e) = session.write_response_header(to_client).await {
            return Err(Outcome::ClientGone(e));
        }
        if measured.event_stream {
            crate::http1::answer::slim_request_header(session.req_header_mut());
        }
        Ok((
            connection,
            request,
            status,
            retry_after,
            upstream_id,
            passing,
            held,
        ))
    });
    let (mut connection, request, status, retry_after, upstream_id, mut passing, held) =
        match head.await {
            Ok(head) => head,
            Err(outcome) => return outcome,
        };
    let (written, rest) = match held {
        Some(Held::Whole(body)) => {
            // Its last bytes: the caller sends them with the end.
            measured.bytes_out += body.len();
            measured.unsent = body;
            (Ok(()), false)
        }
        Some(Held::Start(start)) => (write_body(session, measured, start).await, true),
        None => (Ok(()), true),
    };
    let relayed = match written {
        Ok(()) if rest => {
            relay_body(
                session,
                &mut connection,
                call,
                deadline,
                measured,
                &mut passing,
            )
            .await
        }
        written => written,
    };
    if passing.edits_skipped {
        log::warn!(target: "sluice::upstream", request_id = call.request_id, upstream = upstream.name.as_str(); "an event of the stream passed the edit bound; the rest went unedited");
        metrics
            .stream_edits_skipped
            .with_label_values(&[&upstream.name])
            .inc();
    }
    if let Some(reading) = &passing.reading {
        measured.usage = reading.usage();
    }
    if let Some(head) = &passing.head {
        measured.response_model = model_named(head);
    }
    if let Some(body) = passing.kept {
        measured.upstream_error = Some(UpstreamErrorRecord::read(&body, upstream_id.as_deref()));
    }
    if let Err(outcome) = relayed {
        return outcome;
    }
    // The answer's end is the caller's to send (`Exchange::unsent`).
    match request {
        Request::Whole => release(pool, upstream, connection).await,
        Request::CutShort => connection.shutdown().await,
    }
    Outcome::Answered {
        status,
        retry_after,
    }
}

/// Writes body bytes read before the answer started.
async fn write_body(
    session: &mut Session,
    measured: &mut Exchange,
    body: Bytes,
) -> Result<(), Outcome> {
    measured.bytes_out += body.len();
    session
        .write_response_body(body, false)
        .await
        .map_err(Outcome::ClientGone)
}

/// Gives a connection whose exchange is complete back to the pool, if it may be reused.
async fn release(pool: &Pool, upstream: &Upstream, connection: Http1) {
    match connection.reuse() {
        Ok(stream) => pool.give_back(&upstream.peer, stream),
        Err(mut connection) => connection.shutdown().await,
    }
}

/// `Server-Timing`: the gateway's time before the request went upstream and the
/// upstream's time to its response head, in milliseconds with three decimals. Written
/// from whole microseconds: formatting two floats with a precision was the costliest
/// `format!` of a request.
fn server_timing(gateway: Duration, upstream: Duration) -> String {
    let mut timing = String::with_capacity(48);
    for (name, spent) in [("gateway;dur=", gateway), (", upstream;dur=", upstream)] {
        let micros = (spent.as_nanos() + 500) / 1000;
        timing.push_str(name);
        timing.push_str(itoa::Buffer::new().format(micros / 1000));
        timing.push('.');
        let fraction = (micros % 1000) as u16;
        for digit in [fraction / 100, fraction / 10 % 10, fraction % 10] {
            timing.push(char::from(b'0' + digit as u8));
        }
    }
    timing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_is_in_milliseconds_with_three_decimals_rounded() {
        assert_eq!(
            server_timing(
                Duration::from_nanos(1_234_400),
                Duration::from_nanos(2_000_500)
            ),
            "gateway;dur=1.234, upstream;dur=2.001"
        );
        assert_eq!(
            server_timing(Duration::ZERO, Duration::from_secs(75)),
            "gateway;dur=0.000, upstream;dur=75000.000"
        );
        assert_eq!(
            server_timing(
                Duration::from_micros(999_999),
                Duration::from_nanos(999_600)
            ),
            "gateway;dur=999.999, upstream;dur=1.000"
        );
    }
}
