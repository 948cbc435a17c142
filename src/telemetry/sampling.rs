//! Who decides that a request is traced: always the gateway, by its own `sample_ratio`,
//! drawn afresh for every request before anything of its span is built. A caller's
//! `traceparent` may give the trace its ID (when trusted) but never its sampled flag, and
//! the draw does not depend on the trace ID, so a caller cannot pick an ID that is always
//! sampled. An upstream attempt follows its request. Also here: the random IDs.

use opentelemetry::trace::{SpanId, TraceId};
use rand::Rng;

/// Whether a request is sampled, at `ratio` (0 to 1).
pub(super) fn draw(ratio: f64) -> bool {
    ratio >= 1.0 || (ratio > 0.0 && rand::thread_rng().gen::<f64>() < ratio)
}

/// A new random trace ID (never the invalid all-zero one).
pub(super) fn trace_id() -> TraceId {
    let mut rng = rand::thread_rng();
    loop {
        let id: u128 = rng.gen();
        if id != 0 {
            return TraceId::from(id);
        }
    }
}

/// A new random span ID (never the invalid all-zero one).
pub(super) fn span_id() -> SpanId {
    let mut rng = rand::thread_rng();
    loop {
        let id: u64 = rng.gen();
        if id != 0 {
            return SpanId::from(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_share_of_requests_sampled() {
        assert!((0..1000).all(|_| draw(1.0)), "1 samples every request");
        assert!((0..1000).all(|_| !draw(0.0)), "0 samples none");
        let sampled = (0..10_000).filter(|_| draw(0.5)).count();
        // 10,000 draws at 0.5: 4,700..5,300 is more than 6 standard deviations wide.
        assert!((4_700..5_300).contains(&sampled), "{sampled} of 10,000");
    }

    #[test]
    fn ids_are_valid_and_fresh() {
        let (a, b) = (trace_id(), trace_id());
        assert!(a != TraceId::INVALID && a != b);
        let (a, b) = (span_id(), span_id());
        assert!(a != SpanId::INVALID && a != b);
    }
}
