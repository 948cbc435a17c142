//! A client API key as the catalog holds it: its settings (the key itself never, only its
//! hash in the catalog's table), which models it may use, whether it may be used now, and
//! its limits divided among replicas while the shared store is down.

use crate::clock::WallClock;
use crate::config::KeyConfig;
use crate::error::Inactive;
use crate::glob;
use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};

/// A client API key's settings. The key itself is never held, only its hash.
#[derive(Debug)]
pub struct Key {
    pub name: String,
    pub disabled: bool,
    /// Refused before this instant (milliseconds since the Unix epoch).
    pub not_before_unix_ms: Option<i64>,
    /// Refused from this instant on (milliseconds since the Unix epoch).
    pub expires_at_unix_ms: Option<i64>,
    pub owner: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The `models` patterns as written, for the admin view; `None` means every model.
    pub models: Option<Vec<String>>,
    /// Glob patterns over model IDs, as characters; `None` means every model.
    patterns: Option<Vec<Vec<char>>>,
    pub requests_per_minute: Option<NonZeroU32>,
    pub burst: Option<NonZeroU32>,
    pub max_concurrent: Option<NonZeroU32>,
    pub tokens_per_minute: Option<NonZeroU64>,
    pub tokens_per_day: Option<NonZeroU64>,
    /// The key's own money budget.
    pub budget: Option<crate::config::Budget>,
    /// The budget of its owner (`owners:`), shared with the owner's other keys.
    pub owner_budget: Option<crate::config::Budget>,
    /// Its metric series, resolved as its requests first move them.
    pub series: super::KeySeries,
}

impl Key {
    /// Whose stored responses the key reads and makes: its `owner` (a team's keys share
    /// them), else the key alone.
    pub fn response_owner(&self) -> &str {
        self.owner.as_deref().unwrap_or(&self.name)
    }

    /// This key with each limit divided by `replicas` (rounded up, at least 1): what one
    /// replica enforces alone while the shared limits store is down.
    pub fn divided(&self, replicas: NonZeroU32) -> Key {
        let n = replicas.get();
        let part = |limit: Option<NonZeroU32>| {
            limit.map(|l| NonZeroU32::new(l.get().div_ceil(n)).unwrap_or(NonZeroU32::MIN))
        };
        let part64 = |limit: Option<NonZeroU64>| {
            limit
                .map(|l| NonZeroU64::new(l.get().div_ceil(u64::from(n))).unwrap_or(NonZeroU64::MIN))
        };
        Key {
            name: self.name.clone(),
            disabled: self.disabled,
            not_before_unix_ms: self.not_before_unix_ms,
            expires_at_unix_ms: self.expires_at_unix_ms,
            owner: None,
            labels: BTreeMap::new(),
            models: None,
            patterns: None,
            requests_per_minute: part(self.requests_per_minute),
            burst: part(self.burst),
            max_concurrent: part(self.max_concurrent),
            tokens_per_minute: part64(self.tokens_per_minute),
            tokens_per_day: part64(self.tokens_per_day),
            // Money is decided by the budget ledger with the key as configured.
            budget: None,
            owner_budget: None,
            series: Default::default(),
        }
    }

    /// Why the key may not be used now, if it may not. The wall clock is read only for a
    /// key that has a validity window. A disabled key is reported as disabled whatever its
    /// dates: that is what an operator must undo first.
    pub fn inactive(&self, clock: &dyn WallClock) -> Option<Inactive> {
        if self.disabled {
            return Some(Inactive::Disabled);
        }
        if self.not_before_unix_ms.is_none() && self.expires_at_unix_ms.is_none() {
            return None;
        }
        let now = clock.unix_millis();
        match (self.not_before_unix_ms, self.expires_at_unix_ms) {
            (Some(from), _) if now < from => Some(Inactive::NotYetValid { from_unix_ms: from }),
            (_, Some(at)) if now >= at => Some(Inactive::Expired { at_unix_ms: at }),
            _ => None,
        }
    }

    /// Whether this key's view of the catalog includes the model.
    pub fn may_use(&self, model_id: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(patterns) => {
                let id: Vec<char> = model_id.chars().collect();
                patterns.iter().any(|pattern| glob::matches(pattern, &id))
            }
        }
    }
}

/// A key's settings as the catalog holds them, its owner's budget found in `owners`.
pub(super) fn build_key(key: &KeyConfig, owners: &[crate::config::OwnerConfig]) -> Key {
    let owner_budget = key
        .owner
        .as_deref()
        .and_then(|name| owners.iter().find(|o| o.name == name))
        .map(|o| o.budget);
    Key {
        name: key.name.clone(),
        disabled: key.disabled,
        not_before_unix_ms: key.not_before_unix_ms,
        expires_at_unix_ms: key.expires_at_unix_ms,
        owner: key.owner.clone(),
        labels: key.labels.clone(),
        models: key.models.clone(),
        patterns: key
            .models
            .as_ref()
            .map(|list| list.iter().map(|p| p.chars().collect()).collect()),
        requests_per_minute: key.requests_per_minute,
        burst: key.burst,
        max_concurrent: key.max_concurrent,
        tokens_per_minute: key.tokens_per_minute,
        tokens_per_day: key.tokens_per_day,
        budget: key.budget,
        owner_budget,
        series: Default::default(),
    }
}
