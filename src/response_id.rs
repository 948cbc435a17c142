//! Stored responses (the Responses API) live on the upstream that made them, so a request
//! that names one (`GET /v1/responses/{id}`, `previous_response_id`, ...) must reach that
//! upstream, from any replica and after any restart. The ID a client sees carries the
//! catalog model and the upstream it was made on, beside the upstream's own ID, and an
//! HMAC-SHA256 that binds them to the owner they were made for:
//!
//! `resp_` + base64url(`sl2` NL model NL upstream NL upstream's ID, then the 32-byte tag)
//!
//! The tag is keyed by `response_ids.secret_env` (the same secret on every replica) and
//! covers the owner (the key's `owner`, else its name), the model, the upstream and the
//! upstream's ID, each length-prefixed. An ID is read only by the owner it was made for:
//! another owner's, an altered one or one made under another secret does not verify and is
//! 404 `response_not_found`, as is an upstream ID outside `[A-Za-z0-9_-]` (it becomes a
//! path segment of the upstream's URL: no `..`, no `%2F`). During a rotation the previous
//! secret (`previous_secret_env`) is still accepted; new IDs are made with the current one.
//! No shared state is needed, and nothing has to survive a restart.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;

const PREFIX: &str = "resp_";
const VERSION: &str = "sl2";
/// Bytes of the HMAC-SHA256 tag that end an encoded ID.
const TAG_BYTES: usize = 32;
/// What the tag's input starts with, so it is never the tag of anything else we sign.
const DOMAIN: &[u8] = b"sluice stored response id v2";

/// The secrets stored-response IDs are signed with: the current one signs and verifies,
/// the previous one (during a rotation) only verifies.
/// Shared by every request that signs or reads an ID: cloning it is one reference count.
#[derive(Clone)]
pub struct IdKeys(std::sync::Arc<Secrets>);

struct Secrets {
    current: hmac::Key,
    previous: Option<hmac::Key>,
}

impl std::fmt::Debug for IdKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdKeys([redacted])")
    }
}

impl IdKeys {
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Self {
        IdKeys(std::sync::Arc::new(Secrets {
            current: hmac::Key::new(hmac::HMAC_SHA256, current),
            previous: previous.map(|p| hmac::Key::new(hmac::HMAC_SHA256, p)),
        }))
    }

    /// A secret of this process alone, for a configuration without `response_ids`: its
    /// IDs are refused by other replicas and after a restart.
    pub fn ephemeral() -> Self {
        let secret: [u8; 32] = rand::random();
        IdKeys::new(&secret, None)
    }
}

/// Who may read the IDs made for a request, and with which secrets they are signed.
#[derive(Debug, Clone, Copy)]
pub struct IdIssuer<'a> {
    pub keys: &'a IdKeys,
    /// The key's `owner`, else its name.
    pub owner: &'a str,
}

/// What a client's response ID names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponseId {
    pub model: String,
    pub upstream: String,
    /// The upstream's own ID for the response.
    pub upstream_id: String,
}

impl StoredResponseId {
    /// The ID given to clients of `issuer`'s owner; `None` when the upstream's ID is not
    /// one the gateway will send back as a path segment.
    pub fn encode(&self, issuer: IdIssuer) -> Option<String> {
        if !plain_id(&self.upstream_id) {
            return None;
        }
        let inner = format!(
            "{VERSION}\n{}\n{}\n{}",
            self.model, self.upstream, self.upstream_id
        );
        let mut bytes = inner.into_bytes();
        let tag = hmac::sign(&issuer.keys.0.current, &self.signed(issuer.owner));
        bytes.extend_from_slice(tag.as_ref());
        Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// Reads a client's ID; `None` for one the gateway did not make for this owner.
    pub fn decode(id: &str, issuer: IdIssuer) -> Option<StoredResponseId> {
        let mut bytes = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        let split = bytes.len().checked_sub(TAG_BYTES)?;
        let tag = bytes.split_off(split);
        let text = String::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(4, '\n');
        if parts.next()? != VERSION {
            return None;
        }
        let (model, upstream, upstream_id) = (parts.next()?, parts.next()?, parts.next()?);
        if model.is_empty() || upstream.is_empty() || !plain_id(upstream_id) {
            return None;
        }
        let named = StoredResponseId {
            model: model.to_owned(),
            upstream: upstream.to_owned(),
            upstream_id: upstream_id.to_owned(),
        };
        let signed = named.signed(issuer.owner);
        let keys = std::iter::once(&issuer.keys.0.current).chain(&issuer.keys.0.previous);
        keys.into_iter()
            .any(|key| hmac::verify(key, &signed, &tag).is_ok())
            .then_some(named)
    }

    /// What the tag covers: each part length-prefixed, so no two lists of parts share it.
    fn signed(&self, owner: &str) -> Vec<u8> {
        let parts = [owner, &self.model, &self.upstream, &self.upstream_id];
        let mut out =
            Vec::with_capacity(DOMAIN.len() + 64 + parts.iter().map(|p| p.len()).sum::<usize>());
        out.extend_from_slice(DOMAIN);
        for part in parts {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out
    }
}

/// An upstream response ID the gateway wraps and sends back: `[A-Za-z0-9_-]`, 1 to 256
/// characters.
fn plain_id(id: &str) -> bool {
    (1..=256).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Replaces an upstream's response IDs by the IDs clients see, in an answer's bytes: the
/// ones known before the answer (the ID a request named) and the one the answer itself
/// carries (a new response's `id`, or an event's `response.id`), learnt as it passes.
#[derive(Debug, Clone)]
pub struct IdRewrite {
    keys: IdKeys,
    owner: String,
    model: String,
    upstream: String,
    /// Quoted upstream ID, quoted client ID.
    pairs: Vec<(String, String)>,
}

impl IdRewrite {
    pub fn new(issuer: IdIssuer, model: &str, upstream: &str, known: &[&str]) -> Self {
        let mut rewrite = IdRewrite {
            keys: issuer.keys.clone(),
            owner: issuer.owner.to_owned(),
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
        let issuer = IdIssuer {
            keys: &self.keys,
            owner: &self.owner,
        };
        // An ID the gateway would refuse to send back passes as the upstream wrote it.
        let Some(ours) = (StoredResponseId {
            model: self.model.clone(),
            upstream: self.upstream.clone(),
            upstream_id: upstream_id.to_owned(),
        })
        .encode(issuer) else {
            return;
        };
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

    fn issuer<'a>(keys: &'a IdKeys, owner: &'a str) -> IdIssuer<'a> {
        IdIssuer { keys, owner }
    }

    fn sample() -> StoredResponseId {
        StoredResponseId {
            model: "gpt-oss/20b".into(),
            upstream: "vllm-a".into(),
            upstream_id: "resp_abc123".into(),
        }
    }

    #[test]
    fn ids_round_trip_for_their_owner_and_anything_else_is_refused() {
        let keys = IdKeys::new(b"a secret of at least thirty-two bytes", None);
        let ours = sample().encode(issuer(&keys, "team-a")).unwrap();
        assert!(ours.starts_with("resp_"));
        assert_eq!(
            StoredResponseId::decode(&ours, issuer(&keys, "team-a")),
            Some(sample())
        );
        assert_eq!(
            StoredResponseId::decode(&ours, issuer(&keys, "team-b")),
            None,
            "another owner's ID does not verify"
        );
        let other = IdKeys::new(b"another secret of thirty-two bytes!!", None);
        assert_eq!(
            StoredResponseId::decode(&ours, issuer(&other, "team-a")),
            None,
            "an ID made under another secret does not verify"
        );
        for bad in [
            "resp_abc123",
            "resp_",
            "msg_x",
            "resp_!!!!",
            &ours[..ours.len() - 3],
        ] {
            assert_eq!(
                StoredResponseId::decode(bad, issuer(&keys, "team-a")),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn a_rewrapped_or_altered_id_is_refused() {
        let keys = IdKeys::new(b"a secret of at least thirty-two bytes", None);
        let ours = sample().encode(issuer(&keys, "a")).unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(&ours[PREFIX.len()..]).unwrap();
        // The model named in clear, changed: the tag no longer matches.
        let text = String::from_utf8_lossy(&bytes[..bytes.len() - TAG_BYTES]).into_owned();
        let swapped = text.replace("gpt-oss/20b", "gpt-oss/12b");
        let mut forged = swapped.into_bytes();
        forged.extend_from_slice(&bytes[bytes.len() - TAG_BYTES..]);
        let forged = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(forged));
        assert_eq!(StoredResponseId::decode(&forged, issuer(&keys, "a")), None);
        // One bit of the tag flipped.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let flipped = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
        assert_eq!(StoredResponseId::decode(&flipped, issuer(&keys, "a")), None);
    }

    #[test]
    fn upstream_ids_outside_the_plain_alphabet_are_never_wrapped() {
        let keys = IdKeys::new(b"a secret of at least thirty-two bytes", None);
        for id in ["..", "a/b", "a%2Fb", "resp.1", "", "x y"] {
            let named = StoredResponseId {
                upstream_id: id.into(),
                ..sample()
            };
            assert_eq!(named.encode(issuer(&keys, "a")), None, "{id:?}");
        }
    }

    #[test]
    fn a_path_steering_upstream_id_is_refused_even_with_a_valid_tag() {
        let keys = IdKeys::new(b"a secret of at least thirty-two bytes", None);
        for id in ["..", "..%2F..%2Fadmin", "a/b"] {
            let named = StoredResponseId {
                upstream_id: id.into(),
                ..sample()
            };
            let mut bytes =
                format!("{VERSION}\n{}\n{}\n{id}", named.model, named.upstream).into_bytes();
            bytes.extend_from_slice(hmac::sign(&keys.0.current, &named.signed("a")).as_ref());
            let forged = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
            assert_eq!(
                StoredResponseId::decode(&forged, issuer(&keys, "a")),
                None,
                "{id}"
            );
        }
    }

    #[test]
    fn the_previous_secret_still_reads_during_a_rotation() {
        let old = IdKeys::new(b"the old secret, thirty-two bytes long", None);
        let made = sample().encode(issuer(&old, "a")).unwrap();
        let rotated = IdKeys::new(
            b"the new secret, thirty-two bytes long",
            Some(b"the old secret, thirty-two bytes long"),
        );
        assert_eq!(
            StoredResponseId::decode(&made, issuer(&rotated, "a")),
            Some(sample())
        );
        let after = IdKeys::new(b"the new secret, thirty-two bytes long", None);
        assert_eq!(StoredResponseId::decode(&made, issuer(&after, "a")), None);
        // New IDs are made with the new secret.
        let new = sample().encode(issuer(&rotated, "a")).unwrap();
        assert_eq!(
            StoredResponseId::decode(&new, issuer(&after, "a")),
            Some(sample())
        );
    }

    #[test]
    fn an_answers_ids_are_rewritten_as_they_are_learnt() {
        let keys = IdKeys::new(b"a secret of at least thirty-two bytes", None);
        let who = issuer(&keys, "o");
        let mut rewrite = IdRewrite::new(who, "m", "u", &["resp_prev"]);
        let body = br#"{"id":"resp_new","object":"response","previous_response_id":"resp_prev"}"#;
        let out: serde_json::Value = serde_json::from_slice(&rewrite.json(body)).unwrap();
        let new = StoredResponseId::decode(out["id"].as_str().unwrap(), who).unwrap();
        assert_eq!(new.upstream_id, "resp_new");
        assert_eq!(new.upstream, "u");
        let prev = StoredResponseId::decode(out["previous_response_id"].as_str().unwrap(), who);
        assert_eq!(prev.unwrap().upstream_id, "resp_prev");

        let mut stream = IdRewrite::new(who, "m", "u", &[]);
        let created = stream.event(
            b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s\"}}\n\n",
        );
        assert!(!created.windows(8).any(|w| w == b"\"resp_s\""), "rewritten");
        let later =
            stream.event(b"data: {\"response\":{\"id\":\"resp_s\",\"status\":\"completed\"}}\n\n");
        let text = String::from_utf8(later).unwrap();
        let expected = StoredResponseId {
            model: "m".into(),
            upstream: "u".into(),
            upstream_id: "resp_s".into(),
        }
        .encode(who)
        .unwrap();
        assert!(text.contains(&expected));
    }
}
