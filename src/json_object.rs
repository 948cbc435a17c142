//! A JSON object read for its top-level members without copying them: each value stays a
//! `&RawValue` borrowed from the body, and a member name written twice is noted, because
//! JSON parsers disagree on which copy wins and the upstream must never act on a `model`,
//! `stream` or `tools` other than the one the gateway checked.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::hash_map::{Entry, HashMap};
use std::fmt;

/// A JSON object's members, each value borrowed from the body, keys borrowed unless they
/// hold escapes. `repeated` is the first key that appeared a second time (the first copy's
/// value is kept; the object is refused anyway where that matters).
pub(crate) struct Object<'a> {
    pub(crate) members: HashMap<Cow<'a, str>, &'a RawValue>,
    pub(crate) repeated: Option<Cow<'a, str>>,
}

impl<'a> Object<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<&&'a RawValue> {
        self.members.get(key)
    }
}

impl<'de> Deserialize<'de> for Object<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Object<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<'de>, A::Error> {
        let mut members = HashMap::with_capacity(map.size_hint().unwrap_or(8));
        let mut repeated = None;
        while let Some(MemberName(name)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            match members.entry(name) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(first) => {
                    if repeated.is_none() {
                        repeated = Some(first.key().clone());
                    }
                }
            }
        }
        Ok(Object { members, repeated })
    }
}

/// A member name, borrowed from the body when it holds no escape (serde's own `Cow<str>`
/// always copies).
struct MemberName<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(MemberNameVisitor)
    }
}

struct MemberNameVisitor;

impl<'de> Visitor<'de> for MemberNameVisitor {
    type Value = MemberName<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Borrowed(name)))
    }

    fn visit_str<E>(self, name: &str) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Owned(name.to_owned())))
    }

    fn visit_string<E>(self, name: String) -> Result<MemberName<'de>, E> {
        Ok(MemberName(Cow::Owned(name)))
    }
}
