//! `POST /v1/moderations`: one result per input, never flagged, every category score 0.

use super::reply::{model, new_id, Reply};
use serde_json::{json, Map, Value};

/// OpenAI's categories, and the input types each applies to.
const CATEGORIES: [(&str, &[&str]); 13] = [
    ("harassment", &["text"]),
    ("harassment/threatening", &["text"]),
    ("hate", &["text"]),
    ("hate/threatening", &["text"]),
    ("illicit", &["text"]),
    ("illicit/violent", &["text"]),
    ("self-harm", &["text", "image"]),
    ("self-harm/instructions", &["text", "image"]),
    ("self-harm/intent", &["text", "image"]),
    ("sexual", &["text", "image"]),
    ("sexual/minors", &["text"]),
    ("violence", &["text", "image"]),
    ("violence/graphic", &["text", "image"]),
];

pub fn reply(request: &Value) -> Reply {
    let inputs = match &request["input"] {
        Value::String(_) => 1,
        // Strings, or the parts of one multimodal input.
        Value::Array(items) if items.iter().all(Value::is_string) => items.len(),
        Value::Array(items) if items.iter().all(Value::is_object) => 1,
        _ => {
            return Reply::invalid(
                "input",
                "'input' must be a string, an array of strings, or an array of input parts.",
            )
        }
    };
    let table = |value: &dyn Fn(&[&str]) -> Value| -> Value {
        let map: Map<String, Value> = CATEGORIES
            .iter()
            .map(|(name, types)| (name.to_string(), value(types)))
            .collect();
        Value::Object(map)
    };
    let result = json!({
        "flagged": false,
        "categories": table(&|_| json!(false)),
        "category_scores": table(&|_| json!(0.0)),
        "category_applied_input_types": table(&|types| json!(types)),
    });
    Reply::json(&json!({
        "id": new_id("modr-"), "model": model(request),
        "results": vec![result; inputs],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::body_json;

    #[test]
    fn one_unflagged_result_per_input() {
        let (status, body) = body_json(reply(&json!({"input": ["a", "b"]})));
        assert_eq!(status, 200);
        assert_eq!(body["results"].as_array().unwrap().len(), 2);
        assert_eq!(body["results"][0]["flagged"], false);
        assert_eq!(body["results"][1]["categories"]["self-harm/intent"], false);
        assert_eq!(body["results"][0]["category_scores"]["violence"], 0.0);
        assert_eq!(body_json(reply(&json!({"input": 1}))).0, 400);
    }
}
