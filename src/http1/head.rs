//! Heads read on both sides, one module with a policy per side:
//!
//! - a client's request head: parsed out of the connection's buffer (`httparse`), at most
//!   `max_header_bytes` and [`MAX_FIELDS`] fields (else 431), checked (framing, authority),
//!   made a `RequestHeader` whose fields share the head's bytes; and when a head being read
//!   is worth parsing again;
//! - an upstream's response head: at most [`MAX_RESPONSE_HEAD_BYTES`] (checked by the
//!   caller as it reads) and [`MAX_FIELDS`] fields, spaces after a field name tolerated,
//!   the fields copied out (an answer's head is dropped once parsed), the framing checked.
//!
//! Both refuse a head `httparse` refuses, a field name or value `http` refuses, and more
//! than [`MAX_FIELDS`] fields.

use super::error::{Error, Result};
use super::framing::{request_framing, response_framing, Framing, FramingFields};
use crate::http1::connection_tokens::ConnectionFacts;
use crate::http1::reader::{MessageReader, Reading};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use pingora_http::RequestHeader;

/// Most fields a head may have, on either side.
pub const MAX_FIELDS: usize = 256;
/// Largest response head (status line and fields) read before it is refused.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 128 << 10;

/// A request head read whole.
pub(super) struct Head {
    pub request: RequestHeader,
    /// How its body is read.
    pub reading: Reading,
    /// The client lets the connection carry another request, and the framing allows it.
    pub keepalive: bool,
}

/// Parses a whole head at the front of `reader`'s buffer and takes it out; `None` when more
/// bytes are needed. A head over `max_bytes`, or with more than [`MAX_FIELDS`] fields, is
/// [`Error::HeadTooLarge`] (`request_header_too_large`).
pub(super) fn parse(reader: &mut MessageReader, max_bytes: usize) -> Result<Option<Head>> {
    // Left uninitialized until parsed (an 8 KiB fill otherwise).
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut []);
    let buffered = reader.buffered();
    let length = match parsed.parse_with_uninit_headers(buffered, &mut fields) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::HeadTooLarge),
        Err(_) => return Err(Error::MalformedHead("an unreadable request head")),
    };
    if length > max_bytes {
        // Whole, but longer than allowed (its end arrived with the bytes that crossed it).
        return Err(Error::HeadTooLarge);
    }
    // Where each piece lies in the head, so the fields can share its bytes once it is
    // taken out of the buffer.
    let base = buffered.as_ptr() as usize;
    let at = |piece: &[u8]| (piece.as_ptr() as usize - base, piece.len());
    let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
        .map_err(|_| Error::MalformedHead("an unreadable request method"))?;
    let target = at(parsed.path.unwrap_or_default().as_bytes());
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let spans: Vec<((usize, usize), (usize, usize))> = parsed
        .headers
        .iter()
        .map(|field| (at(field.name.as_bytes()), at(field.value)))
        .collect();
    let head = reader.take(length);
    let piece = |(start, len): (usize, usize)| head.slice(start..start + len);

    let mut headers = HeaderMap::with_capacity(spans.len());
    // The framing, the connection's tokens and the `Host` fields, noted as the fields go
    // into the map rather than looked up in it afterwards.
    let mut framing = FramingFields::default();
    let (mut hosts, mut userinfo) = (0usize, false);
    for (name, value) in spans {
        let name = field_name(&head[name.0..name.0 + name.1])
            .map_err(|_| Error::MalformedHead("a request field name"))?;
        let value = HeaderValue::from_maybe_shared(piece(value))
            .map_err(|_| Error::MalformedHead("a request field value"))?;
        if name == header::HOST {
            hosts += 1;
            userinfo |= memchr::memchr(b'@', value.as_bytes()).is_some();
        } else {
            framing.add(&name, value.as_bytes());
        }
        headers.append(name, value);
    }
    let target = piece(target);
    // An origin-form target (`/path?query`) is the request's `Uri` as it is; any other
    // form, or one `http::Uri` refuses, is read by pingora, which keeps it as sent.
    let uri = match target.first() {
        Some(b'/') => http::Uri::from_maybe_shared(target.clone()).ok(),
        _ => None,
    };
    // An origin-form target has no authority of its own: of pingora's authority check
    // (`validate_request_authority`) only its `Host` rules apply, one field at most and no
    // userinfo, checked here from what the loop noted (a test holds the two alike).
    let origin_form = uri.is_some() && method != Method::CONNECT;
    let mut request = match uri {
        Some(uri) => {
            let (mut parts, ()) = http::Request::new(()).into_parts();
            parts.method = method;
            parts.uri = uri;
            parts.version = version;
            parts.headers = headers;
            RequestHeader::from(parts)
        }
        None => {
            let unreadable = |_| Error::MalformedHead("an unreadable request target");
            let mut request = RequestHeader::build_no_case(method, &target, Some(headers.len()))
                .map_err(unreadable)?;
            request.set_version(version);
            for (name, value) in headers.iter() {
                request
                    .append_header(name.clone(), value.clone())
                    .map_err(unreadable)?;
            }
            request
        }
    };
    // Two `Host` fields, userinfo, a `Host` that differs from an absolute target.
    let ambiguous = || Error::MalformedHead("an ambiguous or malformed authority");
    if origin_form {
        if hosts > 1 || userinfo {
            return Err(ambiguous());
        }
    } else {
        pingora_core::protocols::http::authority::validate_request_authority(&request)
            .map_err(|_| ambiguous())?;
    }
    let connection = framing.connection;
    let framing = request_framing(request.version, &framing)?;
    if framing.drop_content_length {
        request.remove_header(&header::CONTENT_LENGTH);
    }
    Ok(Some(Head {
        keepalive: !framing.drop_content_length && connection.keep_alive(request.version),
        reading: framing.reading,
        request,
    }))
}

/// An upstream's response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    /// How its body is framed.
    pub framing: Framing,
    /// Its `Connection` tokens, noted as it was read.
    pub connection: ConnectionFacts,
}

/// Parses a whole response head at the front of `reader`'s buffer and takes it out; `None`
/// when more bytes are needed.
pub(super) fn parse_response(reader: &mut MessageReader) -> Result<Option<ResponseHead>> {
    let Some((head, length)) = parse_response_bytes(reader.buffered())? else {
        return Ok(None);
    };
    reader.consume(length);
    Ok(Some(head))
}

/// Fields a response head's map has room for beyond its own (see `parse_response_bytes`).
const PROXY_ROOM: usize = 12;

/// Parses a whole response head at the front of `buffered`: the head and its length in
/// bytes, `None` when more bytes are needed (for a reader of its own, `blocking_client.rs`).
pub(super) fn parse_response_bytes(buffered: &[u8]) -> Result<Option<(ResponseHead, usize)>> {
    if buffered.is_empty() {
        return Ok(None);
    }
    // Left uninitialized until parsed: 256 empty fields are 8 KiB to fill on every
    // parse (~0.6k instructions a response, benches/README.md).
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    let parsed = config.parse_response_with_uninit_headers(&mut response, buffered, &mut fields);
    let length = match parsed {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Error::MalformedHead("an unreadable response head")),
    };
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(Error::MalformedHead("a response status out of range"))?;
    let version = if response.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Room from the start for the fields a proxy adds to an answer it passes on (its
    // request ID, its timing, a client's rate-limit positions: up to a dozen), so that the
    // map does not grow and rehash every field as they go in (~3k instructions an answer
    // with rate-limit headers, benches/README.md).
    let mut headers = HeaderMap::with_capacity(response.headers.len() + PROXY_ROOM);
    let mut fields = FramingFields::default();
    for field in response.headers.iter() {
        let name = field_name(field.name.as_bytes())
            .map_err(|_| Error::MalformedHead("a response field name"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| Error::MalformedHead("a response field value"))?;
        fields.add(&name, value.as_bytes());
        headers.append(name, value);
    }
    let framing = response_framing(&fields)
        .map_err(|_| Error::MalformedHead("a response body framed ambiguously"))?;
    let head = ResponseHead {
        status,
        version,
        headers,
        framing,
        connection: fields.connection,
    };
    Ok(Some((head, length)))
}

/// Whether a head of which `buffered` holds the start, `before` bytes of it parsed in
/// vain, may be whole or refusable now: its request line just ended (a bad one is refused
/// at once), or the bytes read could end the head (a blank line). Every parse reads the
/// head from its start, so a head trickled in many small reads is parsed only at these
/// points, not once per read (up to 1 MiB each time).
pub(super) fn worth_parsing(buffered: &[u8], before: usize) -> bool {
    let before = before.min(buffered.len());
    if memchr::memchr(b'\n', &buffered[before..]).is_none() {
        return false;
    }
    let request_line_ended = memchr::memchr(b'\n', &buffered[..before]).is_none();
    // From the three bytes before the read: a blank line may straddle two reads.
    let around = &buffered[before.saturating_sub(3)..];
    request_line_ended
        || memchr::memmem::find(around, b"\n\r\n").is_some()
        || memchr::memmem::find(around, b"\n\n").is_some()
}

/// Not a standard name, but on most requests and answers a gateway sees.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A field's name as `HeaderName::from_bytes` gives it. The names nearly every message
/// carries are matched first and given as constants: `from_bytes` lower-cases a name into
/// a scratch buffer and matches it against every standard name, ~0.2k instructions a field
/// (benches/README.md, thirteenth session).
pub(crate) fn field_name(raw: &[u8]) -> std::result::Result<HeaderName, header::InvalidHeaderName> {
    let first = raw.first().map(u8::to_ascii_lowercase);
    let usual = match (raw.len(), first) {
        (4, Some(b'h')) => header::HOST,
        (4, Some(b'd')) => header::DATE,
        (6, Some(b'a')) => header::ACCEPT,
        (6, Some(b's')) => header::SERVER,
        (10, Some(b'c')) => header::CONNECTION,
        (10, Some(b'u')) => header::USER_AGENT,
        (12, Some(b'c')) => header::CONTENT_TYPE,
        (12, Some(b'x')) => X_REQUEST_ID,
        (13, Some(b'a')) => header::AUTHORIZATION,
        (14, Some(b'c')) => header::CONTENT_LENGTH,
        (17, Some(b't')) => header::TRANSFER_ENCODING,
        _ => return HeaderName::from_bytes(raw),
    };
    // The usual name is lower-case: each byte is that byte, or (for a letter) that letter
    // upper-case, i.e. differs at most in the case bit, and only where a letter stands.
    // (`eq_ignore_ascii_case` lower-cases both sides and cost more than `from_bytes`.)
    let lower = usual.as_str().as_bytes();
    if raw.len() != lower.len() {
        return HeaderName::from_bytes(raw);
    }
    let mut differs = 0u8;
    for (i, &l) in lower.iter().enumerate() {
        let case_bit = u8::from(l.is_ascii_lowercase()) << 5;
        differs |= (raw[i] ^ l) & !case_bit;
    }
    if differs == 0 {
        Ok(usual)
    } else {
        HeaderName::from_bytes(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_read_as_http_reads_them() {
        let usual = [
            "host",
            "date",
            "accept",
            "server",
            "connection",
            "user-agent",
            "content-type",
            "x-request-id",
            "authorization",
            "content-length",
            "transfer-encoding",
        ];
        let mut names: Vec<Vec<u8>> = Vec::new();
        for name in usual {
            names.push(name.as_bytes().to_vec());
            names.push(name.to_ascii_uppercase().into_bytes());
            // Title case; each byte in turn off by a letter, the case bit, or not a name's.
            let mut title = name.as_bytes().to_vec();
            title[0] = title[0].to_ascii_uppercase();
            names.push(title);
            for at in 0..name.len() {
                for byte in [b'q', b' ', 0xc3, b'_', b'\r', b'\0', b'-', b'Z'] {
                    let mut near = name.as_bytes().to_vec();
                    near[at] = byte;
                    names.push(near);
                }
            }
        }
        names.extend([
            b"".to_vec(),
            b"x-custom".to_vec(),
            b"Content-Types".to_vec(),
        ]);
        for raw in names {
            let expected = HeaderName::from_bytes(&raw).ok();
            assert_eq!(
                field_name(&raw).ok(),
                expected,
                "{:?}",
                String::from_utf8_lossy(&raw)
            );
        }
    }
}
