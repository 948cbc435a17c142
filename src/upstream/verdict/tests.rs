use super::*;

const DEFAULT: [RetryOn; 3] = RetryOn::DEFAULT;
/// Another target is free and a resend remains; no fallback.
const ELSEWHERE: Onward = Onward {
    resend: true,
    other_target: true,
    fallback: false,
};
/// Nothing else: the last attempt at the last model.
const NOWHERE: Onward = Onward {
    resend: false,
    other_target: false,
    fallback: false,
};
/// No other target or resend left, but a fallback model follows.
const FALLBACK: Onward = Onward {
    resend: false,
    other_target: false,
    fallback: true,
};

fn failed(error: RequestError, reached: Reached) -> Outcome {
    Outcome::Failed { error, reached }
}

fn answered(status: u16) -> Outcome {
    Outcome::Answered {
        status,
        retry_after: None,
    }
}

fn handed_back(status: u16) -> Outcome {
    Outcome::HandedBack {
        status,
        retry_after: None,
    }
}

#[test]
fn a_connect_failure_is_resent_while_attempts_remain() {
    let outcome = failed(RequestError::UpstreamUnavailable, Reached::No);
    let single_target = Onward {
        other_target: false,
        ..ELSEWHERE
    };
    assert_eq!(
        verdict(&outcome, &DEFAULT, single_target),
        (HealthEffect::Failure, Next::Resend(CONNECT_FAILED)),
        "nothing was sent: even the same target may take it again"
    );
    assert_eq!(
        verdict(&outcome, &DEFAULT, NOWHERE),
        (HealthEffect::Failure, Next::Return),
        "attempts exhausted: the error goes to the client"
    );
    assert_eq!(
        verdict(&outcome, &DEFAULT, FALLBACK),
        (HealthEffect::Failure, Next::Fallback),
        "attempts exhausted: the fallback model takes it"
    );
    assert_eq!(
        verdict(&outcome, &[RetryOn::Status(503)], ELSEWHERE),
        (HealthEffect::Failure, Next::Return),
        "a retry_on without connect_failure sends nothing again"
    );
}

#[test]
fn a_request_that_may_have_been_processed_is_never_resent_by_default() {
    for (error, effect) in [
        (RequestError::UpstreamTimeout, HealthEffect::Failure),
        (RequestError::UpstreamProtocolError, HealthEffect::Failure),
        // Closed after the request went out: maybe that request's doing.
        (RequestError::UpstreamUnavailable, HealthEffect::Unchanged),
        (RequestError::UpstreamClosed, HealthEffect::Unchanged),
    ] {
        let outcome = failed(error.clone(), Reached::Maybe);
        for onward in [ELSEWHERE, FALLBACK] {
            assert_eq!(
                verdict(&outcome, &DEFAULT, onward),
                (effect, Next::Return),
                "{error:?}: sent once, never again, not even to a fallback"
            );
        }
    }
}

#[test]
fn a_first_byte_timeout_moves_the_request_only_when_opted_in() {
    let outcome = failed(RequestError::UpstreamTimeout, Reached::Maybe);
    let opted_in = [RetryOn::FirstByteTimeout];
    assert_eq!(
        verdict(&outcome, &opted_in, ELSEWHERE),
        (HealthEffect::Failure, Next::Resend("first_byte_timeout"))
    );
    assert_eq!(
        verdict(&outcome, &opted_in, FALLBACK),
        (HealthEffect::Failure, Next::Fallback)
    );
    let single_target = Onward {
        other_target: false,
        ..ELSEWHERE
    };
    assert_eq!(
        verdict(&outcome, &opted_in, single_target),
        (HealthEffect::Failure, Next::Return),
        "never again to the target that just timed out"
    );
}

#[test]
fn default_statuses_are_held_back_only_when_there_is_somewhere_to_go() {
    for status in [429, 503] {
        assert!(hands_back(status, &DEFAULT, ELSEWHERE), "{status}");
        assert!(hands_back(status, &DEFAULT, FALLBACK), "{status}");
        assert!(
            !hands_back(status, &DEFAULT, NOWHERE),
            "{status}: nowhere else, so the client gets it"
        );
        let spent = Onward {
            resend: false,
            ..ELSEWHERE
        };
        assert!(
            !hands_back(status, &DEFAULT, spent),
            "{status}: no resend left"
        );
    }
    for status in [200, 400, 401, 500, 502, 504] {
        assert!(
            !hands_back(status, &DEFAULT, ELSEWHERE),
            "{status} is relayed by default: it may have been processed"
        );
    }
}

#[test]
fn opt_in_statuses_are_held_back_when_named() {
    let opted_in = [
        RetryOn::Status(500),
        RetryOn::Status(502),
        RetryOn::Status(504),
    ];
    for status in [500, 502, 504] {
        assert!(hands_back(status, &opted_in, ELSEWHERE), "{status}");
    }
    assert!(
        !hands_back(503, &opted_in, ELSEWHERE),
        "a list written replaces the default"
    );
}

#[test]
fn a_handed_back_answer_goes_to_another_target_or_the_fallback() {
    let wait = Some(Duration::from_secs(2));
    let throttled = Outcome::HandedBack {
        status: 429,
        retry_after: wait,
    };
    assert_eq!(
        verdict(&throttled, &DEFAULT, ELSEWHERE),
        (HealthEffect::CoolDown(wait), Next::Resend(RATE_LIMITED))
    );
    assert_eq!(
        verdict(&handed_back(503), &DEFAULT, ELSEWHERE),
        (HealthEffect::Failure, Next::Resend("status_503"))
    );
    assert_eq!(
        verdict(&handed_back(503), &DEFAULT, FALLBACK),
        (HealthEffect::Failure, Next::Fallback)
    );
    assert_eq!(
        verdict(&handed_back(500), &[RetryOn::Status(500)], ELSEWHERE),
        (HealthEffect::Unchanged, Next::Resend("status_500")),
        "a 500 moves the request when opted in, and still ejects nothing"
    );
    let relayed = Outcome::Answered {
        status: 429,
        retry_after: wait,
    };
    assert_eq!(
        verdict(&relayed, &DEFAULT, ELSEWHERE),
        (HealthEffect::CoolDown(wait), Next::Return),
        "a relayed 429 still cools the target down, and is never sent again"
    );
}

#[test]
fn answers_count_for_health_by_status() {
    for status in [502, 503, 504] {
        assert_eq!(
            verdict(&answered(status), &DEFAULT, ELSEWHERE),
            (HealthEffect::Failure, Next::Return),
            "{status} says the upstream itself is unwell"
        );
    }
    assert_eq!(
        verdict(&answered(500), &DEFAULT, ELSEWHERE),
        (HealthEffect::Unchanged, Next::Return),
        "a 500 may be one request's doing: it never ejects the upstream for everyone"
    );
    for status in [200, 400, 404, 413, 422] {
        assert_eq!(
            verdict(&answered(status), &DEFAULT, ELSEWHERE),
            (HealthEffect::Success, Next::Return)
        );
    }
}

#[test]
fn a_refused_credential_a_departed_client_and_a_cut_stream_stay_where_they_are() {
    let all = [
        RetryOn::ConnectFailure,
        RetryOn::FirstByteTimeout,
        RetryOn::Status(500),
        RetryOn::Status(502),
        RetryOn::Status(503),
        RetryOn::Status(504),
    ];
    let everywhere = Onward {
        fallback: true,
        ..ELSEWHERE
    };
    assert_eq!(
        verdict(
            &failed(RequestError::UpstreamAuthFailed, Reached::Maybe),
            &all,
            everywhere
        ),
        (HealthEffect::Unchanged, Next::Return)
    );
    let gone = Outcome::ClientGone(Error::Closed("the wait for an answer"));
    assert_eq!(
        verdict(&gone, &all, everywhere),
        (HealthEffect::Unchanged, Next::Return)
    );
    let cut = Outcome::Cut {
        error: RequestError::UpstreamTimeout,
        then: AfterCut::KeepAlive,
    };
    assert_eq!(
        verdict(&cut, &all, everywhere),
        (HealthEffect::Unchanged, Next::Return),
        "once the answer started nothing is sent again, whatever retry_on says"
    );
}

#[test]
fn a_failed_send_on_a_pooled_connection_goes_again_fresh() {
    let reset = Error::Write(std::io::ErrorKind::ConnectionReset.into());
    assert_eq!(
        send_failed(Connection::Pooled, &reset),
        EarlyFailure::DeadPooled
    );
    assert_eq!(
        send_failed(Connection::Fresh, &Error::WriteTimeout),
        EarlyFailure::Failed(RequestError::UpstreamTimeout)
    );
}

#[test]
fn an_answer_broken_off_counts_toward_ejection_a_stalled_one_does_not() {
    for (error, effect) in [
        (RequestError::UpstreamClosed, HealthEffect::Failure),
        (RequestError::UpstreamProtocolError, HealthEffect::Failure),
        (RequestError::UpstreamTimeout, HealthEffect::Unchanged),
        (RequestError::Internal, HealthEffect::Unchanged),
    ] {
        for then in [AfterCut::Close, AfterCut::KeepAlive] {
            let outcome = Outcome::Cut {
                error: error.clone(),
                then,
            };
            assert_eq!(
                verdict(&outcome, &DEFAULT, ELSEWHERE),
                (effect, Next::Return),
                "{error:?}: never sent again once the answer started"
            );
        }
    }
}
