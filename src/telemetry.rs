//! Traces (`tracing:`, docs/operations.md): a server span per request and a client span
//! per upstream attempt, after the OpenTelemetry GenAI conventions, exported over OTLP/HTTP
//! in the background. With no `tracing:` section there is no [`Telemetry`] and a request
//! does no tracing work at all.
//!
//! Sampling is decided first, for each request: an unsampled request (and its attempts)
//! has only its IDs, for the access log and the upstream's `traceparent`, and builds
//! nothing else. A sampled span's attributes are written as OTLP protobuf as they are set,
//! and the span is encoded once at its end into the current batch (`span.rs`), which the
//! export thread frames and sends. The OpenTelemetry crates give the ID types, the
//! `traceparent` parser and the resource's attributes; no SDK tracer is involved. Beside
//! this file: `request.rs` (the spans of one request), `span.rs` (a sampled span's record),
//! `sampling.rs` (the gateway's sampling decision and the IDs), `export.rs` (the bounded
//! queue of batches and the export thread) and `collector.rs` (the OTLP request and its
//! POST).

mod collector;
mod export;
mod request;
mod sampling;
mod span;

pub use request::{
    AttemptEnd, AttemptStart, AttemptTrace, RequestEnd, RequestTrace, TraceIdHex, UpstreamFields,
};

use crate::config::TracingConfig;
use collector::Collector;
use export::ExportQueue;
use http::{HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use prometheus::IntCounter;
use span::{Parent, Recording};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Longest text attribute value exported (`url.path`, a model name as the client wrote
/// it...), in characters: a client's text never makes a span larger than this.
pub const MAX_ATTRIBUTE_CHARS: usize = 512;
/// Longest one export may take, retries included; meanwhile spans queue, then are dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest the export thread gets at shutdown to send what is queued.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The gateway's tracer, built once in `main` (or by a test) from `tracing:`.
pub struct Telemetry {
    queue: Arc<ExportQueue>,
    sample_ratio: f64,
    trust_incoming: bool,
}

/// What a request's server span starts with.
pub struct RequestStart<'a> {
    pub headers: &'a http::HeaderMap,
    pub method: &'a str,
    pub path: &'a str,
    pub request_id: &'a str,
    /// When the request's head arrived.
    pub started: Instant,
}

impl Telemetry {
    /// Starts the export thread; spans that find its queue full, or whose export fails, are
    /// counted in `dropped` (`sluice_trace_spans_dropped_total`).
    pub fn start(config: &TracingConfig, dropped: IntCounter) -> Result<Telemetry, String> {
        let mut headers = Vec::with_capacity(config.headers.len());
        for (name, value) in &config.headers {
            let value = HeaderValue::from_str(value.expose())
                .map_err(|_| format!("tracing.headers.{name} is not a valid header value"))?;
            headers.push((HeaderName::clone(name), value));
        }
        // `service.name` and the attributes the SDK describes itself with
        // (`telemetry.sdk.*`, `OTEL_RESOURCE_ATTRIBUTES`), converted once.
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let resource = ResourceAttributesWithSchema::from(&resource);
        let collector = Collector {
            endpoint: config.otlp_endpoint.clone(),
            headers,
            resource: Resource {
                attributes: resource.attributes.0,
                ..Resource::default()
            },
            resource_schema: resource.schema_url.unwrap_or_default(),
            timeout: EXPORT_TIMEOUT,
        };
        let queue = ExportQueue::start(collector, dropped)
            .map_err(|e| format!("cannot start the trace export thread: {e}"))?;
        Ok(Telemetry {
            queue: Arc::new(queue),
            sample_ratio: config.sample_ratio,
            trust_incoming: config.trust_incoming,
        })
    }

    /// The server span of a request, under the client's `traceparent` when it is valid and
    /// trusted (linked to it when not trusted). A malformed one is ignored: a new trace.
    /// Either way the gateway's `sample_ratio` decides whether it is sampled.
    pub fn request(&self, start: RequestStart<'_>) -> RequestTrace {
        let incoming = incoming(start.headers);
        let (parent, linked) = match incoming {
            Some(incoming) if self.trust_incoming => (Some(incoming), None),
            other => (None, other),
        };
        let sampled = sampling::draw(self.sample_ratio);
        let context = SpanContext::new(
            parent
                .as_ref()
                .map_or_else(sampling::trace_id, SpanContext::trace_id),
            sampling::span_id(),
            if sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            false,
            // A trusted caller's `tracestate` goes on with its trace.
            parent
                .as_ref()
                .map_or_else(TraceState::default, |p| p.trace_state().clone()),
        );
        if !sampled {
            return RequestTrace::new(context, None);
        }
        // Named `{method} {route}` once the route is known (`RequestTrace::set_route`).
        let mut span = Recording::start(
            &self.queue,
            &context,
            parent.map(|p| Parent {
                id: p.span_id(),
                remote: true,
            }),
            &[start.method],
            SpanKind::Server,
            SystemTime::now() - start.started.elapsed(),
        );
        if let Some(linked) = linked {
            span.link(&linked);
        }
        span.text("http.request.method", start.method);
        span.text("url.path", start.path);
        span.text("sluice.request_id", start.request_id);
        RequestTrace::new(context, Some(span))
    }

    /// Sends every span ended so far, and waits until the collector took them or the
    /// export failed. Blocks: for tests and tools, never on the request path.
    pub fn flush(&self) {
        if !self.queue.flush() {
            log::warn!(target: "sluice::telemetry", "traces not flushed: the export thread stopped");
        }
    }

    /// Sends what is queued, waiting at most a few seconds: at shutdown.
    pub fn shutdown(&self) {
        if !self.queue.shutdown(SHUTDOWN_TIMEOUT) {
            log::warn!(target: "sluice::telemetry", "traces not all exported at shutdown");
        }
    }
}

/// The caller's span, from a valid `traceparent` (and its `tracestate`); none without one.
fn incoming(headers: &http::HeaderMap) -> Option<SpanContext> {
    if !headers.contains_key(TRACEPARENT) {
        return None;
    }
    let context = TraceContextPropagator::new().extract(&Headers(headers));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// A request's headers as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// `text` cut to [`MAX_ATTRIBUTE_CHARS`] characters, for a span name or attribute.
fn capped(text: &str) -> &str {
    // Never more characters than bytes: most values end here without a walk over them.
    if text.len() <= MAX_ATTRIBUTE_CHARS {
        return text;
    }
    match text.char_indices().nth(MAX_ATTRIBUTE_CHARS) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::{capped, MAX_ATTRIBUTE_CHARS};

    #[test]
    fn a_text_is_cut_to_its_first_characters_not_bytes() {
        let max = MAX_ATTRIBUTE_CHARS;
        for (text, chars) in [
            ("a".repeat(max), max),
            ("a".repeat(max + 1), max),
            ("é".repeat(max), max),
            ("é".repeat(max + 1), max),
            (format!("{}é", "a".repeat(max - 1)), max),
            ("ab".into(), 2),
            (String::new(), 0),
        ] {
            let cut = capped(&text);
            assert!(text.starts_with(cut));
            assert_eq!(cut.chars().count(), chars, "{} bytes", text.len());
        }
    }
}
