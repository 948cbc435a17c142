//! Server-sent events as the gateway reads them, the one reader behind every stream edit
//! (usage stripping, stored-response ID rewriting) and usage reading.
//!
//! The rules are the WHATWG event-stream ones: a line ends with CRLF, LF or CR (a stream may
//! mix them), an empty line ends an event, and a `data:` field's value starts after one
//! optional space. Bytes are scanned once as they arrive, whatever the pieces they come in
//! (a CR at the end of one piece and an LF at the start of the next are one line end), so
//! finding event ends costs time linear in the bytes read. [`EventReader`] holds at most
//! [`MAX_EVENT_BYTES`] of one unfinished event: past it the caller is handed what it holds
//! and stops reading events.

use std::ops::Range;

/// Most bytes of one unfinished event an [`EventReader`] holds.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Finds line ends in a stream that arrives in pieces.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lines {
    /// The previous piece ended with a CR: an LF first in this one belongs to it.
    after_cr: bool,
}

/// What the next scan of a piece found, from a given position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line ends: its text (of this piece) is `start..text_end`, the next line starts
    /// at `next`.
    Ended {
        start: usize,
        text_end: usize,
        next: usize,
    },
    /// No line end: `start..` is text of a line the next piece continues.
    Open { start: usize },
}

impl Lines {
    /// The next line end in `piece` from `at` (where a previous call left off, or 0).
    pub fn next(&mut self, piece: &[u8], at: usize) -> Line {
        let mut start = at;
        if self.after_cr && start < piece.len() {
            self.after_cr = false;
            if piece[start] == b'\n' {
                start += 1;
            }
        }
        let Some(found) = memchr::memchr2(b'\n', b'\r', &piece[start..]) else {
            return Line::Open { start };
        };
        let text_end = start + found;
        let mut next = text_end + 1;
        if piece[text_end] == b'\r' {
            match piece.get(next) {
                Some(b'\n') => next += 1,
                Some(_) => {}
                None => self.after_cr = true,
            }
        }
        Line::Ended {
            start,
            text_end,
            next,
        }
    }
}

/// The text of each line of `bytes` (a whole event, or any complete run of lines), as
/// ranges of `bytes` without their line ends; a last line without an end is included.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut splitter = Lines::default();
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        match splitter.next(bytes, at) {
            Line::Ended {
                start,
                text_end,
                next,
            } => {
                at = next;
                Some(start..text_end)
            }
            Line::Open { start } => {
                at = bytes.len();
                Some(start..bytes.len())
            }
        }
    })
}

/// The value of each `data:` field of `event`, in order, as ranges of `event` (the one
/// optional space after the colon left out).
pub fn data_values(event: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    lines(event).filter_map(|line| {
        let text = &event[line.clone()];
        let value = text.strip_prefix(b"data:")?;
        let skip = usize::from(value.first() == Some(&b' '));
        Some(line.start + 5 + skip..line.end)
    })
}

/// Whole events of a stream, cut out of it as its pieces arrive.
#[derive(Debug)]
pub struct EventReader {
    lines: Lines,
    /// The line being read has had no text yet.
    line_empty: bool,
    /// Bytes of an event not yet whole.
    pending: Vec<u8>,
}

impl Default for EventReader {
    fn default() -> Self {
        EventReader {
            lines: Lines::default(),
            line_empty: true,
            pending: Vec::new(),
        }
    }
}

/// An unfinished event grew past [`MAX_EVENT_BYTES`]: the bytes it held, from the event's
/// start to the end of the piece read. The reader is left empty; the stream's events are
/// no longer cut out.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong(pub Vec<u8>);

impl EventReader {
    /// Reads the next piece of the stream: `each` gets, in order, every event it completes,
    /// whole (its empty line included). Bytes of an unfinished event are kept for the next
    /// piece, at most [`MAX_EVENT_BYTES`] of them.
    pub fn feed(&mut self, piece: &[u8], mut each: impl FnMut(&[u8])) -> Result<(), TooLong> {
        let mut at = 0;
        // Where the event being read starts in this piece (earlier bytes are pending).
        let mut event_start = 0;
        loop {
            match self.lines.next(piece, at) {
                Line::Ended {
                    start,
                    text_end,
                    next,
                } => {
                    let empty = self.line_empty && start == text_end;
                    self.line_empty = true;
                    at = next;
                    if empty {
                        let event = &piece[event_start..next];
                        if self.pending.is_empty() {
                            each(event);
                        } else {
                            self.pending.extend_from_slice(event);
                            each(&self.pending);
                            self.release();
                        }
                        event_start = next;
                    }
                }
                Line::Open { start } => {
                    if start < piece.len() {
                        self.line_empty = false;
                    }
                    break;
                }
            }
        }
        let rest = &piece[event_start..];
        if self.pending.len() + rest.len() > MAX_EVENT_BYTES {
            let mut held = std::mem::take(&mut self.pending);
            held.extend_from_slice(rest);
            *self = EventReader::default();
            return Err(TooLong(held));
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }

    /// Whether bytes of an unfinished event are held.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The bytes of the unfinished event, taken out (the stream ended inside it).
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// Empties the buffer after an event; one grown large is let go rather than kept for
    /// the rest of a stream that may last minutes.
    fn release(&mut self) {
        if self.pending.capacity() > 64 << 10 {
            self.pending = Vec::new();
        } else {
            self.pending.clear();
        }
    }
}

/// The last bytes relayed of a stream, to tell whether it stopped between events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTail([u8; 3]);

impl Default for EventTail {
    /// Nothing relayed yet counts as between events.
    fn default() -> Self {
        EventTail(*b"\n\n\n")
    }
}

impl EventTail {
    pub fn remember(&mut self, bytes: &[u8]) {
        for &byte in bytes.iter().rev().take(3).rev() {
            self.0 = [self.0[1], self.0[2], byte];
        }
    }

    /// Whether the last line relayed was empty, which ends an event: a line end (CRLF, LF
    /// or CR) right after another.
    pub fn at_event_end(&self) -> bool {
        let before_last_end = match self.0 {
            [_, b'\r', b'\n'] => &self.0[..1],
            [_, _, b'\n' | b'\r'] => &self.0[..2],
            _ => return false,
        };
        matches!(before_last_end.last(), Some(b'\n' | b'\r'))
    }
}

#[cfg(test)]
mod tests;
