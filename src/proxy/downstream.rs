//! Talking to the client: reading the request body (under `Expect`, the size limit and a
//! deadline), writing a local answer, and the headers the gateway adds to every answer,
//! local or proxied.

use super::context::{Failure, RequestContext};
use crate::endpoint::EndpointType;
use crate::error::RequestError;
use crate::http1::Error;
use crate::limits::{rate_headers, token_headers};
use crate::listener::Session;
use crate::multipart::{Form, Scanner};
use crate::request_body::ModelRequest;
use crate::respond::{ErrorShape, LocalResponse};
use crate::spool::Spool;
use crate::upstream::RequestBody;
use bytes::{Bytes, BytesMut};
use http::HeaderName;
use pingora_http::ResponseHeader;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Longest time spent discarding a refused request's body before closing.
const LINGER_MAX: Duration = Duration::from_secs(5);

/// The request ID header of Anthropic's API.
const MESSAGES_REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// The headers the gateway adds to every answer: the request ID and, for a limited key,
/// its position (`x-ratelimit-*`, `x-sluice-budget-remaining-usd`).
pub(super) fn gateway_headers(ctx: &RequestContext) -> Vec<(HeaderName, String)> {
    // Room for every one: the ID twice, three per limit, the budget.
    let mut headers = Vec::with_capacity(9);
    headers.push((crate::request_id::HEADER, ctx.request_id.clone()));
    if ctx.error_shape == ErrorShape::Messages {
        // Anthropic's name for it, which its SDKs read.
        headers.push((MESSAGES_REQUEST_ID, ctx.request_id.clone()));
    }
    if let Some(rate) = &ctx.rate {
        headers.extend(rate_headers(rate));
    }
    if let Some(tokens) = &ctx.tokens {
        headers.extend(token_headers(tokens));
    }
    if let Some(remaining) = ctx.budget_remaining {
        headers.push((
            HeaderName::from_static("x-sluice-budget-remaining-usd"),
            crate::limits::format_usd(remaining),
        ));
    }
    headers
}

/// Writes a complete local response with the gateway's headers.
pub(super) async fn answer(
    session: &mut Session,
    ctx: &mut RequestContext,
    response: LocalResponse,
) -> Result<(), Error> {
    let gateway = gateway_headers(ctx);
    let unmade = |_| Error::InvalidAnswer("a local answer's status or field");
    let mut header = ResponseHeader::build_no_case(
        response.status,
        Some(response.headers.len() + gateway.len() + 1),
    )
    .map_err(unmade)?;
    for (name, value) in &response.headers {
        header
            .insert_header(*name, value.as_str())
            .map_err(unmade)?;
    }
    header
        .insert_header("content-length", response.body.len().to_string())
        .map_err(unmade)?;
    for (name, value) in gateway {
        header.insert_header(name, value).map_err(unmade)?;
    }
    let body_unread = !session.is_body_done();
    if body_unread {
        // An unread request body would be taken for the next request: close instead.
        session.disable_keepalive();
    }
    ctx.status = response.status;
    ctx.exchange.bytes_out += response.body.len();
    session.write_response_header(header).await?;
    session.write_response_body(response.body, true).await?;
    if body_unread {
        // Read and discard what the client is still sending, for a while, before the
        // close: closing with unread data makes the kernel send a reset, and a client
        // still uploading (the SDKs send no `Expect`) would see a connection error
        // instead of this answer.
        let linger = ctx
            .catalog
            .as_ref()
            .map_or(LINGER_MAX, |c| c.client_timeout.min(LINGER_MAX));
        let _ = tokio::time::timeout(linger, session.drain_request_body()).await;
    }
    Ok(())
}

/// A failed body read: a body whose chunked framing is broken is the client's error and
/// gets an answer; any other failure means the client is gone.
fn body_failure(error: Error) -> Failure {
    match RequestError::from_client(&error) {
        Some(refused) => Failure::Answer(refused),
        None => Failure::Abort(error),
    }
}

/// The Host a request names (HTTP/1 header, or the authority of an HTTP/2 request).
pub(super) fn request_host(session: &Session) -> &str {
    let request = session.req_header();
    request
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri.authority().map(|a| a.as_str()))
        .unwrap_or_default()
}

/// Reads the whole request body, refusing it past `limit` bytes. Answers
/// `Expect: 100-continue` first: by now the request is known to be acceptable so far.
pub(super) async fn read_body(
    session: &mut Session,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Failure> {
    // A large body of declared length (already refused past `limit`) is read straight into
    // one buffer of its size: no growth by doubling, no copy of each chunk
    // (benches/README.md, large prompts).
    let declared = session
        .request_body_left()
        .map_or(0, |left| usize::try_from(left).unwrap_or(usize::MAX));
    if declared > SINGLE_READ_BYTES {
        answer_continue(session).await?;
        let mut body = BytesMut::with_capacity(declared.min(limit));
        let whole_body = async {
            while session
                .read_request_body_into(&mut body)
                .await
                .map_err(body_failure)?
                > 0
            {
                if body.len() > limit {
                    return Err(RequestError::RequestTooLarge { limit_bytes: limit }.into());
                }
            }
            Ok(())
        };
        within(deadline, whole_body).await?;
        return Ok(body.freeze());
    }
    // A body that comes in one chunk (the usual small one) is kept as it came; only a
    // body in several chunks is copied into one.
    let mut single: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    read_into(session, limit, deadline, |chunk| {
        match single.take() {
            None if joined.is_empty() => single = Some(chunk),
            first => {
                if let Some(first) = first {
                    joined.extend_from_slice(&first);
                }
                joined.extend_from_slice(&chunk);
            }
        }
        Ok(())
    })
    .await?;
    Ok(single.unwrap_or_else(|| joined.freeze()))
}

/// Reads a `multipart/form-data` body as it streams: into a spool (memory, then an unlinked
/// temporary file), while the scanner checks its framing and finds its `model`. The file
/// part is never held whole in memory.
pub(super) async fn read_form(
    session: &mut Session,
    boundary: &[u8],
    limit: usize,
    deadline: Duration,
    request_id: &str,
) -> Result<(Spool, Form), Failure> {
    let mut spool = Spool::default();
    let mut scanner = Scanner::new(boundary);
    read_into(session, limit, deadline, |chunk| {
        scanner.feed(&chunk)?;
        spool.write(&chunk).map_err(|e| {
            log::error!(target: "sluice::proxy", request_id, error:% = e; "cannot spool an upload");
            RequestError::Internal
        })
    })
    .await?;
    Ok((spool, scanner.finish()?))
}

/// Feeds the request body to `take` chunk by chunk, refusing it past `limit` bytes, the
/// whole of it within `deadline`. Answers `Expect: 100-continue` first: by now the request
/// is known to be acceptable so far.
async fn read_into(
    session: &mut Session,
    limit: usize,
    deadline: Duration,
    mut take: impl FnMut(Bytes) -> Result<(), RequestError>,
) -> Result<(), Failure> {
    answer_continue(session).await?;
    let whole_body = async {
        let mut read = 0;
        while let Some(chunk) = session.read_request_body().await.map_err(body_failure)? {
            read += chunk.len();
            if read > limit {
                return Err(RequestError::RequestTooLarge { limit_bytes: limit }.into());
            }
            take(chunk)?;
        }
        Ok(())
    };
    within(deadline, whole_body).await
}

/// Bodies up to this size usually arrive in one read, with their head: kept as they came.
const SINGLE_READ_BYTES: usize = 16 << 10;

/// Answers `Expect: 100-continue`: by now the request is known to be acceptable so far.
async fn answer_continue(session: &mut Session) -> Result<(), Failure> {
    let expects_continue = session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        session
            .write_continue_response()
            .await
            .map_err(Failure::Abort)?;
    }
    Ok(())
}

/// The whole body within `deadline`, not only each read: a client trickling a byte a
/// minute must not hold its slots forever. A body already here (most come with their head)
/// is read at the first poll: then no clock is read and no timer armed; the deadline runs
/// from that first poll.
async fn within(
    deadline: Duration,
    whole_body: impl std::future::Future<Output = Result<(), Failure>>,
) -> Result<(), Failure> {
    let mut whole_body = std::pin::pin!(whole_body);
    let first = std::future::poll_fn(|cx| Poll::Ready(whole_body.as_mut().poll(cx))).await;
    let read = match first {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(deadline, whole_body).await,
    };
    match read {
        Ok(read) => read,
        // The request body not received within client_timeout.
        Err(_) => Err(Failure::Abort(Error::ReadTimeout)),
    }
}

/// A request body as read: JSON with what was checked of it, or a spooled form.
pub(super) enum Read {
    Json(Bytes, ModelRequest),
    Form(Arc<Spool>, Form),
}

impl Read {
    /// The model named, `stream`, and whether tools are used.
    pub(super) fn fields(&self) -> (&str, bool, bool) {
        match self {
            Read::Json(_, request) => (&request.model, request.stream, request.uses_tools),
            Read::Form(_, form) => (&form.model, form.stream, false),
        }
    }

    /// Tokens to reserve: the body's bytes / 4 for its input (nothing for an upload, whose
    /// audio is not text), plus the output asked for, else the model's default, on routes
    /// that generate text; as (input, output), each having its own price.
    pub(super) fn token_estimate(&self, kind: EndpointType, default_max_tokens: u64) -> (u64, u64) {
        let (input, asked) = match self {
            Read::Json(bytes, request) => (bytes.len() as u64 / 4, request.max_output_tokens),
            Read::Form(..) => (0, None),
        };
        let output = if kind.generates_text() {
            asked.unwrap_or(default_max_tokens)
        } else {
            0
        };
        (input, output)
    }

    /// The size of a JSON body (a form's is not read into memory: 0).
    pub(super) fn body_bytes(&self) -> usize {
        match self {
            Read::Json(bytes, _) => bytes.len(),
            Read::Form(..) => 0,
        }
    }

    /// The output limit the request carries upstream, on routes that generate text: its
    /// own, or `enforced` (the model's `default_max_tokens`, with `enforce_output_limit`)
    /// where the gateway writes that into a request that sets none; `None` when it has
    /// none. What its usage's output must stay within to be believed.
    pub(super) fn output_limit(&self, kind: EndpointType, enforced: Option<u64>) -> Option<u64> {
        let written = match kind {
            EndpointType::Chat
            | EndpointType::Completions
            | EndpointType::Responses
            | EndpointType::Messages => enforced,
            _ => None,
        };
        match self {
            Read::Json(_, request) if kind.generates_text() => {
                request.max_output_tokens.or(written)
            }
            _ => None,
        }
    }

    /// Writes the model's default output limit into a JSON request that sets none
    /// (`enforce_output_limit`).
    pub(super) fn enforce_output_limit(&mut self, kind: EndpointType, limit: u64) {
        if let Read::Json(_, request) = self {
            request.enforce_output_limit(kind, limit);
        }
    }

    /// A stream to chat or completions whose client did not ask for the usage chunk.
    pub(super) fn usage_unasked(&self, kind: EndpointType) -> bool {
        match self {
            Read::Json(_, request) => {
                request.stream
                    && !request.include_usage
                    && matches!(kind, EndpointType::Chat | EndpointType::Completions)
            }
            Read::Form(..) => false,
        }
    }

    /// The stored response named by `previous_response_id`.
    pub(super) fn previous_response(&self) -> Option<&str> {
        match self {
            Read::Json(_, request) => request
                .previous_response
                .as_ref()
                .map(|(id, _)| id.as_str()),
            Read::Form(..) => None,
        }
    }

    pub(super) fn body(&self) -> RequestBody<'_> {
        match self {
            Read::Json(bytes, request) => RequestBody::Json {
                bytes: bytes.clone(),
                request,
            },
            Read::Form(spool, form) => RequestBody::Form {
                spool: Arc::clone(spool),
                model_span: form.model_span.clone(),
            },
        }
    }
}
