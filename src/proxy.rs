//! The request path, top to bottom. Every pingora phase we use, and the step it runs:
//!
//! | pingora phase          | our step                                                        |
//! |------------------------|-----------------------------------------------------------------|
//! | `new_ctx`              | start the clock; empty [`RequestContext`]                       |
//! | `early_request_filter` | load the catalog snapshot once; client read/write timeouts     |
//! | `request_filter`       | [`Proxy::handle`]: host, route, key, limits, body, model,       |
//! |                        | capabilities, then answer locally or send upstream through     |
//! |                        | `dispatch.rs`; always returns `Ok(true)`: the response is done  |
//! | `upstream_peer`        | never reached (see `request_filter`)                            |
//! | `fail_to_proxy`        | an unexpected error: JSON 500 if nothing was sent yet            |
//! | `logging`              | access log line and metrics                                     |
//!
//! Chat completions are forwarded by hand (`dispatch.rs` picks the target, `forward.rs` does
//! the exchange) because the model is in the body and pingora's own replay of a pre-read
//! body stops at 64 KiB. Resources a request holds (limit permits, the in-flight gauge)
//! live in the context and are released when it drops, which happens after `logging`, or
//! without it when a task is cancelled at shutdown. The upstream slot and upstream in-flight
//! count live in `dispatch`'s future, which the request's task owns: dropped the same way.

use crate::access_log::{millis, now_rfc3339, AccessRecord};
use crate::auth::authenticate;
use crate::catalog::{Catalog, Key};
use crate::dispatch::{dispatch as dispatch_request, Called, Dispatch};
use crate::error::RequestError;
use crate::forward::{Exchange, ForwardError};
use crate::gateway::Gateway;
use crate::limits::{rate_headers, Admission, Permit, RateStatus};
use crate::metrics::UNKNOWN;
use crate::request_body::{check_media_type, inspect};
use crate::respond::{error_response, LocalResponse};
use crate::route::{route, Route};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorSource, ErrorType, Result};
use prometheus::IntGauge;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pingora application: one per gateway, sharing [`Gateway`].
pub struct Proxy {
    gateway: Arc<Gateway>,
}

impl Proxy {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Proxy { gateway }
    }
}

/// Per-request state. Dropping it releases everything the request held.
pub struct RequestContext {
    started: Instant,
    request_id: String,
    catalog: Option<Arc<Catalog>>,
    key: Option<Arc<Key>>,
    /// The model ID as the client sent it (for the log), and the catalog ID once known.
    model: Option<String>,
    model_label: Option<String>,
    /// The upstream called last.
    called: Called,
    stream: bool,
    status: u16,
    error: Option<RequestError>,
    rate: Option<RateStatus>,
    since_previous: Option<Duration>,
    exchange: Exchange,
    _permits: Vec<Permit>,
    _in_flight: Option<InFlight>,
}

/// Counts a request in `sluice_in_flight_requests` while it lives.
struct InFlight(IntGauge);

impl InFlight {
    fn new(gauge: IntGauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How a request ended before completing normally.
enum Failure {
    /// Answer with this error (if nothing was sent yet).
    Answer(RequestError),
    /// The response had started and was ended; drop the connection if `close`.
    Ended { error: RequestError, close: bool },
    /// The client is gone, or writing to it failed.
    Abort(Box<Error>),
}

impl From<RequestError> for Failure {
    fn from(error: RequestError) -> Self {
        Failure::Answer(error)
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = RequestContext;

    fn new_ctx(&self) -> RequestContext {
        RequestContext {
            started: Instant::now(),
            request_id: String::new(),
            catalog: None,
            key: None,
            model: None,
            model_label: None,
            called: Called::default(),
            stream: false,
            status: 0,
            error: None,
            rate: None,
            since_previous: None,
            exchange: Exchange::default(),
            _permits: Vec::new(),
            _in_flight: None,
        }
    }

    async fn early_request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
    ) -> Result<()> {
        let catalog = self.gateway.catalog();
        let timeout = catalog.client_timeout;
        ctx.catalog = Some(catalog);
        session.set_read_timeout(Some(timeout));
        // A stalled reader must not hold its concurrency slot forever.
        session.set_write_timeout(Some(timeout));
        Ok(())
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
    ) -> Result<bool> {
        match self.handle(session, ctx).await {
            Ok(()) => Ok(true),
            Err(Failure::Answer(error)) => {
                self.answer(session, ctx, error_response(&error)).await?;
                self.record_error(ctx, error);
                Ok(true)
            }
            Err(Failure::Ended { error, close }) => {
                // The answer was a 200 that the upstream broke: logged with its code and
                // counted in sluice_upstream_errors_total, not as a rejection.
                ctx.error = Some(error);
                if close {
                    return Err(Error::explain(
                        ErrorType::ConnectionClosed,
                        "upstream failed after the response started",
                    ));
                }
                Ok(true)
            }
            Err(Failure::Abort(mut e)) => {
                // Only the client's side aborts (it left, or reading or writing it failed):
                // marked so, `fail_to_proxy` answers nothing and counts no internal error.
                e.esource = ErrorSource::Downstream;
                Err(e)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestContext,
    ) -> Result<Box<HttpPeer>> {
        // `request_filter` answers every request itself.
        Error::e_explain(
            ErrorType::InternalError,
            "upstream_peer is not part of Sluice's request path",
        )
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestContext,
    ) -> FailToProxy {
        let client_gone = matches!(e.esource(), ErrorSource::Downstream)
            || matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::WriteError | ErrorType::ReadError
            );
        if session.response_written().is_none() && !client_gone {
            log::error!(target: "sluice::proxy", request_id = ctx.request_id.as_str(), error:? = e.etype(); "request failed");
            let error = RequestError::Internal;
            let _ = self.answer(session, ctx, error_response(&error)).await;
            self.record_error(ctx, error);
        }
        FailToProxy {
            error_code: ctx.status,
            can_reuse_downstream: false,
        }
    }

    fn suppress_error_log(
        &self,
        _session: &Session,
        _ctx: &RequestContext,
        _error: &Error,
    ) -> bool {
        // Disconnects are normal for streaming clients; `logging` records every outcome.
        true
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestContext) {
        self.log_request(session, e, ctx);
    }
}

impl Proxy {
    /// The decisions of DESIGN §1 in their order, then the answer.
    async fn handle(&self, session: &mut Session, ctx: &mut RequestContext) -> Result<(), Failure> {
        // Loaded once in `early_request_filter`: the whole request sees one snapshot.
        let catalog = Arc::clone(ctx.catalog.get_or_insert_with(|| self.gateway.catalog()));
        let request = session.req_header();
        ctx.request_id = crate::request_id::accept_or_generate(
            request.headers.get("x-request-id").map(|v| v.as_bytes()),
        );

        // 1. Host, then route.
        if !catalog.host_allowed(request_host(session)) {
            return Err(RequestError::UnknownRoute {
                repeated_prefix: false,
            }
            .into());
        }
        let route = route(&request.method, request.uri.path())?;
        // 2. Bearer key.
        let key = authenticate(
            &catalog,
            request.headers.get("authorization").map(|v| v.as_bytes()),
        )?;
        ctx.key = Some(Arc::clone(&key));
        // 3. Limits: gateway-wide shedding, then the key's rate and concurrency.
        let shed = if self.gateway.is_draining() {
            Err(RequestError::Overloaded {
                retry_after: Duration::from_secs(1),
            })
        } else {
            self.gateway.limiter.admit_gateway(catalog.max_concurrent)
        };
        match shed {
            Ok(permit) => ctx._permits.push(permit),
            Err(error) => {
                // Shed before the key's own limits: its rate headers still go out, unchanged.
                ctx.rate = self.gateway.limiter.rate_position(&key);
                return Err(error.into());
            }
        }
        match self.gateway.limiter.admit(&key) {
            Admission::Allowed {
                permit,
                rate,
                since_previous,
            } => {
                ctx._permits.push(permit);
                (ctx.rate, ctx.since_previous) = (rate, since_previous);
            }
            Admission::Denied {
                error,
                rate,
                since_previous,
            } => {
                (ctx.rate, ctx.since_previous) = (rate, since_previous);
                return Err(error.into());
            }
        }
        ctx._in_flight = Some(InFlight::new(
            self.gateway
                .metrics
                .in_flight
                .with_label_values(&[&key.name]),
        ));

        match route {
            Route::ListModels => {
                let list = catalog.render_list(&key);
                self.answer(session, ctx, LocalResponse::json(200, list))
                    .await
                    .map_err(Failure::Abort)
            }
            Route::GetModel(id) => {
                ctx.model = Some(id.clone());
                let model = catalog
                    .model_for(&key, &id)
                    .ok_or(RequestError::ModelNotFound { model: id })?;
                ctx.model_label = Some(model.id.clone());
                let entry = model.entry_json.clone();
                self.answer(session, ctx, LocalResponse::json(200, entry))
                    .await
                    .map_err(Failure::Abort)
            }
            Route::ChatCompletions => self.chat_completion(session, ctx, &catalog, &key).await,
        }
    }

    /// Steps 4-7 for `POST /v1/chat/completions`.
    async fn chat_completion(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        catalog: &Catalog,
        key: &Key,
    ) -> Result<(), Failure> {
        // 4. Body: size, media type, JSON, shape.
        check_declared_length(session, catalog.max_body_bytes)?;
        check_media_type(
            session
                .req_header()
                .headers
                .get("content-type")
                .map(|v| v.as_bytes()),
        )?;
        let body = read_body(session, catalog.max_body_bytes, catalog.client_timeout).await?;
        let request = inspect(&body)?;
        ctx.model = Some(request.model.clone());
        ctx.stream = request.stream;
        // 5. The model, in this key's view.
        let model = catalog
            .model_for(key, &request.model)
            .ok_or(RequestError::ModelNotFound {
                model: request.model.clone(),
            })?;
        ctx.model_label = Some(model.id.clone());
        // 6. Capabilities.
        if request.stream && !model.streaming {
            return Err(RequestError::CapabilityNotSupported {
                param: "stream",
                model: model.id.clone(),
                capability: "streaming",
            }
            .into());
        }
        if request.uses_tools && !model.tool_calling {
            return Err(RequestError::CapabilityNotSupported {
                param: "tools",
                model: model.id.clone(),
                capability: "tool calling",
            }
            .into());
        }
        // 7. Upstream.
        let dispatch = Dispatch {
            model,
            request: &request,
            body,
            request_id: &ctx.request_id,
            request_started: ctx.started,
            extra_headers: ctx
                .rate
                .as_ref()
                .map(|r| rate_headers(r).to_vec())
                .unwrap_or_default(),
            retry_attempts: catalog.retry_attempts,
            retry_backoff: catalog.retry_backoff,
        };
        let result = dispatch_request(
            session,
            &self.gateway,
            dispatch,
            &mut ctx.exchange,
            &mut ctx.called,
        )
        .await;
        if let Some(status) = ctx.exchange.status {
            ctx.status = status;
        }
        match result {
            Ok(()) => Ok(()),
            Err(ForwardError::BeforeResponse { error, .. }) => Err(Failure::Answer(error)),
            Err(ForwardError::AfterResponse { error, close }) => {
                Err(Failure::Ended { error, close })
            }
            Err(ForwardError::ClientGone(e)) => Err(Failure::Abort(e)),
            // `dispatch` resolves every hand-back itself.
            Err(ForwardError::Throttled { .. }) => Err(Failure::Answer(RequestError::Internal)),
        }
    }

    /// Writes a complete local response with the gateway's headers.
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        response: LocalResponse,
    ) -> Result<()> {
        let mut header = ResponseHeader::build(response.status, Some(response.headers.len() + 6))?;
        for (name, value) in &response.headers {
            header.insert_header(*name, value.as_str())?;
        }
        header.insert_header("content-length", response.body.len().to_string())?;
        header.insert_header("x-request-id", ctx.request_id.as_str())?;
        if let Some(rate) = &ctx.rate {
            for (name, value) in rate_headers(rate) {
                header.insert_header(name, value)?;
            }
        }
        let body_unread = !session.is_body_done();
        if body_unread {
            // An unread request body would be taken for the next request: close instead.
            session.set_keepalive(None);
        }
        ctx.status = response.status;
        ctx.exchange.bytes_out += response.body.len();
        session
            .write_response_header(Box::new(header), false)
            .await?;
        session
            .write_response_body(Some(response.body), true)
            .await?;
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

    fn record_error(&self, ctx: &mut RequestContext, error: RequestError) {
        let key = ctx.key.as_ref().map_or(UNKNOWN, |k| k.name.as_str());
        self.gateway
            .metrics
            .rejections
            .with_label_values(&[key, error.code()])
            .inc();
        ctx.error = Some(error);
    }

    fn log_request(&self, session: &Session, e: Option<&Error>, ctx: &RequestContext) {
        let duration = ctx.started.elapsed();
        let request = session.req_header();
        let key = ctx.key.as_ref().map(|k| k.name.as_str());
        let model_label = ctx.model_label.as_deref().unwrap_or(UNKNOWN);
        let client_gone = e.is_some() && ctx.error.is_none();
        let status = if ctx.status == 0 { 499 } else { ctx.status };
        let metrics = &self.gateway.metrics;
        metrics
            .requests
            .with_label_values(&[key.unwrap_or(UNKNOWN), model_label, &status.to_string()])
            .inc();
        metrics
            .request_duration
            .with_label_values(&[model_label])
            .observe(duration.as_secs_f64());
        metrics.overhead.observe(
            duration
                .saturating_sub(ctx.exchange.upstream_wait)
                .as_secs_f64(),
        );

        let error_code = ctx
            .error
            .as_ref()
            .map(RequestError::code)
            .or(client_gone.then_some("client_disconnected"));
        let record = AccessRecord {
            ts: now_rfc3339(),
            environment: ctx.catalog.as_ref().map_or("", |c| c.environment.as_str()),
            request_id: &ctx.request_id,
            method: request.method.as_str(),
            path: request.uri.path(),
            host: request_host(session),
            key,
            model: ctx
                .model
                .as_deref()
                .map(|m| bounded(m, MAX_LOGGED_MODEL_BYTES)),
            upstream: ctx.called.upstream.as_deref(),
            upstream_url: ctx.called.url.as_deref(),
            status,
            stream: ctx.stream,
            duration_ms: millis(duration),
            upstream_ms: ctx
                .exchange
                .ttfb
                .map(|_| millis(ctx.exchange.upstream_wait)),
            ttfb_ms: ctx.exchange.ttfb.map(millis),
            bytes_out: ctx.exchange.bytes_out,
            error_code,
            error_message: ctx.error.as_ref().map(RequestError::message),
            retry_after_ms: ctx
                .error
                .as_ref()
                .and_then(RequestError::retry_after)
                .map(|d| d.as_nanos().div_ceil(1_000_000) as u64),
            since_previous_ms: if ctx.error.as_ref().is_some_and(|e| e.status() == 429) {
                ctx.since_previous.map(millis)
            } else {
                None
            },
        };
        self.gateway.access_log.write(&record);
    }
}

/// Longest time spent discarding a refused request's body before closing.
const LINGER_MAX: Duration = Duration::from_secs(5);

/// Longest client-sent model ID written to the access log (the body may hold megabytes).
const MAX_LOGGED_MODEL_BYTES: usize = 256;

/// `text` cut to at most `max` bytes, on a character boundary.
fn bounded(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The Host a request names (HTTP/1 header, or the authority of an HTTP/2 request).
fn request_host(session: &Session) -> &str {
    let request = session.req_header();
    request
        .headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri.authority().map(|a| a.as_str()))
        .unwrap_or_default()
}

/// Refuses a body whose declared `Content-Length` is over `limit`, before reading any of it.
fn check_declared_length(session: &Session, limit: usize) -> Result<(), RequestError> {
    let declared = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    match declared {
        Some(length) if length > limit => Err(RequestError::RequestTooLarge { limit_bytes: limit }),
        _ => Ok(()),
    }
}

/// Reads the whole request body, refusing it past `limit` bytes. Answers
/// `Expect: 100-continue` first: by now the request is known to be acceptable so far.
async fn read_body(
    session: &mut Session,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Failure> {
    let expects_continue = session
        .req_header()
        .headers
        .get("expect")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        session
            .as_downstream_mut()
            .write_continue_response()
            .await
            .map_err(Failure::Abort)?;
    }
    // The whole body within `deadline`, not only each read: a client trickling a byte a
    // minute must not hold its slots forever.
    let whole_body = async {
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_request_body().await.map_err(Failure::Abort)? {
            if body.len() + chunk.len() > limit {
                return Err(RequestError::RequestTooLarge { limit_bytes: limit }.into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    match tokio::time::timeout(deadline, whole_body).await {
        Ok(read) => read,
        Err(_) => Err(Failure::Abort(Error::explain(
            ErrorType::ReadTimedout,
            "request body not received within client_timeout",
        ))),
    }
}
