//! Stored responses (the Responses API) live on the upstream that made them, so a request
//! that names one (`GET /v1/responses/{id}`, `previous_response_id`, ...) must reach that
//! upstream, from any replica and after any restart. The ID a client sees carries the
//! catalog model and the upstream it was made on, beside the upstream's own ID:
//!
//! `resp_` + base64url(`sl1` NL model NL upstream NL upstream's ID, then a 6-byte check:
//! the start of the SHA-256 of what precedes it)
//!
//! No shared state is needed, and nothing has to survive a restart. The ID is not a
//! secret and not signed: a client that rewrites one can only name a model its key may
//! use and an upstream that serves that model (both checked), which it could reach anyway;
//! the upstream's own ID stays unguessable. The check catches an ID cut short or mistyped.
//! Anything that does not decode and check is 404 `response_not_found`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

const PREFIX: &str = "resp_";
const VERSION: &str = "sl1";
/// Bytes of SHA-256 that end an encoded ID.
const CHECK_BYTES: usize = 6;

/// What a client's response ID names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponseId {
    pub model: String,
    pub upstream: String,
    /// The upstream's own ID for the response.
    pub upstream_id: String,
}

impl StoredResponseId {
    /// The ID given to clients.
    pub fn encode(&self) -> String {
        let inner = format!(
            "{VERSION}\n{}\n{}\n{}",
            self.model, self.upstream, self.upstream_id
        );
        let mut bytes = inner.into_bytes();
        let check = Sha256::digest(&bytes);
        bytes.extend_from_slice(&check[..CHECK_BYTES]);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Reads a client's ID; `None` for one the gateway did not make.
    pub fn decode(id: &str) -> Option<StoredResponseId> {
        let mut bytes = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        let split = bytes.len().checked_sub(CHECK_BYTES)?;
        let check = bytes.split_off(split);
        if Sha256::digest(&bytes)[..CHECK_BYTES] != check[..] {
            return None;
        }
        let text = String::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(4, '\n');
        if parts.next()? != VERSION {
            return None;
        }
        let (model, upstream, upstream_id) = (parts.next()?, parts.next()?, parts.next()?);
        if model.is_empty() || upstream.is_empty() || upstream_id.is_empty() {
            return None;
        }
        Some(StoredResponseId {
            model: model.to_owned(),
            upstream: upstream.to_owned(),
            upstream_id: upstream_id.to_owned(),
        })
    }
}

/// Replaces an upstream's response IDs by the IDs clients see, in an answer's bytes: the
/// ones known before the answer (the ID a request named) and the one the answer itself
/// carries (a new response's `id`, or an event's `response.id`), learnt as it passes.
#[derive(Debug, Clone)]
pub struct IdRewrite {
    model: String,
    upstream: String,
    /// Quoted upstream ID, quoted client ID.
    pairs: Vec<(String, String)>,
}

impl IdRewrite {
    pub fn new(model: &str, upstream: &str, known: &[&str]) -> Self {
        let mut rewrite = IdRewrite {
            model: model.to_owned(),
            upstream: upstream.to_owned(),
            pairs: Vec::new(),
        };
        for id in known {
            rewrite.learn_id(id);
        }
        rewrite
    }

    fn learn_id(&mut self, upstream_id: &str) {
        let quoted = quote(upstream_id);
        if upstream_id.is_empty() || self.pairs.iter().any(|(q, _)| *q == quoted) {
            return;
        }
        let ours = StoredResponseId {
            model: self.model.clone(),
            upstream: self.upstream.clone(),
            upstream_id: upstream_id.to_owned(),
        }
        .encode();
        self.pairs.push((quoted, quote(&ours)));
    }

    /// Learns the response ID a JSON document carries: a response object's `id`, or the
    /// `response.id` of a streamed event.
    fn learn(&mut self, json: &[u8]) {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else {
            return;
        };
        let candidates = [
            (value["object"] == "response").then(|| &value["id"]),
            Some(&value["response"]["id"]),
        ];
        for id in candidates.into_iter().flatten() {
            if let Some(id) = id.as_str() {
                self.learn_id(id);
            }
        }
    }

    /// A whole JSON answer, rewritten.
    pub fn json(&mut self, body: &[u8]) -> Vec<u8> {
        self.learn(body);
        self.replace(body)
    }

    /// One whole SSE event (ending with its blank line), rewritten.
    pub fn event(&mut self, event: &[u8]) -> Vec<u8> {
        for data in crate::http1::sse::data_values(event) {
            self.learn(event[data].trim_ascii());
        }
        self.replace(event)
    }

    fn replace(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for (theirs, ours) in &self.pairs {
            out = replace_all(&out, theirs.as_bytes(), ours.as_bytes());
        }
        out
    }
}

fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    while let Some(found) = memchr::memmem::find(&haystack[at..], needle) {
        out.extend_from_slice(&haystack[at..at + found]);
        out.extend_from_slice(with);
        at += found + needle.len();
    }
    out.extend_from_slice(&haystack[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_anything_else_is_refused() {
        let id = StoredResponseId {
            model: "gpt-oss/20b".into(),
            upstream: "vllm-a".into(),
            upstream_id: "resp_abc123".into(),
        };
        let ours = id.encode();
        assert!(ours.starts_with("resp_"));
        assert_eq!(StoredResponseId::decode(&ours), Some(id));
        for bad in [
            "resp_abc123",
            "resp_",
            "msg_x",
            "resp_!!!!",
            &ours[..ours.len() - 3],
        ] {
            assert_eq!(StoredResponseId::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_answers_ids_are_rewritten_as_they_are_learnt() {
        let mut rewrite = IdRewrite::new("m", "u", &["resp_prev"]);
        let body = br#"{"id":"resp_new","object":"response","previous_response_id":"resp_prev"}"#;
        let out: serde_json::Value = serde_json::from_slice(&rewrite.json(body)).unwrap();
        let new = StoredResponseId::decode(out["id"].as_str().unwrap()).unwrap();
        assert_eq!(new.upstream_id, "resp_new");
        assert_eq!(new.upstream, "u");
        let prev = StoredResponseId::decode(out["previous_response_id"].as_str().unwrap());
        assert_eq!(prev.unwrap().upstream_id, "resp_prev");

        let mut stream = IdRewrite::new("m", "u", &[]);
        let created = stream.event(
            b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s\"}}\n\n",
        );
        assert!(!created.windows(8).any(|w| w == b"\"resp_s\""), "rewritten");
        let later =
            stream.event(b"data: {\"response\":{\"id\":\"resp_s\",\"status\":\"completed\"}}\n\n");
        let text = String::from_utf8(later).unwrap();
        assert!(text.contains(
            &StoredResponseId {
                model: "m".into(),
                upstream: "u".into(),
                upstream_id: "resp_s".into()
            }
            .encode()
        ));
    }
}
