//! A chat completion request's `messages` as Anthropic's `system` and turns: system and
//! developer messages join the system prompt, `tool` messages become `tool_result` blocks
//! of a user turn, and consecutive turns of one role are merged (Anthropic wants a tool's
//! results in the one user turn after the call).

use super::{text, Untranslatable};
use serde_json::{json, Map, Value};

/// The system prompt and the turns of a chat completion request.
pub(super) fn messages_turns(
    request: &Map<String, Value>,
) -> Result<(String, Vec<Value>), Untranslatable> {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("messages", "'messages' must be an array."))?;
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let content = message.get("content").unwrap_or(&Value::Null);
        let (role, blocks) = match text(message, "role").unwrap_or_default() {
            "system" | "developer" => {
                system.push(plain_text(content));
                continue;
            }
            "assistant" => ("assistant", assistant_blocks(message, &param)?),
            "tool" => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": plain_text(content),
                })],
            ),
            _ => ("user", user_blocks(content, &param)?),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, earlier)) if last == role => earlier.extend(blocks),
            _ => turns.push((role.to_owned(), blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((system.join("\n\n"), turns))
}

/// A message's text: a string, or its text parts joined.
fn plain_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| text(part, "text"))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

/// A user message's content as blocks: text, and images from `image_url` parts.
fn user_blocks(content: &Value, param: &str) -> Result<Vec<Value>, Untranslatable> {
    let parts = match content {
        Value::String(s) if s.is_empty() => return Ok(Vec::new()),
        Value::String(s) => return Ok(vec![json!({"type": "text", "text": s})]),
        Value::Array(parts) => parts,
        _ => {
            return Err(Untranslatable::new(
                format!("{param}.content"),
                "A message's content must be a string or an array of parts.",
            ))
        }
    };
    let mut blocks = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        match text(part, "type") {
            Some("text") => blocks.push(json!({"type": "text", "text": part["text"]})),
            Some("image_url") => {
                let url = part
                    .get("image_url")
                    .and_then(|i| i.get("url").or(Some(i)))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                blocks.push(json!({"type": "image", "source": image_source(url)}));
            }
            _ => {
                return Err(Untranslatable::new(
                    format!("{param}.content[{j}].type"),
                    "Only text and image_url parts can be sent to this model: its backend \
                     speaks Anthropic's Messages API.",
                ))
            }
        }
    }
    Ok(blocks)
}

/// An image URL as an Anthropic image source: a `data:` URL's bytes, or the URL.
fn image_source(url: &str) -> Value {
    if let Some((media_type, data)) = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        return json!({"type": "base64", "media_type": media_type, "data": data});
    }
    json!({"type": "url", "url": url})
}

/// An assistant message's text and tool calls as blocks; a call's arguments must be JSON.
fn assistant_blocks(message: &Value, param: &str) -> Result<Vec<Value>, Untranslatable> {
    let mut blocks = Vec::new();
    let said = plain_text(message.get("content").unwrap_or(&Value::Null));
    if !said.is_empty() {
        blocks.push(json!({"type": "text", "text": said}));
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (j, call) in calls.into_iter().flatten().enumerate() {
        let function = call.get("function").unwrap_or(&Value::Null);
        let arguments = text(function, "arguments").unwrap_or("{}");
        let input: Value = serde_json::from_str(arguments).map_err(|_| {
            Untranslatable::new(
                format!("{param}.tool_calls[{j}].function.arguments"),
                "A tool call's arguments must be a JSON object to send them to this model.",
            )
        })?;
        blocks.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": function.get("name").cloned().unwrap_or(Value::Null),
            "input": input,
        }));
    }
    Ok(blocks)
}
