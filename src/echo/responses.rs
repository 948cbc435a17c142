//! `POST /v1/responses` and `/v1/responses/input_tokens`: the last user input echoed as a
//! `response` whose output is one assistant message, or streamed as the Responses API's
//! typed events (`response.created` ... `response.output_text.delta` ...
//! `response.completed`). Responses are stored (`response_store.rs`) unless `store: false`.

use super::reply::{model, new_id, now, spaced, streamed, words, Event, Reply};
use super::response_store::{ResponseStore, Stored};
use serde_json::{json, Value};

pub fn create(store: &ResponseStore, request: &Value) -> Reply {
    let Some(input_items) = input_items(&request["input"]) else {
        return Reply::invalid(
            "input",
            "'input' must be a string or an array of input items.",
        );
    };
    let previous = &request["previous_response_id"];
    if let Some(previous) = previous.as_str() {
        if store.get(previous).is_none() {
            return Reply::error(
                404,
                "The previous response was not found.",
                Some("previous_response_id"),
                Some("previous_response_not_found"),
            );
        }
    }
    let text = last_user_text(&input_items);
    let echoed = words(&text);
    let input_tokens = input_text(&input_items).split_whitespace().count();
    let (id, message_id, created) = (new_id("resp_"), new_id("msg_"), now());
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
    let message = |status: &str, content: Value| json!({"id": message_id, "type": "message", "status": status, "role": "assistant", "content": content});
    let completed_message = message("completed", json!([part(&echoed.join(" "))]));
    let mut response = json!({
        "id": id, "object": "response", "created_at": created, "status": "completed",
        "completed_at": created, "background": request["background"].as_bool().unwrap_or(false),
        "error": null, "incomplete_details": null, "instructions": request["instructions"],
        "max_output_tokens": request["max_output_tokens"], "metadata": request.get("metadata").cloned().unwrap_or(json!({})),
        "model": model(request), "output": [completed_message], "parallel_tool_calls": true,
        "previous_response_id": previous, "reasoning": {"effort": null, "summary": null},
        "store": request["store"].as_bool().unwrap_or(true), "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "truncation": "disabled", "user": null,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": echoed.len(), "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + echoed.len(),
        },
    });
    if response["store"] == true {
        store.insert(
            &id,
            Stored {
                response: response.clone(),
                input_items,
            },
        );
    }
    if !streamed(request) {
        return Reply::json(&response);
    }
    let mut sequence = 0;
    let mut events = Vec::new();
    let mut push = |mut event: Value, paced: bool| {
        event["sequence_number"] = json!(sequence);
        sequence += 1;
        events.push(Event::typed(&event, paced));
    };
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    started["completed_at"] = Value::Null;
    push(
        json!({"type": "response.created", "response": started}),
        false,
    );
    push(
        json!({"type": "response.in_progress", "response": started}),
        false,
    );
    let at = json!({"item_id": message_id, "output_index": 0, "content_index": 0});
    let with = |kind: &str, fields: Value| {
        let mut event = at.clone();
        event["type"] = json!(kind);
        for (key, value) in fields.as_object().into_iter().flatten() {
            event[key] = value.clone();
        }
        event
    };
    push(
        json!({"type": "response.output_item.added", "output_index": 0, "item": message("in_progress", json!([]))}),
        false,
    );
    push(
        with("response.content_part.added", json!({"part": part("")})),
        false,
    );
    for (i, word) in echoed.iter().enumerate() {
        let delta = json!({"delta": spaced(i, word), "logprobs": []});
        push(with("response.output_text.delta", delta), true);
    }
    let full = echoed.join(" ");
    push(
        with(
            "response.output_text.done",
            json!({"text": full, "logprobs": []}),
        ),
        false,
    );
    push(
        with("response.content_part.done", json!({"part": part(&full)})),
        false,
    );
    let item = response["output"][0].take();
    push(
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        false,
    );
    response["output"] = json!([item]);
    push(
        json!({"type": "response.completed", "response": response}),
        false,
    );
    Reply::Stream(events)
}

/// `POST /v1/responses/input_tokens`: the words of every input text.
pub fn input_tokens(request: &Value) -> Reply {
    let Some(items) = input_items(&request["input"]) else {
        return Reply::invalid(
            "input",
            "'input' must be a string or an array of input items.",
        );
    };
    let count = input_text(&items).split_whitespace().count();
    Reply::json(&json!({"object": "response.input_tokens", "input_tokens": count}))
}

/// The request's `input` as the items `input_items` lists: a string becomes one user
/// message; message content given as a string becomes an `input_text` part; every item
/// gets an ID. Absent input is no items; any other shape is `None`.
fn input_items(input: &Value) -> Option<Vec<Value>> {
    let item = |mut item: Value| -> Option<Value> {
        let object = item.as_object_mut()?;
        if object.contains_key("role") && !object.contains_key("type") {
            object.insert("type".into(), json!("message"));
        }
        if let Some(Value::String(text)) = object.get("content") {
            let parts = json!([{"type": "input_text", "text": text}]);
            object.insert("content".into(), parts);
        }
        object.entry("id").or_insert_with(|| json!(new_id("msg_")));
        object.entry("status").or_insert_with(|| json!("completed"));
        Some(item)
    };
    match input {
        Value::Null => Some(Vec::new()),
        Value::String(text) => Some(vec![item(json!({"role": "user", "content": text}))?]),
        Value::Array(items) => items.iter().cloned().map(item).collect(),
        _ => None,
    }
}

/// The text parts of one message item, joined by spaces.
fn message_text(item: &Value) -> String {
    item["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn last_user_text(items: &[Value]) -> String {
    items
        .iter()
        .rev()
        .find(|item| item["role"] == "user")
        .map(message_text)
        .unwrap_or_default()
}

fn input_text(items: &[Value]) -> String {
    items.iter().map(message_text).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::{body_json, stream_data};

    #[test]
    fn a_response_echoes_the_last_user_input_and_is_stored() {
        let store = ResponseStore::new(4);
        let (status, body) = body_json(create(&store, &json!({"model": "m", "input": "hi there"})));
        assert_eq!(status, 200);
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"][0]["content"][0]["text"], "hi there");
        assert_eq!(body["usage"]["input_tokens"], 2);
        assert_eq!(body["usage"]["output_tokens"], 2);
        let stored = store.get(body["id"].as_str().unwrap()).expect("stored");
        assert_eq!(stored.response, body);
        assert_eq!(stored.input_items[0]["content"][0]["text"], "hi there");

        let items = json!([{"role": "user", "content": [{"type": "input_text", "text": "again"}]}]);
        let request = json!({"input": items, "previous_response_id": body["id"], "store": false});
        let (_, next) = body_json(create(&store, &request));
        assert_eq!(next["output"][0]["content"][0]["text"], "again");
        assert_eq!(next["previous_response_id"], body["id"]);
        assert!(
            store.get(next["id"].as_str().unwrap()).is_none(),
            "store: false"
        );

        let unknown = json!({"input": "x", "previous_response_id": "resp_nope"});
        let (status, error) = body_json(create(&store, &unknown));
        assert_eq!(
            (status, &error["error"]["param"]),
            (404, &json!("previous_response_id"))
        );
    }

    #[test]
    fn a_stream_is_typed_events_in_order_ending_with_usage() {
        let store = ResponseStore::new(4);
        let (events, done) = stream_data(create(&store, &json!({"input": "a b", "stream": true})));
        assert!(!done, "the Responses API sends no [DONE]");
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        let completed = &events[9]["response"];
        assert_eq!(completed["output"][0]["content"][0]["text"], "a b");
        assert_eq!(completed["usage"]["output_tokens"], 2);
        assert_eq!(events[0]["response"]["id"], completed["id"]);
        assert!(store.get(completed["id"].as_str().unwrap()).is_some());
    }

    #[test]
    fn input_tokens_counts_every_input_text() {
        let request = json!({"input": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]});
        let (_, body) = body_json(input_tokens(&request));
        assert_eq!(
            body,
            json!({"object": "response.input_tokens", "input_tokens": 3})
        );
    }
}
