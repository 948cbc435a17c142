//! A small blocking HTTP/1.1 client over a std stream, for a caller on a thread of its own
//! (the OTLP exporter, `telemetry/collector.rs`): one request per connection, written with
//! its length and `Connection: close`, and one answer read by the layer's own rules (the
//! response head parser of `head.rs`, the body decoder of `reader.rs`: a length, chunks,
//! or the close). The caller opens the connection and sets its timeouts.

use super::error::{Error, Result};
use super::framing::Framing;
use super::head::parse_response_bytes;
use super::reader::{next_piece, Chunk, Piece, Reading};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, StatusCode};
use std::io::{ErrorKind, Read, Write};

/// Most bytes one read takes.
const READ_BYTES: usize = 8 << 10;

/// An answer read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Largest body copied behind the head to go out in one write.
const COPIED_BODY_BYTES: usize = 16 << 10;

/// Sends `request` on `stream` and reads its answer, at most `max_answer_bytes` of it (head
/// and body). Fields named `host`, `content-length`, `connection` and `transfer-encoding`
/// are the client's to set: the request's own are not sent.
pub fn exchange<S: Read + Write>(
    stream: &mut S,
    request: &Request<Bytes>,
    max_answer_bytes: usize,
) -> Result<Answer> {
    let mut wire = request_head(request);
    let body = request.body();
    // A small body goes out with the head; a large one is written as it is, not copied.
    if body.len() <= COPIED_BODY_BYTES {
        wire.extend_from_slice(body);
        stream.write_all(&wire).map_err(write_error)?;
    } else {
        stream.write_all(&wire).map_err(write_error)?;
        stream.write_all(body).map_err(write_error)?;
    }
    stream.flush().map_err(write_error)?;
    read_answer(stream, *request.method() == Method::HEAD, max_answer_bytes)
}

/// The request head: the method, target and fields of `request`, `Host` from its URI, the
/// body's length, and a connection that closes after the answer.
pub fn request_head(request: &Request<Bytes>) -> Vec<u8> {
    let uri = request.uri();
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or("", |a| a.as_str());
    let mut head = Vec::with_capacity(128 + 48 * request.headers().len());
    for piece in [
        request.method().as_str(),
        " ",
        target,
        " HTTP/1.1\r\nhost: ",
    ] {
        head.extend_from_slice(piece.as_bytes());
    }
    head.extend_from_slice(authority.as_bytes());
    head.extend_from_slice(b"\r\ncontent-length: ");
    head.extend_from_slice(itoa::Buffer::new().format(request.body().len()).as_bytes());
    head.extend_from_slice(b"\r\nconnection: close\r\n");
    for (name, value) in request.headers() {
        let ours = matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        );
        if ours {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Reads one answer (interim 1xx heads skipped): its head, then its body by its framing.
/// An answer over `max_bytes` is refused rather than cut.
pub fn read_answer<S: Read>(
    stream: &mut S,
    head_request: bool,
    max_bytes: usize,
) -> Result<Answer> {
    let mut buf = BytesMut::new();
    let mut read = 0usize;
    let head = loop {
        if let Some((head, length)) = parse_response_bytes(&buf)? {
            let _ = buf.split_to(length);
            if head.status.is_informational() {
                continue;
            }
            break head;
        }
        if fill(stream, &mut buf, &mut read, max_bytes)? == 0 {
            return Err(Error::Closed("a response head"));
        }
    };
    let bodiless = head_request || matches!(head.status.as_u16(), 204 | 304);
    let mut reading = match head.framing {
        _ if bodiless => Reading::Length(0),
        Framing::Length(length) => Reading::Length(length),
        Framing::Chunked => Reading::Chunked(Chunk::Size),
        Framing::Close => Reading::UntilClose,
    };
    let mut body = BytesMut::new();
    loop {
        match next_piece(&mut buf, &mut reading)? {
            Piece::Data(data) => body.extend_from_slice(&data),
            Piece::End => break,
            Piece::More => {
                if fill(stream, &mut buf, &mut read, max_bytes)? == 0 {
                    if reading == Reading::UntilClose {
                        break;
                    }
                    return Err(Error::Closed("a body"));
                }
            }
        }
    }
    Ok(Answer {
        status: head.status,
        headers: head.headers,
        body: body.freeze(),
    })
}

/// Reads more of the answer onto `buf`: how many bytes, 0 at the connection's end. `read`
/// counts the answer's bytes so far, refused past `max_bytes`.
fn fill<S: Read>(
    stream: &mut S,
    buf: &mut BytesMut,
    read: &mut usize,
    max_bytes: usize,
) -> Result<usize> {
    if *read >= max_bytes {
        return Err(Error::MalformedBody("an answer over its size limit"));
    }
    let mut space = [0u8; READ_BYTES];
    let most = READ_BYTES.min(max_bytes - *read);
    let got = loop {
        match stream.read(&mut space[..most]) {
            Ok(got) => break got,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => return Err(Error::ReadTimeout),
            Err(e) => return Err(Error::Read(e)),
        }
    };
    buf.extend_from_slice(&space[..got]);
    *read += got;
    Ok(got)
}

/// A failed write: a timeout (a std socket's write timeout) or an I/O error.
fn write_error(e: std::io::Error) -> Error {
    if is_timeout(&e) {
        Error::WriteTimeout
    } else {
        Error::Write(e)
    }
}

/// What a std socket's timeout looks like (`WouldBlock` on Unix, `TimedOut` on Windows).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests;
