//! [`EventUsage`]: the `data:` lines of an event stream fed to a [`JsonScan`], the last
//! non-null `usage` kept; [`strip_event`]: what an injected
//! `stream_options.include_usage` added to an event, taken out again.

use super::{JsonScan, Usage};
use crate::json_object::Object;

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
