//! The queue with a stand-in sender: full batches go at once, the rest on a flush, and
//! spans past the queue's bound are dropped and counted, never waited for.

use super::*;
use crate::telemetry::span::Recording;
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use std::time::SystemTime;

/// Tells the test of each batch (its span count, and whether it starts with the prefix),
/// after waiting for `gate` to let it through when there is one.
struct Recorder {
    batches: mpsc::Sender<(usize, bool)>,
    gate: Option<Mutex<Receiver<()>>>,
}

impl Sender for Recorder {
    fn prefix(&self) -> Vec<u8> {
        b"PFX".to_vec()
    }

    fn send(&self, batch: Batch) -> (u64, Option<BytesMut>) {
        let _ = self
            .batches
            .send((batch.spans, batch.bytes.starts_with(b"PFX")));
        if let Some(gate) = &self.gate {
            let _ = lock(gate).recv();
        }
        (0, Some(batch.bytes))
    }
}

fn end_spans(queue: &Arc<ExportQueue>, count: usize) {
    let context = SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(1u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    for _ in 0..count {
        let span = Recording::start(
            queue,
            &context,
            None,
            &["span"],
            SpanKind::Server,
            SystemTime::now(),
        );
        span.end();
    }
}

fn dropped() -> IntCounter {
    IntCounter::new("dropped", "dropped").unwrap()
}

#[test]
fn a_full_batch_goes_at_once_and_the_rest_on_a_flush() {
    let (batches, sent) = mpsc::channel();
    let recorder = Recorder {
        batches,
        gate: None,
    };
    let queue = Arc::new(ExportQueue::start(recorder, dropped()).unwrap());
    end_spans(&queue, BATCH_SPANS + 3);
    assert_eq!(sent.recv().unwrap(), (BATCH_SPANS, true), "a full batch");
    assert!(queue.flush());
    assert_eq!(
        sent.try_recv(),
        Ok((3, true)),
        "the rest, sent before the flush returned"
    );
    assert!(queue.shutdown(Duration::from_secs(5)));
    assert!(!queue.flush(), "nothing is flushed once shut down");
    end_spans(&queue, 2);
    assert_eq!(
        queue.shared.dropped.get(),
        2,
        "a span after the shutdown is dropped"
    );
}

#[test]
fn spans_past_the_queue_bound_are_dropped_and_counted() {
    let (batches, sent) = mpsc::channel();
    let (open, gate) = mpsc::channel();
    let recorder = Recorder {
        batches,
        gate: Some(Mutex::new(gate)),
    };
    let counter = dropped();
    let queue = Arc::new(ExportQueue::start(recorder, counter.clone()).unwrap());
    // The first batch is taken by the export thread, which then waits at the gate.
    end_spans(&queue, BATCH_SPANS);
    assert_eq!(sent.recv().unwrap(), (BATCH_SPANS, true));
    end_spans(&queue, QUEUE_SPANS + 5);
    assert_eq!(
        counter.get(),
        5,
        "the queue holds {QUEUE_SPANS} spans, no more"
    );
    for _ in 0..=QUEUE_SPANS / BATCH_SPANS {
        open.send(()).unwrap();
    }
    assert!(queue.flush());
    let queued: usize = sent.try_iter().map(|(spans, _)| spans).sum();
    assert_eq!(queued, QUEUE_SPANS, "every queued span was sent");
    assert_eq!(counter.get(), 5);
}
