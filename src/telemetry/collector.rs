//! The HTTP client the OTLP exporter posts with: one HTTP/1.1 request per export over a
//! plain TCP connection, on the export thread, every step under a timeout. Its bytes are
//! written and read by the HTTP layer's blocking client (`http1/blocking_client.rs`); this
//! file opens the connection and hands the exporter its answer. Written so that exporting
//! traces brings no HTTP client stack or second async runtime into the build; an export
//! happens about once a second, so a connection per export costs nothing.

use crate::http1::blocking_client;
use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest collector answer read, head and body (an OTLP answer is a few bytes; an error
/// page, more); a longer one is an export error.
const MAX_ANSWER_BYTES: usize = 64 << 10;

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
        let answer = blocking_client::exchange(&mut stream, request, MAX_ANSWER_BYTES)?;
        // The exporter reads the status and a partial-success message from the body.
        Ok(Response::builder()
            .status(answer.status)
            .body(answer.body)?)
    }
}

#[async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.post(&request)
    }
}
