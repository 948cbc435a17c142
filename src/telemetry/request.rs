//! The spans of one request: its server span, held in the request's context from the head
//! to the log line, and a client span per upstream attempt (resends and fallbacks are
//! siblings under the server span). A span dropped unfinished (a task cancelled at shutdown)
//! still ends and is exported.

use super::sampling;
use super::span::{Parent, Recording};
use crate::hex::{digits_u128, digits_u64, write_lower};
use crate::usage::Usage;
use opentelemetry::trace::{SpanContext, TraceFlags};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use std::time::{Duration, SystemTime};

/// A request's server span: its IDs, and its record when it is sampled.
pub struct RequestTrace {
    context: SpanContext,
    span: Option<Recording>,
}

/// What an upstream attempt's client span starts with.
pub struct AttemptStart<'a> {
    /// The GenAI operation (`chat`, `text_completion`, `embeddings`...).
    pub operation: &'a str,
    /// The model the upstream is asked for (its own name for it, if it has one).
    pub request_model: &'a str,
    pub upstream: &'a str,
    /// The upstream's `host[:port]`.
    pub server: &'a str,
    /// 1 for the first attempt of the request, counting resends and fallbacks.
    pub number: u32,
}

/// How an upstream attempt ended.
#[derive(Debug, Default)]
pub struct AttemptEnd<'a> {
    /// The upstream's status, if it answered.
    pub status: Option<u16>,
    /// Our error code when the attempt failed (`upstream_timeout`...), else none.
    pub error: Option<&'a str>,
    pub usage: Option<Usage>,
    /// From sending the request to the response's first byte.
    pub time_to_first_chunk: Option<Duration>,
    /// The model that answered, as the answer names it.
    pub response_model: Option<&'a str>,
    /// The answer was held back so another target or model takes the request.
    pub handed_back: bool,
}

/// How a request ended, for its server span.
#[derive(Debug, Default)]
pub struct RequestEnd<'a> {
    pub status: u16,
    /// Our error code (`rate_limited`, `client_disconnected`...), if the request failed.
    pub error: Option<&'a str>,
    pub key: Option<&'a str>,
    /// The model as the client named it, and the catalog model that served it.
    pub model: Option<&'a str>,
    pub served_model: Option<&'a str>,
    pub stream: bool,
    pub usage: Option<Usage>,
}

impl RequestTrace {
    pub(super) fn new(context: SpanContext, span: Option<Recording>) -> Self {
        RequestTrace { context, span }
    }

    /// The trace ID in lower-case hex, for the access log.
    pub fn trace_id(&self) -> TraceIdHex {
        TraceIdHex(digits_u128(u128::from_be_bytes(
            self.context.trace_id().to_bytes(),
        )))
    }

    /// Names the span for its route (`POST /v1/chat/completions`): a template, so span
    /// names stay few whatever IDs the paths carry.
    /// `route` is only called for a sampled request.
    pub fn set_route(&mut self, method: &str, route: impl FnOnce() -> String) {
        if let Some(span) = &mut self.span {
            let route = route();
            span.rename(&[method, &route]);
            span.text("http.route", &route);
        }
    }

    /// Starts the client span of one upstream attempt: sampled when its request is, and
    /// otherwise only its IDs, for the upstream's `traceparent`.
    pub fn attempt(&self, start: AttemptStart<'_>) -> AttemptTrace {
        let context = SpanContext::new(
            self.context.trace_id(),
            sampling::span_id(),
            self.context.trace_flags(),
            false,
            self.context.trace_state().clone(),
        );
        let Some(request) = &self.span else {
            return AttemptTrace {
                context,
                span: None,
            };
        };
        let mut span = request.child(
            &context,
            Parent {
                id: self.context.span_id(),
                remote: false,
            },
            &[start.operation, start.request_model],
            SpanKind::Client,
            SystemTime::now(),
        );
        let (address, port) = host_and_port(start.server);
        span.text("gen_ai.operation.name", start.operation);
        span.text("gen_ai.request.model", start.request_model);
        span.text("server.address", address);
        span.text("sluice.upstream", start.upstream);
        span.int("sluice.attempt", i64::from(start.number));
        if let Some(port) = port {
            span.int("server.port", i64::from(port));
        }
        AttemptTrace {
            context,
            span: Some(span),
        }
    }

    /// Ends the server span with the request's outcome.
    pub fn finish(&mut self, end: RequestEnd<'_>) {
        let Some(mut span) = self.span.take() else {
            return;
        };
        span.int("http.response.status_code", i64::from(end.status));
        span.bool("sluice.stream", end.stream);
        if let Some(key) = end.key {
            span.text("sluice.key", key);
        }
        if let Some(model) = end.model {
            span.text("gen_ai.request.model", model);
        }
        if let Some(served) = end.served_model {
            span.text("sluice.served_model", served);
        }
        set_usage(&mut span, end.usage);
        if let Some(error) = end.error {
            span.text("error.type", error);
        }
        // A server span is in error for a 5xx only: a 4xx is the client's.
        if end.status >= 500 {
            span.fail(end.error.unwrap_or(""));
        }
        span.end();
    }
}

/// A span dropped unfinished (its task cancelled) still ends and is exported.
impl Drop for RequestTrace {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            span.end();
        }
    }
}

/// An upstream attempt's client span.
pub struct AttemptTrace {
    context: SpanContext,
    span: Option<Recording>,
}

impl AttemptTrace {
    /// Whether the attempt is sampled: what it records is exported.
    pub fn is_recording(&self) -> bool {
        self.span.is_some()
    }

    /// `traceparent` (and `tracestate`, if any) naming this attempt, for the upstream.
    pub fn upstream_headers(&self) -> UpstreamFields {
        upstream_headers(&self.context)
    }

    /// Ends the span with the attempt's outcome.
    pub fn finish(mut self, end: AttemptEnd<'_>) {
        let Some(mut span) = self.span.take() else {
            return;
        };
        if let Some(status) = end.status {
            span.int("http.response.status_code", i64::from(status));
        }
        if let Some(model) = end.response_model {
            span.text("gen_ai.response.model", model);
        }
        if let Some(ttfc) = end.time_to_first_chunk {
            span.double("gen_ai.response.time_to_first_chunk", ttfc.as_secs_f64());
        }
        set_usage(&mut span, end.usage);
        if end.handed_back {
            span.bool("sluice.handed_back", true);
        }
        // A client span is in error for our own failure or any 4xx or 5xx answer.
        let error = match (end.error, end.status) {
            (Some(code), _) => Some(code.to_owned()),
            (None, Some(status)) if status >= 400 => Some(status.to_string()),
            _ => None,
        };
        if let Some(error) = error {
            span.text("error.type", &error);
            span.fail(&error);
        }
        span.end();
    }
}

impl Drop for AttemptTrace {
    fn drop(&mut self) {
        if let Some(span) = self.span.take() {
            span.end();
        }
    }
}

/// `gen_ai.usage.*` once an answer's tokens were read.
fn set_usage(span: &mut Recording, usage: Option<Usage>) {
    if let Some(usage) = usage {
        span.int("gen_ai.usage.input_tokens", usage.input as i64);
        span.int("gen_ai.usage.output_tokens", usage.output as i64);
    }
}

/// `host` and `port` of `host[:port]` (an IPv6 host in brackets keeps them).
fn host_and_port(authority: &str) -> (&str, Option<u16>) {
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (authority, None),
        },
        _ => (authority, None),
    }
}

/// A trace ID in lower-case hex, written on the stack (no allocation per request).
pub struct TraceIdHex([u8; 32]);

impl TraceIdHex {
    pub fn as_str(&self) -> &str {
        // Hex digits only: always valid.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The W3C Trace Context fields naming an attempt, for its upstream request.
pub struct UpstreamFields {
    /// None for an invalid context (nothing to propagate).
    traceparent: Option<[u8; 55]>,
    tracestate: String,
}

impl UpstreamFields {
    /// `traceparent`'s value: hex digits and dashes. Empty for an invalid context.
    pub fn traceparent(&self) -> &[u8] {
        self.traceparent.as_ref().map_or(&[], |p| p)
    }

    /// `tracestate`'s value, empty when it has no entries (or the context is invalid).
    pub fn tracestate(&self) -> &[u8] {
        self.tracestate.as_bytes()
    }
}

/// The W3C Trace Context fields naming `context`: version 00, the trace and span IDs and
/// the flags in lower-case hex, written directly (the SDK's propagator formats each ID
/// through `fmt`, a few thousand instructions a request, sampled or not).
fn upstream_headers(context: &SpanContext) -> UpstreamFields {
    if !context.is_valid() {
        return UpstreamFields {
            traceparent: None,
            tracestate: String::new(),
        };
    }
    let mut parent = *b"00-0123456789abcdef0123456789abcdef-0123456789abcdef-00";
    parent[3..35].copy_from_slice(&digits_u128(u128::from_be_bytes(
        context.trace_id().to_bytes(),
    )));
    parent[36..52].copy_from_slice(&digits_u64(u64::from_be_bytes(
        context.span_id().to_bytes(),
    )));
    // Only the sampled flag is defined in version 00 (the SDK masks the rest too).
    write_lower(
        &mut parent[53..],
        &[(context.trace_flags() & TraceFlags::SAMPLED).to_u8()],
    );
    UpstreamFields {
        traceparent: Some(parent),
        // An empty `tracestate` says nothing: not sent.
        tracestate: context.trace_state().header(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TraceState};
    use opentelemetry::Context;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use std::collections::HashMap;

    /// What the SDK's own propagator writes for `context`.
    fn sdk_fields(context: &SpanContext) -> Vec<(String, String)> {
        let mut fields = HashMap::new();
        TraceContextPropagator::new().inject_context(
            &Context::new().with_remote_span_context(context.clone()),
            &mut fields,
        );
        let mut fields: Vec<(String, String)> = fields
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        fields.sort();
        fields
    }

    fn ours(context: &SpanContext) -> Vec<(String, String)> {
        let fields = upstream_headers(context);
        let mut fields: Vec<(String, String)> = [
            ("traceparent", fields.traceparent()),
            ("tracestate", fields.tracestate()),
        ]
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| (name.to_owned(), String::from_utf8(value.to_vec()).unwrap()))
        .collect();
        fields.sort();
        fields
    }

    #[test]
    fn the_fields_are_the_sdk_propagators() {
        let state = TraceState::from_key_value([("vendor", "opaque"), ("other", "1")]).unwrap();
        for (flags, state) in [
            (TraceFlags::SAMPLED, TraceState::default()),
            (TraceFlags::default(), TraceState::default()),
            (TraceFlags::new(0x03), TraceState::default()),
            (TraceFlags::SAMPLED, state),
        ] {
            let context = SpanContext::new(
                TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
                SpanId::from_hex("00f067aa0ba902b7").unwrap(),
                flags,
                true,
                state,
            );
            assert_eq!(ours(&context), sdk_fields(&context));
        }
        assert_eq!(
            ours(&SpanContext::NONE),
            Vec::new(),
            "an invalid context propagates nothing"
        );
    }
}
