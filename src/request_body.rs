//! The chat completion body: media type, JSON, the shape we check, and the model rename.
//!
//! Only the fields the gateway decides on are read (`model`, `messages`, `stream`, `tools`,
//! `functions`); everything else passes through as the client sent it. Values are borrowed
//! from the body, so a 4 MiB prompt is validated without being copied.
//!
//! A top-level key written twice is refused: JSON parsers disagree on which copy wins, and
//! the upstream must never act on a `model`, `stream` or `tools` other than the one checked.

use crate::error::RequestError;
use bytes::{Bytes, BytesMut};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::ops::Range;

/// A JSON object's members, each value borrowed from the body, keys borrowed unless they
/// hold escapes. `repeated` is the first key that appeared a second time (the first copy's
/// value is kept; the object is refused anyway where that matters).
struct Object<'a> {
    members: HashMap<Cow<'a, str>, &'a RawValue>,
    repeated: Option<Cow<'a, str>>,
}

impl<'a> Object<'a> {
    fn get(&self, key: &str) -> Option<&&'a RawValue> {
        self.members.get(key)
    }
}

impl<'de> Deserialize<'de> for Object<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Object<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<'de>, A::Error> {
        let mut members = HashMap::with_capacity(map.size_hint().unwrap_or(8));
        let mut repeated = None;
        while let Some(MemberName(name)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            match members.entry(name) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(first) => {
                    if repeated.is_none() {
                        repeated = Some(first.key().clone());
                    }
                }
            }
        }
        Ok(Object { members, repeated })
    }
}

/// A member name, borrowed from the body when it holds no escape (serde's own `Cow<str>`
/// always copies).
struct MemberName<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(MemberNameVisitor)
    }
}

struct MemberNameVisitor;

impl<'de> Visitor<'de> for MemberNameVisitor {
    type Value = MemberName<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Borrowed(name)))
    }

    fn visit_str<E>(self, name: &str) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Owned(name.to_owned())))
    }

    fn visit_string<E>(self, name: String) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Owned(name)))
    }
}

/// What the gateway needs to know about a chat completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    pub model: String,
    pub stream: bool,
    /// A non-empty `tools` or `functions` array: needs `tool_calling`.
    pub uses_tools: bool,
    /// Byte range of the `model` value (with its quotes) inside the body.
    model_span: Range<usize>,
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

/// Parses and checks a chat completion body.
pub fn inspect(body: &[u8]) -> Result<ChatRequest, RequestError> {
    let object: Object = serde_json::from_slice(body).map_err(|e| match e.classify() {
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

    let raw_model = *object
        .get("model")
        .ok_or(RequestError::MissingParameter { param: "model" })?;
    let model: Cow<str> = serde_json::from_str(raw_model.get()).map_err(|_| {
        invalid(
            "model",
            "'model' must be a string: a model ID from GET /v1/models.",
        )
    })?;
    let start = raw_model.get().as_ptr() as usize - body.as_ptr() as usize;
    let model_span = start..start + raw_model.get().len();

    let messages = *object
        .get("messages")
        .ok_or(RequestError::MissingParameter { param: "messages" })?;
    check_messages(messages)?;

    let stream = match object.get("stream").map(|v| v.get()) {
        None | Some("null") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(invalid("stream", "'stream' must be a boolean.")),
    };
    let mut uses_tools = false;
    for field in ["tools", "functions"] {
        if let Some(raw) = object.get(field) {
            let list: Option<Vec<&RawValue>> = serde_json::from_str(raw.get())
                .map_err(|_| invalid(field, &format!("'{field}' must be an array.")))?;
            uses_tools |= list.is_some_and(|l| !l.is_empty());
        }
    }
    Ok(ChatRequest {
        model: model.into_owned(),
        stream,
        uses_tools,
        model_span,
    })
}

/// The body with the `model` value replaced and every other byte unchanged.
pub fn with_model(body: &Bytes, request: &ChatRequest, new_model: &str) -> Bytes {
    let quoted = serde_json::Value::String(new_model.to_owned()).to_string();
    let mut out = BytesMut::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..request.model_span.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[request.model_span.end..]);
    out.freeze()
}

fn check_messages(raw: &RawValue) -> Result<(), RequestError> {
    let messages: Vec<&RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
        invalid(
            "messages",
            "'messages' must be an array of message objects.",
        )
    })?;
    if messages.is_empty() {
        return Err(invalid(
            "messages",
            "'messages' must contain at least one message.",
        ));
    }
    for (i, message) in messages.iter().enumerate() {
        let object: Object = serde_json::from_str(message.get()).map_err(|_| {
            invalid(
                &format!("messages[{i}]"),
                &format!("messages[{i}] must be an object with 'role' and 'content'."),
            )
        })?;
        let role_param = format!("messages[{i}].role");
        let raw_role = object
            .get("role")
            .ok_or_else(|| invalid(&role_param, &format!("messages[{i}] has no 'role'.")))?;
        let role: Cow<str> = serde_json::from_str(raw_role.get()).map_err(|_| {
            invalid(
                &role_param,
                &format!("messages[{i}].role must be a string."),
            )
        })?;
        let content_param = format!("messages[{i}].content");
        match object.get("content").map(|c| c.get().as_bytes()[0]) {
            Some(b'"') | Some(b'[') => {}
            Some(b'n') | None if role == "assistant" => {}
            None => {
                return Err(invalid(
                    &content_param,
                    &format!("messages[{i}] has no 'content'."),
                ))
            }
            Some(_) => {
                return Err(invalid(
                    &content_param,
                    &format!(
                        "messages[{i}].content must be a string or an array of content parts."
                    ),
                ))
            }
        }
    }
    Ok(())
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
mod tests {
    use super::*;

    fn param_of(body: &str) -> Option<String> {
        inspect(body.as_bytes())
            .err()
            .and_then(|e| e.param().map(str::to_owned))
    }

    #[test]
    fn a_minimal_body_passes() {
        let request =
            inspect(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(request.model, "m");
        assert!(!request.stream && !request.uses_tools);
    }

    #[test]
    fn shape_errors_name_the_parameter() {
        assert_eq!(param_of(r#"{"messages":[]}"#).as_deref(), Some("model"));
        assert_eq!(param_of(r#"{"model":"m"}"#).as_deref(), Some("messages"));
        assert_eq!(
            param_of(r#"{"model":1,"messages":[]}"#).as_deref(),
            Some("model")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[]}"#).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":{}}"#).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[1]}"#).as_deref(),
            Some("messages[0]")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[{"content":"x"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[{"role":5,"content":"x"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[{"role":"user"}]}"#).as_deref(),
            Some("messages[0].content")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[{"role":"user","content":"a"}],"stream":"yes"}"#)
                .as_deref(),
            Some("stream")
        );
        assert_eq!(
            param_of(r#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":{}}"#)
                .as_deref(),
            Some("tools")
        );
    }

    #[test]
    fn assistant_tool_call_messages_may_omit_content() {
        let body = r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[]},{"role":"assistant","content":null}]}"#;
        assert!(inspect(body.as_bytes()).is_ok());
    }

    #[test]
    fn not_json_and_not_an_object_are_invalid_json() {
        for body in ["{", "not json", "[1,2]", "\"text\""] {
            assert_eq!(
                inspect(body.as_bytes()).unwrap_err().code(),
                "invalid_json",
                "{body}"
            );
        }
    }

    #[test]
    fn stream_and_tools_are_detected() {
        let request = inspect(br#"{"model":"m","messages":[{"role":"user","content":"a"}],"stream":true,"tools":[{"type":"function"}]}"#).unwrap();
        assert!(request.stream && request.uses_tools);
        let request = inspect(br#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[],"functions":null}"#).unwrap();
        assert!(!request.uses_tools, "empty tools need no capability");
    }

    #[test]
    fn rename_changes_only_the_model_value() {
        let body = Bytes::from_static(
            br#"{ "messages" : [{"role":"user","content":"model"}],  "model"  :  "short" , "x":1}"#,
        );
        let request = inspect(&body).unwrap();
        let renamed = with_model(&body, &request, "org/a \"long\" name");
        assert_eq!(
            &renamed[..],
            &br#"{ "messages" : [{"role":"user","content":"model"}],  "model"  :  "org/a \"long\" name" , "x":1}"#[..]
        );
    }

    #[test]
    fn a_repeated_top_level_key_is_invalid_json_naming_it() {
        for (body, key) in [
            (
                r#"{"model":"secret","messages":[{"role":"user","content":"a"}],"model":"m"}"#,
                "model",
            ),
            (
                r#"{"model":"m","stream":false,"messages":[{"role":"user","content":"a"}],"stream":true}"#,
                "stream",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[],"tools":[{"type":"function"}]}"#,
                "tools",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":"a"}],"top_p":1,"top_p":1}"#,
                "top_p",
            ),
            // The same key written once with an escape: parsers decode it, so it repeats.
            (
                r#"{"model":"secret","messages":[{"role":"user","content":"a"}],"mod\u0065l":"m"}"#,
                "model",
            ),
        ] {
            let error = inspect(body.as_bytes()).unwrap_err();
            assert_eq!(error.code(), "invalid_json", "{body}");
            assert_eq!(error.param(), Some(key), "{body}");
        }
    }

    #[test]
    fn nested_objects_may_repeat_keys() {
        let body = r#"{"model":"m","messages":[{"role":"user","role":"user","content":"a"}],"metadata":{"a":1,"a":2}}"#;
        assert!(inspect(body.as_bytes()).is_ok());
    }

    #[test]
    fn member_names_with_escapes_are_read() {
        let request =
            inspect(br#"{"mod\u0065l":"m","messages":[{"r\u006fle":"user","content":"a"}]}"#)
                .unwrap();
        assert_eq!(request.model, "m");
    }

    #[test]
    fn escaped_model_ids_are_decoded() {
        let request =
            inspect(br#"{"model":"a\u002fb","messages":[{"role":"user","content":"a"}]}"#).unwrap();
        assert_eq!(request.model, "a/b");
    }
}
