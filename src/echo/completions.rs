//! `POST /v1/completions`: each prompt echoed as the text of one choice of a
//! `text_completion`, or streamed one word per chunk (the same object shape, as OpenAI's
//! legacy completions do).

use super::reply::{
    model, new_id, now, spaced, streamed, texts, usage_requested, words, Event, Reply,
};
use serde_json::{json, Value};

pub fn reply(request: &Value) -> Reply {
    let Some(prompts) = prompts(&request["prompt"]) else {
        return Reply::invalid(
            "prompt",
            "'prompt' must be a string, an array of strings, or an array of token arrays.",
        );
    };
    let model = model(request);
    let (id, created) = (new_id("cmpl-"), now());
    let echoed: Vec<Vec<&str>> = prompts.iter().map(|p| words(p)).collect();
    let prompt_tokens: usize = prompts.iter().map(|p| p.split_whitespace().count()).sum();
    let completion_tokens: usize = echoed.iter().map(Vec::len).sum();
    let usage = json!({
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    let completion = |choices: Value| json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": choices});
    let choice = |index: usize, text: String, finish: Value| json!({"index": index, "text": text, "logprobs": null, "finish_reason": finish});
    if !streamed(request) {
        let choices: Vec<Value> = echoed
            .iter()
            .enumerate()
            .map(|(i, words)| choice(i, words.join(" "), json!("stop")))
            .collect();
        let mut answer = completion(Value::Array(choices));
        answer["usage"] = usage;
        return Reply::json(&answer);
    }
    let mut events = Vec::new();
    for (index, words) in echoed.iter().enumerate() {
        for (i, word) in words.iter().enumerate() {
            let chunk = completion(json!([choice(index, spaced(i, word), Value::Null)]));
            events.push(Event::data(&chunk, true));
        }
        let end = completion(json!([choice(index, String::new(), json!("stop"))]));
        events.push(Event::data(&end, false));
    }
    if usage_requested(request) {
        let mut last = completion(json!([]));
        last["usage"] = usage;
        events.push(Event::data(&last, false));
    }
    events.push(Event::done());
    Reply::Stream(events)
}

/// The prompts of a request as text: a string, strings, or token arrays (their IDs
/// written out, so they echo too). `None` for any other shape.
fn prompts(prompt: &Value) -> Option<Vec<String>> {
    texts(prompt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::{body_json, stream_data};

    #[test]
    fn each_prompt_is_one_choice() {
        let (status, body) = body_json(reply(&json!({"model": "m", "prompt": ["a b", "c"]})));
        assert_eq!(status, 200);
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["choices"][0]["text"], "a b");
        assert_eq!(body["choices"][1]["text"], "c");
        assert_eq!(body["choices"][1]["index"], 1);
        assert_eq!(body["usage"]["prompt_tokens"], 3);
        let (_, tokens) = body_json(reply(&json!({"prompt": [1, 2]})));
        assert_eq!(tokens["choices"][0]["text"], "1 2");
        let (status, _) = body_json(reply(&json!({"prompt": {"x": 1}})));
        assert_eq!(status, 400);
    }

    #[test]
    fn a_stream_carries_words_then_stop_then_usage_then_done() {
        let request = json!({"prompt": "one two three", "stream": true,
            "stream_options": {"include_usage": true}});
        let (events, done) = stream_data(reply(&request));
        assert!(done);
        let text: String = events
            .iter()
            .filter_map(|e| e["choices"][0]["text"].as_str())
            .collect();
        assert_eq!(text, "one two three");
        assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[4]["usage"]["total_tokens"], 6);
        assert!(events.iter().all(|e| e["object"] == "text_completion"));
    }
}
