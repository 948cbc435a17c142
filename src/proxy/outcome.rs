//! The end of a request: the rejection count of a gateway-made error, the request metrics,
//! and the access-log record (the spec's error record for failures).

use super::context::{Broken, RequestContext};
use super::downstream::request_host;
use crate::access_log::{millis, now_rfc3339, AccessRecord};
use crate::catalog::ModelCounter;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::listener::Session;
use crate::metrics::UNKNOWN;
use crate::respond::error_response;
use crate::telemetry::{RequestEnd, RequestTrace, TraceIdHex};
use pingora_http::ResponseHeader;

/// Longest client-sent model ID written to the access log (the body may hold megabytes).
const MAX_LOGGED_MODEL_BYTES: usize = 256;
/// Longest path written to the access log (a request line may be 64 KiB).
const MAX_LOGGED_PATH_BYTES: usize = 1024;
/// Longest `Host` written to the access log.
const MAX_LOGGED_HOST_BYTES: usize = 256;

/// Notes a gateway-made error answer: counted in `sluice_rejections_total`, kept for the log.
pub(super) fn record_error(gateway: &Gateway, ctx: &mut RequestContext, error: RequestError) {
    let key = ctx.key.as_ref().map_or(UNKNOWN, |k| k.name.as_str());
    gateway
        .metrics
        .rejections
        .with_label_values(&[key, error.code()])
        .inc();
    ctx.error = Some(error);
}

/// Settles the request's token reservation with the usage its answer reported, and counts
/// the tokens. An answer that may have used tokens but reported none (cut, client gone,
/// no usage sent) leaves the reservation standing, counted in `sluice_usage_missing_total`
/// where usage is part of the route's contract; a request that generated nothing (no
/// upstream reached, or an error answer) gets its reservation back whole.
///
/// Usage that is not plausible (a count of 2^24 or more, or output beyond the request's own
/// limit plus slack) is not believed: it counts as missing, the reservation stands, and it
/// is counted in `sluice_usage_implausible_total` (not in `sluice_usage_missing_total`).
pub(super) fn settle_tokens(gateway: &Gateway, e: Option<&Broken>, ctx: &mut RequestContext) {
    let metrics = &gateway.metrics;
    let implausible = ctx
        .exchange
        .usage
        .is_some_and(|usage| !usage.plausible(ctx.output_limit));
    if implausible {
        let upstream = ctx.called.upstream.as_deref().unwrap_or(UNKNOWN);
        metrics
            .usage_implausible
            .with_label_values(&[upstream])
            .inc();
        log::warn!(target: "sluice::limits", request_id = ctx.request_id.as_str(), upstream = upstream; "usage reported by the upstream is not plausible; the reservation stands");
        // Not believed anywhere: not in the token counts, the log line or the trace.
        ctx.exchange.usage = None;
    }
    let usage = ctx.exchange.usage;
    if let (Some(usage), Some(key)) = (usage, &ctx.key) {
        let counts = [
            (ModelCounter::InputTokens, "input", usage.input),
            (ModelCounter::OutputTokens, "output", usage.output),
        ];
        for (which, kind, count) in counts {
            let resolve = |model: &str| metrics.tokens.with_label_values(&[&key.name, model, kind]);
            match &ctx.catalog_model {
                Some(model) => key.series.add(model, which, count, || resolve(&model.id)),
                None => resolve(UNKNOWN).inc_by(count),
            }
        }
    }
    let client_gone = e.is_some() && ctx.error.is_none();
    let upstream = ctx.called.upstream.as_deref();
    let may_have_used = match ctx.exchange.status {
        Some(status) => (200..300).contains(&status),
        None => {
            upstream.is_some()
                && (client_gone
                    || matches!(
                        ctx.error,
                        Some(RequestError::UpstreamTimeout | RequestError::UpstreamClosed)
                    ))
        }
    };
    let missing = usage.is_none() && !implausible && may_have_used && ctx.usage_expected;
    if let (true, Some(upstream)) = (missing, upstream) {
        metrics.usage_missing.with_label_values(&[upstream]).inc();
    }
    // What was used: the usage, nothing, or unknown (then the reservation stands).
    let used = match usage {
        Some(usage) => Some(usage.total()),
        None if may_have_used || implausible => None,
        None => Some(0),
    };
    if let (Some(reservation), Some(used)) = (ctx.reservation.take(), used) {
        gateway.limiter.reconcile(reservation, used);
    }
    let cost = super::spend::settle_budget(gateway, ctx, usage, used);
    if let Some(grant) = ctx.grant.take() {
        // Tokens, money and lease, in the key's next store call.
        grant.settle(used, cost);
    }
}

/// The request's metrics and its access-log line. `e`: why its answer did not end well.
pub(super) fn log_request(
    gateway: &Gateway,
    session: &Session,
    e: Option<&Broken>,
    ctx: &RequestContext,
) {
    let duration = ctx.started.elapsed();
    let request = session.req_header();
    let key = ctx.key.as_ref().map(|k| k.name.as_str());
    let model_label = ctx
        .catalog_model
        .as_ref()
        .map_or(UNKNOWN, |m| m.id.as_str());
    let status = if ctx.status == 0 { 499 } else { ctx.status };
    let metrics = &gateway.metrics;
    // Every status we record (100-999) has its text ready in `StatusCode`.
    let resolve = || {
        let code = http::StatusCode::from_u16(status).ok();
        let status_text = code.as_ref().map_or(UNKNOWN, http::StatusCode::as_str);
        metrics
            .requests
            .with_label_values(&[key.unwrap_or(UNKNOWN), model_label, status_text])
    };
    match (&ctx.key, &ctx.catalog_model) {
        (Some(key), Some(model)) => {
            key.series
                .add(model, ModelCounter::Requests(status), 1, resolve)
        }
        _ => resolve().inc(),
    }
    let seconds = duration.as_secs_f64();
    match &ctx.catalog_model {
        Some(model) => model
            .request_duration
            .get(|| metrics.request_duration.with_label_values(&[model_label]))
            .observe(seconds),
        None => metrics
            .request_duration
            .with_label_values(&[model_label])
            .observe(seconds),
    }
    let served_model = ctx.served_model.as_deref();
    if let Some(served) = served_model.filter(|served| *served != model_label) {
        metrics
            .model_fallbacks
            .with_label_values(&[model_label, served])
            .inc();
    }
    metrics.overhead.observe(
        duration
            .saturating_sub(ctx.exchange.upstream_wait)
            .as_secs_f64(),
    );

    let error_code = error_code(ctx, e);
    // The upstream's own error answer, when it was passed on rather than ours.
    let upstream_error = ctx
        .exchange
        .upstream_error
        .as_ref()
        .filter(|_| ctx.error.is_none());
    let retry_after = match &ctx.error {
        Some(error) => error.retry_after(),
        None if status == 429 => ctx.exchange.upstream_retry_after,
        None => None,
    };
    let tls = session.tls();
    let trace_id = ctx.trace.as_deref().map(RequestTrace::trace_id);
    let record = AccessRecord {
        ts: now_rfc3339(),
        environment: ctx.catalog.as_ref().map_or("", |c| c.environment.as_str()),
        request_id: &ctx.request_id,
        trace_id: trace_id.as_ref().map(TraceIdHex::as_str),
        method: request.method.as_str(),
        path: bounded(request.uri.path(), MAX_LOGGED_PATH_BYTES),
        host: bounded(request_host(session), MAX_LOGGED_HOST_BYTES),
        http_version: session.http_version(),
        key,
        key_owner: ctx.key.as_ref().and_then(|k| k.owner.as_deref()),
        key_labels: ctx
            .key
            .as_ref()
            .map(|k| &k.labels)
            .filter(|labels| !labels.is_empty()),
        model: ctx
            .model
            .as_deref()
            .map(|m| bounded(m, MAX_LOGGED_MODEL_BYTES)),
        served_model,
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
        cut: ctx.exchange.cut,
        error_code,
        error_message: ctx
            .error
            .as_ref()
            .map(RequestError::message)
            .or_else(|| upstream_error.and_then(|u| u.message.clone())),
        retry_after_ms: retry_after.map(crate::error::wait_millis),
        since_previous_ms: (status == 429)
            .then_some(ctx.since_previous)
            .flatten()
            .map(millis),
        upstream_status: upstream_error.map(|_| status),
        upstream_error_code: upstream_error.and_then(|u| u.code.as_deref()),
        upstream_request_id: upstream_error.and_then(|u| u.request_id.as_deref()),
        cut_by_shutdown: ctx.cut_by_shutdown,
        input_tokens: ctx.exchange.usage.map(|u| u.input),
        output_tokens: ctx.exchange.usage.map(|u| u.output),
        reserved_tokens: ctx.reserved_tokens,
        cost_usd: ctx.cost_micros,
        tls_version: tls.map(|t| t.version),
        tls_client_subject: tls.and_then(|t| t.client_subject.as_deref()),
    };
    log::trace!(target: "sluice::request", request_id = ctx.request_id.as_str(), status, duration_ms = record.duration_ms; "request finished");
    gateway.access_log.write(&record);
}

/// Our code for how the request failed, if it did (`client_disconnected` for a client
/// that left).
fn error_code(ctx: &RequestContext, e: Option<&Broken>) -> Option<&'static str> {
    let client_gone = e.is_some() && ctx.error.is_none();
    ctx.error
        .as_ref()
        .map(RequestError::code)
        .or(client_gone.then_some("client_disconnected"))
}

/// Ends the request's server span (when tracing is configured) with its outcome.
pub(super) fn finish_trace(e: Option<&Broken>, ctx: &mut RequestContext) {
    let error = error_code(ctx, e);
    let Some(trace) = ctx.trace.as_mut() else {
        return;
    };
    trace.finish(RequestEnd {
        status: if ctx.status == 0 { 499 } else { ctx.status },
        error,
        key: ctx.key.as_ref().map(|k| k.name.as_str()),
        model: ctx.model.as_deref(),
        served_model: ctx.served_model.as_deref(),
        stream: ctx.stream,
        usage: ctx.exchange.usage,
    });
}

/// Answers a request head the session refused, or a `CONNECT`, with the gateway's error
/// envelope and an `x-request-id`, through the session like every answer; counts it in
/// `sluice_rejections_total` and `sluice_requests_total` and writes its access-log line.
/// The connection is then closed.
pub(super) async fn refuse_head(gateway: &Gateway, session: &mut Session, error: RequestError) {
    let request_id = crate::request_id::accept_or_generate(None);
    let response = error_response(&error);
    session.disable_keepalive();
    let written = async {
        let unmade = |_| crate::http1::Error::InvalidAnswer("a refused head's answer");
        let mut header =
            ResponseHeader::build_no_case(response.status, Some(response.headers.len() + 2))
                .map_err(unmade)?;
        for (name, value) in &response.headers {
            header
                .insert_header(*name, value.as_str())
                .map_err(unmade)?;
        }
        header
            .insert_header(http::header::CONTENT_LENGTH, response.body.len())
            .map_err(unmade)?;
        header
            .insert_header(crate::request_id::HEADER, request_id.as_str())
            .map_err(unmade)?;
        session.write_response_header(header).await?;
        session
            .write_response_body(response.body.clone(), true)
            .await
    };
    let _ = written.await;
    gateway
        .metrics
        .rejections
        .with_label_values(&[UNKNOWN, error.code()])
        .inc();
    gateway
        .metrics
        .requests
        .with_label_values(&[UNKNOWN, UNKNOWN, &response.status.to_string()])
        .inc();
    let catalog = gateway.catalog();
    let tls = session.tls();
    gateway.access_log.write(&AccessRecord {
        ts: now_rfc3339(),
        environment: &catalog.environment,
        request_id: &request_id,
        method: "",
        path: "",
        host: "",
        http_version: session.http_version(),
        status: response.status,
        bytes_out: response.body.len(),
        error_code: Some(error.code()),
        error_message: Some(error.message()),
        tls_version: tls.map(|t| t.version),
        tls_client_subject: tls.and_then(|t| t.client_subject.as_deref()),
        ..AccessRecord::default()
    });
}

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
