//! A request body to a model: media type, JSON, the shape we check per endpoint type, and
//! the model rename.
//!
//! Only the fields the gateway decides on are read (`model`, `messages`, `stream`, `tools`,
//! `functions`); everything else passes through as the client sent it. Values are borrowed
//! from the body, so a 4 MiB prompt is validated without being copied.
//!
//! A top-level key written twice is refused: JSON parsers disagree on which copy wins, and
//! the upstream must never act on a `model`, `stream` or `tools` other than the one checked.

use crate::endpoint::EndpointType;
use crate::error::RequestError;
use crate::json_object::{self, Object};
use bytes::{Bytes, BytesMut};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

mod output_limit;

use output_limit::output_limit;
pub use output_limit::output_limit_fields;

/// What the gateway needs to know about a request to a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRequest {
    pub model: String,
    pub stream: bool,
    /// A non-empty `tools` (or, for chat, `functions`) array: needs `tool_calling`.
    pub uses_tools: bool,
    /// Byte range of the `model` value (with its quotes) inside the body.
    model_span: Range<usize>,
    /// A Responses request's `previous_response_id`, and the byte range of its value.
    pub previous_response: Option<(String, Range<usize>)>,
    /// Byte range of the `stream_options` value (an object or `null`), if sent.
    stream_options: Option<Range<usize>>,
    /// The client asked for the usage chunk (`stream_options.include_usage: true`).
    pub include_usage: bool,
    /// The output limit asked for, in the route's own field (see [`output_limit_fields`]).
    pub max_output_tokens: Option<u64>,
    /// The limit the gateway writes into a request that sets none, in the route's field
    /// (a model's `enforce_output_limit`), so the reservation is a ceiling.
    enforced_limit: Option<(&'static str, u64)>,
    /// Offset just past the body's opening brace (where a member can be added).
    members_start: usize,
}

/// What changes in a JSON body on its way to a target.
#[derive(Debug, Clone, Copy, Default)]
pub struct Edits<'a> {
    /// The name the target knows the model by.
    pub model: Option<&'a str>,
    /// The target's own ID for the stored response named in the body.
    pub previous_response: Option<&'a str>,
    /// Ask the target for the usage chunk of a stream (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// Refuses a body whose declared `Content-Length` is over `limit`, before reading any of it.
pub fn check_declared_length(
    content_length: Option<&[u8]>,
    limit: usize,
) -> Result<(), RequestError> {
    let declared = content_length
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(length) if length > limit => Err(RequestError::RequestTooLarge { limit_bytes: limit }),
        _ => Ok(()),
    }
}

/// Accepts `application/json`, with or without parameters such as `charset`.
pub fn check_media_type(content_type: Option<&[u8]>) -> Result<(), RequestError> {
    let Some(value) = content_type else {
        return Err(RequestError::UnsupportedMediaType);
    };
    let essence = value
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if essence.eq_ignore_ascii_case(b"application/json") {
        Ok(())
    } else {
        Err(RequestError::UnsupportedMediaType)
    }
}

/// Parses a request body and checks the shape its endpoint type needs.
pub fn inspect(body: &[u8], kind: EndpointType) -> Result<ModelRequest, RequestError> {
    let object = Object::parse(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => RequestError::InvalidJson {
            detail: "the body must be a JSON object".into(),
        },
        _ => RequestError::InvalidJson {
            detail: format!(
                "{} at line {} column {}",
                describe(&e),
                e.line(),
                e.column()
            ),
        },
    })?;
    if let Some(key) = object.repeated {
        return Err(RequestError::RepeatedKey {
            key: key.into_owned(),
        });
    }

    let raw_model = object
        .get("model")
        .ok_or(RequestError::MissingParameter { param: "model" })?;
    let model = json_object::string(raw_model).ok_or_else(|| {
        invalid(
            "model",
            "'model' must be a string: a model ID from GET /v1/models.",
        )
    })?;
    let model_span = span(body, raw_model);

    for &field in kind.required_fields() {
        let value = object
            .get(field)
            .ok_or(RequestError::MissingParameter { param: field })?;
        if field == "messages" {
            check_messages(value)?;
        }
    }

    let stream = match object.get("stream") {
        None | Some("null") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(invalid("stream", "'stream' must be a boolean.")),
    };
    let mut uses_tools = false;
    let tool_fields: &[&str] = match kind {
        EndpointType::Chat => &["tools", "functions"],
        EndpointType::Responses => &["tools"],
        _ => &[],
    };
    for &field in tool_fields {
        if let Some(raw) = object.get(field) {
            let list: Option<Vec<&RawValue>> = serde_json::from_str(raw)
                .map_err(|_| invalid(field, &format!("'{field}' must be an array.")))?;
            uses_tools |= list.is_some_and(|l| !l.is_empty());
        }
    }
    let previous_response = match (kind, object.get("previous_response_id")) {
        (EndpointType::Responses, Some(raw)) if raw != "null" => {
            let id: Cow<str> = serde_json::from_str(raw).map_err(|_| {
                invalid(
                    "previous_response_id",
                    "'previous_response_id' must be a string: an ID this gateway returned.",
                )
            })?;
            Some((id.into_owned(), span(body, raw)))
        }
        _ => None,
    };
    let (stream_options, include_usage) = stream_options(&object, body)?;
    let max_output_tokens = output_limit(&object, kind)?;
    let members_start = body.iter().position(|&b| b == b'{').map_or(0, |at| at + 1);
    Ok(ModelRequest {
        model: model.into_owned(),
        stream,
        uses_tools,
        model_span,
        previous_response,
        stream_options,
        include_usage,
        max_output_tokens,
        enforced_limit: None,
        members_start,
    })
}

/// `stream_options`: an object or `null`; its value's byte range (`null`'s too: it is
/// replaced like an object when usage is asked for), and whether it asks for the usage
/// chunk. A key repeated inside it is refused, as at the top level.
fn stream_options(
    object: &Object,
    body: &[u8],
) -> Result<(Option<Range<usize>>, bool), RequestError> {
    let Some(raw) = object.get("stream_options") else {
        return Ok((None, false));
    };
    let span = span(body, raw);
    if raw == "null" {
        return Ok((Some(span), false));
    }
    let options = Object::parse(raw.as_bytes()).map_err(|_| {
        invalid(
            "stream_options",
            "'stream_options' must be an object, such as {\"include_usage\": true}.",
        )
    })?;
    if let Some(key) = options.repeated {
        return Err(RequestError::RepeatedKey {
            key: format!("stream_options.{key}"),
        });
    }
    let include_usage = match options.get("include_usage") {
        None | Some("null") | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(invalid(
                "stream_options.include_usage",
                "'stream_options.include_usage' must be a boolean.",
            ))
        }
    };
    Ok((Some(span), include_usage))
}

/// The body as a target receives it: the `model` value replaced (when the target knows the
/// model by another name), `previous_response_id` by the upstream's own ID (when there is
/// one), `stream_options.include_usage` set (keeping the client's other options; a `null`
/// replaced) when asked, the enforced output limit added; every other byte unchanged.
pub fn for_target(body: &Bytes, request: &ModelRequest, edits: Edits) -> Bytes {
    let mut splices: Vec<(Range<usize>, String)> = Vec::with_capacity(4);
    if let Some(name) = edits.model {
        splices.push((request.model_span.clone(), quoted(name)));
    }
    if let (Some(id), Some((_, span))) = (edits.previous_response, &request.previous_response) {
        splices.push((span.clone(), quoted(id)));
    }
    if edits.include_usage && !request.include_usage {
        splices.push(match &request.stream_options {
            Some(span) => {
                // An object without repeated keys (`inspect` refused them), or `null`.
                let mut options: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice::<Option<_>>(&body[span.clone()])
                        .ok()
                        .flatten()
                        .unwrap_or_default();
                options.insert("include_usage".into(), true.into());
                (span.clone(), serde_json::Value::Object(options).to_string())
            }
            None => {
                let at = request.members_start;
                (
                    at..at,
                    r#""stream_options":{"include_usage":true},"#.to_owned(),
                )
            }
        });
    }
    if let Some((field, limit)) = request.enforced_limit {
        let at = request.members_start;
        splices.push((at..at, format!("\"{field}\":{limit},")));
    }
    if splices.is_empty() {
        return body.clone();
    }
    // Insertions at the same place keep their order (a stable sort).
    splices.sort_by_key(|(span, _)| span.start);
    let mut out = BytesMut::with_capacity(body.len() + 64);
    let mut at = 0;
    for (span, value) in splices {
        out.extend_from_slice(&body[at..span.start]);
        out.extend_from_slice(value.as_bytes());
        at = span.end;
    }
    out.extend_from_slice(&body[at..]);
    out.freeze()
}

/// `text` as a JSON string.
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The byte range of `value`, a text borrowed from `body`, inside it.
fn span(body: &[u8], value: &str) -> Range<usize> {
    let start = value.as_ptr() as usize - body.as_ptr() as usize;
    start..start + value.len()
}

fn check_messages(raw: &str) -> Result<(), RequestError> {
    let messages = json_object::elements(raw).ok_or_else(|| {
        invalid(
            "messages",
            "'messages' must be an array of message objects.",
        )
    })?;
    let mut count = 0;
    // One list of member names for every message, so a long conversation allocates once.
    let mut names: Vec<Cow<str>> = Vec::new();
    for (i, message) in messages.enumerate() {
        count += 1;
        let members = json_object::members(message).ok_or_else(|| {
            invalid(
                &format!("messages[{i}]"),
                &format!("messages[{i}] must be an object with 'role' and 'content'."),
            )
        })?;
        // A message is read, so none of its keys may repeat: the upstream must act on the
        // role and content checked here.
        let (mut raw_role, mut content) = (None, None);
        names.clear();
        for (name, value) in members {
            match name.as_ref() {
                "role" => _ = raw_role.get_or_insert(value),
                "content" => _ = content.get_or_insert(value),
                _ => {}
            }
            names.push(name);
        }
        if let Some(key) = repeated_name(&mut names) {
            return Err(RequestError::RepeatedKey {
                key: format!("messages[{i}].{key}"),
            });
        }
        // The parameter names are made only for an error: this runs for every message.
        let role_param = || format!("messages[{i}].role");
        let raw_role = raw_role
            .ok_or_else(|| invalid(&role_param(), &format!("messages[{i}] has no 'role'.")))?;
        let role = json_object::string(raw_role).ok_or_else(|| {
            invalid(
                &role_param(),
                &format!("messages[{i}].role must be a string."),
            )
        })?;
        let content_param = || format!("messages[{i}].content");
        match content.map(|c| c.as_bytes().first().copied().unwrap_or(b',')) {
            Some(b'"') | Some(b'[') => {}
            Some(b'n') | None if role == "assistant" => {}
            None => {
                return Err(invalid(
                    &content_param(),
                    &format!("messages[{i}] has no 'content'."),
                ))
            }
            Some(_) => {
                return Err(invalid(
                    &content_param(),
                    &format!(
                        "messages[{i}].content must be a string or an array of content parts."
                    ),
                ))
            }
        }
    }
    if count == 0 {
        return Err(invalid(
            "messages",
            "'messages' must contain at least one message.",
        ));
    }
    Ok(())
}

/// A name that appears twice in `names` (which it may sort). A message has a handful of
/// members: they are compared pairwise, without sorting, up to eight.
fn repeated_name<'a>(names: &mut [Cow<'a, str>]) -> Option<Cow<'a, str>> {
    if names.len() <= 8 {
        for (i, name) in names.iter().enumerate() {
            if names[i + 1..].contains(name) {
                return Some(name.clone());
            }
        }
        return None;
    }
    names.sort_unstable();
    names
        .windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0].clone())
}

fn invalid(param: &str, message: &str) -> RequestError {
    RequestError::InvalidParameter {
        param: param.to_string(),
        message: message.to_string(),
    }
}

/// serde_json's message without its position suffix, which we add ourselves.
fn describe(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.find(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests;
