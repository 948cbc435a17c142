//! The export queue: ended spans go into a bounded queue without waiting, and one thread
//! sends them to the collector in batches. A request never waits on the collector: when the
//! queue is full (the collector is down or slow) a span is dropped and counted, and so are
//! the spans of a batch whose export failed (`sluice_trace_spans_dropped_total`).
//!
//! Ours rather than the SDK's batch processor because that one keeps its drop count to
//! itself, and an operator needs to see spans being lost.

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
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
    Span(Box<SpanData>),
    /// Send everything queued so far, then answer.
    Flush(SyncSender<()>),
}

/// A [`SpanProcessor`] with a bounded queue and its own export thread.
#[derive(Debug)]
pub(super) struct ExportQueue {
    /// `None` once shut down: the thread then sends what is left and stops.
    sender: RwLock<Option<SyncSender<Message>>>,
    done: Mutex<Option<Receiver<()>>>,
    dropped: IntCounter,
}

impl ExportQueue {
    /// Starts the export thread with `exporter`, every span carrying `resource`.
    pub(super) fn start<E: SpanExporter + 'static>(
        mut exporter: E,
        resource: &Resource,
        dropped: IntCounter,
    ) -> std::io::Result<Self> {
        exporter.set_resource(resource);
        let (sender, queue) = mpsc::sync_channel(QUEUE_SPANS);
        let (finished, done) = mpsc::sync_channel(1);
        let counter = dropped.clone();
        thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || {
                run(&exporter, &queue, &counter);
                let _ = exporter.shutdown();
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
}

impl SpanProcessor for ExportQueue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    /// On the request's thread: never waits (the lock is only written at shutdown).
    fn on_end(&self, span: SpanData) {
        let sender = self.sender.read().unwrap_or_else(|p| p.into_inner());
        let sent = match sender.as_ref() {
            Some(sender) => sender.try_send(Message::Span(Box::new(span))),
            None => Err(TrySendError::Disconnected(Message::Span(Box::new(span)))),
        };
        if sent.is_err() {
            self.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let sender = self.sender().ok_or(OTelSdkError::AlreadyShutdown)?;
        let (answer, flushed) = mpsc::sync_channel(1);
        sender
            .send(Message::Flush(answer))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        flushed
            .recv()
            .map_err(|_| OTelSdkError::InternalFailure("the export thread stopped".into()))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        // Dropping the sender lets the thread send what is queued, then stop.
        if self
            .sender
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_none()
        {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        match done.map(|done| done.recv_timeout(timeout)) {
            Some(Ok(())) | None => Ok(()),
            Some(Err(_)) => Err(OTelSdkError::Timeout(timeout)),
        }
    }
}

/// The export thread: batches of up to [`BATCH_SPANS`], each sent when full, when its
/// first span has waited [`BATCH_DELAY`], on a flush, and at the end.
fn run<E: SpanExporter>(exporter: &E, queue: &Receiver<Message>, dropped: &IntCounter) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH_SPANS);
    let mut first_at: Option<Instant> = None;
    loop {
        let wait = first_at.map_or(BATCH_DELAY, |at| BATCH_DELAY.saturating_sub(at.elapsed()));
        match queue.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                batch.push(*span);
                first_at.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH_SPANS {
                    send(exporter, &mut batch, dropped);
                    first_at = None;
                }
            }
            Ok(Message::Flush(answer)) => {
                send(exporter, &mut batch, dropped);
                first_at = None;
                let _ = answer.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(exporter, &mut batch, dropped);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(exporter, &mut batch, dropped);
                return;
            }
        }
    }
}

/// Exports and empties `batch`; a failed export's spans are counted as dropped.
fn send<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>, dropped: &IntCounter) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let count = spans.len() as u64;
    if let Err(e) = futures_executor::block_on(exporter.export(spans)) {
        dropped.inc_by(count);
        log::debug!(target: "sluice::telemetry", spans = count, error:% = e; "trace export failed; spans dropped");
    }
}
