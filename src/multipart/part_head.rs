//! A form part's header lines, read as RFC 7578 says, strictly: the one
//! `Content-Disposition` that names the part, its parameters as tokens or quoted strings
//! (backslash escapes undone, `;` inside quotes just a character). A head that another
//! parser could read differently (two `Content-Disposition` fields, a folded line, a
//! `name*` parameter, `name` twice) is refused.

use super::{ambiguous, malformed, Field};
use crate::error::RequestError;

/// What a part's head says of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Part {
    /// The `name` parameter of its `Content-Disposition`.
    pub name: Option<String>,
    /// It has a `filename` (or `filename*`): a file, never a field value.
    file: bool,
}

impl Part {
    /// The field a part is: a file part is never the model.
    pub fn field(&self) -> Field {
        match self.name.as_deref() {
            Some("model") if !self.file => Field::Model,
            Some("stream") if !self.file => Field::Stream,
            _ => Field::Other,
        }
    }
}

/// Reads a part's header lines: exactly one `Content-Disposition` is looked at, and a
/// head another parser could read differently is refused.
pub(super) fn part_of(head: &str) -> Result<Part, RequestError> {
    let mut disposition = None;
    for line in head.split("\r\n").filter(|line| !line.is_empty()) {
        if line.starts_with([' ', '\t']) {
            // obs-fold: some parsers join the line to the one before, others do not.
            return Err(ambiguous(None, "a part's header line is folded"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(malformed("a multipart part's header line has no colon"));
        };
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        if disposition.replace(value).is_some() {
            return Err(ambiguous(
                None,
                "a part has more than one Content-Disposition field",
            ));
        }
    }
    let Some(disposition) = disposition else {
        return Ok(Part::default());
    };
    let mut part = Part::default();
    let parameters = parameters(disposition)
        .ok_or_else(|| malformed("a part's Content-Disposition is not valid"))?;
    for (name, value) in parameters {
        match name.to_ascii_lowercase().as_str() {
            "name" if part.name.is_some() => {
                return Err(ambiguous(
                    None,
                    "a part's Content-Disposition names it twice",
                ));
            }
            "name" => part.name = Some(value),
            // `name*`, and RFC 2231 continuations (`name*0`, `name*1*`...) that parsers
            // built on email libraries join into a `name`.
            other if other.starts_with("name*") => {
                return Err(ambiguous(
                    None,
                    "a part's Content-Disposition has a name* parameter (RFC 7578 forbids it)",
                ));
            }
            // `filename`, `filename*`, or its continuations: a file.
            other if other.starts_with("filename") => part.file = true,
            _ => {}
        }
    }
    Ok(part)
}

/// The parameters of a `Content-Disposition` or `Content-Type` value (`form-data;
/// name="a"; filename=b`): each value a quoted string, whose backslash escapes are undone,
/// or a bare run of visible characters other than `;` and `"`. Anything else (a parameter
/// without `=`, text after a quoted string, an unclosed quote) is `None`.
pub(super) fn parameters(value: &str) -> Option<Vec<(String, String)>> {
    let mut rest = value.trim_start();
    // The disposition or media type, up to the first parameter.
    let end = rest.find(';').unwrap_or(rest.len());
    if rest[..end].trim().is_empty() {
        return None;
    }
    rest = &rest[end..];
    let mut out = Vec::new();
    while let Some(after) = rest.strip_prefix(';') {
        let after = after.trim_start();
        if after.is_empty() {
            // A trailing `;`: tolerated, as by every common parser.
            break;
        }
        let (name, after) = after.split_once('=')?;
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return None;
        }
        let after = after.trim_start();
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => quoted_string(quoted)?,
            None => {
                let end = after
                    .find(|c: char| c == ';' || c.is_ascii_whitespace())
                    .unwrap_or(after.len());
                let bare = &after[..end];
                if bare.is_empty() || bare.contains(|c: char| c == '"' || c.is_control()) {
                    return None;
                }
                (bare.to_owned(), &after[end..])
            }
        };
        rest = after.trim_start();
        if !rest.is_empty() && !rest.starts_with(';') {
            return None;
        }
        out.push((name.to_owned(), value));
    }
    if !rest.trim().is_empty() {
        return None;
    }
    Some(out)
}

/// The content of a quoted string whose opening quote was taken, and what follows its
/// closing quote; `None` if it does not close. `\x` stands for `x`.
fn quoted_string(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 1..])),
            '\\' => value.push(chars.next()?.1),
            _ => value.push(c),
        }
    }
    None
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_tokens_or_quoted_strings() {
        assert_eq!(
            parameters(" form-data; name=\"a\\\"b;c\" ; filename=f.wav").unwrap(),
            [
                ("name".into(), "a\"b;c".into()),
                ("filename".into(), "f.wav".into())
            ]
        );
        for broken in [
            "form-data; name=\"open",
            "form-data; name=\"a\"x",
            "form-data; name",
            "form-data; name=a b",
            "form-data; name=a\"b",
            "; name=a",
        ] {
            assert!(parameters(broken).is_none(), "{broken:?} is refused");
        }
    }

    #[test]
    fn one_plain_content_disposition_names_a_part() {
        let part =
            part_of("Content-Type: text/plain\r\ncontent-disposition: form-data; name=\"model\"")
                .unwrap();
        assert_eq!(part.field(), Field::Model);
        let file =
            part_of("content-disposition: form-data; name=model; filename*=UTF-8''m").unwrap();
        assert_eq!(file.field(), Field::Other, "a file is never a field value");
        let continued =
            part_of("content-disposition: form-data; name=model; filename*0=m").unwrap();
        assert_eq!(
            continued.field(),
            Field::Other,
            "nor is a file named by continuations"
        );
        assert_eq!(part_of("x-other: 1").unwrap(), Part::default());
        for head in [
            "content-disposition: form-data; name=a\r\nContent-Disposition: form-data; name=b",
            "content-disposition: form-data; name*=UTF-8''model",
            "content-disposition: form-data; name=x; name*0=mo; NAME*1=del",
            "content-disposition: form-data; name=a; NAME=b",
            "content-disposition: form-data;\r\n\tname=model",
            "no colon here",
        ] {
            assert_eq!(
                part_of(head).unwrap_err().code(),
                "invalid_request",
                "{head:?}"
            );
        }
    }
}
