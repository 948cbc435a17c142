//! A sampled span as it is recorded: its fields, and its attributes already as the bytes
//! of OTLP's `KeyValue` messages, written by prost's field encoders as each is set. At its
//! end the span is encoded once, as the `Span` message prost's derived encoding writes,
//! into the export queue's current batch (`export.rs`): the export thread then only frames
//! and posts the bytes. (Recorded into `Span` messages, the spans cost the export thread
//! ~8k instructions each in prost's derived encoding, which works out a nested message's
//! length once per message around it, and the request ~250 an attribute to fill them.)
//! A record comes from the queue's pool and goes back to it, its buffers reused, so a
//! span in the steady state allocates nothing. An unsampled span has no record at all:
//! its IDs are all it needs.

use super::export::ExportQueue;
use bytes::BufMut;
use opentelemetry::trace::{SpanContext, SpanId, TraceState};
use opentelemetry_proto::tonic::trace::v1::span::{Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{status, SpanFlags, Status};
use prost::encoding::{
    bool, double, encode_key, encode_varint, encoded_len_varint, fixed32, fixed64, int32, int64,
    key_len, message, WireType,
};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The span's parent, if it has one.
pub(super) struct Parent {
    pub id: SpanId,
    /// The parent is the caller's (from its `traceparent`), not one of ours.
    pub remote: bool,
}

/// A span's fields while it is recorded; reused from span to span.
#[derive(Debug, Default)]
pub(super) struct SpanRecord {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    trace_state: String,
    name: String,
    kind: i32,
    start_time_unix_nano: u64,
    end_time_unix_nano: u64,
    /// The `attributes` fields, each a `KeyValue` message with its key and length.
    attributes: Vec<u8>,
    links: Vec<Link>,
    status: Status,
    flags: u32,
    /// The span's fields before its attributes, then those after: written at its end.
    around: Vec<u8>,
}

/// An attribute's value.
enum Value<'a> {
    Text(&'a str),
    Int(i64),
    Bool(bool),
    Double(f64),
}

/// A span being recorded. Dropped without [`Recording::end`], it ends then (its owner's
/// `Drop` calls it).
pub(super) struct Recording {
    span: Box<SpanRecord>,
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
        span.trace_id = context.trace_id().to_bytes();
        span.span_id = context.span_id().to_bytes();
        span.trace_state.clear();
        if *context.trace_state() != TraceState::NONE {
            span.trace_state.push_str(&context.trace_state().header());
        }
        span.parent_span_id = parent.map(|parent| parent.id.to_bytes());
        span.flags = flags(remote, context.trace_flags().to_u8());
        span.kind = kind as i32;
        span.start_time_unix_nano = nanos(started);
        span.end_time_unix_nano = 0;
        span.attributes.clear();
        span.links.clear();
        // Unset until it fails: OTLP's default status, sent like the SDK sent it.
        span.status.code = status::StatusCode::Unset as i32;
        span.status.message.clear();
        let mut recording = Recording {
            span,
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
        self.span.attribute(key, Value::Text(super::capped(value)));
    }

    pub(super) fn int(&mut self, key: &str, value: i64) {
        self.span.attribute(key, Value::Int(value));
    }

    pub(super) fn bool(&mut self, key: &str, value: bool) {
        self.span.attribute(key, Value::Bool(value));
    }

    pub(super) fn double(&mut self, key: &str, value: f64) {
        self.span.attribute(key, Value::Double(value));
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
        let status = &mut self.span.status;
        status.code = status::StatusCode::Error as i32;
        status.message.clear();
        status.message.push_str(message);
    }

    /// Ends the span now and queues it for export.
    pub(super) fn end(self) {
        let Recording { mut span, queue } = self;
        span.end_time_unix_nano = nanos(SystemTime::now());
        queue.push(span);
    }
}

impl SpanRecord {
    /// Appends an attribute: the `KeyValue` field prost's derived encoding writes for it.
    fn attribute(&mut self, key: &str, value: Value<'_>) {
        // AnyValue { oneof value }: a set oneof field is written even when it is empty.
        let any = match value {
            Value::Text(text) => delimited_len(1, text.len()),
            Value::Int(n) => int64::encoded_len(3, &n),
            Value::Bool(b) => bool::encoded_len(2, &b),
            Value::Double(x) => double::encoded_len(4, &x),
        };
        // KeyValue { 1: key (left out when empty), 2: value }
        let key_field = if key.is_empty() {
            0
        } else {
            delimited_len(1, key.len())
        };
        let out = &mut self.attributes;
        encode_key(9, WireType::LengthDelimited, out);
        encode_varint((key_field + delimited_len(2, any)) as u64, out);
        if !key.is_empty() {
            delimited(1, key.as_bytes(), out);
        }
        encode_key(2, WireType::LengthDelimited, out);
        encode_varint(any as u64, out);
        match value {
            Value::Text(text) => delimited(1, text.as_bytes(), out),
            Value::Int(n) => int64::encode(3, &n, out),
            Value::Bool(b) => bool::encode(2, &b, out),
            Value::Double(x) => double::encode(4, &x, out),
        }
    }

    /// Writes the span as a field `tag` of the message around it: the bytes of
    /// `message::encode(tag, span)` for the `Span` message it describes, fields in tag order
    /// and those at their default left out, as prost's derived encoding does.
    pub(super) fn encode(&mut self, tag: u32, out: &mut impl BufMut) {
        let SpanRecord {
            ref mut around,
            ref attributes,
            ..
        } = *self;
        around.clear();
        delimited(1, &self.trace_id, around);
        delimited(2, &self.span_id, around);
        if !self.trace_state.is_empty() {
            delimited(3, self.trace_state.as_bytes(), around);
        }
        if let Some(parent) = &self.parent_span_id {
            delimited(4, parent, around);
        }
        if !self.name.is_empty() {
            delimited(5, self.name.as_bytes(), around);
        }
        if self.kind != 0 {
            int32::encode(6, &self.kind, around);
        }
        if self.start_time_unix_nano != 0 {
            fixed64::encode(7, &self.start_time_unix_nano, around);
        }
        if self.end_time_unix_nano != 0 {
            fixed64::encode(8, &self.end_time_unix_nano, around);
        }
        let before = around.len();
        // 9: the attributes. No events (11) and nothing dropped (10, 12, 14).
        for link in &self.links {
            message::encode(13, link, around);
        }
        message::encode(15, &self.status, around);
        if self.flags != 0 {
            fixed32::encode(16, &self.flags, around);
        }
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint((around.len() + attributes.len()) as u64, out);
        out.put_slice(&around[..before]);
        out.put_slice(attributes);
        out.put_slice(&around[before..]);
    }
}

/// Writes a length-delimited field (bytes, a string): key, length, `value`.
fn delimited(tag: u32, value: &[u8], out: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(value.len() as u64, out);
    out.put_slice(value);
}

/// The size of a length-delimited field of `len` bytes.
fn delimited_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
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
mod tests;
