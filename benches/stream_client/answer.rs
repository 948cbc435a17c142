//! Reading one streamed answer as it arrives: the HTTP/1.1 head (httparse), the chunked
//! body (httparse's chunk-size reader, the framing around it here) and the SSE events in
//! it. Plain functions over bytes, so `tests/stream_client.rs` checks them with any split
//! of the input; the socket side is `main.rs`.

use httparse::Status;

/// Why a stream did not count as a complete answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The answer's status was not 200.
    Status(u16),
    /// The bytes are not a chunked HTTP/1.1 answer; what was wrong.
    Framing(&'static str),
    /// The server closed the connection before the answer's end.
    Closed,
    /// The answer ended without a `data: [DONE]` event.
    NoDone,
    /// The answer did not end within the bound.
    Timeout,
    /// A socket error.
    Io(std::io::ErrorKind),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(code) => write!(f, "status {code}"),
            Failure::Framing(what) => write!(f, "framing: {what}"),
            Failure::Closed => write!(f, "closed before the answer's end"),
            Failure::NoDone => write!(f, "ended without data: [DONE]"),
            Failure::Timeout => write!(f, "did not end within the bound"),
            Failure::Io(kind) => write!(f, "socket error: {kind}"),
        }
    }
}

/// What an answer's head says: `Some(length)` of the head when it is complete and a 200 with
/// a chunked body; `None` when more bytes are needed.
pub fn read_head(buf: &[u8]) -> Result<Option<usize>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buf) {
        Ok(Status::Complete(length)) => length,
        Ok(Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure::Framing("not an HTTP/1.1 answer head")),
    };
    match response.code {
        Some(200) => {}
        Some(code) => return Err(Failure::Status(code)),
        None => return Err(Failure::Framing("no status")),
    }
    let chunked = response.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding") && h.value.eq_ignore_ascii_case(b"chunked")
    });
    if !chunked {
        return Err(Failure::Framing("the answer is not chunked"));
    }
    Ok(Some(length))
}

/// Where the chunked body's reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk's data, with this many bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last (empty) chunk: the trailer section.
    Trailer,
    /// The body is over.
    Done,
}

/// A chunked body read piece by piece, its data fed to an [`Events`] reader.
#[derive(Debug)]
pub struct ChunkedBody {
    at: Chunk,
}

impl ChunkedBody {
    pub fn new() -> Self {
        ChunkedBody { at: Chunk::Size }
    }

    pub fn is_done(&self) -> bool {
        self.at == Chunk::Done
    }

    /// Reads what it can of `buf`, feeding chunk data to `events`; returns how many bytes
    /// it used (the rest waits for more bytes).
    pub fn read(
        &mut self,
        buf: &[u8],
        events: &mut Events,
        on_event: &mut impl FnMut(bool),
    ) -> Result<usize, Failure> {
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            match self.at {
                Chunk::Size => match httparse::parse_chunk_size(rest) {
                    Ok(Status::Complete((used, 0))) => {
                        at += used;
                        self.at = Chunk::Trailer;
                    }
                    Ok(Status::Complete((used, size))) => {
                        at += used;
                        self.at = Chunk::Data(size);
                    }
                    Ok(Status::Partial) => return Ok(at),
                    Err(_) => return Err(Failure::Framing("bad chunk-size line")),
                },
                Chunk::Data(left) => {
                    let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    if take == 0 {
                        return Ok(at);
                    }
                    events.feed(&rest[..take], on_event);
                    at += take;
                    let left = left - take as u64;
                    self.at = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                }
                Chunk::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        at += 2;
                        self.at = Chunk::Size;
                    }
                    [] | [b'\r'] => return Ok(at),
                    _ => return Err(Failure::Framing("no CRLF after a chunk's data")),
                },
                Chunk::Trailer => {
                    if rest.starts_with(b"\r\n") {
                        at += 2;
                        self.at = Chunk::Done;
                        continue;
                    }
                    let mut fields = [httparse::EMPTY_HEADER; 8];
                    match httparse::parse_headers(rest, &mut fields) {
                        Ok(Status::Complete((used, _))) => {
                            at += used;
                            self.at = Chunk::Done;
                        }
                        Ok(Status::Partial) => return Ok(at),
                        Err(_) => return Err(Failure::Framing("bad trailer section")),
                    }
                }
                Chunk::Done => return Ok(at),
            }
        }
    }
}

impl Default for ChunkedBody {
    fn default() -> Self {
        Self::new()
    }
}

/// The longest start of a line kept: enough to tell `data: [DONE]` from other lines.
const KEPT_LINE_BYTES: usize = 16;

/// Server-sent events read from a byte stream split anywhere: lines end with `\n`, `\r\n`
/// or `\r`; a blank line ends an event, which counts when it had a `data` field.
#[derive(Debug, Default)]
pub struct Events {
    /// The start of the current line.
    line: Vec<u8>,
    /// The current line is longer than `line` holds.
    long: bool,
    /// The last byte fed was a CR: a LF that comes next ends no other line.
    after_cr: bool,
    /// The current event has a `data` field.
    has_data: bool,
    /// The current event's data is `[DONE]`.
    done: bool,
}

impl Events {
    /// Reads `bytes`; calls `on_event(is_done)` for each event they end, `is_done` when its
    /// data is `[DONE]`.
    pub fn feed(&mut self, mut bytes: &[u8], on_event: &mut impl FnMut(bool)) {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = memchr::memchr2(b'\r', b'\n', bytes) {
            self.keep(&bytes[..end]);
            self.end_line(on_event);
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.keep(bytes);
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = KEPT_LINE_BYTES - self.line.len();
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.long |= bytes.len() > room;
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(bool)) {
        let line = std::mem::take(&mut self.line);
        let long = std::mem::take(&mut self.long);
        if line.is_empty() && !long {
            if std::mem::take(&mut self.has_data) {
                on_event(std::mem::take(&mut self.done));
            }
            return;
        }
        // `data` alone is the field with an empty value.
        let value = match line.strip_prefix(b"data") {
            Some([]) if !long => Some(&b""[..]),
            Some([b':', value @ ..]) => Some(value.strip_prefix(b" ").unwrap_or(value)),
            _ => None,
        };
        if let Some(value) = value {
            // A second data line joins the first: `[DONE]` only when it is the whole data.
            self.done = !self.has_data && !long && value == b"[DONE]";
            self.has_data = true;
        }
        self.line = line;
        self.line.clear();
    }
}
