//! How a message's body is framed, side by side for the two sides: a client's request
//! (read by `reader.rs`), an upstream's answer (read by `client.rs` with `reader.rs`), and
//! an answer the gateway writes. Requests are held to the stricter rule (one `chunked`
//! coding and no list, `Transfer-Encoding` never on HTTP/1.0; with both framings the length
//! is dropped and the connection closed); an upstream's answer to one `chunked` field and
//! agreeing lengths, chunked winning over a length (RFC 9112 §6.3).

use super::connection_tokens::ConnectionFacts;
use super::error::{Error, Result};
use crate::http1::reader::{Chunk, Reading};
use http::{header, HeaderMap, HeaderName, Version};
use pingora_core::protocols::Stream;
use tokio::io::AsyncWriteExt;

/// What a head's fields say of its body's framing and of its connection, gathered field by
/// field as the head is parsed (`head.rs`): the framing is then decided without looking
/// the fields up again in the map (benches/README.md, fourteenth session).
#[derive(Debug, Default)]
pub struct FramingFields {
    /// `Transfer-Encoding` fields.
    codings: usize,
    /// The first of them is the one coding `chunked`.
    first_chunked: bool,
    /// A `Content-Length` field came.
    has_length: bool,
    lengths: Lengths,
    /// The `Connection` fields' tokens.
    pub connection: ConnectionFacts,
}

impl FramingFields {
    /// Notes a field, if it is one of the framing's or the connection's.
    pub fn add(&mut self, name: &HeaderName, value: &[u8]) {
        if *name == header::CONTENT_LENGTH {
            self.has_length = true;
            self.lengths.add(value);
        } else if *name == header::TRANSFER_ENCODING {
            if self.codings == 0 {
                self.first_chunked = is_chunked(value);
            }
            self.codings += 1;
        } else if *name == header::CONNECTION {
            self.connection.add(value);
        }
    }

    /// The fields of a whole map, in its order (the tests' heads).
    #[cfg(test)]
    pub fn of(headers: &HeaderMap) -> Self {
        let mut fields = FramingFields::default();
        for (name, value) in headers {
            fields.add(name, value.as_bytes());
        }
        fields
    }
}

/// A coding that is `chunked` alone (any case, spaces around).
fn is_chunked(coding: &[u8]) -> bool {
    coding.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// A request body's framing, as read from its head.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestFraming {
    pub reading: Reading,
    /// Both `Transfer-Encoding` and `Content-Length` came: the body is chunked, the length
    /// is dropped, and the connection is not kept (RFC 9112 §6.1).
    pub drop_content_length: bool,
}

/// The framing of the body of a request of `version` whose head had `fields`.
/// `Transfer-Encoding` is accepted only as one field whose value is the one coding
/// `chunked` (any case): the gateway decodes no other coding, and a list or a second field
/// (`gzip, chunked`, `chunked, chunked`) is what a front proxy may read otherwise; that is
/// [`Error::UnsupportedTransferCoding`] (`unsupported_transfer_encoding`, as nginx
/// answers). Any `Transfer-Encoding` on HTTP/1.0, or an ambiguous `Content-Length`, is
/// [`Error::MalformedHead`] (400).
pub fn request_framing(version: Version, fields: &FramingFields) -> Result<RequestFraming> {
    if fields.codings > 0 {
        if version == Version::HTTP_10 {
            return Err(Error::MalformedHead(
                "Transfer-Encoding on an HTTP/1.0 request",
            ));
        }
        if fields.codings > 1 || !fields.first_chunked {
            return Err(Error::UnsupportedTransferCoding);
        }
        return Ok(RequestFraming {
            reading: Reading::Chunked(Chunk::Size),
            drop_content_length: fields.has_length,
        });
    }
    let length = fields
        .lengths
        .length()
        .map_err(|_| Error::MalformedHead("an ambiguous Content-Length"))?;
    Ok(RequestFraming {
        reading: Reading::Length(length.unwrap_or(0)),
        drop_content_length: false,
    })
}

/// How an upstream framed its answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// Neither: the body ends when the connection closes.
    Close,
}

/// An answer's framing that is malformed or contradictory.
#[derive(Debug, PartialEq, Eq)]
pub struct AmbiguousFraming;

/// An upstream answer's body framing, from its head's `fields`, if it is one a client can
/// be given unambiguously: one `Transfer-Encoding: chunked` field, or `Content-Length`
/// values that all agree.
pub fn response_framing(fields: &FramingFields) -> Result<Framing, AmbiguousFraming> {
    if fields.codings > 0 {
        return if fields.codings == 1 && fields.first_chunked {
            Ok(Framing::Chunked)
        } else {
            Err(AmbiguousFraming)
        };
    }
    let length = fields.lengths.length().map_err(|_| AmbiguousFraming)?;
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// `Content-Length` values that do not agree, or one that is not a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmbiguousLength;

/// A message's `Content-Length`: every value (fields and comma-separated lists) must be
/// the same number in decimal digits; `None` when there is none.
pub fn content_length(headers: &HeaderMap) -> Result<Option<u64>, AmbiguousLength> {
    let mut lengths = Lengths::default();
    for value in headers.get_all(header::CONTENT_LENGTH) {
        lengths.add(value.as_bytes());
    }
    lengths.length()
}

/// `Content-Length` values taken one by one (as a head's fields are read, [`FramingFields`]),
/// by [`content_length`]'s rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lengths {
    length: Option<u64>,
    /// A value was not a number, or not the same number as another.
    ambiguous: bool,
}

impl Lengths {
    /// One field's value (a comma-separated list of numbers).
    pub fn add(&mut self, value: &[u8]) {
        for part in value.split(|&b| b == b',') {
            match decimal(part.trim_ascii()) {
                Some(n) if self.length.is_none_or(|l| l == n) => self.length = Some(n),
                _ => self.ambiguous = true,
            }
        }
    }

    /// The one number the values said, `None` when there was none.
    pub fn length(&self) -> Result<Option<u64>, AmbiguousLength> {
        match self.ambiguous {
            true => Err(AmbiguousLength),
            false => Ok(self.length),
        }
    }
}

/// `digits` as a number: one or more ASCII digits and nothing else (no sign), within `u64`.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// How an answer's body is written, and how much of it is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writing {
    /// Bytes left of a `Content-Length`; more is refused, never cut to fit.
    Length(u64),
    Chunked,
    /// Until the connection closes.
    UntilClose,
    /// An answer that has no body whatever its fields say (to `HEAD`, a 204, a 304): what
    /// is written is dropped.
    Bodiless,
    /// Ended (or not begun).
    Done,
}

impl Writing {
    /// The framing an answer with `headers` has: none for a bodiless one, else chunked
    /// when its `Transfer-Encoding` says so, its `Content-Length`, or the close.
    pub fn of(headers: &HeaderMap, bodiless: bool) -> Self {
        if bodiless {
            return Writing::Bodiless;
        }
        let chunked = headers
            .get(header::TRANSFER_ENCODING)
            .is_some_and(|coding| is_chunked(coding.as_bytes()));
        if chunked {
            return Writing::Chunked;
        }
        match content_length(headers) {
            Ok(Some(length)) => Writing::Length(length),
            _ => Writing::UntilClose,
        }
    }

    /// Writes `data` by the framing; a chunk or a close-delimited piece is flushed (it may
    /// be a stream's event). More bytes than a length left is [`Error::Overrun`].
    pub async fn write(&mut self, stream: &mut Stream, data: &[u8]) -> Result<()> {
        match self {
            Writing::Length(left) => {
                if data.len() as u64 > *left {
                    *self = Writing::Done;
                    return Err(Error::Overrun);
                }
                stream.write_all(data).await.map_err(Error::Write)?;
                *left -= data.len() as u64;
            }
            Writing::Chunked => {
                let written = async {
                    stream.write_all(&chunk_size_line(data.len())).await?;
                    stream.write_all(data).await?;
                    stream.write_all(b"\r\n").await?;
                    stream.flush().await
                };
                written.await.map_err(Error::Write)?;
            }
            Writing::UntilClose => {
                let written = async {
                    stream.write_all(data).await?;
                    stream.flush().await
                };
                written.await.map_err(Error::Write)?;
            }
            Writing::Bodiless | Writing::Done => {}
        }
        Ok(())
    }

    /// Ends the body (a chunked one with its last chunk); whether it ended short of its
    /// `Content-Length`.
    pub async fn finish(&mut self, stream: &mut Stream) -> Result<bool> {
        let short = match *self {
            Writing::Chunked => {
                stream.write_all(b"0\r\n\r\n").await.map_err(Error::Write)?;
                false
            }
            Writing::Length(left) => left > 0,
            Writing::UntilClose | Writing::Bodiless | Writing::Done => false,
        };
        *self = Writing::Done;
        Ok(short)
    }
}

/// The size line of a chunk of `size` bytes: hexadecimal digits and CRLF.
fn chunk_size_line(size: usize) -> Vec<u8> {
    let mut line = format!("{size:X}").into_bytes();
    line.extend_from_slice(b"\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    fn fields(headers: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn an_answer_framed_ambiguously_is_refused() {
        for framing in [
            [("content-length", "5"), ("content-length", "6")],
            [("content-length", "+5"), ("x-other", "1")],
            [("transfer-encoding", "identity"), ("x-other", "1")],
            [("transfer-encoding", "chunked, identity"), ("x-other", "1")],
            [("transfer-encoding", "gzip"), ("content-length", "5")],
        ] {
            assert_eq!(
                response_framing(&FramingFields::of(&fields(&framing))).unwrap_err(),
                AmbiguousFraming,
                "{framing:?} is refused"
            );
        }
        let both = fields(&[("transfer-encoding", "Chunked"), ("content-length", "9")]);
        assert_eq!(
            response_framing(&FramingFields::of(&both)),
            Ok(Framing::Chunked),
            "chunked wins"
        );
    }

    #[tokio::test]
    async fn a_body_longer_than_its_length_is_refused_not_cut_to_fit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (client, accepted) = tokio::join!(
            TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        let mut stream: Stream = Box::new(pingora_core::protocols::l4::stream::Stream::from(
            client.unwrap(),
        ));
        let mut writing = Writing::Length(8);
        writing.write(&mut stream, b"1234").await.unwrap();
        let over = writing.write(&mut stream, b"56789").await;
        assert!(
            matches!(over, Err(Error::Overrun)),
            "5 bytes where 4 are left: an error"
        );
        assert_eq!(writing, Writing::Done, "nothing more is written");
        stream.flush().await.unwrap();
        drop(stream);
        let mut got = Vec::new();
        accepted.unwrap().0.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"1234", "none of the refused bytes went out");
    }

    fn length_of(values: &[&str]) -> Result<Option<u64>, AmbiguousLength> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::CONTENT_LENGTH, value.parse().unwrap());
        }
        content_length(&headers)
    }

    #[test]
    fn a_length_is_one_number_however_often_it_is_said() {
        assert_eq!(length_of(&[]), Ok(None));
        assert_eq!(length_of(&["0"]), Ok(Some(0)));
        assert_eq!(length_of(&[" 42 , 42", "42"]), Ok(Some(42)));
        assert_eq!(
            length_of(&["18446744073709551615"]),
            Ok(Some(u64::MAX)),
            "the largest u64"
        );
        for bad in [
            &["42", "43"][..],
            &["42, 43"],
            &["+42"],
            &["-1"],
            &["4 2"],
            &["42,"],
            &[""],
            &["0x10"],
            &["18446744073709551616"],
        ] {
            assert_eq!(length_of(bad), Err(AmbiguousLength), "{bad:?}");
        }
    }
}
