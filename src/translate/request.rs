//! Requests: a Messages request made a chat completion request for an OpenAI-compatible
//! upstream, and a chat completion request made a Messages request for an Anthropic one.
//! Fields with no counterpart are dropped (docs/routing.md lists them); content that would
//! change meaning if dropped (a document, a server tool) is refused instead.

use super::{text, Untranslatable};
use serde_json::{json, Map, Value};

/// Sampling fields both APIs spell the same way.
const SAME_NAMED: [&str; 4] = ["max_tokens", "temperature", "top_p", "stream"];

/// A Messages request (`POST /v1/messages`) as a chat completion request. A stream asks
/// for the usage chunk: the final `message_delta` carries the usage.
pub fn messages_to_chat(body: &[u8]) -> Result<Vec<u8>, Untranslatable> {
    let request: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|_| Untranslatable::new("messages", "The request body must be a JSON object."))?;
    let mut chat = Map::new();
    if let Some(model) = request.get("model") {
        chat.insert("model".into(), model.clone());
    }
    let mut messages = Vec::new();
    if let Some(system) = request.get("system") {
        let system = joined_text(system, "system")?;
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system}));
        }
    }
    let turns = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Untranslatable::new("messages", "'messages' must be an array."))?;
    for (i, turn) in turns.iter().enumerate() {
        chat_turn(turn, i, &mut messages)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    for name in SAME_NAMED {
        if let Some(value) = request.get(name) {
            chat.insert(name.into(), value.clone());
        }
    }
    if request.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(top_k) = request.get("top_k") {
        // Not OpenAI's, but vLLM, SGLang and llama.cpp's server read it.
        chat.insert("top_k".into(), top_k.clone());
    }
    if let Some(stop) = request.get("stop_sequences") {
        chat.insert("stop".into(), stop.clone());
    }
    if let Some(user) = request.get("metadata").and_then(|m| m.get("user_id")) {
        chat.insert("user".into(), user.clone());
    }
    if let Some(tools) = request.get("tools").and_then(Value::as_array) {
        let tools = tools
            .iter()
            .enumerate()
            .map(|(i, tool)| chat_tool(tool, i))
            .collect::<Result<Vec<_>, _>>()?;
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = request.get("tool_choice") {
        let (choice, parallel) = chat_tool_choice(choice)?;
        chat.insert("tool_choice".into(), choice);
        if !parallel {
            chat.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
    }
    Ok(serde_json::to_vec(&Value::Object(chat)).unwrap_or_default())
}

/// One Messages turn as chat messages: a user turn's `tool_result` blocks become `tool`
/// messages ahead of its other content; an assistant's `tool_use` blocks, `tool_calls`.
fn chat_turn(turn: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), Untranslatable> {
    let param = format!("messages[{i}]");
    let role = text(turn, "role").unwrap_or_default();
    let content = turn.get("content").unwrap_or(&Value::Null);
    if let Some(plain) = content.as_str() {
        out.push(json!({"role": role, "content": plain}));
        return Ok(());
    }
    let blocks = content.as_array().ok_or_else(|| {
        Untranslatable::new(
            format!("{param}.content"),
            "A message's content must be a string or an array of blocks.",
        )
    })?;
    match role {
        "assistant" => {
            let mut texts = String::new();
            let mut calls = Vec::new();
            for (j, block) in blocks.iter().enumerate() {
                match text(block, "type").unwrap_or_default() {
                    "text" => texts.push_str(text(block, "text").unwrap_or_default()),
                    "tool_use" => calls.push(json!({
                        "id": block.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": block.get("name").cloned().unwrap_or(Value::Null),
                            "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                        },
                    })),
                    // Chat completions have no place for earlier reasoning.
                    "thinking" | "redacted_thinking" => {}
                    other => return Err(unsupported_block(&param, j, other)),
                }
            }
            let mut message = json!({"role": "assistant", "content": texts});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
                if texts.is_empty() {
                    message["content"] = Value::Null;
                }
            }
            out.push(message);
        }
        _ => {
            let mut parts = Vec::new();
            for (j, block) in blocks.iter().enumerate() {
                match text(block, "type").unwrap_or_default() {
                    "text" => parts.push(json!({"type": "text", "text": block["text"]})),
                    "image" => parts.push(image_part(block, &param, j)?),
                    "tool_result" => out.push(tool_message(block, &param, j)?),
                    other => return Err(unsupported_block(&param, j, other)),
                }
            }
            if !parts.is_empty() {
                out.push(json!({"role": role, "content": parts}));
            }
        }
    }
    Ok(())
}

fn unsupported_block(param: &str, j: usize, kind: &str) -> Untranslatable {
    Untranslatable::new(
        format!("{param}.content[{j}].type"),
        format!(
            "Content blocks of type '{}' cannot be sent to this model: its backend speaks \
             OpenAI's chat completions.",
            kind.chars().take(64).collect::<String>()
        ),
    )
}

/// An image block as an `image_url` part: a data URL for base64, the URL otherwise.
fn image_part(block: &Value, param: &str, j: usize) -> Result<Value, Untranslatable> {
    let source = block.get("source").unwrap_or(&Value::Null);
    let url = match text(source, "type") {
        Some("base64") => format!(
            "data:{};base64,{}",
            text(source, "media_type").unwrap_or("image/png"),
            text(source, "data").unwrap_or_default()
        ),
        Some("url") => text(source, "url").unwrap_or_default().to_owned(),
        _ => {
            return Err(Untranslatable::new(
                format!("{param}.content[{j}].source"),
                "An image's source must be base64 data or a URL.",
            ))
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A `tool_result` block as a `tool` message; an error result says so in its text.
fn tool_message(block: &Value, param: &str, j: usize) -> Result<Value, Untranslatable> {
    let content = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(content) => joined_text(content, &format!("{param}.content[{j}].content"))?,
    };
    let content = if block.get("is_error") == Some(&Value::Bool(true)) {
        format!("Error: {content}")
    } else {
        content
    };
    Ok(json!({
        "role": "tool",
        "tool_call_id": block.get("tool_use_id").cloned().unwrap_or(Value::Null),
        "content": content,
    }))
}

/// A string, or the text of an array of text blocks joined by blank lines.
fn joined_text(value: &Value, param: &str) -> Result<String, Untranslatable> {
    if let Some(plain) = value.as_str() {
        return Ok(plain.to_owned());
    }
    let invalid = || Untranslatable::new(param, format!("'{param}' must be text."));
    let blocks = value.as_array().ok_or_else(invalid)?;
    let texts = blocks
        .iter()
        .map(|block| match text(block, "type") {
            Some("text") => text(block, "text").ok_or_else(invalid),
            _ => Err(invalid()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(texts.join("\n\n"))
}

/// An Anthropic tool definition as an OpenAI function tool. Anthropic's own server tools
/// (web search, code execution, ...) have no counterpart.
fn chat_tool(tool: &Value, i: usize) -> Result<Value, Untranslatable> {
    if !matches!(text(tool, "type"), None | Some("custom")) {
        return Err(Untranslatable::new(
            format!("tools[{i}].type"),
            "Anthropic's server tools cannot be used with this model: its backend speaks \
             OpenAI's chat completions.",
        ));
    }
    let mut function = json!({
        "name": tool.get("name").cloned().unwrap_or(Value::Null),
        "parameters": tool.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
    });
    if let Some(description) = tool.get("description") {
        function["description"] = description.clone();
    }
    Ok(json!({"type": "function", "function": function}))
}

/// Anthropic's `tool_choice` as OpenAI's, and whether parallel calls stay allowed.
fn chat_tool_choice(choice: &Value) -> Result<(Value, bool), Untranslatable> {
    let parallel = choice.get("disable_parallel_tool_use") != Some(&Value::Bool(true));
    let choice = match text(choice, "type") {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
        _ => {
            return Err(Untranslatable::new(
                "tool_choice.type",
                "'tool_choice.type' must be one of auto, any, tool, none.",
            ))
        }
    };
    Ok((choice, parallel))
}

/// A chat completion request as a Messages request for an Anthropic upstream.
/// `default_max_tokens` fills `max_tokens`, which Anthropic requires and OpenAI does not.
pub fn chat_to_messages(body: &[u8], default_max_tokens: u64) -> Result<Vec<u8>, Untranslatable> {
    let request: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|_| Untranslatable::new("messages", "The request body must be a JSON object."))?;
    if request
        .get("n")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        return Err(Untranslatable::new(
            "n",
            "This model's backend returns one choice per request: 'n' must be 1.",
        ));
    }
    let mut out = Map::new();
    if let Some(model) = request.get("model") {
        out.insert("model".into(), model.clone());
    }
    let limit = request
        .get("max_completion_tokens")
        .or(request.get("max_tokens"))
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or(json!(default_max_tokens));
    out.insert("max_tokens".into(), limit);
    let (system, messages) = super::request_turns::messages_turns(&request)?;
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system));
    }
    out.insert("messages".into(), Value::Array(messages));
    for name in ["temperature", "top_p", "top_k", "stream"] {
        if let Some(value) = request.get(name).filter(|v| !v.is_null()) {
            out.insert(name.into(), value.clone());
        }
    }
    match request.get("stop") {
        Some(Value::String(stop)) => {
            out.insert("stop_sequences".into(), json!([stop]));
        }
        Some(stop @ Value::Array(_)) => {
            out.insert("stop_sequences".into(), stop.clone());
        }
        _ => {}
    }
    if let Some(user) = request.get("user").filter(|v| v.is_string()) {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    if let Some(tools) = request.get("tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools.iter().filter_map(messages_tool).collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    let parallel = request.get("parallel_tool_calls") != Some(&Value::Bool(false));
    let choice = match request.get("tool_choice") {
        Some(Value::String(s)) if s == "required" => Some(json!({"type": "any"})),
        Some(Value::String(s)) if s == "none" => Some(json!({"type": "none"})),
        Some(Value::String(_)) => Some(json!({"type": "auto"})),
        Some(Value::Object(o)) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .map(|name| json!({"type": "tool", "name": name})),
        _ => None,
    };
    let choice = match (choice, parallel) {
        (Some(choice), true) => Some(choice),
        (choice, false) if out.contains_key("tools") => {
            let mut choice = choice.unwrap_or(json!({"type": "auto"}));
            choice["disable_parallel_tool_use"] = Value::Bool(true);
            Some(choice)
        }
        _ => None,
    };
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    Ok(serde_json::to_vec(&Value::Object(out)).unwrap_or_default())
}

/// An OpenAI function tool as an Anthropic tool; other kinds are left out.
fn messages_tool(tool: &Value) -> Option<Value> {
    let function = tool.get("function")?;
    let mut out = json!({
        "name": function.get("name")?,
        "input_schema": function.get("parameters").cloned().unwrap_or(json!({"type": "object"})),
    });
    if let Some(description) = function.get("description") {
        out["description"] = description.clone();
    }
    Some(out)
}

#[cfg(test)]
#[path = "request/tests.rs"]
mod tests;
