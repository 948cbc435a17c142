//! The export queue: ended spans go into a bounded queue without waiting, and one thread
//! sends them to the collector in batches. A request never waits on the collector: when the
//! queue is full (the collector is down or slow) a span is dropped and counted, and so are
//! the spans of a batch whose export failed (`sluice_trace_spans_dropped_total`). Once a
//! batch is encoded, its messages go to a pool for the next spans to be written over.

// A message's box is what travels: from the pool to a recording, through the channel, back
// to the pool; keeping the boxes in the lists keeps them from being freed and allocated.
#![allow(clippy::vec_box)]

use super::collector::Collector;
use opentelemetry_proto::tonic::trace::v1::Span;
use prometheus::IntCounter;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

/// Spans waiting for the export thread; past it, spans are dropped.
pub(super) const QUEUE_SPANS: usize = 2048;
/// Spans sent in one export.
const BATCH_SPANS: usize = 512;
/// Most encoded messages kept for reuse (a batch's worth).
const POOL_SPANS: usize = BATCH_SPANS;
/// Longest a span waits for a batch to fill before it is sent anyway.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What the export thread is told.
pub(super) enum Message {
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
    /// Messages already encoded, to be written over.
    pool: Arc<Mutex<Vec<Box<Span>>>>,
    /// A test's queue has no thread: what is queued stays here.
    #[cfg(test)]
    queued: Mutex<Option<Receiver<Message>>>,
}

impl ExportQueue {
    /// Starts the export thread, which sends to `collector`.
    pub(super) fn start(collector: Collector, dropped: IntCounter) -> std::io::Result<Self> {
        let (sender, queue) = mpsc::sync_channel(QUEUE_SPANS);
        let (finished, done) = mpsc::sync_channel(1);
        let counter = dropped.clone();
        let pool = Arc::new(Mutex::new(Vec::new()));
        let refill = Arc::clone(&pool);
        thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || {
                run(&collector, &queue, &counter, &refill);
                let _ = finished.send(());
            })?;
        Ok(ExportQueue {
            sender: RwLock::new(Some(sender)),
            done: Mutex::new(Some(done)),
            dropped,
            pool,
            #[cfg(test)]
            queued: Mutex::new(None),
        })
    }

    /// A queue with no export thread, whose spans stay queued for the test to read.
    #[cfg(test)]
    pub(super) fn idle() -> Self {
        let (sender, queue) = mpsc::sync_channel(QUEUE_SPANS);
        ExportQueue {
            sender: RwLock::new(Some(sender)),
            done: Mutex::new(None),
            dropped: IntCounter::new("dropped", "dropped").unwrap_or_else(|_| unreachable!()),
            pool: Arc::new(Mutex::new(Vec::new())),
            queued: Mutex::new(Some(queue)),
        }
    }

    /// The spans queued so far (a test's idle queue).
    #[cfg(test)]
    pub(super) fn queued(&self) -> Vec<Box<Span>> {
        let queue = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        queue
            .as_ref()
            .map(|queue| {
                queue
                    .try_iter()
                    .filter_map(|message| match message {
                        Message::Span(span) => Some(span),
                        Message::Flush(_) => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Gives encoded messages back to the pool (a test's idle queue).
    #[cfg(test)]
    pub(super) fn recycle(&self, spans: Vec<Box<Span>>) {
        refill(&self.pool, spans.into_iter());
    }

    /// A message to write a span over, if one is free.
    pub(super) fn recycled(&self) -> Option<Box<Span>> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop()
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
fn run(
    collector: &Collector,
    queue: &Receiver<Message>,
    dropped: &IntCounter,
    pool: &Mutex<Vec<Box<Span>>>,
) {
    let mut batch: Vec<Box<Span>> = Vec::with_capacity(BATCH_SPANS);
    let mut first_at: Option<Instant> = None;
    loop {
        let wait = first_at.map_or(BATCH_DELAY, |at| BATCH_DELAY.saturating_sub(at.elapsed()));
        match queue.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                batch.push(span);
                first_at.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH_SPANS {
                    send(collector, &mut batch, dropped, pool);
                    first_at = None;
                }
            }
            Ok(Message::Flush(answer)) => {
                send(collector, &mut batch, dropped, pool);
                first_at = None;
                let _ = answer.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(collector, &mut batch, dropped, pool);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(collector, &mut batch, dropped, pool);
                return;
            }
        }
    }
}

/// Exports and empties `batch`, its messages then back in `pool`; a failed export's spans
/// are counted as dropped, and so are those a collector says it rejected.
fn send(
    collector: &Collector,
    batch: &mut Vec<Box<Span>>,
    dropped: &IntCounter,
    pool: &Mutex<Vec<Box<Span>>>,
) {
    if batch.is_empty() {
        return;
    }
    let count = batch.len() as u64;
    // The messages move into the request and back, their boxes kept for the pool.
    let spans: Vec<Span> = batch
        .iter_mut()
        .map(|span| std::mem::take(&mut **span))
        .collect();
    let (request, spans) = collector.request(spans);
    for (boxed, span) in batch.iter_mut().zip(spans) {
        **boxed = span;
    }
    refill(pool, batch.drain(..));
    let sent = request.and_then(|request| collector.export(&request));
    match sent {
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

/// Keeps `spans` for reuse, up to [`POOL_SPANS`].
fn refill(pool: &Mutex<Vec<Box<Span>>>, spans: impl Iterator<Item = Box<Span>>) {
    let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
    let room = POOL_SPANS.saturating_sub(pool.len());
    pool.extend(spans.take(room));
}
