//! The fixed label sets: values a series takes that come from no configuration (codes,
//! resend reasons), declared up front so every series exists at zero.

/// The `reason` of a resend after no connection could be opened.
pub const CONNECT_FAILED: &str = "connect_failed";
/// The `reason` of a resend after a handed-back 429.
pub const RATE_LIMITED: &str = "rate_limited";
/// Every `reason` of `sluice_upstream_retries_total` (the resend decisions are
/// `upstream/verdict.rs`'s; the label set is the registry's).
pub const RESEND_REASONS: [&str; 7] = [
    CONNECT_FAILED,
    RATE_LIMITED,
    "status_500",
    "status_502",
    "status_503",
    "status_504",
    "first_byte_timeout",
];

/// Label value for a request that named no known key or model.
pub const UNKNOWN: &str = "unknown";

/// Rejections made before a key is known (`key="unknown"`).
pub(super) const ANONYMOUS_CODES: [&str; 6] = [
    "missing_api_key",
    "invalid_api_key",
    "unknown_route",
    "invalid_request",
    "request_header_too_large",
    "unsupported_transfer_encoding",
];
/// Rejections counted under a key's name: its own limits, and the key being inactive.
pub(super) const KEY_CODES: [&str; 3] = [
    "rate_limit_exceeded",
    "concurrency_limit_exceeded",
    "invalid_api_key",
];
/// The codes of `sluice_upstream_errors_total`.
pub(super) const UPSTREAM_CODES: [&str; 4] = [
    "upstream_unavailable",
    "upstream_timeout",
    "upstream_protocol_error",
    "upstream_auth_failed",
];
