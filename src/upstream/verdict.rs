//! The decisions of the upstream path, as pure functions over plain data so every case has a
//! unit test: what a failed send or read means, which answers are held back from the client,
//! and, once an attempt is over, what it does to the upstream's health and whether the
//! request goes out again, to another target or to a fallback model.
//!
//! The rule they keep: a request goes out again only after a failure the upstream's
//! `retry_on` names, and only before anything of an answer reached the client. By default
//! those are failures where the request provably was not processed: no connection could be
//! opened, or the upstream answered 429 or 503. A reused pooled connection that failed
//! while the request was being written is replaced at once whatever `retry_on` says (the
//! upstream never had all of it). An operator may add 500, 502, 504 and
//! `first_byte_timeout`, accepting that such a request may be processed twice. A 401/403,
//! or anything after the response started, never goes out again.
use super::health::HealthEffect;
use crate::config::RetryOn;
use crate::error::RequestError;
use crate::http1::Error;
use pingora_core::ErrorType;
use std::time::Duration;

/// Whether the upstream may have received the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Provably not: no connection was ever opened.
    No,
    /// Maybe: bytes were written, so it may have been processed.
    Maybe,
}

/// What the client connection does after a cut response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCut {
    /// The response was ended cleanly (an SSE error event and the end of the body).
    KeepAlive,
    /// The response could only be cut: the client connection must be dropped.
    Close,
}

/// Where a request may go if an attempt fails in a way its upstream's `retry_on` names;
/// decided before the attempt, so the answer's fate and the verdict agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Onward {
    /// A resend remains within `retry_attempts`, and the request is not bound to one target
    /// (a stored response).
    pub resend: bool,
    /// Another target of the model, not the one this attempt goes to, takes requests now.
    pub other_target: bool,
    /// A fallback model follows this one.
    pub fallback: bool,
}

impl Onward {
    /// Whether a failure other than a connect failure may go somewhere: to another target
    /// (the same one would likely fail the same way), or to a fallback model.
    fn elsewhere(self) -> bool {
        (self.resend && self.other_target) || self.fallback
    }
}

/// How one attempt at one target ended.
#[derive(Debug)]
pub enum Outcome {
    /// The upstream's answer was relayed whole. `retry_after`: what a relayed 429 asked.
    Answered {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// The upstream answered with a `retry_on` status and, as allowed, nothing was relayed.
    HandedBack {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Nothing reached the client.
    Failed {
        error: RequestError,
        reached: Reached,
    },
    /// The response had started and was ended as well as it could be.
    Cut { error: RequestError, then: AfterCut },
    /// The client went away; the upstream request was abandoned.
    ClientGone(Error),
}

/// After an attempt: return its outcome, send the request again, or give up on this model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Return,
    /// Again, for this reason (the `reason` label of `sluice_upstream_retries_total`).
    Resend(&'static str),
    /// The model could not serve it (a `retry_on` failure with no other target left): the
    /// next fallback model takes the request.
    Fallback,
}

pub use crate::metrics::{CONNECT_FAILED, RATE_LIMITED};

/// The `reason` label of a resend after `failure`.
fn reason(failure: RetryOn) -> &'static str {
    match failure {
        RetryOn::ConnectFailure => CONNECT_FAILED,
        RetryOn::FirstByteTimeout => "first_byte_timeout",
        RetryOn::Status(429) => RATE_LIMITED,
        RetryOn::Status(500) => "status_500",
        RetryOn::Status(502) => "status_502",
        RetryOn::Status(504) => "status_504",
        RetryOn::Status(_) => "status_503",
    }
}

/// Whether an answer with `status` is held back from the client, so that another target
/// or a fallback model takes the request: `retry_on` names the status and there is
/// somewhere to go. Otherwise it is relayed as it is.
pub fn hands_back(status: u16, retry_on: &[RetryOn], onward: Onward) -> bool {
    retry_on.contains(&RetryOn::Status(status)) && onward.elsewhere()
}

/// The `retry_on` failure an outcome is, if it is one of the failures `retry_on` can name.
fn failure(outcome: &Outcome) -> Option<RetryOn> {
    match outcome {
        Outcome::Failed {
            reached: Reached::No,
            ..
        } => Some(RetryOn::ConnectFailure),
        Outcome::Failed {
            error: RequestError::UpstreamTimeout,
            reached: Reached::Maybe,
        } => Some(RetryOn::FirstByteTimeout),
        Outcome::HandedBack { status, .. } => Some(RetryOn::Status(*status)),
        _ => None,
    }
}

/// What an attempt's outcome does to the upstream's health, and what happens next.
///
/// Only signs that the upstream itself is unwell count as failures toward ejection: no
/// connection, no answer in time, an answer that is not HTTP (a body broken off before its
/// end included, whether or not part of it reached the client), a 502/503/504. One
/// tenant's request that makes a backend answer 500, or stall after its answer started,
/// must not take the upstream out for everyone: those count in metrics only.
pub fn verdict(outcome: &Outcome, retry_on: &[RetryOn], onward: Onward) -> (HealthEffect, Next) {
    let effect = match outcome {
        Outcome::Answered {
            status,
            retry_after,
        }
        | Outcome::HandedBack {
            status,
            retry_after,
        } => match status {
            502..=504 => HealthEffect::Failure,
            429 => HealthEffect::CoolDown(*retry_after),
            // Not proof of health either: leave the count of failures as it is.
            500..=599 => HealthEffect::Unchanged,
            _ => HealthEffect::Success,
        },
        Outcome::Failed { error, reached } => {
            let unwell = *reached == Reached::No
                || matches!(
                    error,
                    RequestError::UpstreamTimeout | RequestError::UpstreamProtocolError
                );
            // A refused credential is our configuration; a connection closed after the
            // request went out may be that request's doing (a prompt that crashes it).
            if unwell {
                HealthEffect::Failure
            } else {
                HealthEffect::Unchanged
            }
        }
        // The upstream broke off an answer it had started: like any answer that is not HTTP.
        Outcome::Cut {
            error: RequestError::UpstreamClosed | RequestError::UpstreamProtocolError,
            ..
        } => HealthEffect::Failure,
        Outcome::Cut { .. } | Outcome::ClientGone(_) => HealthEffect::Unchanged,
    };
    let next = match failure(outcome) {
        // A handed-back answer never reaches the client: it always goes somewhere.
        Some(failure @ RetryOn::Status(_)) => {
            if onward.resend && onward.other_target {
                Next::Resend(reason(failure))
            } else {
                Next::Fallback
            }
        }
        Some(failure) if retry_on.contains(&failure) => {
            // Nothing was sent on a connection that never opened: any target may take it,
            // this one again included (a single-target model retries its target).
            let resend = match failure {
                RetryOn::ConnectFailure => onward.resend,
                _ => onward.resend && onward.other_target,
            };
            if resend {
                Next::Resend(reason(failure))
            } else if onward.fallback {
                Next::Fallback
            } else {
                Next::Return
            }
        }
        _ => Next::Return,
    };
    (effect, next)
}

/// How a connection was taken for an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// Reused from the pool: the upstream may have closed it while it sat idle.
    Pooled,
    /// Opened for this attempt.
    Fresh,
}

/// A failed send before the response header: the attempt fails, or the connection was a
/// dead pooled one and the request goes again at once on a fresh connection.
#[derive(Debug, PartialEq, Eq)]
pub enum EarlyFailure {
    DeadPooled,
    Failed(RequestError),
}

/// Writing the request failed, with no answer from the upstream: it never had the whole
/// request. A pooled connection is taken for dead (closed while idle); on a fresh one the
/// failure is the upstream's.
pub fn send_failed(connection: Connection, error: &Error) -> EarlyFailure {
    match connection {
        Connection::Pooled => EarlyFailure::DeadPooled,
        Connection::Fresh => EarlyFailure::Failed(RequestError::from_upstream(error)),
    }
}

/// The client-facing error for a failed read of the answer, once the request went out: the
/// upstream was reached, so a closed connection is not "could not be reached".
pub fn read_failure(error: &Error) -> RequestError {
    match RequestError::from_upstream(error) {
        RequestError::UpstreamUnavailable => RequestError::UpstreamClosed,
        other => other,
    }
}

/// The client-facing error for a connection that could not be opened (pingora's connector:
/// TCP, TLS): a timeout, or the upstream unavailable.
pub fn connect_failure(error: &pingora_core::Error) -> RequestError {
    match error.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            RequestError::UpstreamTimeout
        }
        _ => RequestError::UpstreamUnavailable,
    }
}

#[cfg(test)]
mod tests;
