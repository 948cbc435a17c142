//! [`EventUsage`]: the `data:` lines of an event stream fed to a [`JsonScan`], the last
//! non-null `usage` kept; [`strip_event`]: what an injected
//! `stream_options.include_usage` added to an event, taken out again. Lines and events are
//! found by the gateway's one SSE reader (`http1/sse.rs`).

use super::{JsonScan, Usage};
use crate::http1::sse::{data_values, Line, Lines};
use crate::json_object::Object;

/// Where a line of an event stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Start,
    /// Reading a field name: bytes of `data` matched so far.
    Name(usize),
    /// After `data:`, before its optional space.
    DataStart,
    Data,
    /// Another field, or a comment.
    Skip,
}

/// The last non-null `usage` of an event stream, read as the stream passes.
#[derive(Debug)]
pub struct EventUsage {
    line: Field,
    lines: Lines,
    data_lines: usize,
    json: JsonScan,
    last: Option<Usage>,
}

impl Default for EventUsage {
    fn default() -> Self {
        EventUsage {
            line: Field::Start,
            lines: Lines::default(),
            data_lines: 0,
            json: JsonScan::copying(),
            last: None,
        }
    }
}

impl EventUsage {
    /// Follows the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut at = 0;
        loop {
            match self.lines.next(bytes, at) {
                Line::Ended {
                    start,
                    text_end,
                    next,
                } => {
                    self.text(&bytes[start..text_end]);
                    self.line_end();
                    at = next;
                }
                Line::Open { start } => {
                    self.text(&bytes[start..]);
                    return;
                }
            }
        }
    }

    /// Follows text of the current line (no line end in it).
    fn text(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            match self.line {
                Field::Start if byte == b'd' => self.line = Field::Name(1),
                Field::Start => self.line = Field::Skip,
                Field::Name(4) if byte == b':' => self.line = Field::DataStart,
                Field::Name(n) if n < 4 && byte == b"data"[n] => self.line = Field::Name(n + 1),
                Field::Name(_) => self.line = Field::Skip,
                Field::DataStart | Field::Data => {
                    if self.line == Field::DataStart {
                        if self.data_lines > 0 {
                            // Lines of one event's data are joined by a line feed.
                            self.json.feed(b"\n");
                        }
                        self.line = Field::Data;
                        if byte == b' ' {
                            i += 1;
                            continue;
                        }
                    }
                    self.json.feed(&bytes[i..]);
                    return;
                }
                Field::Skip => return,
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
            Field::Start => self.event_end(),
            Field::DataStart | Field::Data => self.data_lines += 1,
            _ => {}
        }
        self.line = Field::Start;
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
    let mut values = data_values(event);
    let data = values.next();
    if values.next().is_some() {
        return Stripped::Unchanged;
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
    let Ok(object) = Object::parse(chunk) else {
        return false;
    };
    match object.get("choices") {
        None => true,
        Some(raw) => serde_json::from_str::<Vec<serde::de::IgnoredAny>>(raw)
            .is_ok_and(|list| list.is_empty()),
    }
}
