//! An object's top-level members read in one pass over its text that also checks the whole
//! text is JSON, without serde_json's deserializer: the routing parse of a chat body cost
//! ~6.4k instructions, most of them serde_json's machinery around a body of ~100 bytes
//! (`benches/README.md`).
//!
//! It accepts only text serde_json accepts, and finds the same members and value texts;
//! anything else (text that is not JSON, a member name with an escape, nesting deeper
//! than 64) gives `None`, and the caller parses with serde_json, which accepts or refuses
//! it with its own message. The checks are serde_json's (its `ignore_value`, and a
//! `RawValue`'s UTF-8): the blanks space, tab, CR and LF; strings without control
//! characters, escapes `\" \\ \/ \b \f \n \r \t` and `\u` with four hex digits; numbers
//! `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; `true`, `false`, `null`; no
//! trailing comma; nothing but blanks after the object.

use super::Member;
use std::borrow::Cow;

/// The members of `text`, a JSON object, in document order; `None` where serde_json must
/// decide (see the module's comment).
pub(super) fn top_members(text: &str) -> Option<Vec<Member<'_>>> {
    let mut members = Vec::with_capacity(8);
    each_member(text, |name, value| {
        let at = members.len();
        members.push(Member {
            name: Cow::Borrowed(name),
            value,
            at,
        });
        Some(())
    })?;
    Some(members)
}

/// Calls `take` with each member of `text`, a JSON object, in document order: its name
/// (without escapes) and its value's text. `None` where serde_json must decide (see the
/// module's comment), or where `take` gives `None`; then the members taken so far are to
/// be thrown away.
pub(crate) fn each_member<'a>(
    text: &'a str,
    mut take: impl FnMut(&'a str, &'a str) -> Option<()>,
) -> Option<()> {
    let bytes = text.as_bytes();
    let mut at = blank_end(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = blank_end(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            // A name without escapes is the text between its quotes.
            let name_end = string_end(bytes, at, false)?;
            let name = text.get(at + 1..name_end - 1)?;
            at = blank_end(bytes, name_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            let start = blank_end(bytes, at + 1);
            let end = value_end(bytes, start)?;
            take(name, text.get(start..end)?)?;
            at = blank_end(bytes, end);
            match bytes.get(at) {
                Some(b',') => at = blank_end(bytes, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (blank_end(bytes, at) == bytes.len()).then_some(())
}

/// Just past the value that starts at `start`, every byte of it checked.
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    // One bit per open container, the innermost lowest: 1 for an object, 0 for an array.
    let mut open = 0u64;
    let mut depth = 0u32;
    let mut at = start;
    loop {
        at = match *bytes.get(at)? {
            b'"' => string_end(bytes, at, true)?,
            b't' => literal_end(bytes, at, b"true")?,
            b'f' => literal_end(bytes, at, b"false")?,
            b'n' => literal_end(bytes, at, b"null")?,
            b'-' | b'0'..=b'9' => number_end(bytes, at)?,
            bracket @ (b'{' | b'[') => {
                if depth == 64 {
                    return None;
                }
                let object = bracket == b'{';
                let close = if object { b'}' } else { b']' };
                let inner = blank_end(bytes, at + 1);
                if bytes.get(inner) == Some(&close) {
                    inner + 1
                } else {
                    open = open << 1 | u64::from(object);
                    depth += 1;
                    at = if object {
                        member_value(bytes, inner)?
                    } else {
                        inner
                    };
                    continue;
                }
            }
            _ => return None,
        };
        // After a value: close what it ends, or go on past a comma to the next value.
        loop {
            if depth == 0 {
                return Some(at);
            }
            let object = open & 1 == 1;
            at = blank_end(bytes, at);
            match *bytes.get(at)? {
                b',' => {
                    let next = blank_end(bytes, at + 1);
                    at = if object {
                        member_value(bytes, next)?
                    } else {
                        next
                    };
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            open >>= 1;
            depth -= 1;
            at += 1;
        }
    }
}

/// Past a member's name (escapes allowed), its colon and the blanks after it: where its
/// value starts.
fn member_value(bytes: &[u8], at: usize) -> Option<usize> {
    let at = blank_end(bytes, string_end(bytes, at, true)?);
    (bytes.get(at) == Some(&b':')).then(|| blank_end(bytes, at + 1))
}

/// Just past the closing quote of the string whose opening quote is at `at`; `None` for a
/// string that does not close, holds a control character or a bad escape, or holds an
/// escape where `escapes` is false.
fn string_end(bytes: &[u8], at: usize, escapes: bool) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        at = next_special(bytes, at);
        match *bytes.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' if escapes => {
                at += match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                    _ => return None,
                }
            }
            // A control character, or an escape in a name read as it is.
            _ => return None,
        }
    }
}

/// The position of the first byte from `from` on that a JSON string cannot hold as it is
/// (`"`, `\` or a control character), or the text's length. Sixteen bytes are tested a
/// step, as two words in registers, while they last, then eight, then one by one: strings
/// are mostly long runs of plain text (two words a step cost ~1.5 instructions a byte,
/// one word ~2.5, callgrind over 1 MiB).
#[inline]
pub(crate) fn next_special(bytes: &[u8], from: usize) -> usize {
    let Some(rest) = bytes.get(from..) else {
        return from;
    };
    let mut at = from;
    let mut pairs = rest.chunks_exact(16);
    for pair in pairs.by_ref() {
        let (low, high) = pair.split_at(8);
        let (low, high) = (special_marks(word(low)), special_marks(word(high)));
        if low | high != 0 {
            let lane = if low != 0 {
                low.trailing_zeros() / 8
            } else {
                8 + high.trailing_zeros() / 8
            };
            return at + lane as usize;
        }
        at += 16;
    }
    let mut words = pairs.remainder().chunks_exact(8);
    for chunk in words.by_ref() {
        let marks = special_marks(word(chunk));
        if marks != 0 {
            return at + (marks.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    for &byte in words.remainder() {
        if byte < 0x20 || byte == b'"' || byte == b'\\' {
            return at;
        }
        at += 1;
    }
    at
}

/// Eight bytes (a chunk of exactly eight) as one word, the first byte lowest.
#[inline]
fn word(chunk: &[u8]) -> u64 {
    <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes)
}

/// The high bit of each byte of `word` set where that byte is `"`, `\` or below 0x20, or
/// comes after such a byte; the lowest one set marks the first. (A high bit set in a
/// byte of `(x - 1) & !x` marks a zero byte, and in `(x - 0x20) & !x` a byte below 0x20;
/// a borrow can mark a byte after a true mark too, never one before.)
#[inline]
fn special_marks(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (word.wrapping_sub(ONES * 0x20) & !word))
        & HIGHS
}

fn literal_end(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    let end = at + literal.len();
    (bytes.get(at..end)? == literal).then_some(end)
}

fn number_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut at = at + usize::from(bytes.get(at) == Some(&b'-'));
    at = match *bytes.get(at)? {
        // One leading zero, not followed by another digit.
        b'0' if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) => return None,
        b'0' => at + 1,
        b'1'..=b'9' => digits_end(bytes, at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let end = digits_end(bytes, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1 + usize::from(matches!(bytes.get(at + 1), Some(b'+' | b'-')));
        let end = digits_end(bytes, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

fn digits_end(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

fn blank_end(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests;
