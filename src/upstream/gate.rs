//! An upstream's `max_concurrent`: a semaphore per upstream and a bounded queue in front of
//! it, so a backend that serves N requests at once is never sent N+1.

use super::Upstreams;
use crate::catalog::Upstream;
use crate::error::RequestError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The `max_concurrent` gate of one upstream.
pub(super) struct Gate {
    limit: u32,
    slots: Arc<Semaphore>,
    waiting: Arc<AtomicU32>,
}

/// One place in an upstream's queue, given back on drop.
struct Waiting(Arc<AtomicU32>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a request went through to get an upstream slot; the slot is held while it lives.
pub struct Slot {
    pub permit: Option<OwnedSemaphorePermit>,
    /// Time spent waiting in the queue.
    pub queued: Duration,
}

impl Upstreams {
    /// Requests waiting in the upstream's `max_concurrent` queue now.
    pub fn waiting(&self, name: &str) -> u32 {
        let Some(state) = self.states.get(name) else {
            return 0;
        };
        let gate = state.gate.lock().unwrap_or_else(|p| p.into_inner());
        gate.as_ref()
            .map_or(0, |g| g.waiting.load(Ordering::Acquire))
    }

    /// Takes a slot of the upstream's `max_concurrent`, waiting in its bounded queue: 503
    /// `upstream_saturated` when the queue is full or the wait runs out.
    pub async fn acquire(&self, upstream: &Upstream) -> Result<Slot, RequestError> {
        let policy = &upstream.policy;
        let Some(limit) = policy.max_concurrent else {
            return Ok(Slot {
                permit: None,
                queued: Duration::ZERO,
            });
        };
        let (slots, waiting) = {
            let state = self.state(&upstream.name);
            let mut gate = state.gate.lock().unwrap_or_else(|p| p.into_inner());
            // A new limit after a reload gets a new gate; requests on the old one finish.
            if gate.as_ref().is_some_and(|g| g.limit != limit.get()) {
                *gate = None;
            }
            let gate = gate.get_or_insert_with(|| Gate {
                limit: limit.get(),
                slots: Arc::new(Semaphore::new(limit.get() as usize)),
                waiting: Arc::new(AtomicU32::new(0)),
            });
            (Arc::clone(&gate.slots), Arc::clone(&gate.waiting))
        };
        if let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
            return Ok(Slot {
                permit: Some(permit),
                queued: Duration::ZERO,
            });
        }
        let saturated = RequestError::UpstreamSaturated {
            retry_after: Duration::from_secs(1),
        };
        let took = waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < policy.max_queue).then_some(n + 1)
        });
        if took.is_err() {
            return Err(saturated);
        }
        // A guard, so a request dropped while it waits (shutdown) still leaves the queue.
        let _in_queue = Waiting(waiting);
        let started = tokio::time::Instant::now();
        let acquired = tokio::time::timeout(policy.queue_timeout, slots.acquire_owned()).await;
        match acquired {
            Ok(Ok(permit)) => Ok(Slot {
                permit: Some(permit),
                queued: started.elapsed(),
            }),
            _ => Err(saturated),
        }
    }
}
