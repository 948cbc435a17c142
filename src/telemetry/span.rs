//! A sampled span as it is recorded: the OTLP `Span` message itself, filled in place from
//! its start to its end and then handed to the export queue as it is, so that exporting
//! it converts nothing (the SDK's span kept its own record, which the exporter then copied
//! into these messages: most of a sampled request's tracing cost). Once encoded, a message
//! comes back to the queue's pool and the next span is written over it, reusing its
//! strings and lists, so that a span in the steady state allocates nearly nothing. An
//! unsampled span has no record at all: its IDs are all it needs.

use super::export::ExportQueue;
use opentelemetry::trace::{SpanContext, SpanId, TraceState};
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

/// A span being recorded. Dropped without [`Recording::end`], it ends then (its owner's
/// `Drop` calls it).
pub(super) struct Recording {
    span: Box<Span>,
    /// Attributes written so far: the message's list may hold more, left from the span
    /// it was before, to be written over.
    attributes: usize,
    queue: Arc<ExportQueue>,
}

impl Recording {
    /// Starts recording the span `context` names (a sampled one), `name` in parts.
    pub(super) fn start(
        queue: &Arc<ExportQueue>,
        context: &SpanContext,
        parent: Option<Parent>,
        name: &[&str],
        kind: SpanKind,
        started: SystemTime,
    ) -> Recording {
        let mut span = queue.recycled().unwrap_or_default();
        let remote = parent.as_ref().is_some_and(|p| p.remote);
        replace(&mut span.trace_id, &context.trace_id().to_bytes());
        replace(&mut span.span_id, &context.span_id().to_bytes());
        span.trace_state.clear();
        if *context.trace_state() != TraceState::NONE {
            span.trace_state.push_str(&context.trace_state().header());
        }
        match parent {
            Some(parent) => replace(&mut span.parent_span_id, &parent.id.to_bytes()),
            None => span.parent_span_id.clear(),
        }
        span.flags = flags(remote, context.trace_flags().to_u8());
        span.kind = kind as i32;
        span.start_time_unix_nano = nanos(started);
        span.end_time_unix_nano = 0;
        span.links.clear();
        // Unset until it fails: OTLP's default status, sent like the SDK sent it.
        let status = span.status.get_or_insert_with(Status::default);
        status.code = status::StatusCode::Unset as i32;
        status.message.clear();
        let mut recording = Recording {
            span,
            attributes: 0,
            queue: Arc::clone(queue),
        };
        recording.rename(name);
        recording
    }

    /// Starts recording a span under this one's request (an attempt), for the same queue.
    pub(super) fn child(
        &self,
        context: &SpanContext,
        parent: Parent,
        name: &[&str],
        kind: SpanKind,
        started: SystemTime,
    ) -> Recording {
        Recording::start(&self.queue, context, Some(parent), name, kind, started)
    }

    /// Names the span: `parts` joined by spaces, cut to [`super::MAX_ATTRIBUTE_CHARS`] characters.
    pub(super) fn rename(&mut self, parts: &[&str]) {
        let name = &mut self.span.name;
        name.clear();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                name.push(' ');
            }
            name.push_str(part);
        }
        name.truncate(super::capped(name).len());
    }

    /// A text attribute, cut to [`super::MAX_ATTRIBUTE_CHARS`] characters.
    pub(super) fn text(&mut self, key: &str, value: &str) {
        let value = super::capped(value);
        if let Some(any_value::Value::StringValue(text)) = self.slot(key) {
            text.clear();
            text.push_str(value);
            return;
        }
        self.set(any_value::Value::StringValue(value.to_owned()));
    }

    pub(super) fn int(&mut self, key: &str, value: i64) {
        self.slot(key);
        self.set(any_value::Value::IntValue(value));
    }

    pub(super) fn bool(&mut self, key: &str, value: bool) {
        self.slot(key);
        self.set(any_value::Value::BoolValue(value));
    }

    pub(super) fn double(&mut self, key: &str, value: f64) {
        self.slot(key);
        self.set(any_value::Value::DoubleValue(value));
    }

    /// The next attribute's place, named `key`, and its value as the span before left it.
    fn slot(&mut self, key: &str) -> Option<&mut any_value::Value> {
        let attributes = &mut self.span.attributes;
        if self.attributes == attributes.len() {
            attributes.push(KeyValue::default());
        }
        let slot = &mut attributes[self.attributes];
        self.attributes += 1;
        slot.key.clear();
        slot.key.push_str(key);
        slot.value.as_mut()?.value.as_mut()
    }

    /// Sets the value of the attribute [`Recording::slot`] just placed.
    fn set(&mut self, value: any_value::Value) {
        if let Some(slot) = self.attributes.checked_sub(1) {
            self.span.attributes[slot].value = Some(AnyValue { value: Some(value) });
        }
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
    pub(super) fn fail(&mut self, message: &str) {
        let status = self.span.status.get_or_insert_with(Status::default);
        status.code = status::StatusCode::Error as i32;
        status.message.clear();
        status.message.push_str(message);
    }

    /// Ends the span now and queues it for export.
    pub(super) fn end(self) {
        let Recording {
            mut span,
            attributes,
            queue,
        } = self;
        span.attributes.truncate(attributes);
        span.end_time_unix_nano = nanos(SystemTime::now());
        queue.push(span);
    }
}

/// Makes `bytes` the content of `field`, in its own allocation if it has room.
fn replace(field: &mut Vec<u8>, bytes: &[u8]) {
    field.clear();
    field.extend_from_slice(bytes);
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

#[cfg(test)]
mod tests {
    use super::super::MAX_ATTRIBUTE_CHARS;
    use super::*;
    use opentelemetry::trace::{TraceFlags, TraceId};

    #[test]
    fn a_recycled_message_keeps_nothing_of_the_span_before() {
        let context = |id: u64| {
            SpanContext::new(
                TraceId::from(7u128),
                SpanId::from(id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            )
        };
        let queue = Arc::new(ExportQueue::idle());
        let mut first = Recording::start(
            &queue,
            &context(1),
            Some(Parent {
                id: SpanId::from(9u64),
                remote: true,
            }),
            &["first", "name"],
            SpanKind::Server,
            SystemTime::now(),
        );
        first.text("a", "text");
        first.int("b", 2);
        first.text("c", &"x".repeat(600));
        first.link(&context(3));
        first.fail("broken");
        first.end();
        let used = queue.queued();
        assert_eq!(used.len(), 1);
        assert_eq!(used[0].attributes[2].value, {
            let capped = "x".repeat(MAX_ATTRIBUTE_CHARS);
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(capped)),
            })
        });
        queue.recycle(used);

        let mut second = Recording::start(
            &queue,
            &context(2),
            None,
            &["second"],
            SpanKind::Client,
            SystemTime::now(),
        );
        second.int("a", 1);
        second.text("b", "text");
        second.end();
        let span = &queue.queued()[0];
        assert_eq!(span.name, "second");
        assert_eq!(span.span_id, 2u64.to_be_bytes());
        assert!(span.parent_span_id.is_empty() && span.links.is_empty());
        assert_eq!(span.flags, 0x101);
        assert_eq!(span.kind, SpanKind::Client as i32);
        assert_eq!(span.status, Some(Status::default()), "not failed");
        let attributes: Vec<(&str, Option<any_value::Value>)> = span
            .attributes
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.clone().and_then(|v| v.value)))
            .collect();
        assert_eq!(
            attributes,
            [
                ("a", Some(any_value::Value::IntValue(1))),
                ("b", Some(any_value::Value::StringValue("text".into())))
            ]
        );
    }
}
