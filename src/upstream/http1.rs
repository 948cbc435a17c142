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
//! What it reads: a status line and fields (`httparse`, at most 256 fields and
//! [`MAX_HEAD_BYTES`]), interim 1xx heads skipped, a body framed by `Content-Length`, by
//! `Transfer-Encoding: chunked` (extensions and trailers read and dropped) or by the
//! connection closing; framing that is malformed or contradictory is a protocol error, as
//! is a `101`. What it writes: the request header as pingora serializes it and the body,
//! in as few writes as the transport under it allows (see `transport.rs`).

use super::body::Body;
use super::request::RequestHead;
use super::response::{framing, Framing};
use crate::http1::connection_tokens::ConnectionTokens;
use crate::http1::reader::{Chunk, MessageReader, Reading};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use pingora::protocols::Shutdown;
use pingora::protocols::Stream;
use pingora::{Error, ErrorType, OrErr, Result};
use tokio::io::AsyncWriteExt;

/// Largest response head (status line and fields) read before it is refused.
pub const MAX_HEAD_BYTES: usize = 128 << 10;
/// Most fields a response head may have.
const MAX_FIELDS: usize = 256;

/// A response head, interim ones skipped.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    /// How its body is framed.
    pub framing: Framing,
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

    /// Writes the request header and body and flushes them.
    pub async fn send(&mut self, head: &RequestHead, body: &Body) -> Result<()> {
        self.head_request = head.is_head();
        let stream = &mut self.reader.stream;
        stream
            .write_all(head.wire())
            .await
            .or_err(ErrorType::WriteError, "writing the request header")?;
        body.write(stream).await?;
        stream
            .flush()
            .await
            .or_err(ErrorType::WriteError, "writing the request")
    }

    /// Reads the next final response head, skipping interim (1xx) ones.
    pub async fn read_head(&mut self) -> Result<Head> {
        loop {
            if let Some(head) = self.parse_head()? {
                if head.status.is_informational() {
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return Error::e_explain(ErrorType::H1Error, "a 101 nobody asked for");
                    }
                    continue;
                }
                self.begin_body(&head);
                return Ok(head);
            }
            if self.reader.buffered().len() > MAX_HEAD_BYTES {
                return Error::e_explain(
                    ErrorType::InvalidHTTPHeader,
                    "a response head over its size limit",
                );
            }
            if self.reader.fill().await? == 0 {
                return Error::e_explain(
                    ErrorType::ConnectionClosed,
                    "the upstream closed before its response head",
                );
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

    /// A whole head at the front of the buffer, taken out of it; `None` when more bytes are
    /// needed.
    fn parse_head(&mut self) -> Result<Option<Head>> {
        if self.reader.buffered().is_empty() {
            return Ok(None);
        }
        // Left uninitialized until parsed: 256 empty fields are 8 KiB to fill on every
        // parse (~0.6k instructions a response, benches/README.md, ninth session).
        let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
        let mut response = httparse::Response::new(&mut []);
        let mut config = httparse::ParserConfig::default();
        config.allow_spaces_after_header_name_in_responses(true);
        let parsed = config.parse_response_with_uninit_headers(
            &mut response,
            self.reader.buffered(),
            &mut fields,
        );
        let length = match parsed {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                return Err(Error::because(
                    ErrorType::InvalidHTTPHeader,
                    "an unreadable response head",
                    e,
                ))
            }
        };
        // `ok_or_else`: pingora's `OkOrErr::or_err` builds its error (an allocation) even
        // when there is none to report, twice a response (benches/README.md, ninth session).
        let status = response
            .code
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    "a response status out of range",
                )
            })?;
        let version = if response.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let mut headers = HeaderMap::with_capacity(response.headers.len());
        for field in response.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .or_err(ErrorType::InvalidHTTPHeader, "a response field name")?;
            let value = HeaderValue::from_bytes(field.value)
                .or_err(ErrorType::InvalidHTTPHeader, "a response field value")?;
            headers.append(name, value);
        }
        let framing = framing(&headers).map_err(|_| {
            Error::explain(
                ErrorType::InvalidHTTPHeader,
                "a response body framed ambiguously",
            )
        })?;
        self.reader.consume(length);
        Ok(Some(Head {
            status,
            version,
            headers,
            framing,
        }))
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
        self.keepalive = ConnectionTokens::of(&head.headers).keep_alive(head.version)
            && !chunked_on_1_0
            && self.reader.reading != Reading::UntilClose;
    }
}

#[cfg(test)]
mod tests;
