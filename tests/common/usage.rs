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

/// The first object key written twice anywhere in a JSON document (`Err` when it is not
/// JSON): what an upstream must never be sent, since parsers disagree on which copy wins.
pub fn repeated_key(json: &[u8]) -> Result<Option<String>, serde_json::Error> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Walk(Option<String>);
    impl<'de> Visitor<'de> for &mut Walk {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) && self.0.is_none() {
                    self.0 = Some(key);
                }
                map.next_value_seed(&mut *self)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(&mut *self)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    impl<'de> serde::de::DeserializeSeed<'de> for &mut Walk {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    let mut walk = Walk(None);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    serde::de::DeserializeSeed::deserialize(&mut walk, &mut deserializer)?;
    deserializer.end()?;
    Ok(walk.0)
}
