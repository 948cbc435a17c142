//! Series handles kept by what a request already holds (its key, its model, the state of
//! the upstream it calls), so a request does not look its labels up each time: a family's
//! look-up hashes the label values and searches the family's map under a lock, and a
//! request made seven of them (`benches/README.md`).
//!
//! A handle is resolved from its family on first use, when the series would have been
//! created anyway, so what `/metrics` exports is unchanged: it is the family's own series
//! (every handle of the same labels moves the one series). Handles live as long as what
//! holds them: a key's and a model's go with their catalog generation (a reload builds new
//! entries with none resolved, and the old ones are dropped with the last request on the
//! old catalog), an upstream's with its state (dropped once the upstream is gone from the
//! configuration and idle). The series themselves stay in their families, as before.

use super::Model;
use prometheus::{IntCounter, IntGauge};
use std::fmt;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

/// One series, resolved on first use.
pub struct Held<M>(OnceLock<M>);

impl<M> Held<M> {
    /// The series, resolved by `resolve` the first time.
    pub fn get(&self, resolve: impl FnOnce() -> M) -> &M {
        self.0.get_or_init(resolve)
    }

    /// The series, if it was resolved.
    pub fn resolved(&self) -> Option<&M> {
        self.0.get()
    }
}

impl<M> Default for Held<M> {
    fn default() -> Self {
        Held(OnceLock::new())
    }
}

impl<M> fmt::Debug for Held<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.get().is_some() {
            "resolved"
        } else {
            "unresolved"
        };
        write!(f, "Held({state})")
    }
}

/// A key's series: its in-flight gauge, and its counters that also carry a model.
#[derive(Debug, Default)]
pub struct KeySeries {
    pub in_flight: Held<IntGauge>,
    with_model: RwLock<Vec<WithModel>>,
}

/// Which of a key's counters that also carry a model: `sluice_requests_total` of a status,
/// or `sluice_tokens_total` of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelCounter {
    Requests(u16),
    InputTokens,
    OutputTokens,
}

/// One of those counters: the model's entry is held (its address names it for as long as
/// the handle lives), so the look-up compares a pointer and a small value, no text.
struct WithModel {
    model: Arc<Model>,
    which: ModelCounter,
    counter: IntCounter,
}

impl fmt::Debug for WithModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WithModel({}, {:?})", self.model.id, self.which)
    }
}

impl KeySeries {
    /// Adds `n` to the key's counter `which` with `model`, resolved by `resolve` the first
    /// time. There is at most one entry per series the key moved in its generation: a key
    /// uses a few models, each with a few statuses, so the entries are searched in order.
    pub fn add(
        &self,
        model: &Arc<Model>,
        which: ModelCounter,
        n: u64,
        resolve: impl FnOnce() -> IntCounter,
    ) {
        let same = |entry: &WithModel| entry.which == which && Arc::ptr_eq(&entry.model, model);
        {
            let entries = self
                .with_model
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = entries.iter().find(|entry| same(entry)) {
                entry.counter.inc_by(n);
                return;
            }
        }
        let counter = resolve();
        counter.inc_by(n);
        let mut entries = self
            .with_model
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Another request may have added it meanwhile: the same series either way.
        if !entries.iter().any(same) {
            entries.push(WithModel {
                model: Arc::clone(model),
                which,
                counter,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_series_is_resolved_once() {
        let held = Held::default();
        assert!(held.resolved().is_none());
        let mut calls = 0;
        for _ in 0..3 {
            held.get(|| {
                calls += 1;
                7
            });
        }
        assert_eq!((calls, held.resolved()), (1, Some(&7)));
    }
}
