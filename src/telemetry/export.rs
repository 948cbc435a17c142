//! The export queue: ended spans go into a bounded queue without waiting, and one thread
//! sends them to the collector in batches. A request never waits on the collector: when the
//! queue is full (the collector is down or slow) a span is dropped and counted, and so are
//! the spans of a batch whose export failed (`sluice_trace_spans_dropped_total`).

use super::collector::Collector;
use opentelemetry_proto::tonic::trace::v1::Span;
use prometheus::IntCounter;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

/// Spans waiting for the export thread; past it, spans are dropped.
pub(super) const QUEUE_SPANS: usize = 2048;
/// Spans sent in one export.
const BATCH_SPANS: usize = 512;
/// Longest a span waits for a batch to fill before it is sent anyway.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What the export thread is told.
enum Message {
    Span(Box<Span>),
    /// Send everything queued so far, then answer.
    Flush(SyncSender<()>),
}

/// A bounded queue of ended spans and its export thread.
#[derive(Debug)]
pub(super) struct ExportQueue {
    /// `None` once shut down: the thread then sends what is left and stops.
    sender: RwLock<Option<SyncSender<Message>>>,
    done: Mutex<Option<Receiver<()>>>,
    dropped: IntCounter,
}

impl ExportQueue {
    /// Starts the export thread, which sends to `collector`.
    pub(super) fn start(collector: Collector, dropped: IntCounter) -> std::io::Result<Self> {
        let (sender, queue) = mpsc::sync_channel(QUEUE_SPANS);
        let (finished, done) = mpsc::sync_channel(1);
        let counter = dropped.clone();
        thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || {
                run(&collector, &queue, &counter);
                let _ = finished.send(());
            })?;
        Ok(ExportQueue {
            sender: RwLock::new(Some(sender)),
            done: Mutex::new(Some(done)),
            dropped,
        })
    }

    fn sender(&self) -> Option<SyncSender<Message>> {
        self.sender
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Queues an ended span. On the request's thread: never waits (the lock is only
    /// written at shutdown).
    pub(super) fn push(&self, span: Box<Span>) {
        let sender = self.sender.read().unwrap_or_else(|p| p.into_inner());
        let sent = match sender.as_ref() {
            Some(sender) => sender.try_send(Message::Span(span)),
            None => Err(TrySendError::Disconnected(Message::Span(span))),
        };
        if sent.is_err() {
            self.dropped.inc();
        }
    }

    /// Sends every span queued so far and waits until that export ended; false once shut
    /// down.
    pub(super) fn flush(&self) -> bool {
        let Some(sender) = self.sender() else {
            return false;
        };
        let (answer, flushed) = mpsc::sync_channel(1);
        sender.send(Message::Flush(answer)).is_ok() && flushed.recv().is_ok()
    }

    /// Lets the thread send what is queued and stop, waiting at most `timeout`; false if it
    /// did not finish in time (or was already shut down).
    pub(super) fn shutdown(&self, timeout: Duration) -> bool {
        // Dropping the sender lets the thread send what is queued, then stop.
        if self
            .sender
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_none()
        {
            return false;
        }
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        done.is_none_or(|done| done.recv_timeout(timeout).is_ok())
    }
}

/// The export thread: batches of up to [`BATCH_SPANS`], each sent when full, when its
/// first span has waited [`BATCH_DELAY`], on a flush, and at the end.
fn run(collector: &Collector, queue: &Receiver<Message>, dropped: &IntCounter) {
    let mut batch: Vec<Span> = Vec::with_capacity(BATCH_SPANS);
    let mut first_at: Option<Instant> = None;
    loop {
        let wait = first_at.map_or(BATCH_DELAY, |at| BATCH_DELAY.saturating_sub(at.elapsed()));
        match queue.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                batch.push(*span);
                first_at.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH_SPANS {
                    send(collector, &mut batch, dropped);
                    first_at = None;
                }
            }
            Ok(Message::Flush(answer)) => {
                send(collector, &mut batch, dropped);
                first_at = None;
                let _ = answer.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(collector, &mut batch, dropped);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(collector, &mut batch, dropped);
                return;
            }
        }
    }
}

/// Exports and empties `batch`; a failed export's spans are counted as dropped, and so are
/// those a collector says it rejected.
fn send(collector: &Collector, batch: &mut Vec<Span>, dropped: &IntCounter) {
    if batch.is_empty() {
        return;
    }
    let count = batch.len() as u64;
    let spans = std::mem::replace(batch, Vec::with_capacity(BATCH_SPANS));
    match collector.export(spans) {
        Ok(0) => {}
        Ok(rejected) => {
            dropped.inc_by(rejected);
            log::debug!(target: "sluice::telemetry", spans = rejected; "the collector rejected spans");
        }
        Err(e) => {
            dropped.inc_by(count);
            log::debug!(target: "sluice::telemetry", spans = count, error:% = e; "trace export failed; spans dropped");
        }
    }
}
