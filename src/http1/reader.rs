//! The reading side of an HTTP/1 connection, either end: the bytes read and not yet used,
//! and a message body handed out chunk by chunk by its framing. Heads are parsed by the
//! owner (`http1/server.rs` for requests, `http1/client.rs` for responses) from
//! [`MessageReader::buffered`]; bodies are read here.
//!
//! A waiting connection holds no read buffer: a read goes through one scratch buffer per
//! thread and keeps exactly the bytes it got (benches/README.md, the idle streams).
//!
//! Body framings: `Content-Length`, `Transfer-Encoding: chunked` (size lines read by
//! `chunk_line.rs`, extensions checked and dropped, trailer fields dropped, each line at most
//! [`MAX_CHUNK_LINE`] bytes and ended by CRLF or LF, a CR anywhere else refused), or the
//! connection's end.
//! Malformed chunk framing is [`Error::MalformedBody`]; a connection that ends inside a body
//! framed by length or chunks is [`Error::Closed`].

use super::chunk_line;
use super::error::{Error, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use pingora_core::protocols::Stream;
use std::cell::RefCell;
use std::pin::Pin;
use std::task::{ready, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Most bytes one read takes from the connection.
const READ_BYTES: usize = 16 << 10;
/// Most bytes one read straight into a caller's buffer takes ([`MessageReader::read_body_into`]).
const DIRECT_READ_BYTES: usize = 256 << 10;
/// Longest chunk-size line (extensions included) or trailer field.
pub const MAX_CHUNK_LINE: usize = 4096;

thread_local! {
    /// Where every read on this thread lands before its bytes are kept: a connection
    /// waiting for its peer holds no buffer of its own.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_BYTES].into_boxed_slice());
}

/// Where the reading of a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// No head yet (or its body not begun).
    Head,
    /// Bytes of body left.
    Length(u64),
    Chunked(Chunk),
    /// The body ends when the connection does.
    UntilClose,
    /// The body was read whole.
    Done,
}

/// Where the reading of a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// A chunk-size line is next.
    Size,
    /// Bytes of chunk data left.
    Data(u64),
    /// The line end after a chunk's data.
    DataEnd,
    /// The trailer section after the last chunk (ended by an empty line).
    Trailer,
}

/// What one step through a chunked body gave.
enum Step {
    Data(Bytes),
    /// Framing was read (a size line, a line end, a trailer field): step again.
    Framing,
    /// The buffer ends inside the framing: read more.
    More,
}

/// A connection's stream with the bytes read from it and not used yet.
pub struct MessageReader {
    pub stream: Stream,
    /// Bytes read and not yet handed out.
    buf: BytesMut,
    pub reading: Reading,
}

impl MessageReader {
    pub fn new(stream: Stream) -> Self {
        MessageReader {
            stream,
            buf: BytesMut::new(),
            reading: Reading::Head,
        }
    }

    /// The bytes read and not used yet (a head being parsed, or what follows it).
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Whether the body was read whole (or there is none).
    pub fn body_done(&self) -> bool {
        matches!(self.reading, Reading::Done | Reading::Length(0))
    }

    /// The next bytes of the body, `None` once it was read whole. A connection that closes
    /// before the body's end is an error (except for a body that ends so).
    pub async fn read_body(&mut self) -> Result<Option<Bytes>> {
        loop {
            match next_piece(&mut self.buf, &mut self.reading)? {
                Piece::Data(data) => return Ok(Some(data)),
                Piece::End => return Ok(None),
                Piece::More if self.reading == Reading::UntilClose => {
                    if self.fill().await? == 0 {
                        self.reading = Reading::Done;
                        return Ok(None);
                    }
                }
                Piece::More => self.fill_or_cut().await?,
            }
        }
    }

    /// Bytes of a body framed by its `Content-Length` still to come (those buffered
    /// included); `None` for other framings.
    pub fn body_left(&self) -> Option<u64> {
        match self.reading {
            Reading::Length(left) => Some(left),
            _ => None,
        }
    }

    /// Appends the next bytes of the body to `dst`: how many, 0 once the body was read
    /// whole. A body framed by its length, with nothing buffered, is read from the
    /// connection straight into `dst`'s free capacity (never past the body's end): no
    /// copy through the scratch buffer and none into the caller's. Other framings go
    /// through [`Self::read_body`].
    pub async fn read_body_into(&mut self, dst: &mut BytesMut) -> Result<usize> {
        if let Reading::Length(left) = self.reading {
            if left > 0 && self.buf.is_empty() {
                let most = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(DIRECT_READ_BYTES);
                dst.reserve(most);
                let read = self
                    .stream
                    .read_buf(&mut (&mut *dst).limit(most))
                    .await
                    .map_err(Error::Read)?;
                if read == 0 {
                    return Err(Error::Closed("a body"));
                }
                self.reading = Reading::Length(left - read as u64);
                return Ok(read);
            }
        }
        Ok(match self.read_body().await? {
            Some(bytes) => {
                dst.extend_from_slice(&bytes);
                bytes.len()
            }
            None => 0,
        })
    }

    /// The first `count` buffered bytes, taken out. A buffer emptied is let go, so a
    /// waiting connection keeps no allocation shared with bytes handed out.
    pub fn take(&mut self, count: usize) -> Bytes {
        take(&mut self.buf, count)
    }

    /// Drops the first `count` buffered bytes (a head). Unlike [`Self::take`] it moves the
    /// buffer's start instead of splitting it, which would make the buffer shared (one
    /// more allocation) for bytes nobody keeps.
    pub fn consume(&mut self, count: usize) {
        if count >= self.buf.len() {
            self.buf = BytesMut::new();
        } else {
            self.buf.advance(count);
        }
    }

    /// Reads more bytes onto the buffer: how many, 0 at the connection's end.
    pub async fn fill(&mut self) -> Result<usize> {
        self.read_more(READ_BYTES, None).await
    }

    /// Reads at most `most` (at least 1) more bytes onto the buffer: how many, 0 at the
    /// connection's end. For a head being read: its buffer never holds, nor allocates,
    /// more than its length now and `most` (a buffer that grows by doubling would reach
    /// twice the head's limit).
    pub async fn fill_at_most(&mut self, most: usize) -> Result<usize> {
        let limit = self.buf.len().saturating_add(most.max(1));
        self.read_more(most, Some(limit)).await
    }

    /// The buffer's allocation (the tests of a head's bound).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Reads at most `most` bytes onto the buffer, its allocation kept within `limit`.
    async fn read_more(&mut self, most: usize, limit: Option<usize>) -> Result<usize> {
        let most = most.clamp(1, READ_BYTES);
        let stream = &mut self.stream;
        let buf = &mut self.buf;
        std::future::poll_fn(|cx| {
            SCRATCH.with(|scratch| {
                let mut borrowed = scratch.try_borrow_mut();
                let mut own;
                let space: &mut [u8] = match &mut borrowed {
                    Ok(scratch) => scratch,
                    Err(_) => {
                        own = vec![0; READ_BYTES];
                        &mut own
                    }
                };
                let mut read = ReadBuf::new(&mut space[..most]);
                ready!(Pin::new(&mut *stream).poll_read(cx, &mut read)).map_err(Error::Read)?;
                let filled = read.filled();
                let short = buf.capacity() - buf.len() < filled.len();
                if let Some(limit) = limit.filter(|&l| short && buf.capacity() * 2 > l) {
                    // Doubling would pass the limit: grow to it exactly, once.
                    let mut exact = BytesMut::with_capacity(limit);
                    exact.extend_from_slice(buf);
                    *buf = exact;
                }
                buf.extend_from_slice(filled);
                Poll::Ready(Ok(filled.len()))
            })
        })
        .await
    }

    /// Reads more bytes; the connection ending here cuts the body short.
    async fn fill_or_cut(&mut self) -> Result<()> {
        match self.fill().await? {
            0 => Err(Error::Closed("a body")),
            _ => Ok(()),
        }
    }
}

/// What the bytes buffered so far give of a body.
pub(super) enum Piece {
    Data(Bytes),
    /// The body was read whole (or there is none).
    End,
    /// The buffer ends inside the body: read more (or, for a body that ends with the
    /// connection, find it closed).
    More,
}

/// The next piece of a body out of `buf`, by `reading` (which it advances); nothing is
/// read. The one body decoder, for a connection read by [`MessageReader`] and for the
/// blocking client (`blocking_client.rs`).
pub(super) fn next_piece(buf: &mut BytesMut, reading: &mut Reading) -> Result<Piece> {
    loop {
        match *reading {
            Reading::Head | Reading::Done => return Ok(Piece::End),
            Reading::Length(0) => {
                *reading = Reading::Done;
                return Ok(Piece::End);
            }
            Reading::Length(left) => {
                if buf.is_empty() {
                    return Ok(Piece::More);
                }
                let taken = take(buf, left.min(buf.len() as u64) as usize);
                *reading = Reading::Length(left - taken.len() as u64);
                return Ok(Piece::Data(taken));
            }
            Reading::UntilClose => {
                if buf.is_empty() {
                    return Ok(Piece::More);
                }
                return Ok(Piece::Data(take(buf, buf.len())));
            }
            Reading::Chunked(chunk) => match step_chunked(buf, reading, chunk)? {
                Step::Data(data) => return Ok(Piece::Data(data)),
                Step::Framing => {}
                Step::More => return Ok(Piece::More),
            },
        }
    }
}

/// One step through a chunked body's framing and data, on what is buffered.
fn step_chunked(buf: &mut BytesMut, reading: &mut Reading, chunk: Chunk) -> Result<Step> {
    let next = match chunk {
        Chunk::Size => {
            let Some(line) = line(buf)? else {
                return Ok(Step::More);
            };
            match chunk_size(&line)? {
                0 => Chunk::Trailer,
                size => Chunk::Data(size),
            }
        }
        Chunk::Data(left) => {
            if buf.is_empty() {
                return Ok(Step::More);
            }
            let data = take(buf, left.min(buf.len() as u64) as usize);
            let left = left - data.len() as u64;
            *reading = Reading::Chunked(match left {
                0 => Chunk::DataEnd,
                left => Chunk::Data(left),
            });
            return Ok(Step::Data(data));
        }
        Chunk::DataEnd => match line(buf)? {
            None => return Ok(Step::More),
            Some(line) if line.is_empty() => Chunk::Size,
            Some(_) => return Err(Error::MalformedBody("chunk data longer than its size")),
        },
        Chunk::Trailer => match line(buf)? {
            None => return Ok(Step::More),
            Some(line) if line.is_empty() => {
                *reading = Reading::Done;
                return Ok(Step::Framing);
            }
            // A trailer field: not passed on.
            Some(_) => Chunk::Trailer,
        },
    };
    *reading = Reading::Chunked(next);
    Ok(Step::Framing)
}

/// The next line of chunk framing taken out of `buf`, without its line end (CRLF or a
/// bare LF); `None` until it is whole.
fn line(buf: &mut BytesMut) -> Result<Option<Bytes>> {
    let end = memchr::memchr(b'\n', buf);
    // Bounded whether the line is whole or not yet.
    if end.unwrap_or(buf.len()) > MAX_CHUNK_LINE {
        return Err(Error::MalformedBody("a chunk line over its size limit"));
    }
    let Some(end) = end else {
        return Ok(None);
    };
    let mut line = take(buf, end + 1);
    line.truncate(end);
    if line.last() == Some(&b'\r') {
        line.truncate(end - 1);
    }
    // A CR that does not end the line: a front proxy may end the line there (RFC 9112
    // §2.2), and so read the body differently.
    if memchr::memchr(b'\r', &line).is_some() {
        return Err(Error::MalformedBody("a bare CR in a chunk line"));
    }
    Ok(Some(line))
}

/// The first `count` bytes of `buf`, taken out. A buffer emptied is let go, so a waiting
/// connection keeps no allocation shared with bytes handed out.
fn take(buf: &mut BytesMut, count: usize) -> Bytes {
    if count >= buf.len() {
        std::mem::take(buf).freeze()
    } else {
        buf.split_to(count).freeze()
    }
}

/// A chunk-size line's size (`chunk_line.rs`).
fn chunk_size(line: &[u8]) -> Result<u64> {
    match chunk_line::chunk_size(line) {
        Some(size) => Ok(size),
        None => Err(Error::MalformedBody("an unreadable chunk size")),
    }
}
