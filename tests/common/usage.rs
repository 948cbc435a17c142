//! Answers that carry token usage, and request bodies of a known token estimate.

use super::mock::Reply;

/// A chat completion whose `usage` member is `usage` (an object as JSON text).
pub fn json_with_usage(usage: &str) -> Reply {
    Reply::json(
        200,
        &format!(
            r#"{{"id":"c","object":"chat.completion","model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"x"}},"finish_reason":"stop"}}],"usage":{usage}}}"#
        ),
    )
}

/// A chat body whose estimate is exactly `estimate` tokens: its bytes / 4 plus `max_tokens`.
pub fn body_estimating(estimate: u64) -> String {
    let with = |max: u64| {
        format!(
            r#"{{"model":"chat-model","max_tokens":{max},"messages":[{{"role":"user","content":"hi"}}]}}"#
        )
    };
    (0..=estimate)
        .rev()
        .map(with)
        .find(|body| {
            let max: u64 = body[body.find("max_tokens\":").unwrap() + 12..]
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            body.len() as u64 / 4 + max == estimate
        })
        .expect("a body with that estimate")
}
