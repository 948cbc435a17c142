//! `POST /v1/messages` and `/v1/messages/count_tokens` in Anthropic's shapes: the last
//! user message echoed as a Messages answer, or streamed one word per `text_delta`
//! between `message_start` and `message_stop`.

use super::reply::{last_user_text, model, new_id, spaced, streamed, text_of, words, Event, Reply};
use serde_json::{json, Value};

pub fn reply(request: &Value) -> Reply {
    if !request["messages"].is_array() {
        return invalid("messages: Field required");
    }
    if !request["max_tokens"].is_u64() {
        return invalid("max_tokens: Field required");
    }
    let model = model(request);
    let prompt = last_user_text(request);
    let input_tokens = prompt.split_whitespace().count();
    let words = words(&prompt);
    let id = new_id("msg_");
    if !streamed(request) {
        return Reply::json(&json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": words.join(" ")}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": words.len()},
        }));
    }
    let message = json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    });
    let mut events = vec![
        Event::typed(&json!({"type": "message_start", "message": message}), false),
        Event::typed(
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            false,
        ),
        Event::typed(&json!({"type": "ping"}), false),
    ];
    for (i, word) in words.iter().enumerate() {
        let delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": spaced(i, word)}});
        events.push(Event::typed(&delta, true));
    }
    events.push(Event::typed(
        &json!({"type": "content_block_stop", "index": 0}),
        false,
    ));
    events.push(Event::typed(
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": words.len()}}),
        false,
    ));
    events.push(Event::typed(&json!({"type": "message_stop"}), false));
    Reply::Stream(events)
}

/// `count_tokens`: one token per word of every message and the system prompt.
pub fn count_tokens(request: &Value) -> Reply {
    let Some(messages) = request["messages"].as_array() else {
        return invalid("messages: Field required");
    };
    let words: usize = messages
        .iter()
        .map(|m| text_of(&m["content"]))
        .chain(std::iter::once(text_of(&request["system"])))
        .map(|text| text.split_whitespace().count())
        .sum();
    Reply::json(&json!({"input_tokens": words}))
}

/// Anthropic's error envelope.
fn invalid(message: &str) -> Reply {
    Reply::json_status(
        400,
        &json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::body_json;

    #[test]
    fn the_last_user_message_is_echoed_in_anthropics_shape() {
        let request = json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]},
        ]});
        let (status, answer) = body_json(reply(&request));
        assert_eq!(status, 200);
        assert_eq!(
            answer["content"],
            json!([{"type": "text", "text": "hello there"}])
        );
        assert_eq!(
            answer["usage"],
            json!({"input_tokens": 2, "output_tokens": 2})
        );
        let (status, refused) = body_json(reply(&json!({"messages": []})));
        assert_eq!((status, refused["type"].as_str()), (400, Some("error")));
    }

    #[test]
    fn a_stream_is_anthropics_event_sequence() {
        let request = json!({"model": "m", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "one two"}]});
        let Reply::Stream(events) = reply(&request) else {
            panic!("a stream");
        };
        let kinds: Vec<String> = events
            .iter()
            .map(|e| {
                let text = std::str::from_utf8(&e.bytes).unwrap();
                text.lines()
                    .next()
                    .unwrap()
                    .trim_start_matches("event: ")
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
    }

    #[test]
    fn count_tokens_counts_words() {
        let request =
            json!({"system": "be brief", "messages": [{"role": "user", "content": "a b c"}]});
        let (_, counted) = body_json(count_tokens(&request));
        assert_eq!(counted, json!({"input_tokens": 5}));
    }
}
