//! Answers the gateway writes itself: the error envelope and local JSON responses, built as
//! plain data so they can be checked without a server.

use crate::error::RequestError;
use bytes::Bytes;
use std::time::Duration;

/// A complete response made by the gateway (not proxied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

impl LocalResponse {
    /// `200` (or another status) with a JSON body.
    pub fn json(status: u16, body: Bytes) -> Self {
        LocalResponse {
            status,
            headers: vec![("content-type", "application/json".into())],
            body,
        }
    }
}

/// The OpenAI error envelope; `param` is JSON `null` when absent.
pub fn envelope(error: &RequestError) -> Bytes {
    let body = serde_json::json!({
        "error": {
            "message": error.message(),
            "type": error.error_type(),
            "param": error.param(),
            "code": error.code(),
        }
    });
    Bytes::from(body.to_string())
}

/// The API whose error envelope a client reads: OpenAI's everywhere, Anthropic's on the
/// Messages API's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    #[default]
    OpenAi,
    Messages,
}

/// Anthropic's error envelope, its `type` from the status (`code` and `param` have no
/// place in it: the message names the parameter).
pub fn messages_envelope(error: &RequestError) -> Bytes {
    let body = serde_json::json!({
        "type": "error",
        "error": {
            "type": crate::translate::messages_error_type(error.status()),
            "message": error.message(),
        }
    });
    Bytes::from(body.to_string())
}

/// The full answer to a gateway-made error, headers included.
pub fn error_response(error: &RequestError) -> LocalResponse {
    error_response_in(ErrorShape::OpenAi, error)
}

/// The full answer to a gateway-made error in the client's API's envelope.
pub fn error_response_in(shape: ErrorShape, error: &RequestError) -> LocalResponse {
    let body = match shape {
        ErrorShape::OpenAi => envelope(error),
        ErrorShape::Messages => messages_envelope(error),
    };
    let mut response = LocalResponse::json(error.status(), body);
    if error.status() == 401 {
        response.headers.push(("www-authenticate", "Bearer".into()));
    }
    if let Some(wait) = error.retry_after() {
        response.headers.extend(retry_after_headers(wait));
    }
    let exhausted = matches!(error, RequestError::BudgetExhausted { .. });
    if error.status() == 500 || *error == RequestError::UpstreamAuthFailed || exhausted {
        // The spec: a repeated 500 with the same payload is persistent; a credential the
        // upstream refuses stays refused until an operator fixes it; a spent budget stays
        // spent until its window resets (hours away, as a rule). Tell SDKs not to loop.
        response.headers.push(("x-should-retry", "false".into()));
    }
    response
}

/// `Retry-After` in whole seconds (rounded up, at least 1) and `retry-after-ms`.
pub fn retry_after_headers(wait: Duration) -> [(&'static str, String); 2] {
    let millis = crate::error::wait_millis(wait);
    let seconds = millis.div_ceil(1000).max(1);
    [
        ("retry-after", seconds.to_string()),
        ("retry-after-ms", millis.to_string()),
    ]
}

/// The SSE event that ends a stream the gateway had to cut, so no client mistakes it for a
/// finished one. Starts with a blank line in case the upstream stopped mid-event.
pub fn stream_error_event(error: &RequestError) -> Bytes {
    stream_error_event_in(ErrorShape::OpenAi, error)
}

/// The SSE event that ends a cut stream, in the client's API's shape (Anthropic's is an
/// `error` event).
pub fn stream_error_event_in(shape: ErrorShape, error: &RequestError) -> Bytes {
    let mut event = Vec::with_capacity(256);
    match shape {
        ErrorShape::OpenAi => {
            event.extend_from_slice(b"\n\ndata: ");
            event.extend_from_slice(&envelope(error));
        }
        ErrorShape::Messages => {
            event.extend_from_slice(b"\n\nevent: error\ndata: ");
            event.extend_from_slice(&messages_envelope(error));
        }
    }
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_has_json_null_param() {
        let body: serde_json::Value =
            serde_json::from_slice(&envelope(&RequestError::MissingApiKey)).unwrap();
        assert!(
            body["error"]["param"].is_null(),
            "param is JSON null: {body}"
        );
        assert_eq!(body["error"]["code"], "missing_api_key");
        assert_eq!(body["error"]["type"], "authentication_error");
    }

    #[test]
    fn the_messages_envelope_is_anthropics_with_the_same_status_and_headers() {
        let table = [
            (RequestError::MissingApiKey, 401, "authentication_error"),
            (
                RequestError::UnknownRoute {
                    repeated_prefix: false,
                },
                404,
                "not_found_error",
            ),
            (
                RequestError::ModelNotFound { model: "m".into() },
                404,
                "not_found_error",
            ),
            (
                RequestError::RateLimited {
                    retry_after: Duration::from_secs(2),
                },
                429,
                "rate_limit_error",
            ),
            (
                RequestError::MissingParameter { param: "messages" },
                400,
                "invalid_request_error",
            ),
            (
                RequestError::RequestTooLarge { limit_bytes: 1 },
                413,
                "invalid_request_error",
            ),
            (
                RequestError::Overloaded {
                    retry_after: Duration::from_secs(1),
                },
                503,
                "overloaded_error",
            ),
            (RequestError::Internal, 500, "api_error"),
            (RequestError::UpstreamTimeout, 504, "api_error"),
        ];
        for (error, status, kind) in table {
            let openai = error_response(&error);
            let messages = error_response_in(ErrorShape::Messages, &error);
            assert_eq!(messages.status, status, "{error:?}");
            assert_eq!(messages.headers, openai.headers, "same headers: {error:?}");
            let body: serde_json::Value = serde_json::from_slice(&messages.body).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], kind, "{error:?}");
            assert_eq!(body["error"]["message"], error.message());
        }
        let event = stream_error_event_in(ErrorShape::Messages, &RequestError::UpstreamTimeout);
        assert!(event.starts_with(b"\n\nevent: error\ndata: {"), "{event:?}");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(
            retry_after_headers(Duration::from_millis(1)),
            [("retry-after", "1".into()), ("retry-after-ms", "1".into())]
        );
        assert_eq!(retry_after_headers(Duration::from_millis(1001))[0].1, "2");
        assert_eq!(retry_after_headers(Duration::from_millis(3000))[0].1, "3");
        assert_eq!(retry_after_headers(Duration::ZERO)[0].1, "1");
    }

    #[test]
    fn errors_carry_their_headers() {
        let unauthorized = error_response(&RequestError::InvalidApiKey);
        assert!(unauthorized
            .headers
            .contains(&("www-authenticate", "Bearer".into())));
        let internal = error_response(&RequestError::Internal);
        assert!(internal
            .headers
            .contains(&("x-should-retry", "false".into())));
        let limited = error_response(&RequestError::RateLimited {
            retry_after: Duration::from_millis(2500),
        });
        assert!(limited.headers.contains(&("retry-after", "3".into())));
        assert!(limited.headers.contains(&("retry-after-ms", "2500".into())));
    }
}
