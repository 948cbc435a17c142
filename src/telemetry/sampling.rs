//! Who decides that a request is traced: always the gateway, by its own `sample_ratio`,
//! drawn afresh for every request. A caller's `traceparent` may give the trace its ID (when
//! trusted) but never its sampled flag, and the draw does not depend on the trace ID, so a
//! caller cannot pick an ID that is always sampled. An upstream attempt follows its request.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use rand::Rng;

/// The gateway's sampler: a request's server span is sampled with probability `ratio`,
/// whatever its parent says; any other span (an attempt) has the decision of its parent,
/// the request's span.
#[derive(Debug, Clone, Copy)]
pub(super) struct GatewaySampler {
    pub ratio: f64,
}

impl GatewaySampler {
    fn draw(&self) -> bool {
        self.ratio >= 1.0 || (self.ratio > 0.0 && rand::thread_rng().gen::<f64>() < self.ratio)
    }
}

impl ShouldSample for GatewaySampler {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let parent = parent
            .filter(|p| p.has_active_span())
            .map(|p| p.span().span_context().clone())
            .filter(|p| p.is_valid());
        let sampled = match (kind, &parent) {
            (SpanKind::Server, _) | (_, None) => self.draw(),
            (_, Some(request)) => request.is_sampled(),
        };
        SamplingResult {
            decision: if sampled {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            // A trusted caller's `tracestate` goes on with its trace.
            trace_state: parent.map_or_else(TraceState::default, |p| p.trace_state().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags};

    fn decide(ratio: f64, kind: SpanKind, parent_sampled: bool) -> SamplingDecision {
        let flags = if parent_sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let parent = SpanContext::new(
            TraceId::from(7u128),
            SpanId::from(9u64),
            flags,
            true,
            TraceState::default(),
        );
        let context = Context::new().with_remote_span_context(parent);
        GatewaySampler { ratio }
            .should_sample(Some(&context), TraceId::from(7u128), "x", &kind, &[], &[])
            .decision
    }

    #[test]
    fn a_request_is_sampled_by_our_ratio_and_an_attempt_follows_it() {
        use SamplingDecision::{Drop, RecordAndSample};
        assert_eq!(
            decide(0.0, SpanKind::Server, true),
            Drop,
            "a sampled caller"
        );
        assert_eq!(decide(1.0, SpanKind::Server, false), RecordAndSample);
        assert_eq!(decide(0.0, SpanKind::Client, true), RecordAndSample);
        assert_eq!(decide(1.0, SpanKind::Client, false), Drop);
    }
}
