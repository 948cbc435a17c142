//! [`whole_usage`]: the usage of a JSON answer that is here whole, read by serde_json in one
//! pass over it, every member but the `usage` ones skipped without being copied, each
//! `usage` read typed (a body with a malformed one, or too long to rule out one past the
//! bound, is read with each `usage` kept as its bytes instead).
//!
//! It gives what [`JsonScan`](super::JsonScan) gives the same bytes in pieces, for every
//! document serde_json accepts: the last `usage` member at the top level or inside a
//! top-level `response` object counts (a `null` or malformed last one: no usage, even after
//! a good one), a member name written with an escape is another name (the scan compares
//! names as written), a value past [`MAX_USAGE_BYTES`] is malformed. A body serde_json
//! refuses (not JSON, cut short, text after the document, nested deeper than it reads) has
//! no usage: the scan follows structure without checking it, but an answer that is not JSON
//! is not believed here, and the request's reservation stands.

use super::{RawUsage, Usage, MAX_USAGE_BYTES};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// The usage a whole JSON answer reports: `None` when the body is not JSON, has no `usage`,
/// or its last one is `null` or malformed.
pub fn whole_usage(body: &[u8]) -> Option<Usage> {
    // The usual answer: each `usage` read typed as it comes. No value in a body this short
    // can be past the bound; a malformed one stops serde_json, and the body is read again
    // below (a later `usage` may still count).
    if body.len() <= MAX_USAGE_BYTES {
        if let Ok(last) = read::<Option<RawUsage>>(body) {
            return last.flatten().and_then(RawUsage::usage);
        }
    }
    value_by_value(body)
}

/// [`whole_usage`] with each `usage` kept as its bytes, the last one read.
fn value_by_value(body: &[u8]) -> Option<Usage> {
    let raw = read::<&RawValue>(body).ok()??.get();
    (raw.len() <= MAX_USAGE_BYTES)
        .then(|| Usage::parse(raw.as_bytes()))
        .flatten()
}

/// The last `usage` value of `body`, read as a `T`, if any.
fn read<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<Option<T>, serde_json::Error> {
    let mut last = None;
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    Members {
        last: &mut last,
        top_level: true,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(last)
}

/// A member name that matters, compared as written: a name with an escape in it is
/// [`Name::Other`], as it is to the scan.
enum Name {
    Usage,
    Response,
    Other,
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
        deserializer.deserialize_identifier(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Name;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    /// A name as written in the body (serde_json lends one that has no escape).
    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Name, E> {
        Ok(match name {
            "usage" => Name::Usage,
            "response" => Name::Response,
            _ => Name::Other,
        })
    }

    /// A name serde_json had to unescape.
    fn visit_str<E>(self, _: &str) -> Result<Name, E> {
        Ok(Name::Other)
    }
}

/// An object whose `usage` members count: the document itself (anything else is
/// malformed), whose `response` object is read the same way, or that `response` object,
/// whose own `response` is another member.
struct Members<'a, T> {
    last: &'a mut Option<T>,
    top_level: bool,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Members<'_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de>> Members<'_, T> {
    /// A top-level `response` value: passed over as a whole first (any value may stand
    /// there), its bytes read again only when it is an object.
    fn read_response<E: serde::de::Error>(self, value: &'de RawValue) -> Result<(), E> {
        if !value.get().starts_with('{') {
            return Ok(());
        }
        let mut deserializer = serde_json::Deserializer::from_str(value.get());
        deserializer.deserialize_map(self).map_err(E::custom)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Members<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<Name>()? {
            match name {
                Name::Usage => *self.last = Some(map.next_value()?),
                Name::Response if self.top_level => Members {
                    last: &mut *self.last,
                    top_level: false,
                }
                .read_response(map.next_value()?)?,
                Name::Response | Name::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
