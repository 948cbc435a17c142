//! Token usage, read from answers as they pass: a JSON answer's `usage`, or the last non-null
//! `usage` of an event stream, wherever the provider puts it (a chunk of its own with
//! `choices: []`, the chunk with `finish_reason`, a Responses API `response.completed` event).
//!
//! Nothing is held or copied but the `usage` value itself: [`JsonScan`] follows a JSON
//! document's structure as it arrives in pieces, and [`EventUsage`] finds the `data:` lines
//! of an event stream and feeds them to it. [`strip_event`] takes out of one event what an
//! injected `stream_options.include_usage` added, for a client that did not ask for it.

use crate::json_object::Object;
use serde::Deserialize;
use serde_json::Number;
use std::ops::Range;

/// Largest `usage` value read; a bigger one is malformed.
const MAX_USAGE_BYTES: usize = 4096;

/// Largest token count believed; more is malformed (it would put a key in endless debt).
const MAX_COUNT: u64 = 1 << 40;

/// The tokens an answer says it used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Input tokens served from the provider's prompt cache, when reported.
    pub cached: Option<u64>,
    /// Output tokens spent on reasoning, when reported.
    pub reasoning: Option<u64>,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }

    /// Reads a `usage` value: OpenAI's `prompt_tokens`/`completion_tokens`, the Responses
    /// API's `input_tokens`/`output_tokens`, `total_tokens` alone (embeddings, rerank), or a
    /// transcription billed by duration (no tokens). `None` for `null` and for a malformed
    /// value: a count that is not a non-negative integer, or no count at all.
    pub fn parse(raw: &[u8]) -> Option<Usage> {
        // Typed, so reading it allocates nothing; any field of the wrong type (a string, a
        // list) makes the whole value malformed, and a count must be a non-negative integer.
        let raw: RawUsage = serde_json::from_slice(raw).ok()?;
        let count = |n: Option<Number>| -> Result<Option<u64>, ()> {
            match n {
                None => Ok(None),
                Some(n) => n.as_u64().filter(|&n| n <= MAX_COUNT).map(Some).ok_or(()),
            }
        };
        let input = count(raw.prompt_tokens)
            .ok()?
            .or(count(raw.input_tokens).ok()?);
        let output = count(raw.completion_tokens)
            .ok()?
            .or(count(raw.output_tokens).ok()?);
        let total = count(raw.total_tokens).ok()?;
        let by_duration = raw.kind.as_deref() == Some("duration");
        let (input, output) = match (input, output, total) {
            (None, None, Some(total)) => (total, 0),
            (None, None, None) if by_duration => (0, 0),
            (None, None, None) => return None,
            (input, output, _) => (input.unwrap_or(0), output.unwrap_or(0)),
        };
        let cached = raw.prompt_tokens_details.or(raw.input_tokens_details);
        let reasoning = raw.completion_tokens_details.or(raw.output_tokens_details);
        Some(Usage {
            input,
            output,
            cached: count(cached.and_then(|d| d.cached_tokens)).ok()?,
            reasoning: count(reasoning.and_then(|d| d.reasoning_tokens)).ok()?,
        })
    }
}

/// The `usage` fields read; others are ignored.
#[derive(Deserialize)]
struct RawUsage<'a> {
    prompt_tokens: Option<Number>,
    completion_tokens: Option<Number>,
    input_tokens: Option<Number>,
    output_tokens: Option<Number>,
    total_tokens: Option<Number>,
    prompt_tokens_details: Option<Details>,
    input_tokens_details: Option<Details>,
    completion_tokens_details: Option<Details>,
    output_tokens_details: Option<Details>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<Number>,
    reasoning_tokens: Option<Number>,
}

/// Where a document's top-level `usage` member sits, as offsets into what was fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// From the member name's opening quote to the end of its value.
    pub span: Range<usize>,
    pub value: Range<usize>,
    /// The comma before it, unless it is the first member.
    pub comma_before: Option<usize>,
    /// The comma after it, unless it is the last member.
    pub comma_after: Option<usize>,
}

/// A member name that matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Usage,
    Response,
    Other,
}

/// The member name being read: its first bytes, enough to tell `usage` and `response`.
#[derive(Debug, Clone, Copy, Default)]
struct NameBytes {
    bytes: [u8; 8],
    len: usize,
    /// Longer than any name that matters.
    long: bool,
}

impl NameBytes {
    fn push(&mut self, run: &[u8]) {
        let room = self.bytes.len() - self.len;
        if run.len() > room {
            self.long = true;
            return;
        }
        self.bytes[self.len..self.len + run.len()].copy_from_slice(run);
        self.len += run.len();
    }

    fn name(&self) -> Name {
        match (&self.bytes[..self.len], self.long) {
            (b"usage", false) => Name::Usage,
            (b"response", false) => Name::Response,
            _ => Name::Other,
        }
    }
}

/// A `usage` value being read: where it is, and whether it is the top-level member.
#[derive(Debug, Clone, Copy)]
struct Capture {
    /// Depth of the object that holds the member.
    depth: usize,
    top_level: bool,
    /// Offset of the value's first byte, once seen.
    start: Option<usize>,
}

/// A JSON document followed as it arrives in pieces, for its `usage` member: at the top
/// level, or inside a top-level `response` object (the Responses API's events). Strings
/// are skipped a run at a time; everything else costs one branch per byte.
#[derive(Debug, Default)]
pub struct JsonScan {
    /// Offset of the next byte.
    at: usize,
    depth: usize,
    /// Bit `d` set: the container at depth `d + 1` is an object (the first 64 levels).
    objects: u64,
    in_string: bool,
    escaped: bool,
    /// In an object, before a member name.
    expect_name: bool,
    /// A member name being read at a depth that matters.
    name: Option<NameBytes>,
    /// The last member name read, at depth 1 and 2, until its value starts.
    named: [Option<Name>; 2],
    /// The depth-1 member whose value is open (`response` matters).
    outer: Option<Name>,
    /// At depth 1: where the current member's name starts, the comma before it, and the
    /// last comma seen.
    member_start: usize,
    comma_before: Option<usize>,
    last_comma: Option<usize>,
    /// End of the last byte outside strings that was not whitespace (a scalar's end).
    significant_end: usize,
    capture: Option<Capture>,
    /// The capture ended: (value end, the comma that ended it at depth 1).
    ended: Option<(usize, Option<usize>)>,
    /// The `usage` value's bytes (when copying).
    copying: bool,
    value: Vec<u8>,
    found: bool,
    too_long: bool,
    member: Option<Member>,
}

impl JsonScan {
    /// A scan that keeps the `usage` value's bytes, to read it across pieces.
    pub fn copying() -> Self {
        JsonScan {
            copying: true,
            ..JsonScan::default()
        }
    }

    /// Follows `bytes`, the next piece of the document.
    pub fn feed(&mut self, bytes: &[u8]) {
        // Where the `usage` value's bytes start in this piece, once it has started: they
        // are copied in one go when it ends, or at the end of the piece.
        let mut copy_from = self.capture.is_some_and(|c| c.start.is_some()).then_some(0);
        let mut i = 0;
        while i < bytes.len() {
            let from = i;
            if self.in_string {
                i = self.string_run(bytes, i);
            } else {
                let byte = bytes[i];
                // Outside a `usage` value, scalars and string values change only offsets.
                let watching = self.capture.is_some() || self.expect_name;
                match SKIMMED[usize::from(byte)] {
                    Skimmed::Blank => self.at += 1,
                    Skimmed::Scalar if self.capture.is_none() => {
                        self.at += 1;
                        self.significant_end = self.at;
                    }
                    Skimmed::Quote if !watching => {
                        self.at += 1;
                        self.significant_end = self.at;
                        self.in_string = true;
                    }
                    _ => self.byte(byte),
                }
                i += 1;
            }
            let Some(capture) = self.capture else {
                continue;
            };
            if copy_from.is_none() && capture.start.is_some() {
                copy_from = Some(from);
            }
            if let Some((end, comma)) = self.ended.take() {
                if self.copying {
                    self.keep(&bytes[copy_from.unwrap_or(from)..i]);
                }
                copy_from = None;
                self.finish_capture(end, comma);
            }
        }
        if let (Some(from), true) = (copy_from, self.copying) {
            self.keep(&bytes[from..]);
        }
    }

    /// The `usage` value read: `None` when there is none, it is `null`, or malformed.
    pub fn usage(&self) -> Option<Usage> {
        (self.found && !self.too_long)
            .then(|| Usage::parse(&self.value))
            .flatten()
    }

    /// The top-level `usage` member, once its value has ended.
    pub fn member(&self) -> Option<&Member> {
        self.member.as_ref()
    }

    /// String bytes from `from` up to and including the closing quote, as one run.
    fn string_run(&mut self, bytes: &[u8], from: usize) -> usize {
        let mut i = from;
        if self.escaped {
            self.escaped = false;
            i += 1;
        }
        let quote = loop {
            match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                None => break None,
                Some(offset) if bytes[i + offset] == b'\\' => {
                    if i + offset + 1 >= bytes.len() {
                        self.escaped = true;
                        break None;
                    }
                    i += offset + 2;
                }
                Some(offset) => break Some(i + offset),
            }
        };
        let end = quote.map_or(bytes.len(), |q| q + 1);
        if let Some(name) = &mut self.name {
            name.push(&bytes[from..quote.unwrap_or(bytes.len())]);
        }
        self.at += end - from;
        if quote.is_some() {
            self.in_string = false;
            self.significant_end = self.at;
            if let Some(name) = self.name.take() {
                if (1..=2).contains(&self.depth) {
                    self.named[self.depth - 1] = Some(name.name());
                }
            }
            if self
                .capture
                .is_some_and(|c| c.depth == self.depth && c.start.is_some())
            {
                // A string value ends at its closing quote.
                self.ended = Some((self.at, None));
            }
        }
        end
    }

    /// One byte outside strings.
    fn byte(&mut self, byte: u8) {
        let at = self.at;
        self.at += 1;
        if byte.is_ascii_whitespace() {
            return;
        }
        if let Some(capture) = &mut self.capture {
            if capture.start.is_none() && !matches!(byte, b',' | b'}' | b']') {
                capture.start = Some(at);
            }
        }
        let capture_here = self.capture.is_some_and(|c| c.depth == self.depth);
        match byte {
            b'"' => {
                self.in_string = true;
                if self.expect_name {
                    self.expect_name = false;
                    if self.depth == 1 {
                        self.member_start = at;
                        self.comma_before = self.last_comma;
                    }
                    let watched =
                        self.depth == 1 || (self.depth == 2 && self.outer == Some(Name::Response));
                    self.name = watched.then(NameBytes::default);
                }
            }
            b':' => self.value_follows(),
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth <= 64 {
                    let bit = 1u64 << (self.depth - 1);
                    if byte == b'{' {
                        self.objects |= bit;
                    } else {
                        self.objects &= !bit;
                    }
                }
                self.expect_name = byte == b'{';
                if self.depth == 1 {
                    self.last_comma = None;
                }
            }
            b'}' | b']' => {
                if capture_here {
                    // A scalar value ends where its object does.
                    self.ended = Some((self.significant_end, None));
                }
                self.depth = self.depth.saturating_sub(1);
                self.expect_name = false;
                if self.capture.is_some_and(|c| c.depth == self.depth) && self.ended.is_none() {
                    // The closing bracket of an object or array value.
                    self.ended = Some((self.at, None));
                }
            }
            b',' => {
                if self.depth == 1 {
                    self.last_comma = Some(at);
                    self.outer = None;
                    if let Some(member) = &mut self.member {
                        member.comma_after.get_or_insert(at);
                    }
                }
                if capture_here {
                    let comma = (self.depth == 1).then_some(at);
                    self.ended = Some((self.significant_end, comma));
                }
                self.expect_name = self.is_object();
            }
            _ => {}
        }
        self.significant_end = self.at;
    }

    /// A `:` after a member name: the value that follows may be the one wanted.
    fn value_follows(&mut self) {
        if !(1..=2).contains(&self.depth) || !self.is_object() {
            return;
        }
        let Some(name) = self.named[self.depth - 1].take() else {
            return;
        };
        if self.depth == 1 {
            self.outer = Some(name);
        }
        let wanted = name == Name::Usage && (self.depth == 1 || self.outer == Some(Name::Response));
        if wanted && self.capture.is_none() {
            self.value.clear();
            if self.copying {
                // Room for a usual value at once (a chat answer's is ~70 bytes, with details
                // ~200), rather than growing from 8.
                self.value.reserve(256);
            }
            self.too_long = false;
            self.capture = Some(Capture {
                depth: self.depth,
                top_level: self.depth == 1,
                start: None,
            });
        }
    }

    fn is_object(&self) -> bool {
        self.depth > 0 && self.depth <= 64 && self.objects & (1 << (self.depth - 1)) != 0
    }

    fn finish_capture(&mut self, end: usize, comma_after: Option<usize>) {
        let Some(capture) = self.capture.take() else {
            return;
        };
        let start = capture.start.unwrap_or(end);
        self.value.truncate(end.saturating_sub(start));
        self.found = true;
        if capture.top_level {
            self.member = Some(Member {
                span: self.member_start..end,
                value: start..end,
                comma_before: self.comma_before,
                comma_after,
            });
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.value.len() + bytes.len() > MAX_USAGE_BYTES {
            self.too_long = true;
            return;
        }
        self.value.extend_from_slice(bytes);
    }
}

/// What a byte outside strings is, for [`JsonScan::feed`].
#[derive(Clone, Copy)]
enum Skimmed {
    /// Whitespace: moves the offset only.
    Blank,
    /// Part of a number, `true`, `false` or `null` (or a stray byte): ends a scalar.
    Scalar,
    /// Opens a string.
    Quote,
    /// A bracket, colon or comma.
    Structure,
}

/// [`Skimmed`] for every byte.
static SKIMMED: [Skimmed; 256] = {
    let mut table = [Skimmed::Scalar; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = match byte as u8 {
            b if b.is_ascii_whitespace() => Skimmed::Blank,
            b'"' => Skimmed::Quote,
            b'{' | b'[' | b'}' | b']' | b':' | b',' => Skimmed::Structure,
            _ => Skimmed::Scalar,
        };
        byte += 1;
    }
    table
};

/// Where a line of an event stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Start,
    /// Reading a field name: bytes of `data` matched so far.
    Field(usize),
    /// After `data:`, before its optional space.
    DataStart,
    Data,
    /// Another field, or a comment.
    Skip,
}

/// The last non-null `usage` of an event stream, read as the stream passes.
#[derive(Debug)]
pub struct EventUsage {
    line: Line,
    after_cr: bool,
    data_lines: usize,
    json: JsonScan,
    last: Option<Usage>,
}

impl Default for EventUsage {
    fn default() -> Self {
        EventUsage {
            line: Line::Start,
            after_cr: false,
            data_lines: 0,
            json: JsonScan::copying(),
            last: None,
        }
    }
}

impl EventUsage {
    /// Follows the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                i += 1;
                continue;
            }
            if byte == b'\n' || byte == b'\r' {
                self.after_cr = byte == b'\r';
                self.line_end();
                i += 1;
                continue;
            }
            match self.line {
                Line::Start if byte == b'd' => self.line = Line::Field(1),
                Line::Start => self.line = Line::Skip,
                Line::Field(4) if byte == b':' => self.line = Line::DataStart,
                Line::Field(n) if n < 4 && byte == b"data"[n] => self.line = Line::Field(n + 1),
                Line::Field(_) => self.line = Line::Skip,
                Line::DataStart | Line::Data => {
                    if self.line == Line::DataStart {
                        if self.data_lines > 0 {
                            // Lines of one event's data are joined by a line feed.
                            self.json.feed(b"\n");
                        }
                        self.line = Line::Data;
                        if byte == b' ' {
                            i += 1;
                            continue;
                        }
                    }
                    let end =
                        memchr::memchr2(b'\n', b'\r', &bytes[i..]).map_or(bytes.len(), |e| i + e);
                    self.json.feed(&bytes[i..end]);
                    i = end;
                    continue;
                }
                Line::Skip => {}
            }
            i += 1;
        }
    }

    /// The last usage read, once the stream has ended.
    pub fn last(&self) -> Option<Usage> {
        self.last
    }

    fn line_end(&mut self) {
        match self.line {
            Line::Start => self.event_end(),
            Line::DataStart | Line::Data => self.data_lines += 1,
            _ => {}
        }
        self.line = Line::Start;
    }

    fn event_end(&mut self) {
        if self.data_lines == 0 {
            return;
        }
        if let Some(usage) = self.json.usage() {
            self.last = Some(usage);
        }
        self.json = JsonScan::copying();
        self.data_lines = 0;
    }
}

/// What to send of one event of a stream whose usage the client did not ask for.
#[derive(Debug, PartialEq, Eq)]
pub enum Stripped {
    /// The event as it came.
    Unchanged,
    /// The event without its `usage` member.
    Edited(Vec<u8>),
    /// Nothing: the usage-only chunk (`choices: []`).
    Dropped,
}

/// Takes the top-level `usage` member out of an event whose one `data:` line is a JSON
/// object, and drops the event when what is left has no choices. Anything else (comments,
/// `[DONE]`, data over several lines) passes unchanged.
pub fn strip_event(event: &[u8]) -> Stripped {
    let mut data = None;
    let mut at = 0;
    for line in event.split_inclusive(|&b| b == b'\n') {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if let Some(rest) = text.strip_prefix(b"data:") {
            if data.is_some() {
                return Stripped::Unchanged;
            }
            let skip = usize::from(rest.first() == Some(&b' '));
            let start = at + 5 + skip;
            data = Some(start..at + text.len());
        }
        at += line.len();
    }
    let Some(data) = data else {
        return Stripped::Unchanged;
    };
    let json = &event[data.clone()];
    let mut scan = JsonScan::default();
    scan.feed(json);
    let Some(member) = scan.member() else {
        return Stripped::Unchanged;
    };
    let removed = match (member.comma_before, member.comma_after) {
        (Some(before), _) => before..member.span.end,
        (None, Some(after)) => member.span.start..after + 1,
        (None, None) => member.span.clone(),
    };
    let mut edited = Vec::with_capacity(json.len());
    edited.extend_from_slice(&json[..removed.start]);
    edited.extend_from_slice(&json[removed.end..]);
    if &json[member.value.clone()] != b"null" && has_no_choices(&edited) {
        return Stripped::Dropped;
    }
    let mut out = Vec::with_capacity(event.len());
    out.extend_from_slice(&event[..data.start]);
    out.extend_from_slice(&edited);
    out.extend_from_slice(&event[data.end..]);
    Stripped::Edited(out)
}

/// Whether a chunk's `choices` is empty or absent: it carried nothing but usage.
fn has_no_choices(chunk: &[u8]) -> bool {
    let Ok(object) = serde_json::from_slice::<Object>(chunk) else {
        return false;
    };
    match object.get("choices") {
        None => true,
        Some(raw) => serde_json::from_str::<Vec<serde::de::IgnoredAny>>(raw.get())
            .is_ok_and(|list| list.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(json: &[u8], piece: usize) -> JsonScan {
        let mut scan = JsonScan::copying();
        for chunk in json.chunks(piece) {
            scan.feed(chunk);
        }
        scan
    }

    #[test]
    fn each_usage_shape_is_read() {
        let chat = br#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":20}}"#;
        assert_eq!(
            Usage::parse(chat),
            Some(Usage {
                input: 12,
                output: 30,
                cached: Some(8),
                reasoning: Some(20)
            })
        );
        let responses = br#"{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":3}}"#;
        assert_eq!(
            Usage::parse(responses).map(|u| (u.input, u.output, u.reasoning)),
            Some((5, 7, Some(3)))
        );
        let embeddings = br#"{"prompt_tokens":9,"total_tokens":9}"#;
        assert_eq!(Usage::parse(embeddings).map(|u| u.total()), Some(9));
        let rerank = br#"{"total_tokens":11}"#;
        assert_eq!(Usage::parse(rerank).map(|u| u.input), Some(11));
        let duration = br#"{"type":"duration","seconds":3}"#;
        assert_eq!(Usage::parse(duration).map(|u| u.total()), Some(0));
    }

    #[test]
    fn malformed_usage_is_missing_never_negative() {
        for raw in [
            &b"null"[..],
            br#"{"prompt_tokens":-3,"completion_tokens":4}"#,
            br#"{"prompt_tokens":"3"}"#,
            br#"{"prompt_tokens":1.5}"#,
            br#"{"prompt_tokens":99999999999999999999}"#,
            br#"{}"#,
            br#"[1,2]"#,
            br#"{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}"#,
        ] {
            assert_eq!(Usage::parse(raw), None, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn the_top_level_usage_is_found_whatever_the_pieces() {
        let json = br#"{"id":"x","choices":[{"delta":{"content":"say \"usage\": {}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"z":[1,{"usage":9}]}"#;
        for piece in [1, 2, 3, 7, json.len()] {
            let scan = scan_in_pieces(json, piece);
            assert_eq!(
                scan.usage().map(|u| (u.input, u.output)),
                Some((3, 4)),
                "pieces of {piece}"
            );
            let member = scan.member().expect("member");
            assert_eq!(
                &json[member.span.clone()],
                br#""usage":{"prompt_tokens":3,"completion_tokens":4}"#
            );
            assert_eq!(member.comma_after, Some(member.span.end));
        }
    }

    #[test]
    fn every_split_reads_what_the_whole_document_reads() {
        let documents: [&[u8]; 4] = [
            br#"{"id":"x", "choices":[{"delta":{"content":"a \"usage\": {[}"}}] ,"usage" : {"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":1,"x":["]}\"",{"a":[[]]}]}} ,"z":[1,{"usage":9}]}"#,
            br#"{"type":"response.completed","response":{"id":"r","output":[{"t":"}]"}],"usage":{"input_tokens":2,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":1}}},"n":1}"#,
            br#"{ "usage" : null , "choices" : [ ] }"#,
            br#"{"a":[true,false,null,-1.5e3,"s"],"usage":{"total_tokens":11}}"#,
        ];
        for json in documents {
            let whole = scan_in_pieces(json, json.len());
            let expected = (whole.usage(), whole.member().cloned(), whole.found);
            assert!(whole.found, "{}", String::from_utf8_lossy(json));
            for piece in 1..json.len() {
                let scan = scan_in_pieces(json, piece);
                assert_eq!(
                    (scan.usage(), scan.member().cloned(), scan.found),
                    expected,
                    "pieces of {piece}"
                );
            }
            for at in 1..json.len() {
                let mut scan = JsonScan::copying();
                scan.feed(&json[..at]);
                scan.feed(&json[at..]);
                assert_eq!(
                    (scan.usage(), scan.member().cloned(), scan.found),
                    expected,
                    "split at {at}"
                );
            }
        }
        let first = scan_in_pieces(documents[0], 5);
        assert_eq!(
            first.usage(),
            Some(Usage {
                input: 3,
                output: 4,
                cached: Some(1),
                reasoning: None
            })
        );
        assert_eq!(
            scan_in_pieces(documents[1], 3).usage().map(|u| u.reasoning),
            Some(Some(1))
        );
        assert_eq!(
            scan_in_pieces(documents[3], 2).usage().map(|u| u.total()),
            Some(11)
        );
    }

    #[test]
    fn nested_usage_counts_only_inside_response() {
        let completed = br#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":2,"output_tokens":5}}}"#;
        assert_eq!(
            scan_in_pieces(completed, 4).usage().map(|u| u.output),
            Some(5)
        );
        let elsewhere = br#"{"type":"x","item":{"usage":{"input_tokens":2,"output_tokens":5}}}"#;
        assert_eq!(scan_in_pieces(elsewhere, 4).usage(), None);
        let null = br#"{"usage":null,"choices":[]}"#;
        let scan = scan_in_pieces(null, 3);
        assert_eq!(scan.usage(), None);
        assert_eq!(scan.member().map(|m| m.value.clone()), Some(9..13));
    }

    #[test]
    fn an_event_stream_gives_its_last_usage_in_any_framing() {
        let shapes: [&[u8]; 4] = [
            // A usage-only chunk after the one with finish_reason.
            b"data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n",
            // Usage on the chunk with finish_reason, CRLF lines.
            b"data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\ndata: [DONE]\r\n\r\n",
            // Named events, data split over two lines.
            b"event: response.completed\ndata: {\"type\":\"response.completed\",\ndata: \"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}}\n\n",
            // A comment, no space after the colon.
            b": keep-alive\n\ndata:{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
        ];
        for stream in shapes {
            for piece in [1, 5, stream.len()] {
                let mut events = EventUsage::default();
                for chunk in stream.chunks(piece) {
                    events.feed(chunk);
                }
                assert_eq!(
                    events.last().map(|u| (u.input, u.output)),
                    Some((3, 4)),
                    "{} in pieces of {piece}",
                    String::from_utf8_lossy(stream)
                );
            }
        }
    }

    #[test]
    fn stripping_gives_the_chunk_the_client_would_have_seen() {
        assert_eq!(
            strip_event(b"data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n"),
            Stripped::Edited(b"data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}]}\n\n".to_vec())
        );
        assert_eq!(
            strip_event(b"data: {\"usage\":null,\"id\":\"a\"}\n\n"),
            Stripped::Edited(b"data: {\"id\":\"a\"}\n\n".to_vec())
        );
        assert_eq!(
            strip_event(b"data: {\"id\":\"a\",\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n"),
            Stripped::Dropped
        );
        assert_eq!(
            strip_event(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1}}\n\n"),
            Stripped::Edited(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n".to_vec())
        );
        assert_eq!(strip_event(b"data: [DONE]\n\n"), Stripped::Unchanged);
        assert_eq!(
            strip_event(b"data: {\"id\":\"a\"}\n\n"),
            Stripped::Unchanged
        );
    }
}
