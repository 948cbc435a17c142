//! A request's output limit: the fields that bound a route's output, the one limit a
//! request asks for (every such field sent checked, two that differ refused), and the
//! limit a model with `enforce_output_limit` writes into a request that sets none.

use super::{invalid, ModelRequest};
use crate::endpoint::{EndpointType, MAX_OUTPUT_TOKENS};
use crate::error::RequestError;
use crate::json_object::Object;

/// The fields that bound a route's output, in the order they are read; `None` for a route
/// that generates no text. (vLLM's completions and responses requests have no
/// `max_completion_tokens`: an upstream acts on the route's own field only.)
pub fn output_limit_fields(kind: EndpointType) -> &'static [&'static str] {
    match kind {
        EndpointType::Chat => &["max_completion_tokens", "max_tokens"],
        EndpointType::Completions => &["max_tokens"],
        EndpointType::Responses => &["max_output_tokens"],
        EndpointType::Messages => &["max_tokens"],
        _ => &[],
    }
}

/// Every name an output limit goes by, on some route.
const OUTPUT_LIMIT_NAMES: [&str; 3] = ["max_completion_tokens", "max_tokens", "max_output_tokens"];

/// The output limit the route acts on. On a route that generates text every limit field
/// sent must be an integer in range, and two of them with different values are refused:
/// upstreams differ in which one they read.
pub(super) fn output_limit(
    object: &Object,
    kind: EndpointType,
) -> Result<Option<u64>, RequestError> {
    let fields = output_limit_fields(kind);
    if fields.is_empty() {
        return Ok(None);
    }
    // Every limit sent has one value (else refused), so the route's field, if sent, has it.
    let mut seen: Option<(&str, u64)> = None;
    let mut asked = None;
    for field in OUTPUT_LIMIT_NAMES {
        let Some(raw) = object.get(field).filter(|&raw| raw != "null") else {
            continue;
        };
        let limit = serde_json::from_str::<u64>(raw)
            .ok()
            .filter(|&n| n <= MAX_OUTPUT_TOKENS)
            .ok_or_else(|| {
                invalid(
                    field,
                    &format!("'{field}' must be an integer from 0 to {MAX_OUTPUT_TOKENS}."),
                )
            })?;
        match seen {
            Some((first, value)) if value != limit => {
                return Err(invalid(
                    field,
                    &format!(
                        "'{field}' ({limit}) and '{first}' ({value}) differ: set one output limit."
                    ),
                ))
            }
            _ => seen = Some((field, limit)),
        }
        if fields.contains(&field) {
            asked = Some(limit);
        }
    }
    Ok(asked)
}

impl ModelRequest {
    /// For a model with `enforce_output_limit`: a request to `kind` that sets no output
    /// limit gets `limit` written into it, in the field every OpenAI-compatible server reads
    /// on that route (`max_tokens` for chat and completions, `max_output_tokens` for
    /// responses).
    pub fn enforce_output_limit(&mut self, kind: EndpointType, limit: u64) {
        let field = match kind {
            EndpointType::Chat | EndpointType::Completions => "max_tokens",
            EndpointType::Responses => "max_output_tokens",
            _ => return,
        };
        if self.max_output_tokens.is_none() {
            self.enforced_limit = Some((field, limit));
        }
    }
}
