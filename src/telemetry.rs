//! Traces (`tracing:`, docs/operations.md): a server span per request and a client span
//! per upstream attempt, after the OpenTelemetry GenAI conventions, exported over OTLP/HTTP
//! in the background. With no `tracing:` section there is no [`Telemetry`] and a request
//! does no tracing work at all.
//!
//! The OpenTelemetry API is used directly (no `tracing` crate): a request's spans live in
//! its context and end when it drops, like every other resource it holds. Beside this file:
//! `request.rs` (the spans of one request), `sampling.rs` (the gateway's sampling decision),
//! `export.rs` (the bounded queue and the export thread) and `collector.rs` (the HTTP client
//! that posts to the collector).

mod collector;
mod export;
mod request;
mod sampling;

pub use request::{AttemptEnd, AttemptStart, AttemptTrace, RequestEnd, RequestTrace};

use crate::config::TracingConfig;
use collector::CollectorClient;
use export::ExportQueue;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Link, Span as _, SpanKind, TraceContextExt, Tracer, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;
use std::time::{Duration, SystemTime};

/// Longest text attribute value exported (`url.path`, a model name as the client wrote
/// it...), in characters: a client's text never makes a span larger than this.
pub const MAX_ATTRIBUTE_CHARS: usize = 512;
/// Longest one export may take, retries included; meanwhile spans queue, then are dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest the export thread gets at shutdown to send what is queued.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The gateway's tracer, built once in `main` (or by a test) from `tracing:`.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    trust_incoming: bool,
}

/// What a request's server span starts with.
pub struct RequestStart<'a> {
    pub headers: &'a http::HeaderMap,
    pub method: &'a str,
    pub path: &'a str,
    pub request_id: &'a str,
    /// When the request's head arrived.
    pub started: SystemTime,
}

impl Telemetry {
    /// Starts the export thread; spans that find its queue full, or whose export fails, are
    /// counted in `dropped` (`sluice_trace_spans_dropped_total`).
    pub fn start(config: &TracingConfig, dropped: IntCounter) -> Result<Telemetry, String> {
        let headers = config
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.expose().to_owned()))
            .collect();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(CollectorClient::new(EXPORT_TIMEOUT))
            .with_endpoint(config.otlp_endpoint.to_string())
            .with_headers(headers)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let queue = ExportQueue::start(exporter, &resource, dropped)
            .map_err(|e| format!("cannot start the trace export thread: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_sampler(sampling::GatewaySampler {
                ratio: config.sample_ratio,
            })
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Telemetry {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
            trust_incoming: config.trust_incoming,
        })
    }

    /// The server span of a request, under the client's `traceparent` when it is valid and
    /// trusted (linked to it when not trusted). A malformed one is ignored: a new trace.
    /// Either way the gateway's `sample_ratio` decides whether it is sampled.
    pub fn request(&self, start: RequestStart<'_>) -> RequestTrace {
        let incoming = self
            .propagator
            .extract(&HeaderExtractor(start.headers))
            .span()
            .span_context()
            .clone();
        let (parent, links) = match (incoming.is_valid(), self.trust_incoming) {
            (true, true) => (
                Context::new().with_remote_span_context(incoming),
                Vec::new(),
            ),
            (true, false) => (Context::new(), vec![Link::with_context(incoming)]),
            (false, _) => (Context::new(), Vec::new()),
        };
        // Named `{method} {route}` once the route is known (`RequestTrace::set_route`).
        let mut span = self
            .tracer
            .span_builder(capped(start.method))
            .with_kind(SpanKind::Server)
            .with_start_time(start.started)
            .with_links(links)
            .start_with_context(&self.tracer, &parent);
        // Only a sampled span's attributes are ever read: an unsampled request builds none.
        if span.is_recording() {
            span.set_attributes([
                KeyValue::new("http.request.method", capped(start.method)),
                KeyValue::new("url.path", capped(start.path)),
                KeyValue::new("sluice.request_id", start.request_id.to_owned()),
            ]);
        }
        RequestTrace::new(span, self.tracer.clone())
    }

    /// Sends every span ended so far, and waits until the collector took them or the
    /// export failed. Blocks: for tests and tools, never on the request path.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            log::warn!(target: "sluice::telemetry", error:% = e; "traces not flushed");
        }
    }

    /// Sends what is queued, waiting at most a few seconds: at shutdown.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            log::warn!(target: "sluice::telemetry", error:% = e; "traces not all exported at shutdown");
        }
    }
}

/// `text` cut to [`MAX_ATTRIBUTE_CHARS`] characters, for a span name or attribute.
fn capped(text: &str) -> String {
    match text.char_indices().nth(MAX_ATTRIBUTE_CHARS) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}
