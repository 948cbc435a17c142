//! What the store answers for one admission: admitted with a grant, refused, or not
//! usable; and where the key stood, for the answer's headers.

use super::Grant;
use crate::error::RequestError;
use crate::limits::{RateStatus, TokenStatus};
use std::time::Duration;

/// The store's answer to one admission.
pub enum Shared {
    Admitted {
        grant: Grant,
        position: Position,
    },
    Refused(Refusal),
    /// The store could not be used: `on_error` decides.
    Unavailable,
}

/// Where a key stood in the store after an admission, for the answer's headers: its rate
/// and token window (`x-ratelimit-*`) and the micro-dollars its tightest budget window has
/// left (`x-sluice-budget-remaining-usd`), each `None` where the key has no such limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct Position {
    pub rate: Option<RateStatus>,
    pub tokens: Option<TokenStatus>,
    pub budget: Option<u64>,
}

impl Position {
    /// The same position with its resets counted down by `since`.
    pub(super) fn counted_down(self, since: Duration) -> Position {
        Position {
            rate: self.rate.map(|rate| RateStatus {
                reset: rate.reset.saturating_sub(since),
                ..rate
            }),
            tokens: self.tokens.map(|tokens| TokenStatus {
                reset: tokens.reset.saturating_sub(since),
                ..tokens
            }),
            budget: self.budget,
        }
    }
}

/// A refusal by the store: the error, and where the key stood, for the answer's headers.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub error: RequestError,
    pub position: Position,
}

/// The same refusal with `left` to wait.
pub(super) fn with_wait(error: &RequestError, left: Duration) -> RequestError {
    match error {
        RequestError::RateLimited { .. } => RequestError::RateLimited { retry_after: left },
        RequestError::TokensLimited {
            window,
            limit,
            estimate,
            ..
        } => RequestError::TokensLimited {
            retry_after: left,
            window,
            limit: *limit,
            estimate: *estimate,
        },
        other => other.clone(),
    }
}
