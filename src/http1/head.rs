//! A client's request head: parsed out of the connection's buffer (`httparse`), checked
//! by pingora's rules (framing, authority), made a `RequestHeader` whose fields share the
//! head's bytes; and when a head being read is worth parsing again.

use super::framing::request_framing;
use super::server::MAX_FIELDS;
use crate::http1::connection_tokens::ConnectionTokens;
use crate::http1::reader::{MessageReader, Reading};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Version};
use pingora::http::RequestHeader;
use pingora::{Error, ErrorType, OrErr, Result};

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
/// an `HTTPStatus(431)` error (`request_header_too_large`).
pub(super) fn parse(reader: &mut MessageReader, max_bytes: usize) -> Result<Option<Head>> {
    // Left uninitialized until parsed (an 8 KiB fill otherwise).
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut []);
    let buffered = reader.buffered();
    let length = match parsed.parse_with_uninit_headers(buffered, &mut fields) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Error::e_explain(
                ErrorType::HTTPStatus(431),
                "a request head with too many fields",
            )
        }
        Err(e) => {
            return Err(Error::because(
                ErrorType::InvalidHTTPHeader,
                "an unreadable request head",
                e,
            ))
        }
    };
    if length > max_bytes {
        // Whole, but longer than allowed (its end arrived with the bytes that crossed it).
        return Error::e_explain(
            ErrorType::HTTPStatus(431),
            "a request head over max_header_bytes",
        );
    }
    // Where each piece lies in the head, so the fields can share its bytes once it is
    // taken out of the buffer.
    let base = buffered.as_ptr() as usize;
    let at = |piece: &[u8]| (piece.as_ptr() as usize - base, piece.len());
    let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
        .or_err(ErrorType::InvalidHTTPHeader, "an unreadable request method")?;
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
    for (name, value) in spans {
        let name = HeaderName::from_bytes(&head[name.0..name.0 + name.1])
            .or_err(ErrorType::InvalidHTTPHeader, "a request field name")?;
        let value = HeaderValue::from_maybe_shared(piece(value))
            .or_err(ErrorType::InvalidHTTPHeader, "a request field value")?;
        headers.append(name, value);
    }
    let target = piece(target);
    // An origin-form target (`/path?query`) is the request's `Uri` as it is; any other
    // form, or one `http::Uri` refuses, is read by pingora, which keeps it as sent.
    let uri = match target.first() {
        Some(b'/') => http::Uri::from_maybe_shared(target.clone()).ok(),
        _ => None,
    };
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
            let mut request = RequestHeader::build_no_case(method, &target, Some(headers.len()))?;
            request.set_version(version);
            for (name, value) in headers.iter() {
                request.append_header(name.clone(), value.clone())?;
            }
            request
        }
    };
    pingora::protocols::http::authority::validate_request_authority(&request)?;
    let framing = request_framing(&request)?;
    if framing.drop_content_length {
        request.remove_header(&header::CONTENT_LENGTH);
    }
    Ok(Some(Head {
        keepalive: !framing.drop_content_length
            && ConnectionTokens::of(&request.headers).keep_alive(request.version),
        reading: framing.reading,
        request,
    }))
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
