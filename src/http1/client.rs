//! HTTP/1.1 to an upstream: the request written, the response head read and its body
//! handed out chunk by chunk, the connection given back when it may carry another request.
//!
//! Ours rather than pingora's client session, for what an open stream costs: pingora's
//! session keeps, for the whole answer, its head read buffer (4 KiB), the parsed response
//! header and the request header it wrote, and reads the body through a 64 KiB buffer of
//! which the pages touched stay resident. Here a waiting connection holds no buffer: a read
//! goes through one scratch buffer per thread and keeps exactly the bytes it got, the head
//! is parsed into one header map and its bytes dropped, and nothing of the request is kept
//! once it went out (benches/README.md has the measurements). It is also one header map
//! built per response instead of two.
//!
//! What it reads: a status line and fields (`head.rs`, at most 256 fields and
//! [`MAX_HEAD_BYTES`]), interim 1xx heads skipped, a body framed by `Content-Length`, by
//! `Transfer-Encoding: chunked` (extensions and trailers read and dropped) or by the
//! connection closing; framing that is malformed or contradictory is
//! [`Error::MalformedHead`] or [`Error::MalformedBody`], as is a `101`. What it writes: the request head's bytes as the caller wrote them and the
//! body, in as few writes as the transport under it allows (`listener/transport.rs`).

use super::error::{Error, Result};
use super::framing::Framing;
use super::head::{parse_response, ResponseHead};
use super::reader::{Chunk, MessageReader, Reading};
use bytes::Bytes;
use http::{StatusCode, Version};
use pingora_core::protocols::Shutdown;
use pingora_core::protocols::Stream;
use std::future::Future;
use tokio::io::AsyncWriteExt;

pub use super::head::MAX_RESPONSE_HEAD_BYTES as MAX_HEAD_BYTES;

/// A response head, interim ones skipped.
pub type Head = ResponseHead;

/// A request body, written after its head.
pub trait WriteBody: Sync {
    /// Writes the body to `stream` (the caller flushes).
    fn write_body(&self, stream: &mut Stream) -> impl Future<Output = Result<()>> + Send;
}

impl WriteBody for Bytes {
    async fn write_body(&self, stream: &mut Stream) -> Result<()> {
        stream.write_all(self).await.map_err(Error::Write)
    }
}

/// One upstream connection speaking HTTP/1.1.
pub struct Http1 {
    reader: MessageReader,
    /// The request was a `HEAD`: its answer has no body whatever its fields say.
    head_request: bool,
    /// The connection may carry another request once the answer is read whole.
    keepalive: bool,
}

impl Http1 {
    pub fn new(stream: Stream) -> Self {
        Http1 {
            reader: MessageReader::new(stream),
            head_request: false,
            keepalive: false,
        }
    }

    /// Writes the request head (its bytes, blank line included; a `HEAD` request's answer
    /// has no body whatever its fields say) and body, and flushes them.
    pub async fn send(
        &mut self,
        head: &[u8],
        head_request: bool,
        body: &impl WriteBody,
    ) -> Result<()> {
        self.head_request = head_request;
        let stream = &mut self.reader.stream;
        stream.write_all(head).await.map_err(Error::Write)?;
        body.write_body(stream).await?;
        stream.flush().await.map_err(Error::Write)
    }

    /// Reads the next final response head, skipping interim (1xx) ones.
    pub async fn read_head(&mut self) -> Result<Head> {
        loop {
            if let Some(head) = parse_response(&mut self.reader)? {
                if head.status.is_informational() {
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return Err(Error::MalformedHead("a 101 nobody asked for"));
                    }
                    continue;
                }
                self.begin_body(&head);
                return Ok(head);
            }
            if self.reader.buffered().len() > MAX_HEAD_BYTES {
                return Err(Error::MalformedHead("a response head over its size limit"));
            }
            if self.reader.fill().await? == 0 {
                return Err(Error::Closed("a response head"));
            }
        }
    }

    /// The next bytes of the response body, `None` once it was read whole. A connection
    /// that closes before the body's end is an error (except for a body that ends so).
    pub async fn read_body(&mut self) -> Result<Option<Bytes>> {
        self.reader.read_body().await
    }

    /// The connection, if it may carry another request: the answer was read whole, nothing
    /// came after it, and neither side asked to close. Otherwise the connection itself,
    /// to be shut.
    pub fn reuse(self) -> std::result::Result<Stream, Http1> {
        if self.keepalive
            && self.reader.reading == Reading::Done
            && self.reader.buffered().is_empty()
        {
            Ok(self.reader.stream)
        } else {
            Err(self)
        }
    }

    /// Closes the connection (a TLS one with its close notification).
    pub async fn shutdown(&mut self) {
        Shutdown::shutdown(&mut *self.reader.stream).await;
    }

    /// Sets how the body of a final head is read, and whether the connection outlives it.
    fn begin_body(&mut self, head: &Head) {
        let bodiless = self.head_request || matches!(head.status.as_u16(), 204 | 304);
        self.reader.reading = match head.framing {
            _ if bodiless => Reading::Length(0),
            Framing::Length(length) => Reading::Length(length),
            Framing::Chunked => Reading::Chunked(Chunk::Size),
            Framing::Close => Reading::UntilClose,
        };
        // HTTP/1.0 never keeps a connection after chunked framing.
        let chunked_on_1_0 = head.version == Version::HTTP_10 && head.framing == Framing::Chunked;
        self.keepalive = head.connection.keep_alive(head.version)
            && !chunked_on_1_0
            && self.reader.reading != Reading::UntilClose;
    }
}

#[cfg(test)]
mod tests;
