//! `POST /v1/chat/completions`: the last user message, echoed as a `chat.completion` or
//! streamed one word per `chat.completion.chunk`.

use super::reply::{
    last_user_text, model, new_id, now, spaced, streamed, usage_requested, words, Event, Reply,
};
use serde_json::{json, Value};

pub fn reply(request: &Value) -> Reply {
    let model = model(request);
    let prompt = last_user_text(request);
    let words = words(&prompt);
    let (id, created) = (new_id("chatcmpl-"), now());
    let prompt_tokens = prompt.split_whitespace().count();
    let usage = json!({
        "prompt_tokens": prompt_tokens, "completion_tokens": words.len(),
        "total_tokens": prompt_tokens + words.len(),
    });
    if !streamed(request) {
        return Reply::json(&json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": words.join(" ")}, "finish_reason": "stop"}],
            "usage": usage,
        }));
    }
    let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices});
    let delta = |delta: Value, finish: Value| {
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]))
    };
    let mut events = vec![Event::data(
        &delta(json!({"role": "assistant", "content": ""}), Value::Null),
        false,
    )];
    for (i, word) in words.iter().enumerate() {
        events.push(Event::data(
            &delta(json!({"content": spaced(i, word)}), Value::Null),
            true,
        ));
    }
    events.push(Event::data(&delta(json!({}), json!("stop")), false));
    if usage_requested(request) {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        events.push(Event::data(&last, false));
    }
    events.push(Event::done());
    Reply::Stream(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::stream_data;

    #[test]
    fn the_last_user_message_is_echoed() {
        let request = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]},
        ]});
        assert_eq!(last_user_text(&request), "hello there");
        assert_eq!(last_user_text(&json!({})), "");
    }

    #[test]
    fn a_stream_ends_with_usage_when_asked_then_done() {
        let request = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "one two"}]});
        let (events, done) = stream_data(reply(&request));
        assert!(done, "the stream ends with [DONE]");
        let text: String = events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "one two");
        let last = events.last().unwrap();
        assert_eq!(last["choices"], json!([]), "the usage chunk has no choice");
        assert_eq!(last["usage"]["completion_tokens"], 2);
    }
}
