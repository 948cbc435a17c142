//! A JSON object read for its top-level members without copying them: each value stays a
//! `&RawValue` borrowed from the body, and a member name written twice is noted, because
//! JSON parsers disagree on which copy wins and the upstream must never act on a `model`,
//! `stream` or `tools` other than the one the gateway checked.

mod special;
mod walk;

pub(crate) use special::next_special;
pub(crate) use walk::{elements, members, string};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A JSON object's members, each value's text borrowed from the body, keys borrowed unless
/// they contain escapes; `repeated` is the first name that appeared twice (in the order the
/// second copies appear), and `get` finds a name's first copy.
///
/// Kept sorted (see [`order`]) rather than in a hash map: a request body has a handful of
/// members, and a binary search over them costs less than hashing each name (SipHash was
/// ~3k instructions a request, `benches/README.md`), while a body with very many members
/// still costs n log n, not n².
pub(crate) struct Object<'a> {
    /// Sorted by name; a name's copies in document order.
    members: Vec<Member<'a>>,
    pub(crate) repeated: Option<Cow<'a, str>>,
}

#[derive(Debug, PartialEq)]
struct Member<'a> {
    name: Cow<'a, str>,
    /// The value's JSON text (checked by serde_json).
    value: &'a str,
    /// Its position in the document.
    at: usize,
}

impl<'a> Object<'a> {
    /// `text` read as a JSON object by serde_json (which checks all of it is JSON).
    pub(crate) fn parse(text: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(text)
    }

    /// The JSON text of the member's first copy.
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        let first = self
            .members
            .partition_point(|m| order(&m.name) < order(key));
        self.members
            .get(first)
            .filter(|m| m.name == key)
            .map(|m| m.value)
    }

    fn from_members(mut members: Vec<Member<'a>>) -> Self {
        // A stable sort: a name's copies stay in document order, the first one first.
        members.sort_by(|a, b| order(&a.name).cmp(&order(&b.name)));
        // The name whose second copy comes first in the document.
        let repeated = members
            .windows(2)
            .filter(|pair| pair[0].name == pair[1].name)
            .min_by_key(|pair| pair[1].at)
            .map(|pair| pair[0].name.clone());
        Object { members, repeated }
    }
}

/// The order members are kept in: by length, then by bytes. Names of different lengths
/// (most pairs) compare without reading them, which a lexical order cannot do.
fn order(name: &str) -> (usize, &[u8]) {
    (name.len(), name.as_bytes())
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
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(MemberName(name)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            let at = members.len();
            members.push(Member {
                name,
                value: value.get(),
                at,
            });
        }
        Ok(Object::from_members(members))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Object<'_> {
        Object::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn members_are_found_by_name_and_a_repeated_name_keeps_its_first_copy() {
        let object = read(r#"{"z":1,"b":[2],"a\u0062c":"x","b":3,"m":null}"#);
        assert_eq!(object.get("z").unwrap(), "1");
        assert_eq!(object.get("b").unwrap(), "[2]", "the first copy");
        assert_eq!(object.get("abc").unwrap(), r#""x""#, "an escaped name");
        assert_eq!(object.get("m").unwrap(), "null");
        assert!(object.get("a").is_none() && object.get("zz").is_none());
        assert_eq!(object.repeated.as_deref(), Some("b"));
        assert!(read(r#"{}"#).get("a").is_none());
        assert!(read(r#"{"a":1,"b":2}"#).repeated.is_none());
    }

    #[test]
    fn the_name_reported_is_the_one_repeated_first_in_the_document() {
        // `y` repeats before `a` does, though `a` sorts first and appeared first.
        let object = read(r#"{"a":1,"y":2,"y":3,"a":4,"a":5}"#);
        assert_eq!(object.repeated.as_deref(), Some("y"));
        assert_eq!(object.get("a").unwrap(), "1");
        // Many members: still found, the repeat still named.
        let mut text = String::from("{");
        for i in 0..5000 {
            text.push_str(&format!(r#""k{i}":{i},"#));
        }
        text.push_str(r#""k17":0}"#);
        let object = read(&text);
        assert_eq!(object.get("k4999").unwrap(), "4999");
        assert_eq!(object.get("k17").unwrap(), "17");
        assert_eq!(object.repeated.as_deref(), Some("k17"));
    }
}
