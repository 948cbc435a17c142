//! The one request-error type: every answer the gateway makes itself on failure.
//!
//! Each variant knows its HTTP status, OpenAI-style `type` and `code`, the parameter it is
//! about, and a one-sentence message a user can act on. `respond.rs` renders it; nothing
//! else builds error JSON.

use crate::clock::rfc3339;
use std::time::Duration;

/// Why a known key is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inactive {
    /// `disabled: true` (or `enabled: false`).
    Disabled,
    /// Before its `not_before`.
    NotYetValid { from_unix_ms: i64 },
    /// At or after its `expires_at`.
    Expired { at_unix_ms: i64 },
}

impl Inactive {
    /// The reason as the admin view names it.
    pub fn name(&self) -> &'static str {
        match self {
            Inactive::Disabled => "disabled",
            Inactive::NotYetValid { .. } => "not_yet_valid",
            Inactive::Expired { .. } => "expired",
        }
    }
}

/// The wait a client is told, in whole milliseconds: rounded up (a client that waits exactly
/// this long is admitted) and at least 1. The message, `retry-after-ms` and the access
/// log's `retry_after_ms` all state this one number.
pub fn wait_millis(wait: Duration) -> u64 {
    u64::try_from(wait.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A failure the gateway answers itself, in the OpenAI error envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    UnknownRoute {
        repeated_prefix: bool,
    },
    MissingApiKey,
    /// No key has this hash.
    InvalidApiKey,
    /// `Authorization: Bearer` and `x-api-key` name different keys (also `invalid_api_key`).
    ConflictingApiKeys,
    /// The key exists but may not be used now (also `invalid_api_key`); the message says
    /// why, about this key only.
    InactiveApiKey {
        why: Inactive,
    },
    RateLimited {
        retry_after: Duration,
    },
    ConcurrencyLimited {
        retry_after: Duration,
    },
    /// A token window has no room for the request's estimate.
    TokensLimited {
        retry_after: Duration,
        window: &'static str,
        limit: u64,
        estimate: u64,
    },
    /// A money budget of the key or its owner has no room for the request's cost.
    BudgetExhausted {
        /// `key 'name'` or `owner 'name'`.
        budget: String,
        /// `day` or `month`.
        window: &'static str,
        limit_micros: u64,
        spent_micros: u64,
        cost_micros: u64,
        retry_after: Duration,
    },
    RequestTooLarge {
        limit_bytes: usize,
    },
    UnsupportedMediaType,
    /// The request is not valid HTTP/1.1 (its head or its body framing).
    InvalidRequest {
        detail: &'static str,
    },
    /// A `multipart/form-data` body the gateway and its upstream could read differently
    /// (also `invalid_request`); `param` names the field when there is one.
    InvalidForm {
        param: Option<&'static str>,
        detail: &'static str,
    },
    /// The request head is over `max_header_bytes` (or has too many fields).
    RequestHeaderTooLarge,
    /// The request's `Transfer-Encoding` is not the one coding `chunked`.
    UnsupportedTransferEncoding,
    InvalidJson {
        detail: String,
    },
    /// The body's top-level object names `key` twice (also `invalid_json`).
    RepeatedKey {
        key: String,
    },
    MissingParameter {
        param: &'static str,
    },
    InvalidParameter {
        param: String,
        message: String,
    },
    CapabilityNotSupported {
        param: &'static str,
        model: String,
        capability: &'static str,
    },
    ModelNotFound {
        model: String,
    },
    /// The model exists for this key but does not serve the route; `serves` names the route
    /// of its endpoint type.
    EndpointNotSupported {
        model: String,
        serves: &'static str,
    },
    /// A stored response ID the gateway did not make, or that no upstream knows.
    ResponseNotFound,
    Internal,
    UpstreamUnavailable,
    /// The upstream closed the connection before its answer was complete (it was reached).
    UpstreamClosed,
    UpstreamAuthFailed,
    UpstreamProtocolError,
    NoHealthyUpstream {
        retry_after: Duration,
    },
    UpstreamSaturated {
        retry_after: Duration,
    },
    Overloaded {
        retry_after: Duration,
    },
    /// The shared limits store cannot be used and `on_error` is `closed`.
    LimitsUnavailable,
    UpstreamTimeout,
}

/// Longest piece of client-supplied text (a model ID) quoted back in a message.
const MAX_QUOTED_CHARS: usize = 128;

impl RequestError {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        use RequestError::*;
        match self {
            InvalidJson { .. }
            | InvalidRequest { .. }
            | InvalidForm { .. }
            | RepeatedKey { .. }
            | MissingParameter { .. }
            | InvalidParameter { .. }
            | CapabilityNotSupported { .. } => 400,
            MissingApiKey | InvalidApiKey | ConflictingApiKeys | InactiveApiKey { .. } => 401,
            UnknownRoute { .. }
            | ModelNotFound { .. }
            | EndpointNotSupported { .. }
            | ResponseNotFound => 404,
            RequestTooLarge { .. } => 413,
            UnsupportedMediaType => 415,
            RequestHeaderTooLarge => 431,
            RateLimited { .. }
            | ConcurrencyLimited { .. }
            | TokensLimited { .. }
            | BudgetExhausted { .. } => 429,
            Internal => 500,
            UnsupportedTransferEncoding => 501,
            UpstreamUnavailable | UpstreamClosed | UpstreamAuthFailed | UpstreamProtocolError => {
                502
            }
            NoHealthyUpstream { .. }
            | UpstreamSaturated { .. }
            | Overloaded { .. }
            | LimitsUnavailable => 503,
            UpstreamTimeout => 504,
        }
    }

    /// The OpenAI `error.type` value.
    pub fn error_type(&self) -> &'static str {
        use RequestError::*;
        match self {
            MissingApiKey | InvalidApiKey | ConflictingApiKeys | InactiveApiKey { .. } => {
                "authentication_error"
            }
            RateLimited { .. } | ConcurrencyLimited { .. } | TokensLimited { .. } => {
                "rate_limit_error"
            }
            BudgetExhausted { .. } => "insufficient_quota",
            Internal | Overloaded { .. } | LimitsUnavailable => "server_error",
            UpstreamUnavailable
            | UpstreamClosed
            | UpstreamAuthFailed
            | UpstreamProtocolError
            | NoHealthyUpstream { .. }
            | UpstreamSaturated { .. }
            | UpstreamTimeout => "upstream_error",
            _ => "invalid_request_error",
        }
    }

    /// The stable machine-readable `error.code`; also the `code` metric label.
    pub fn code(&self) -> &'static str {
        use RequestError::*;
        match self {
            UnknownRoute { .. } => "unknown_route",
            MissingApiKey => "missing_api_key",
            InvalidApiKey | ConflictingApiKeys | InactiveApiKey { .. } => "invalid_api_key",
            RateLimited { .. } | TokensLimited { .. } => "rate_limit_exceeded",
            ConcurrencyLimited { .. } => "concurrency_limit_exceeded",
            BudgetExhausted { .. } => "insufficient_quota",
            RequestTooLarge { .. } => "request_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            InvalidJson { .. } | RepeatedKey { .. } => "invalid_json",
            InvalidRequest { .. } | InvalidForm { .. } => "invalid_request",
            RequestHeaderTooLarge => "request_header_too_large",
            UnsupportedTransferEncoding => "unsupported_transfer_encoding",
            MissingParameter { .. } => "missing_required_parameter",
            InvalidParameter { .. } => "invalid_parameter",
            CapabilityNotSupported { .. } => "capability_not_supported",
            ModelNotFound { .. } => "model_not_found",
            EndpointNotSupported { .. } => "endpoint_not_supported",
            ResponseNotFound => "response_not_found",
            Internal => "internal_error",
            UpstreamUnavailable | UpstreamClosed => "upstream_unavailable",
            UpstreamAuthFailed => "upstream_auth_failed",
            UpstreamProtocolError => "upstream_protocol_error",
            NoHealthyUpstream { .. } => "no_healthy_upstream",
            UpstreamSaturated { .. } => "upstream_saturated",
            Overloaded { .. } => "overloaded",
            LimitsUnavailable => "limits_unavailable",
            UpstreamTimeout => "upstream_timeout",
        }
    }

    /// The request parameter the error is about, if any.
    pub fn param(&self) -> Option<&str> {
        use RequestError::*;
        match self {
            MissingParameter { param } | CapabilityNotSupported { param, .. } => Some(param),
            InvalidParameter { param, .. } => Some(param),
            ModelNotFound { .. } | EndpointNotSupported { .. } => Some("model"),
            RepeatedKey { key } => Some(bounded(key)),
            InvalidForm { param, .. } => *param,
            _ => None,
        }
    }

    /// How long a client should wait before trying again, when the answer says so.
    pub fn retry_after(&self) -> Option<Duration> {
        use RequestError::*;
        match self {
            RateLimited { retry_after }
            | ConcurrencyLimited { retry_after }
            | TokensLimited { retry_after, .. }
            | BudgetExhausted { retry_after, .. }
            | NoHealthyUpstream { retry_after }
            | UpstreamSaturated { retry_after }
            | Overloaded { retry_after } => Some(*retry_after),
            LimitsUnavailable => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// One sentence the user can act on. Never contains a secret: the only client text
    /// quoted is a model ID or a key of the body, cut to a bounded length.
    pub fn message(&self) -> String {
        use RequestError::*;
        match self {
            UnknownRoute { repeated_prefix: true } => "No such route: the path repeats the /v1 prefix; \
                use a base URL ending in /v1 and append the route once (for example /v1/chat/completions)."
                .into(),
            UnknownRoute { repeated_prefix: false } => "No such route. This gateway serves GET /v1/models \
                and the OpenAI routes of its models' endpoint types (each model's `endpoints` in \
                /v1/models)."
                .into(),
            MissingApiKey => "No API key was provided. Send it in the header \
                `Authorization: Bearer <API_KEY>` (or `x-api-key: <API_KEY>`)."
                .into(),
            ConflictingApiKeys => "The request carries two different API keys, in \
                `Authorization` and in `x-api-key`. Send one key."
                .into(),
            InvalidApiKey => "The API key is not valid. Check the key you are sending.".into(),
            InactiveApiKey { why: Inactive::Disabled } => "This API key has been disabled. \
                Ask the gateway's operator to enable it or to issue you a new one."
                .into(),
            InactiveApiKey { why: Inactive::Expired { at_unix_ms } } => format!(
                "This API key expired at {}. Ask the gateway's operator for a new one.",
                rfc3339(*at_unix_ms)
            ),
            InactiveApiKey { why: Inactive::NotYetValid { from_unix_ms } } => format!(
                "This API key is not valid before {}. Use it from then on.",
                rfc3339(*from_unix_ms)
            ),
            RateLimited { retry_after } => format!(
                "Rate limit reached for this API key. Retry after {} ms.",
                wait_millis(*retry_after)
            ),
            BudgetExhausted {
                budget,
                window,
                limit_micros,
                spent_micros,
                cost_micros,
                retry_after,
            } => {
                use crate::config::format_usd;
                format!(
                    "Budget exhausted: the {window} budget of {budget} is {} USD and {} USD is \
                     spent; this request may cost up to {} USD. It resets in {} s (00:00 UTC).",
                    format_usd(*limit_micros),
                    format_usd(*spent_micros),
                    format_usd(*cost_micros),
                    retry_after.as_secs().saturating_add(u64::from(retry_after.subsec_nanos() > 0)),
                )
            }
            TokensLimited {
                retry_after,
                window,
                limit,
                estimate,
            } => format!(
                "Rate limit reached for {window} on this API key (limit {limit}): this request \
                 reserves {estimate} tokens (its input and requested output). Retry after {} ms.",
                wait_millis(*retry_after)
            ),
            ConcurrencyLimited { .. } => "Too many requests are in flight for this API key. \
                Wait for one to finish before sending another."
                .into(),
            RequestTooLarge { limit_bytes } => {
                format!("The request body is larger than the limit of {limit_bytes} bytes.")
            }
            UnsupportedMediaType => {
                "The request body must be JSON: send `Content-Type: application/json`.".into()
            }
            InvalidJson { detail } => format!("The request body is not valid JSON: {detail}."),
            InvalidRequest { detail } => format!("The request is not valid HTTP/1.1: {detail}."),
            InvalidForm { detail, .. } => format!(
                "The multipart form could be read in more than one way: {detail}. Send each \
                 field once, under one Content-Disposition with a plain name parameter."
            ),
            RequestHeaderTooLarge => "The request head (request line and headers) is larger \
                than this gateway accepts; send fewer or shorter headers."
                .into(),
            UnsupportedTransferEncoding => "The request's Transfer-Encoding is not supported: \
                send the body with Content-Length, or with Transfer-Encoding: chunked alone."
                .into(),
            RepeatedKey { key } => format!(
                "The request body names '{}' more than once; send each top-level key once.",
                bounded(key)
            ),
            MissingParameter { param } => format!("Missing required parameter: '{param}'."),
            InvalidParameter { message, .. } => message.clone(),
            CapabilityNotSupported { model, capability, .. } => format!(
                "The model '{}' does not support {capability}.",
                bounded(model)
            ),
            EndpointNotSupported { model, serves } => format!(
                "The model '{}' is not served on this route; use {serves}.",
                bounded(model)
            ),
            ResponseNotFound => "No response with this ID was found.".into(),
            ModelNotFound { model } => format!(
                "The model '{}' does not exist or you do not have access to it.",
                bounded(model)
            ),
            Internal => "The gateway failed to handle the request. Report the x-request-id.".into(),
            UpstreamUnavailable => "The model's backend could not be reached.".into(),
            UpstreamClosed => "The model's backend closed the connection before its answer \
                was complete."
                .into(),
            UpstreamAuthFailed => "The model's backend refused the gateway's credential; \
                this is a gateway configuration problem, not your API key."
                .into(),
            UpstreamProtocolError => "The model's backend sent a response that is not valid HTTP.".into(),
            NoHealthyUpstream { .. } => "Every backend of this model is unavailable for now.".into(),
            UpstreamSaturated { .. } => "The model's backend is at capacity.".into(),
            Overloaded { .. } => "The gateway is at capacity or shutting down.".into(),
            LimitsUnavailable => "The store that holds this gateway's rate limits does not \
                answer, and the gateway is configured to refuse requests until it does."
                .into(),
            UpstreamTimeout => "The model's backend did not answer in time.".into(),
        }
    }
}

/// `text` cut to [`MAX_QUOTED_CHARS`] characters.
fn bounded(text: &str) -> &str {
    text.char_indices()
        .nth(MAX_QUOTED_CHARS)
        .map_or(text, |(end, _)| &text[..end])
}

mod from_http1;

#[cfg(test)]
mod tests;
