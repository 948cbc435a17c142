//! The decisions of the upstream path, as pure functions over plain data so every case has a
//! unit test: what a failed send or read means, and, once an attempt is over, what it does
//! to the upstream's health and whether the request goes out again.
//!
//! The rule they keep: a request is sent again only when it provably was not processed. No
//! connection could be opened, a reused pooled connection failed while the request was
//! being written (so the upstream never had all of it), or the upstream answered 429 while
//! another target was free. Once the whole request went out, a failure to read the answer
//! (a close, a reset, a timeout) is never resent: the upstream may have held it and worked
//! on it. A 500, a 401/403, or anything after the response started, never is either.

use super::health::HealthEffect;
use crate::error::RequestError;
use pingora::{Error, ErrorType};
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

/// What to do with an upstream 429 when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On429 {
    /// Relay it to the client with its `Retry-After`.
    Relay,
    /// Hand it back unrelayed: another target is free and a resend remains.
    HandBack,
}

/// How one attempt at one target ended.
#[derive(Debug)]
pub enum Outcome {
    /// The upstream's answer was relayed whole. `retry_after`: what a relayed 429 asked.
    Answered {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// The upstream answered 429 and, as allowed, nothing was relayed.
    Throttled { retry_after: Option<Duration> },
    /// Nothing reached the client.
    Failed {
        error: RequestError,
        reached: Reached,
    },
    /// The response had started and was ended as well as it could be.
    Cut { error: RequestError, then: AfterCut },
    /// The client went away; the upstream request was abandoned.
    ClientGone(Box<Error>),
}

/// After an attempt: return its outcome, or send the request again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Return,
    /// Again, for this reason (the `reason` label of `sluice_upstream_retries_total`).
    Resend(&'static str),
}

/// The `reason` of a resend after no connection could be opened.
pub const CONNECT_FAILED: &str = "connect_failed";
/// The `reason` of a resend after a handed-back 429.
pub const RATE_LIMITED: &str = "rate_limited";

/// What an attempt's outcome does to the upstream's health, and what happens next.
/// `may_resend`: a resend remains within `retry_attempts`.
///
/// Only signs that the upstream itself is unwell count as failures toward ejection: no
/// connection, no answer in time, an answer that is not HTTP, a 502/503/504. One tenant's
/// request that makes a backend answer 500, or stall or break after its answer started,
/// must not take the upstream out for everyone: those count in metrics only.
pub fn verdict(outcome: &Outcome, may_resend: bool) -> (HealthEffect, Next) {
    match outcome {
        Outcome::Answered {
            status,
            retry_after,
        } => {
            let effect = match status {
                502..=504 => HealthEffect::Failure,
                429 => HealthEffect::CoolDown(*retry_after),
                // Not proof of health either: leave the count of failures as it is.
                500..=599 => HealthEffect::Unchanged,
                _ => HealthEffect::Success,
            };
            (effect, Next::Return)
        }
        // Only handed back when a resend was allowed.
        Outcome::Throttled { retry_after } => (
            HealthEffect::CoolDown(*retry_after),
            Next::Resend(RATE_LIMITED),
        ),
        Outcome::Failed { error, reached } => {
            let unwell = *reached == Reached::No
                || matches!(
                    error,
                    RequestError::UpstreamTimeout | RequestError::UpstreamProtocolError
                );
            // A refused credential is our configuration; a connection closed after the
            // request went out may be that request's doing (a prompt that crashes it).
            let effect = if unwell {
                HealthEffect::Failure
            } else {
                HealthEffect::Unchanged
            };
            let next = if *reached == Reached::No && may_resend {
                Next::Resend(CONNECT_FAILED)
            } else {
                Next::Return
            };
            (effect, next)
        }
        Outcome::Cut { .. } => (HealthEffect::Unchanged, Next::Return),
        Outcome::ClientGone(_) => (HealthEffect::Unchanged, Next::Return),
    }
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
        Connection::Fresh => EarlyFailure::Failed(failure_of(error)),
    }
}

/// The client-facing error for a failed read of the answer, once the request went out: the
/// upstream was reached, so a closed connection is not "could not be reached".
pub fn read_failure(error: &Error) -> RequestError {
    match failure_of(error) {
        RequestError::UpstreamUnavailable => RequestError::UpstreamClosed,
        other => other,
    }
}

/// The client-facing error for an upstream I/O failure.
pub fn failure_of(error: &Error) -> RequestError {
    match error.etype() {
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error => RequestError::UpstreamProtocolError,
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            RequestError::UpstreamTimeout
        }
        _ => RequestError::UpstreamUnavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: RequestError, reached: Reached) -> Outcome {
        Outcome::Failed { error, reached }
    }

    #[test]
    fn a_connect_failure_is_resent_while_attempts_remain() {
        let outcome = failed(RequestError::UpstreamUnavailable, Reached::No);
        assert_eq!(
            verdict(&outcome, true),
            (HealthEffect::Failure, Next::Resend(CONNECT_FAILED))
        );
        assert_eq!(
            verdict(&outcome, false),
            (HealthEffect::Failure, Next::Return),
            "attempts exhausted: the error goes to the client"
        );
    }

    #[test]
    fn a_request_that_may_have_been_processed_is_never_resent() {
        for (error, effect) in [
            (RequestError::UpstreamTimeout, HealthEffect::Failure),
            (RequestError::UpstreamProtocolError, HealthEffect::Failure),
            // Closed after the request went out: maybe that request's doing.
            (RequestError::UpstreamUnavailable, HealthEffect::Unchanged),
        ] {
            let outcome = failed(error.clone(), Reached::Maybe);
            assert_eq!(
                verdict(&outcome, true),
                (effect, Next::Return),
                "{error:?}: sent once, never again"
            );
        }
    }

    #[test]
    fn a_handed_back_429_cools_the_target_and_goes_elsewhere() {
        let wait = Some(Duration::from_secs(2));
        assert_eq!(
            verdict(&Outcome::Throttled { retry_after: wait }, true),
            (HealthEffect::CoolDown(wait), Next::Resend(RATE_LIMITED))
        );
        let relayed = Outcome::Answered {
            status: 429,
            retry_after: wait,
        };
        assert_eq!(
            verdict(&relayed, true),
            (HealthEffect::CoolDown(wait), Next::Return),
            "a relayed 429 still cools the target down"
        );
    }

    #[test]
    fn answers_count_for_health_by_status() {
        let answered = |status| Outcome::Answered {
            status,
            retry_after: None,
        };
        for status in [502, 503, 504] {
            assert_eq!(
                verdict(&answered(status), true),
                (HealthEffect::Failure, Next::Return),
                "{status} says the upstream itself is unwell"
            );
        }
        assert_eq!(
            verdict(&answered(500), true),
            (HealthEffect::Unchanged, Next::Return),
            "a 500 may be one request's doing: it never ejects the upstream for everyone"
        );
        for status in [200, 400, 404, 413, 422] {
            assert_eq!(
                verdict(&answered(status), true),
                (HealthEffect::Success, Next::Return)
            );
        }
    }

    #[test]
    fn a_refused_credential_and_a_departed_client_leave_health_alone() {
        assert_eq!(
            verdict(
                &failed(RequestError::UpstreamAuthFailed, Reached::Maybe),
                true
            ),
            (HealthEffect::Unchanged, Next::Return)
        );
        let gone = Outcome::ClientGone(Error::new(ErrorType::ConnectionClosed));
        assert_eq!(
            verdict(&gone, true),
            (HealthEffect::Unchanged, Next::Return)
        );
        let cut = Outcome::Cut {
            error: RequestError::UpstreamTimeout,
            then: AfterCut::KeepAlive,
        };
        assert_eq!(
            verdict(&cut, true),
            (HealthEffect::Unchanged, Next::Return),
            "a stall after the answer started is one request's fate, not the upstream's"
        );
    }

    #[test]
    fn a_failed_send_on_a_pooled_connection_goes_again_fresh() {
        let reset = Error::new(ErrorType::WriteError);
        assert_eq!(
            send_failed(Connection::Pooled, &reset),
            EarlyFailure::DeadPooled
        );
        assert_eq!(
            send_failed(Connection::Fresh, &Error::new(ErrorType::WriteTimedout)),
            EarlyFailure::Failed(RequestError::UpstreamTimeout)
        );
    }
}
