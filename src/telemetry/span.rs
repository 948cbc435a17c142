//! A sampled span as it is recorded: the OTLP `Span` message itself, filled in place from
//! its start to its end and then handed to the export queue as it is, so that exporting
//! it converts nothing (the SDK's span kept its own record, which the exporter then copied
//! into these messages: most of a sampled request's tracing cost). An unsampled span has
//! no record at all: its IDs are all it needs.

use super::export::ExportQueue;
use opentelemetry::trace::{SpanContext, SpanId};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::{Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{status, Span, SpanFlags, Status};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The span's parent, if it has one.
pub(super) struct Parent {
    pub id: SpanId,
    /// The parent is the caller's (from its `traceparent`), not one of ours.
    pub remote: bool,
}

/// A span being recorded. Dropped without [`Recording::end`], it ends then.
pub(super) struct Recording {
    span: Box<Span>,
    queue: Arc<ExportQueue>,
}

impl Recording {
    /// Starts recording the span `context` names (a sampled one).
    pub(super) fn start(
        queue: &Arc<ExportQueue>,
        context: &SpanContext,
        parent: Option<Parent>,
        name: String,
        kind: SpanKind,
        started: SystemTime,
        attributes: usize,
    ) -> Recording {
        let remote = parent.as_ref().is_some_and(|p| p.remote);
        let span = Span {
            trace_id: context.trace_id().to_bytes().to_vec(),
            span_id: context.span_id().to_bytes().to_vec(),
            trace_state: context.trace_state().header(),
            parent_span_id: parent.map_or_else(Vec::new, |p| p.id.to_bytes().to_vec()),
            flags: flags(remote, context.trace_flags().to_u8()),
            name,
            kind: kind as i32,
            start_time_unix_nano: nanos(started),
            attributes: Vec::with_capacity(attributes),
            // Unset until it fails: OTLP's default status, sent like the SDK sent it.
            status: Some(Status::default()),
            ..Span::default()
        };
        Recording {
            span: Box::new(span),
            queue: Arc::clone(queue),
        }
    }

    /// Starts recording a span under this one's request (an attempt), for the same queue.
    pub(super) fn child(
        &self,
        context: &SpanContext,
        parent: Parent,
        name: String,
        kind: SpanKind,
        started: SystemTime,
        attributes: usize,
    ) -> Recording {
        Recording::start(
            &self.queue,
            context,
            Some(parent),
            name,
            kind,
            started,
            attributes,
        )
    }

    pub(super) fn rename(&mut self, name: String) {
        self.span.name = name;
    }

    pub(super) fn text(&mut self, key: &str, value: String) {
        self.push(key, any_value::Value::StringValue(value));
    }

    pub(super) fn int(&mut self, key: &str, value: i64) {
        self.push(key, any_value::Value::IntValue(value));
    }

    pub(super) fn bool(&mut self, key: &str, value: bool) {
        self.push(key, any_value::Value::BoolValue(value));
    }

    pub(super) fn double(&mut self, key: &str, value: f64) {
        self.push(key, any_value::Value::DoubleValue(value));
    }

    fn push(&mut self, key: &str, value: any_value::Value) {
        self.span.attributes.push(KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        });
    }

    /// Links the span to `other` (a caller's span it does not continue).
    pub(super) fn link(&mut self, other: &SpanContext) {
        self.span.links.push(Link {
            trace_id: other.trace_id().to_bytes().to_vec(),
            span_id: other.span_id().to_bytes().to_vec(),
            trace_state: other.trace_state().header(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            flags: flags(other.is_remote(), other.trace_flags().to_u8()),
        });
    }

    /// Marks the span as failed, with `message`.
    pub(super) fn fail(&mut self, message: String) {
        self.span.status = Some(Status {
            message,
            code: status::StatusCode::Error as i32,
        });
    }

    /// Ends the span now and queues it for export.
    pub(super) fn end(self) {
        let Recording { mut span, queue } = self;
        span.end_time_unix_nano = nanos(SystemTime::now());
        queue.push(span);
    }
}

/// OTLP's span flags: the W3C trace flags, and whether the parent is remote (always said).
fn flags(parent_remote: bool, trace_flags: u8) -> u32 {
    let mut flags = u32::from(trace_flags) | SpanFlags::ContextHasIsRemoteMask as u32;
    if parent_remote {
        flags |= SpanFlags::ContextIsRemoteMask as u32;
    }
    flags
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}
