//! A small raw HTTP/1.1 client, so tests control every byte: headers, `Expect`, chunked
//! bodies, reading SSE events as they arrive, hanging up mid-stream.

use super::mock::find;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every client read is bounded, so a broken gateway fails a test instead of hanging it.
pub const READ_LIMIT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `(status, type, code, param)` of an error envelope, asserting its shape.
    pub fn error(&self) -> (u16, String, String, serde_json::Value) {
        let body = self.json();
        let error = &body["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error has a message: {body}"
        );
        assert!(
            error.get("param").is_some(),
            "error has a param field: {body}"
        );
        (
            self.status,
            error["type"].as_str().unwrap().into(),
            error["code"].as_str().unwrap().into(),
            error["param"].clone(),
        )
    }
}

/// What a [`Conn`] reads and writes: a TCP socket, or a TLS stream over one.
pub trait Transport: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Transport for T {}

/// One client connection.
pub struct Conn {
    socket: Box<dyn Transport>,
    buffer: Vec<u8>,
}

/// A request's bytes with `Host` and, when there is a body, `Content-Length`.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let socket = TcpStream::connect(addr)
            .await
            .expect("connect to the gateway");
        socket.set_nodelay(true).unwrap();
        Conn::over(socket)
    }

    /// A connection over a stream the caller opened (a TLS client's).
    pub fn over(socket: impl Transport + 'static) -> Conn {
        Conn {
            socket: Box::new(socket),
            buffer: Vec::new(),
        }
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.socket
            .write_all(bytes)
            .await
            .expect("write to the gateway");
    }

    /// Closes the writing side (the gateway reads the end of the stream).
    pub async fn shutdown_write(&mut self) {
        let _ = self.socket.shutdown().await;
    }

    /// Writes, reporting a failure (the gateway closed the connection) instead of panicking.
    pub async fn try_write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.socket.write_all(bytes).await
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = vec![0u8; 1 << 16];
        match tokio::time::timeout(READ_LIMIT, self.socket.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(n)) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                true
            }
            Err(_) => panic!("no answer from the gateway within {READ_LIMIT:?}"),
        }
    }

    /// Reads a response head (skipping interim 1xx answers unless `keep_interim`).
    pub async fn read_head(&mut self, keep_interim: bool) -> Option<(u16, Vec<(String, String)>)> {
        loop {
            let end = loop {
                if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                    break end + 4;
                }
                if !self.fill().await {
                    return None;
                }
            };
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Response::new(&mut headers);
            parsed
                .parse(&self.buffer[..end])
                .expect("a valid HTTP response head");
            let status = parsed.code.unwrap();
            let headers = parsed
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            self.buffer.drain(..end);
            if (100..200).contains(&status) && !keep_interim {
                continue;
            }
            return Some((status, headers));
        }
    }

    /// Reads one whole response.
    pub async fn read_response(&mut self) -> Option<Response> {
        let (status, headers) = self.read_head(false).await?;
        let mut body = Vec::new();
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        if chunked {
            while let Some(chunk) = self.read_chunk().await {
                body.extend_from_slice(&chunk);
            }
        } else if let Some(length) = length {
            while self.buffer.len() < length {
                if !self.fill().await {
                    break;
                }
            }
            body = self.buffer.drain(..length.min(self.buffer.len())).collect();
        } else {
            while self.fill().await {}
            body = std::mem::take(&mut self.buffer);
        }
        Some(Response {
            status,
            headers,
            body,
        })
    }

    /// The next chunk of a chunked body; `None` at its end or when the connection drops.
    pub async fn read_chunk(&mut self) -> Option<Vec<u8>> {
        let line_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n") {
                break end;
            }
            if !self.fill().await {
                return None;
            }
        };
        let size_text = String::from_utf8_lossy(&self.buffer[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .expect("chunk size");
        while self.buffer.len() < line_end + 2 + size + 2 {
            if !self.fill().await {
                return None;
            }
        }
        let chunk = self.buffer[line_end + 2..line_end + 2 + size].to_vec();
        self.buffer.drain(..line_end + 2 + size + 2);
        (size > 0).then_some(chunk)
    }

    /// Whether the gateway closed the connection (reads until EOF, bounded).
    pub async fn closed_by_peer(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(
            tokio::time::timeout(READ_LIMIT, self.socket.read(&mut chunk)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// Sends one request on a new connection and reads the answer.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut conn = Conn::open(addr).await;
    conn.write(&request_bytes(method, path, headers, body))
        .await;
    conn.read_response()
        .await
        .expect("a response from the gateway")
}

pub async fn get(addr: SocketAddr, path: &str, key: Option<&str>) -> Response {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    send(addr, "GET", path, &headers, b"").await
}

/// `POST /v1/chat/completions` with a JSON body.
pub async fn chat(addr: SocketAddr, key: &str, body: &str) -> Response {
    let auth = format!("Bearer {key}");
    send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
    .await
}

/// `POST /v1/chat/completions` of `key` with a minimal body for `model`, as bytes on the
/// wire (for a connection the test keeps).
pub fn chat_request_bytes(key: &str, model: &str) -> Vec<u8> {
    let auth = format!("Bearer {key}");
    request_bytes(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        chat_body(model).as_bytes(),
    )
}

/// A minimal valid chat body for `model`.
pub fn chat_body(model: &str) -> String {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#)
}

/// An SSE response being read event by event.
pub struct EventStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    conn: Conn,
    data: Vec<u8>,
}

impl EventStream {
    /// Sends a streaming chat request and reads the response head.
    pub async fn open(addr: SocketAddr, key: &str, body: &str) -> EventStream {
        let mut conn = Self::open_without_head(addr, key, body).await;
        let (status, headers) = conn.read_head(false).await.expect("a response head");
        EventStream {
            status,
            headers,
            conn,
            data: Vec::new(),
        }
    }

    /// The next event's text (without `data: `) and when it arrived; `None` at the end.
    pub async fn next_event(&mut self) -> Option<(String, Instant)> {
        loop {
            if let Some(end) = find(&self.data, b"\n\n") {
                let event = String::from_utf8_lossy(&self.data[..end]).to_string();
                self.data.drain(..end + 2);
                let event = event
                    .trim_start_matches('\n')
                    .trim_start_matches("data: ")
                    .to_string();
                if event.is_empty() {
                    continue;
                }
                return Some((event, Instant::now()));
            }
            let chunk = self.conn.read_chunk().await?;
            self.data.extend_from_slice(&chunk);
        }
    }

    /// Every remaining event.
    pub async fn rest(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        while let Some((event, _)) = self.next_event().await {
            events.push(event);
        }
        events
    }

    /// Hangs up.
    pub fn disconnect(self) {
        drop(self.conn);
    }

    pub async fn closed_by_peer(&mut self) -> bool {
        self.conn.closed_by_peer().await
    }
}

impl EventStream {
    /// Sends a streaming request without waiting for any answer (for hang-ups before it).
    pub async fn open_without_head(addr: SocketAddr, key: &str, body: &str) -> Conn {
        let mut conn = Conn::open(addr).await;
        let auth = format!("Bearer {key}");
        conn.write(&request_bytes(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        ))
        .await;
        conn
    }
}
