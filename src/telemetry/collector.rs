//! The HTTP client the OTLP exporter posts with: one HTTP/1.1 request per export over a
//! plain TCP connection, on the export thread, every step under a timeout. Written here so
//! that exporting traces brings no HTTP client stack or second async runtime into the
//! build; an export happens about once a second, so a connection per export costs nothing.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest collector answer read (an OTLP answer is a few bytes; an error page, more).
const MAX_ANSWER_BYTES: u64 = 64 << 10;

/// Posts to an `http://` collector.
#[derive(Debug)]
pub(super) struct CollectorClient {
    /// For connecting, and for each write and read after it.
    timeout: Duration,
}

impl CollectorClient {
    pub(super) fn new(timeout: Duration) -> Self {
        CollectorClient { timeout }
    }

    fn post(&self, request: &Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let uri = request.uri();
        let host = uri.host().ok_or("the collector URL has no host")?;
        let port = uri.port_u16().unwrap_or(80);
        let address = (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or("the collector's host name has no address")?;
        let mut stream = TcpStream::connect_timeout(&address, self.timeout)?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.write_all(&head(request))?;
        stream.write_all(request.body())?;
        let mut answer = Vec::new();
        stream.take(MAX_ANSWER_BYTES).read_to_end(&mut answer)?;
        parse_answer(&answer)
    }
}

#[async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.post(&request)
    }
}

/// The request head: the exporter's method, path and headers, the body's length, and a
/// connection that closes after the answer (so the answer ends where the stream does).
fn head(request: &Request<Bytes>) -> Vec<u8> {
    let uri = request.uri();
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or("", |a| a.as_str());
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: {}\r\nconnection: close\r\n",
        request.method(),
        request.body().len()
    )
    .into_bytes();
    for (name, value) in request.headers() {
        if matches!(name.as_str(), "host" | "content-length" | "connection") {
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

/// The collector's status and body (the exporter reads a partial-success message from it).
fn parse_answer(answer: &[u8]) -> Result<Response<Bytes>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head_len) = parsed.parse(answer)? else {
        return Err("the collector's answer ended inside its head".into());
    };
    let status = parsed.code.ok_or("the collector's answer has no status")?;
    let length = parsed
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let rest = &answer[head_len..];
    let body = match length {
        Some(length) => &rest[..length.min(rest.len())],
        None => rest,
    };
    Ok(Response::builder()
        .status(status)
        .body(Bytes::copy_from_slice(body))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_names_the_path_length_and_headers() {
        let request = Request::post("http://collector:4318/v1/traces")
            .header("content-type", "application/x-protobuf")
            .header("authorization", "Bearer t")
            .body(Bytes::from_static(b"abc"))
            .unwrap();
        let head = String::from_utf8(head(&request)).unwrap();
        assert!(head.starts_with("POST /v1/traces HTTP/1.1\r\nhost: collector:4318\r\n"));
        assert!(head.contains("content-length: 3\r\n"));
        assert!(head.contains("content-type: application/x-protobuf\r\n"));
        assert!(head.contains("authorization: Bearer t\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
    }

    #[test]
    fn an_answer_gives_its_status_and_body() {
        let answer = parse_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA").unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.body().as_ref(), b"ok");
        let unavailable = parse_answer(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").unwrap();
        assert_eq!(unavailable.status(), 503);
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\ncontent-").is_err());
    }
}
