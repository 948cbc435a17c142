//! What the gateway keeps of an upstream's own error answer (a 4xx or 5xx it passed on) for
//! the access log: the spec's error record asks for the status, a sanitized message and the
//! upstream's request id, so an operator can take a failure to the backend's own logs.

/// Body bytes of an error answer kept while it passes; error bodies are small JSON.
pub const KEPT_BODY_BYTES: usize = 4096;
/// Longest message written to the log.
const MAX_MESSAGE_CHARS: usize = 256;
/// Longest upstream error code or request id written to the log.
const MAX_TOKEN_CHARS: usize = 128;

/// An upstream error answer, as logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamErrorRecord {
    pub message: Option<String>,
    pub code: Option<String>,
    pub request_id: Option<String>,
}

impl UpstreamErrorRecord {
    /// Reads what it can from the first bytes of the body (the OpenAI envelope
    /// `{"error": {"message", "code"}}`, or the `message` / `detail` / `error` string other
    /// servers use) and the upstream's `x-request-id`.
    pub fn read(body: &[u8], request_id: Option<&str>) -> Self {
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let (message, code) = match &json {
            Some(v) => {
                let error = &v["error"];
                let message = text(&error["message"])
                    .or_else(|| text(error))
                    .or_else(|| text(&v["message"]))
                    .or_else(|| text(&v["detail"]));
                let code = text(&error["code"]).or_else(|| text(&error["type"]));
                (message, code)
            }
            // Not JSON: the start of the text, if it is text.
            None => (std::str::from_utf8(body).ok().map(str::to_owned), None),
        };
        UpstreamErrorRecord {
            message: message
                .map(|m| sanitized(&m, MAX_MESSAGE_CHARS))
                .filter(|m| !m.is_empty()),
            code: code.map(|c| sanitized(&c, MAX_TOKEN_CHARS)),
            request_id: request_id.map(|id| sanitized(id, MAX_TOKEN_CHARS)),
        }
    }
}

/// `text` on one line, control characters made spaces, cut to `max` characters.
fn sanitized(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openai_envelope_and_other_shapes_are_read() {
        let openai = br#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        let record = UpstreamErrorRecord::read(openai, Some("req-up-1"));
        assert_eq!(
            record.message.as_deref(),
            Some("This model's maximum context length is 8192 tokens.")
        );
        assert_eq!(record.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(record.request_id.as_deref(), Some("req-up-1"));

        let vllm =
            br#"{"object":"error","message":"bad\nrequest","type":"BadRequestError","code":400}"#;
        let record = UpstreamErrorRecord::read(vllm, None);
        assert_eq!(record.message.as_deref(), Some("bad request"), "one line");
        let tgi = br#"{"error":"Input validation error","error_type":"validation"}"#;
        assert_eq!(
            UpstreamErrorRecord::read(tgi, None).message.as_deref(),
            Some("Input validation error")
        );
        let fastapi = br#"{"detail":"Not Found"}"#;
        assert_eq!(
            UpstreamErrorRecord::read(fastapi, None).message.as_deref(),
            Some("Not Found")
        );
    }

    #[test]
    fn text_is_capped_and_binary_is_dropped() {
        let long = "x".repeat(10_000);
        let record = UpstreamErrorRecord::read(long.as_bytes(), Some(&"i".repeat(500)));
        assert_eq!(record.message.unwrap().len(), MAX_MESSAGE_CHARS);
        assert_eq!(record.request_id.unwrap().len(), MAX_TOKEN_CHARS);
        assert_eq!(UpstreamErrorRecord::read(&[0xff, 0xfe], None).message, None);
    }
}
