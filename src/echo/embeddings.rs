//! `POST /v1/embeddings`: one small unit vector per input, derived from the SHA-256 of its
//! text, so the same text always gets the same vector. As floats, or as base64 of
//! little-endian `f32`s when `encoding_format` is `base64` (what the official Python SDK
//! asks for unless told otherwise, decoding the answer itself).

use super::reply::{model, texts, Reply};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Length of a vector when the request does not set `dimensions`.
const DEFAULT_DIMENSIONS: usize = 8;
/// Longest vector the backend makes (OpenAI's largest model has 3,072).
const MAX_DIMENSIONS: usize = 3072;

pub fn reply(request: &Value) -> Reply {
    let Some(inputs) = inputs(&request["input"]) else {
        return Reply::invalid(
            "input",
            "'input' must be a non-empty string, array of strings, or array of token arrays.",
        );
    };
    let dimensions = match &request["dimensions"] {
        Value::Null => DEFAULT_DIMENSIONS,
        value => match value.as_u64().map(|d| d as usize) {
            Some(d) if (1..=MAX_DIMENSIONS).contains(&d) => d,
            _ => {
                return Reply::invalid(
                    "dimensions",
                    "'dimensions' must be an integer from 1 to 3072.",
                )
            }
        },
    };
    let base64 = match request["encoding_format"].as_str() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return Reply::invalid(
                "encoding_format",
                "'encoding_format' must be 'float' or 'base64'.",
            )
        }
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = vector(text, dimensions);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|t| t.split_whitespace().count()).sum();
    Reply::json(&json!({
        "object": "list", "data": data, "model": model(request),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// The inputs as text: a string, strings, or token arrays (their IDs written out).
fn inputs(input: &Value) -> Option<Vec<String>> {
    texts(input).filter(|texts| !texts.is_empty())
}

/// A unit vector of `dimensions` components made from the SHA-256 of the text: 16
/// components per digest, each digest over the block number and the text.
fn vector(text: &str, dimensions: usize) -> Vec<f32> {
    let mut vector = Vec::with_capacity(dimensions);
    for block in 0u32.. {
        if vector.len() == dimensions {
            break;
        }
        let digest = Sha256::new()
            .chain_update(block.to_le_bytes())
            .chain_update(text.as_bytes())
            .finalize();
        for pair in digest.chunks_exact(2).take(dimensions - vector.len()) {
            let raw = u16::from_le_bytes([pair[0], pair[1]]);
            vector.push(f32::from(raw) / 32767.5 - 1.0);
        }
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::body_json;

    #[test]
    fn vectors_are_deterministic_unit_vectors_per_input() {
        let request = json!({"model": "e", "input": ["a", "b", "a"], "dimensions": 20});
        let (status, body) = body_json(reply(&request));
        assert_eq!(status, 200);
        let vectors: Vec<Vec<f64>> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| serde_json::from_value(d["embedding"].clone()).unwrap())
            .collect();
        assert_eq!(vectors.len(), 3);
        assert_eq!(vectors[0].len(), 20);
        assert_eq!(vectors[0], vectors[2], "same text, same vector");
        assert_ne!(vectors[0], vectors[1]);
        let norm: f64 = vectors[1].iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
        assert_eq!(body["data"][2]["index"], 2);
        assert_eq!(body["object"], "list");
    }

    #[test]
    fn base64_is_the_same_vector_as_little_endian_floats() {
        let (_, floats) = body_json(reply(&json!({"input": "hello"})));
        let (_, packed) = body_json(reply(
            &json!({"input": "hello", "encoding_format": "base64"}),
        ));
        let bytes = STANDARD
            .decode(packed["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        let decoded: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let expected: Vec<f32> =
            serde_json::from_value(floats["data"][0]["embedding"].clone()).unwrap();
        assert_eq!(decoded, expected);
        assert_eq!(decoded.len(), DEFAULT_DIMENSIONS);
    }

    #[test]
    fn bad_inputs_are_400() {
        for request in [
            json!({"input": []}),
            json!({"input": 3}),
            json!({"input": "x", "dimensions": 0}),
            json!({"input": "x", "encoding_format": "hex"}),
        ] {
            assert_eq!(body_json(reply(&request)).0, 400, "{request}");
        }
    }
}
