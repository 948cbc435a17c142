//! A recorded span, decoded by prost as OTLP's `Span`: every field it was given, and the
//! very bytes prost's derived encoding writes for what it decodes to.

use super::super::MAX_ATTRIBUTE_CHARS;
use super::*;
use opentelemetry::trace::{TraceFlags, TraceId};
use opentelemetry_proto::tonic::common::v1::{any_value::Value as Any, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span};
use prost::Message;

fn context(id: u64, state: TraceState) -> SpanContext {
    SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(id),
        TraceFlags::SAMPLED,
        false,
        state,
    )
}

/// The spans queued in `queue`, decoded; their bytes must be the derived encoding's.
fn decoded(queue: &ExportQueue) -> Vec<Span> {
    let bytes = queue.queued();
    let spans = ScopeSpans::decode(bytes.as_slice())
        .expect("the spans decode as fields of a ScopeSpans")
        .spans;
    let again = ScopeSpans {
        spans: spans.clone(),
        ..ScopeSpans::default()
    };
    assert_eq!(
        again.encode_to_vec(),
        bytes,
        "the bytes are those prost's derived encoding writes"
    );
    spans
}

fn attributes(span: &Span) -> Vec<(&str, Option<Any>)> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.clone().and_then(|v| v.value)))
        .collect()
}

#[test]
fn a_span_is_every_field_it_was_given() {
    let queue = Arc::new(ExportQueue::idle());
    let state = TraceState::from_key_value([("vendor", "opaque")]).unwrap();
    let started = UNIX_EPOCH + std::time::Duration::from_nanos(1_700_000_000_123_456_789);
    let mut span = Recording::start(
        &queue,
        &context(1, state),
        Some(Parent {
            id: SpanId::from(9u64),
            remote: true,
        }),
        &["POST", "/v1/chat/completions"],
        SpanKind::Server,
        started,
    );
    span.text("url.path", "/v1/chat/completions");
    span.text("empty", "");
    span.text("long", &"é".repeat(600));
    span.int("http.response.status_code", 502);
    span.int("negative", -3);
    span.int("zero", 0);
    span.bool("sluice.stream", true);
    span.bool("no", false);
    span.double("gen_ai.response.time_to_first_chunk", 0.25);
    span.link(&context(3, TraceState::default()));
    span.fail("upstream_unavailable");
    span.end();
    let spans = decoded(&queue);
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.trace_id, 7u128.to_be_bytes());
    assert_eq!(span.span_id, 1u64.to_be_bytes());
    assert_eq!(span.parent_span_id, 9u64.to_be_bytes());
    assert_eq!(span.trace_state, "vendor=opaque");
    assert_eq!(span.name, "POST /v1/chat/completions");
    assert_eq!(span.kind, SpanKind::Server as i32);
    assert_eq!(span.start_time_unix_nano, 1_700_000_000_123_456_789);
    assert!(span.end_time_unix_nano > span.start_time_unix_nano);
    assert_eq!(span.flags, 0x301, "sampled, with a remote parent");
    assert_eq!(
        attributes(span),
        [
            (
                "url.path",
                Some(Any::StringValue("/v1/chat/completions".into()))
            ),
            ("empty", Some(Any::StringValue(String::new()))),
            (
                "long",
                Some(Any::StringValue("é".repeat(MAX_ATTRIBUTE_CHARS)))
            ),
            ("http.response.status_code", Some(Any::IntValue(502))),
            ("negative", Some(Any::IntValue(-3))),
            ("zero", Some(Any::IntValue(0))),
            ("sluice.stream", Some(Any::BoolValue(true))),
            ("no", Some(Any::BoolValue(false))),
            (
                "gen_ai.response.time_to_first_chunk",
                Some(Any::DoubleValue(0.25))
            ),
        ]
    );
    assert_eq!(span.links.len(), 1);
    assert_eq!(span.links[0].span_id, 3u64.to_be_bytes());
    assert_eq!(span.links[0].flags, 0x101);
    assert_eq!(
        span.status,
        Some(Status {
            message: "upstream_unavailable".into(),
            code: status::StatusCode::Error as i32,
        })
    );
    // What the span would have been as a message: the same, field for field.
    assert_eq!(
        span.attributes[0],
        KeyValue {
            key: "url.path".into(),
            value: Some(AnyValue {
                value: Some(Any::StringValue("/v1/chat/completions".into()))
            }),
            ..KeyValue::default()
        }
    );
}

#[test]
fn a_recycled_record_keeps_nothing_of_the_span_before() {
    let queue = Arc::new(ExportQueue::idle());
    let state = TraceState::from_key_value([("vendor", "opaque")]).unwrap();
    let mut first = Recording::start(
        &queue,
        &context(1, state),
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
    first.link(&context(3, TraceState::default()));
    first.fail("broken");
    first.end();
    assert_eq!(decoded(&queue).len(), 1);
    // The next span is written over the first one's record, from the queue's pool.
    let mut second = Recording::start(
        &queue,
        &context(2, TraceState::default()),
        None,
        &["second"],
        SpanKind::Client,
        SystemTime::now(),
    );
    second.int("a", 1);
    second.text("b", "text");
    second.end();
    let spans = decoded(&queue);
    let span = &spans[0];
    assert_eq!(span.name, "second");
    assert_eq!(span.span_id, 2u64.to_be_bytes());
    assert!(span.parent_span_id.is_empty() && span.links.is_empty());
    assert!(span.trace_state.is_empty());
    assert_eq!(span.flags, 0x101);
    assert_eq!(span.kind, SpanKind::Client as i32);
    assert_eq!(span.status, Some(Status::default()), "not failed");
    assert_eq!(
        attributes(span),
        [
            ("a", Some(Any::IntValue(1))),
            ("b", Some(Any::StringValue("text".into())))
        ]
    );
}
