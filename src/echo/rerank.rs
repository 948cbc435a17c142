//! `POST /v1/rerank` (the Cohere and vLLM shape): each document scored by the share of the
//! query's words it contains, best first, cut to `top_n`.

use super::reply::{model, new_id, Reply};
use serde_json::{json, Value};
use std::collections::HashSet;

pub fn reply(request: &Value) -> Reply {
    let Some(query) = request["query"].as_str() else {
        return Reply::invalid("query", "'query' must be a string.");
    };
    let documents: Option<Vec<&str>> = request["documents"]
        .as_array()
        .map(|documents| {
            documents
                .iter()
                .map(|d| d.as_str().or_else(|| d["text"].as_str()))
                .collect()
        })
        .unwrap_or(None);
    let Some(documents) = documents else {
        return Reply::invalid(
            "documents",
            "'documents' must be an array of strings or of objects with 'text'.",
        );
    };
    let top_n = match &request["top_n"] {
        Value::Null => documents.len(),
        value => match value.as_u64() {
            Some(n) if n > 0 => n as usize,
            _ => return Reply::invalid("top_n", "'top_n' must be a positive integer."),
        },
    };
    let return_documents = request["return_documents"].as_bool().unwrap_or(true);
    let query_words = lowercase_words(query);
    let mut results: Vec<(usize, f64)> = documents
        .iter()
        .map(|document| {
            let found = lowercase_words(document).intersection(&query_words).count();
            found as f64 / query_words.len().max(1) as f64
        })
        .enumerate()
        .collect();
    // Stable: equal scores keep the documents' order.
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results.truncate(top_n);
    let results: Vec<Value> = results
        .into_iter()
        .map(|(index, score)| {
            let mut result = json!({"index": index, "relevance_score": score});
            if return_documents {
                result["document"] = json!({"text": documents[index]});
            }
            result
        })
        .collect();
    let tokens: usize = std::iter::once(query)
        .chain(documents.iter().copied())
        .map(|t| t.split_whitespace().count())
        .sum();
    Reply::json(&json!({
        "id": new_id("rerank-"), "model": model(request), "results": results,
        "usage": {"total_tokens": tokens},
    }))
}

fn lowercase_words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::body_json;

    #[test]
    fn documents_sharing_the_query_words_rank_first() {
        let request = json!({"model": "r", "query": "red apple", "top_n": 2,
            "documents": ["a blue sky", {"text": "A red apple."}, "red car"]});
        let (status, body) = body_json(reply(&request));
        assert_eq!(status, 200);
        let ranked: Vec<(u64, f64)> = body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["index"].as_u64().unwrap(),
                    r["relevance_score"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(ranked, [(1, 1.0), (2, 0.5)]);
        assert_eq!(body["results"][0]["document"]["text"], "A red apple.");
        assert_eq!(body["usage"]["total_tokens"], 2 + 3 + 3 + 2);
        let (status, _) = body_json(reply(&json!({"query": "q", "documents": [1]})));
        assert_eq!(status, 400);
    }
}
