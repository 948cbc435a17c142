use super::*;

#[test]
fn statuses_and_codes_follow_the_design_table() {
    let cases = [
        (
            RequestError::InvalidJson { detail: "x".into() },
            400,
            "invalid_json",
        ),
        (RequestError::MissingApiKey, 401, "missing_api_key"),
        (
            RequestError::InactiveApiKey {
                why: Inactive::Disabled,
            },
            401,
            "invalid_api_key",
        ),
        (
            RequestError::UnknownRoute {
                repeated_prefix: false,
            },
            404,
            "unknown_route",
        ),
        (
            RequestError::ModelNotFound { model: "m".into() },
            404,
            "model_not_found",
        ),
        (
            RequestError::RequestTooLarge { limit_bytes: 1 },
            413,
            "request_too_large",
        ),
        (
            RequestError::UnsupportedMediaType,
            415,
            "unsupported_media_type",
        ),
        (
            RequestError::RequestHeaderTooLarge,
            431,
            "request_header_too_large",
        ),
        (RequestError::Internal, 500, "internal_error"),
        (
            RequestError::UnsupportedTransferEncoding,
            501,
            "unsupported_transfer_encoding",
        ),
        (
            RequestError::UpstreamAuthFailed,
            502,
            "upstream_auth_failed",
        ),
        (RequestError::UpstreamTimeout, 504, "upstream_timeout"),
    ];
    for (error, status, code) in cases {
        assert_eq!(error.status(), status, "status of {error:?}");
        assert_eq!(error.code(), code, "code of {error:?}");
    }
}

#[test]
fn an_inactive_key_is_told_why_and_when() {
    let expired = RequestError::InactiveApiKey {
        why: Inactive::Expired {
            at_unix_ms: 1_767_225_600_000,
        },
    };
    assert_eq!(expired.error_type(), "authentication_error");
    assert!(
        expired
            .message()
            .contains("expired at 2026-01-01T00:00:00Z"),
        "{}",
        expired.message()
    );
    let early = RequestError::InactiveApiKey {
        why: Inactive::NotYetValid {
            from_unix_ms: 1_767_225_600_500,
        },
    };
    assert!(
        early
            .message()
            .contains("not valid before 2026-01-01T00:00:00.500Z"),
        "{}",
        early.message()
    );
    let disabled = RequestError::InactiveApiKey {
        why: Inactive::Disabled,
    };
    assert!(
        disabled.message().contains("disabled"),
        "{}",
        disabled.message()
    );
}

#[test]
fn quoted_model_ids_are_bounded() {
    let long = "m".repeat(10_000);
    let message = RequestError::ModelNotFound { model: long }.message();
    assert!(
        message.len() < 300,
        "message stays short: {} bytes",
        message.len()
    );
}

#[test]
fn a_repeated_key_is_invalid_json_naming_the_key_boundedly() {
    let error = RequestError::RepeatedKey {
        key: "model".into(),
    };
    assert_eq!((error.status(), error.code()), (400, "invalid_json"));
    assert_eq!(error.param(), Some("model"));
    assert!(error.message().contains("'model'"), "{}", error.message());
    let long = RequestError::RepeatedKey {
        key: "é".repeat(10_000),
    };
    assert_eq!(
        long.param().map(|p| p.chars().count()),
        Some(MAX_QUOTED_CHARS)
    );
    assert!(long.message().len() < 400, "message stays short");
}
