//! The export queue: an ended span is encoded into the current batch without waiting, and
//! one thread sends full batches to the collector. A request never waits on the collector:
//! when the queue is full (the collector is down or slow) a span is dropped and counted,
//! and so are the spans of a batch whose export failed (`sluice_trace_spans_dropped_total`).
//!
//! The export thread is woken only when a batch fills, when a batch gets its first span
//! (to send it within [`BATCH_DELAY`]), and for a flush or the shutdown: not once a span,
//! which cost two `futex` calls and a context switch a span. A batch's buffer goes back and
//! forth between the requests and the export thread, and span records back to their pool,
//! so that in the steady state neither is allocated nor freed.

// A record's box is what travels: from the pool to a recording and back; keeping the boxes
// in the pool keeps them from being freed and allocated.
#![allow(clippy::vec_box)]

use super::span::SpanRecord;
use bytes::BytesMut;
use prometheus::IntCounter;
use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// Spans waiting for the export thread; past it, spans are dropped.
pub(super) const QUEUE_SPANS: usize = 2048;
/// Spans sent in one export.
pub(super) const BATCH_SPANS: usize = 512;
/// Most span records kept for reuse (a batch's worth).
const POOL_SPANS: usize = BATCH_SPANS;
/// Longest a span waits for a batch to fill before it is sent anyway.
const BATCH_DELAY: Duration = Duration::from_secs(1);
/// Room a batch's buffer starts with: enough for 512 spans of the usual size.
const BATCH_BYTES: usize = 512 << 10;

/// A batch: the bytes of its spans, each a `spans` field of OTLP's `ScopeSpans`, after
/// what the collector writes in front of them ([`Sender::prefix`]).
#[derive(Debug)]
pub(super) struct Batch {
    pub bytes: BytesMut,
    pub spans: usize,
}

/// What the export thread does with a batch: sends it, and says how many of its spans
/// were lost (the export failed, or the collector rejected them). The buffer comes back.
pub(super) trait Sender: Send + 'static {
    /// What a batch's buffer starts with (room for the messages around the spans, and
    /// those written before them).
    fn prefix(&self) -> Vec<u8>;
    fn send(&self, batch: Batch) -> (u64, Option<BytesMut>);
}

/// A bounded queue of ended spans and its export thread.
#[derive(Debug)]
pub(super) struct ExportQueue {
    shared: Arc<Shared>,
    done: Mutex<Option<Receiver<()>>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Tells the export thread there is work: see the module's comment for when.
    work: Condvar,
    dropped: IntCounter,
    /// Span records already encoded, to be written over.
    records: Mutex<Vec<Box<SpanRecord>>>,
    prefix: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    /// The batch spans are encoded into.
    filling: Option<Batch>,
    /// When `filling` got its first span.
    first_at: Option<Instant>,
    /// Full batches, oldest first.
    ready: VecDeque<Batch>,
    /// Spans in `filling` and `ready`.
    queued: usize,
    /// Buffers sent, to be filled again.
    spare: Vec<BytesMut>,
    /// Flushes waiting for everything queued before them to be sent.
    flushes: Vec<SyncSender<()>>,
    /// False once shut down: the thread then sends what is left and stops.
    open: bool,
}

impl ExportQueue {
    /// Starts the export thread, which hands batches to `sender`.
    pub(super) fn start(sender: impl Sender, dropped: IntCounter) -> std::io::Result<Self> {
        let queue = ExportQueue::new(sender.prefix(), dropped);
        let shared = Arc::clone(&queue.shared);
        let (finished, done) = mpsc::sync_channel(1);
        thread::Builder::new()
            .name("sluice-trace-export".into())
            .spawn(move || {
                run(&shared, &sender);
                let _ = finished.send(());
            })?;
        *lock(&queue.done) = Some(done);
        Ok(queue)
    }

    fn new(prefix: Vec<u8>, dropped: IntCounter) -> Self {
        ExportQueue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    open: true,
                    ..State::default()
                }),
                work: Condvar::new(),
                dropped,
                records: Mutex::new(Vec::new()),
                prefix,
            }),
            done: Mutex::new(None),
        }
    }

    /// A queue with no export thread and no prefix, whose spans stay queued for the test.
    #[cfg(test)]
    pub(super) fn idle() -> Self {
        let dropped = IntCounter::new("dropped", "dropped").unwrap_or_else(|_| unreachable!());
        ExportQueue::new(Vec::new(), dropped)
    }

    /// The bytes of the spans queued so far (a test's idle queue), taken out of it.
    #[cfg(test)]
    pub(super) fn queued(&self) -> Vec<u8> {
        let mut state = lock(&self.shared.state);
        let mut bytes = Vec::new();
        let filling = state.filling.take();
        for batch in state.ready.drain(..).chain(filling) {
            bytes.extend_from_slice(&batch.bytes);
        }
        state.queued = 0;
        state.first_at = None;
        bytes
    }

    /// A record to write a span over, if one is free.
    pub(super) fn recycled(&self) -> Option<Box<SpanRecord>> {
        lock(&self.shared.records).pop()
    }

    /// Encodes an ended span into the current batch, and keeps its record for reuse. On
    /// the request's thread: never waits but for the lock, held to copy the span.
    pub(super) fn push(&self, mut span: Box<SpanRecord>) {
        let shared = &*self.shared;
        match shared.enqueue(&mut span) {
            Some(true) => shared.work.notify_one(),
            Some(false) => {}
            None => shared.dropped.inc(),
        }
        let mut records = lock(&shared.records);
        if records.len() < POOL_SPANS {
            records.push(span);
        }
    }

    /// Sends every span queued so far and waits until that export ended; false once shut
    /// down.
    pub(super) fn flush(&self) -> bool {
        let (answer, flushed) = mpsc::sync_channel(1);
        {
            let mut state = lock(&self.shared.state);
            if !state.open {
                return false;
            }
            state.flushes.push(answer);
        }
        self.shared.work.notify_one();
        flushed.recv().is_ok()
    }

    /// Lets the thread send what is queued and stop, waiting at most `timeout`; false if it
    /// did not finish in time (or was already shut down).
    pub(super) fn shutdown(&self, timeout: Duration) -> bool {
        {
            let mut state = lock(&self.shared.state);
            if !state.open {
                return false;
            }
            state.open = false;
        }
        self.shared.work.notify_one();
        let done = lock(&self.done).take();
        done.is_none_or(|done| done.recv_timeout(timeout).is_ok())
    }
}

impl Shared {
    /// Encodes `span` into the current batch: whether the export thread must be woken
    /// for it, or `None` when it was dropped (the queue is full or shut down).
    fn enqueue(&self, span: &mut SpanRecord) -> Option<bool> {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        if !state.open || state.queued >= QUEUE_SPANS {
            return None;
        }
        state.queued += 1;
        let mut wake = false;
        let batch = match &mut state.filling {
            Some(batch) => batch,
            empty => {
                let bytes = self.start_batch(&mut state.spare);
                state.first_at = Some(Instant::now());
                // The thread may be asleep with no deadline: this span's starts now.
                wake = true;
                empty.insert(Batch { bytes, spans: 0 })
            }
        };
        span.encode(2, &mut batch.bytes);
        batch.spans += 1;
        if batch.spans >= BATCH_SPANS {
            state.ready.extend(state.filling.take());
            state.first_at = None;
            wake = true;
        }
        Some(wake)
    }

    /// An empty batch's buffer: a spare one if there is one, starting with the prefix.
    fn start_batch(&self, spare: &mut Vec<BytesMut>) -> BytesMut {
        let mut bytes = spare
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(BATCH_BYTES));
        bytes.clear();
        bytes.extend_from_slice(&self.prefix);
        bytes
    }
}

/// What the export thread does next.
enum Next {
    Send(Batch),
    /// Sends every batch queued, then answers the flushes waiting for them; stops after
    /// that once shut down.
    Drain {
        batches: Vec<Batch>,
        flushes: Vec<SyncSender<()>>,
        stop: bool,
    },
}

/// The export thread: sends each batch when it is full, when its first span has waited
/// [`BATCH_DELAY`], on a flush, and at the end.
fn run(shared: &Shared, sender: &impl Sender) {
    loop {
        let next = {
            let mut state = lock(&shared.state);
            loop {
                if let Some(next) = next(&mut state) {
                    break next;
                }
                state = match state.first_at {
                    Some(at) => {
                        let wait = BATCH_DELAY.saturating_sub(at.elapsed());
                        shared
                            .work
                            .wait_timeout(state, wait)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => shared.work.wait(state).unwrap_or_else(|p| p.into_inner()),
                };
            }
        };
        match next {
            Next::Send(batch) => send(shared, sender, batch),
            Next::Drain {
                batches,
                flushes,
                stop,
            } => {
                for batch in batches {
                    send(shared, sender, batch);
                }
                for flush in flushes {
                    let _ = flush.send(());
                }
                if stop {
                    return;
                }
            }
        }
    }
}

/// The next thing to do, if there is one now.
fn next(state: &mut State) -> Option<Next> {
    if !state.flushes.is_empty() || !state.open {
        let filling = state.filling.take();
        let batches: Vec<Batch> = state.ready.drain(..).chain(filling).collect();
        state.queued = 0;
        state.first_at = None;
        return Some(Next::Drain {
            batches,
            flushes: std::mem::take(&mut state.flushes),
            stop: !state.open,
        });
    }
    if let Some(batch) = state.ready.pop_front() {
        state.queued -= batch.spans;
        return Some(Next::Send(batch));
    }
    if state.first_at.is_none_or(|at| at.elapsed() < BATCH_DELAY) {
        return None;
    }
    let batch = state.filling.take()?;
    state.first_at = None;
    state.queued -= batch.spans;
    Some(Next::Send(batch))
}

/// Hands `batch` to `sender`; its lost spans are counted, its buffer kept for another.
fn send(shared: &Shared, sender: &impl Sender, batch: Batch) {
    let count = batch.spans;
    let (lost, buffer) = sender.send(batch);
    if lost > 0 {
        shared.dropped.inc_by(lost);
        log::debug!(target: "sluice::telemetry", spans = lost, batch = count; "spans not exported");
    }
    if let Some(buffer) = buffer {
        let mut state = lock(&shared.state);
        if state.spare.len() < QUEUE_SPANS / BATCH_SPANS {
            state.spare.push(buffer);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
