//! A walk over JSON text that serde_json has already validated (a `RawValue`): the
//! elements of an array, the members of an object, each value as its text. Checking the
//! shape of `messages` this way costs one pass over its bytes, where parsing it again
//! into values cost two (`benches/README.md`, ninth session).
//!
//! Text that is not valid JSON never panics here: a walk that runs off the end stops.

use std::borrow::Cow;

/// The elements of `text`, an array: `None` when it is another kind of value.
pub(crate) fn elements(text: &str) -> Option<Elements<'_>> {
    let at = open(text, b'[')?;
    Some(Elements { text, at })
}

/// The members of `text`, an object, as (name, value text): `None` when it is another
/// kind of value. Names are decoded; a name without escapes is borrowed.
pub(crate) fn members(text: &str) -> Option<Members<'_>> {
    let at = open(text, b'{')?;
    Some(Members { text, at })
}

/// A string value decoded: `None` when `text` is not a string.
pub(crate) fn string(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

pub(crate) struct Elements<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = blank_end(bytes, self.at);
        if matches!(bytes.get(start), None | Some(b']')) {
            self.at = bytes.len();
            return None;
        }
        let end = value_end(bytes, start);
        self.at = after_comma(bytes, end);
        self.text.get(start..end)
    }
}

pub(crate) struct Members<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Iterator for Members<'a> {
    type Item = (Cow<'a, str>, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text.as_bytes();
        let name_start = blank_end(bytes, self.at);
        if bytes.get(name_start) != Some(&b'"') {
            self.at = bytes.len();
            return None;
        }
        let name_end = string_end(bytes, name_start);
        let colon = blank_end(bytes, name_end);
        let start = blank_end(bytes, colon + 1);
        if bytes.get(colon) != Some(&b':') || start >= bytes.len() {
            self.at = bytes.len();
            return None;
        }
        let end = value_end(bytes, start);
        self.at = after_comma(bytes, end);
        let name = string(self.text.get(name_start..name_end)?)?;
        Some((name, self.text.get(start..end)?))
    }
}

/// Just past the opening bracket `open` that `text` starts with (after blanks).
fn open(text: &str, open: u8) -> Option<usize> {
    let at = blank_end(text.as_bytes(), 0);
    (text.as_bytes().get(at) == Some(&open)).then_some(at + 1)
}

fn blank_end(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// Past the blanks and the comma that follow a value.
fn after_comma(bytes: &[u8], end: usize) -> usize {
    let at = blank_end(bytes, end);
    if bytes.get(at) == Some(&b',') {
        at + 1
    } else {
        at
    }
}

/// Just past the value that starts at `start`.
fn value_end(bytes: &[u8], start: usize) -> usize {
    match bytes[start] {
        b'"' => string_end(bytes, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = start;
            while at < bytes.len() {
                match bytes[at] {
                    b'"' => {
                        at = string_end(bytes, at);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return at + 1;
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
            bytes.len()
        }
        _ => {
            let mut at = start;
            while at < bytes.len()
                && !matches!(bytes[at], b',' | b'}' | b']')
                && !bytes[at].is_ascii_whitespace()
            {
                at += 1;
            }
            at
        }
    }
}

/// Just past the closing quote of the string whose opening quote is at `start`.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match memchr::memchr2(b'"', b'\\', &bytes[at..]) {
            Some(offset) if bytes[at + offset] == b'\\' => at += offset + 2,
            Some(offset) => return at + offset + 1,
            None => break,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_each_value_text() {
        let text = r#" [ {"a":[1,{"b":"]}\"["}]} , "x\"y" ,3,null, [] ,{}] "#;
        let found: Vec<&str> = elements(text).unwrap().collect();
        assert_eq!(
            found,
            [
                r#"{"a":[1,{"b":"]}\"["}]}"#,
                r#""x\"y""#,
                "3",
                "null",
                "[]",
                "{}"
            ]
        );
        assert_eq!(elements("[]").unwrap().count(), 0);
        assert_eq!(elements(" [ ] ").unwrap().count(), 0);
        assert!(elements(r#"{"a":1}"#).is_none());
        assert!(elements(r#""[""#).is_none());
    }

    #[test]
    fn members_are_decoded_names_and_value_texts() {
        let text = r#"{ "role" : "user", "c\u006fntent":[{"t":"}"}], "n":-1.5e3 ,"z":true}"#;
        let found: Vec<(String, &str)> = members(text)
            .unwrap()
            .map(|(name, value)| (name.into_owned(), value))
            .collect();
        assert_eq!(
            found,
            [
                ("role".to_owned(), r#""user""#),
                ("content".to_owned(), r#"[{"t":"}"}]"#),
                ("n".to_owned(), "-1.5e3"),
                ("z".to_owned(), "true"),
            ]
        );
        assert_eq!(members("{}").unwrap().count(), 0);
        assert!(members("[1]").is_none());
    }

    #[test]
    fn long_strings_end_where_they_end_wherever_an_escape_falls() {
        for length in 0..100 {
            for at in 0..length {
                let mut text: Vec<char> = (0..length).map(|i| ['a', 'é', ']'][i % 3]).collect();
                text[at] = '\\';
                text.insert(at + 1, '"');
                let inner: String = text.into_iter().collect();
                let list = format!(r#"["{inner}", 1]"#);
                let found: Vec<&str> = elements(&list).unwrap().collect();
                assert_eq!(found, [format!(r#""{inner}""#).as_str(), "1"], "{list}");
            }
        }
    }

    #[test]
    fn strings_decode_and_other_values_are_not_strings() {
        assert_eq!(string(r#""user""#).as_deref(), Some("user"));
        assert_eq!(string(r#""us\u0065r""#).as_deref(), Some("user"));
        assert_eq!(string("1"), None);
        assert_eq!(string("null"), None);
    }

    #[test]
    fn text_cut_short_ends_the_walk_without_a_panic() {
        for text in [r#"["abc"#, "[{", r#"{"a""#, r#"{"a":"#, r#"{"a" 1}"#, "[1,"] {
            let _ = elements(text).map(|e| e.count());
            let _ = members(text).map(|m| m.count());
        }
        assert_eq!(members(r#"{"a":"#).unwrap().count(), 0);
    }
}
