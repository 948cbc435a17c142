//! [`JsonScan`]: follows a JSON document's structure as it arrives in pieces and keeps
//! only its top-level `usage` member (and, for the Responses API, the one inside
//! `response`).

use super::{Usage, MAX_USAGE_BYTES};
use std::ops::Range;

pub(super) mod skim;

use skim::{quote_or_backslash, Skimmed, SKIMMED};

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

/// The offset after a string that opens at `bytes[at]` (a quote) when it ends in `bytes`
/// with no escape in it: the usual string, passed over in one step.
fn plain_string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at + 1..)?;
    let end = quote_or_backslash(rest)?;
    (rest[end] == b'"').then_some(at + end + 2)
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
    pub(super) found: bool,
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
            if !self.in_string {
                if let Some(shallowest) = self.deep() {
                    let next = self.skim_deep(bytes, i, shallowest);
                    if next > i {
                        i = next;
                        continue;
                    }
                }
            }
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
                        if let Some(after) = self.open_string(bytes, i) {
                            i = after;
                            continue;
                        }
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
            match quote_or_backslash(&bytes[i..]) {
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

    /// Inside a value where nothing can matter (deeper than any name that matters, or
    /// inside the `usage` value being read), the shallowest depth at which that holds.
    fn deep(&self) -> Option<usize> {
        let shallowest = match self.capture {
            None if self.outer == Some(Name::Response) => 3,
            None => 2,
            Some(Capture {
                start: Some(_),
                depth,
                ..
            }) => depth + 1,
            Some(_) => return None,
        };
        (self.depth >= shallowest).then_some(shallowest)
    }

    /// A string value opens at `bytes[i]`: with no escape and whole in this piece it is
    /// passed in one step and the index after it returned; else it is entered (its bytes
    /// from `i + 1` on are [`JsonScan::string_run`]'s) and `None` returned.
    fn open_string(&mut self, bytes: &[u8], i: usize) -> Option<usize> {
        let after = plain_string_end(bytes, i);
        self.at += after.map_or(1, |after| after - i);
        self.significant_end = self.at;
        self.in_string = after.is_none();
        after
    }

    /// What [`JsonScan::byte`] and [`JsonScan::string_run`] do from `bytes[i]` on while the
    /// scan stays at `shallowest` or deeper, without the checks that cannot apply there:
    /// only depth, strings and offsets move. Stops at the end of the piece or of the deep
    /// value (a `usage` value's closing bracket is left to `byte`, which ends the capture).
    fn skim_deep(&mut self, bytes: &[u8], mut i: usize, shallowest: usize) -> usize {
        while i < bytes.len() {
            let byte = bytes[i];
            match SKIMMED[usize::from(byte)] {
                Skimmed::Blank => {
                    self.at += 1;
                    i += 1;
                    continue;
                }
                Skimmed::Scalar => {}
                Skimmed::Quote => {
                    self.expect_name = false;
                    if let Some(after) = self.open_string(bytes, i) {
                        i = after;
                        continue;
                    }
                    i = self.string_run(bytes, i + 1);
                    if self.in_string {
                        return i;
                    }
                    continue;
                }
                Skimmed::Structure => match byte {
                    b'{' | b'[' => self.open(byte),
                    b'}' | b']' => {
                        if self.depth - 1 < shallowest && self.capture.is_some() {
                            return i;
                        }
                        self.depth -= 1;
                        self.expect_name = false;
                    }
                    b',' => self.expect_name = self.is_object(),
                    _ => self.value_follows(),
                },
            }
            self.at += 1;
            self.significant_end = self.at;
            i += 1;
            if self.depth < shallowest {
                break;
            }
        }
        i
    }

    /// A `{` or `[`: one level deeper.
    fn open(&mut self, byte: u8) {
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
            b'{' | b'[' => self.open(byte),
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
