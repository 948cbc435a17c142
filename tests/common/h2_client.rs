//! HTTP/2 clients for the tests of the client listener: the `h2` crate's client over
//! cleartext (h2c by prior knowledge), and raw frames for what no client sends on purpose
//! (a CONTINUATION flood) or to read the server's SETTINGS as sent.

use super::*;
use bytes::Bytes;
use h2::client::SendRequest;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub const SLOW: &str = "sk-test-slow-0123456789abc";

pub const STREAM_BODY: &str =
    r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// `h2c: true` and `top`; two more keys: `limited` (one request at a time) and `slow` (one
/// request a minute).
pub fn h2c_config(upstream: &str, top: &str) -> String {
    config_with(upstream, &format!("h2c: true\n{top}")).replace(
        "keys:\n",
        &format!(
            "keys:\n  - name: limited\n    sha256: {}\n    max_concurrent: 1\n  - name: slow\n    sha256: {}\n    requests_per_minute: 1\n    burst: 1\n",
            key_hash(LIMITED),
            key_hash(SLOW)
        ),
    )
}

pub async fn h2c_gateway(top: &str) -> (MockUpstream, TestGateway) {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&h2c_config(&mock.url(), top)).await;
    (mock, gw)
}

/// `what` within 10 s, else the test fails (a bound on a hang, not a wait for readiness).
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 10 s"))
}

/// One chunk that opens an event stream, then nothing: the upstream holds the stream open.
pub fn first_event_then_stall() -> Reply {
    Reply::Sse {
        events: vec![(
            Duration::ZERO,
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"mock","choices":[{"index":0,"delta":{"content":"first"},"finish_reason":null}]}"#.into(),
        )],
        end: StreamEnd::Stall,
        close: false,
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A whole answer on an HTTP/2 stream.
pub struct H2Response {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl H2Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("a JSON body ({e}): {}", String::from_utf8_lossy(&self.body))
        })
    }
}

/// One h2c connection of the `h2` client, its driver on a task.
pub struct H2Client {
    pub send: SendRequest<Bytes>,
    /// The connection's driver: how the connection ended (on the handle that connected).
    pub connection: Option<JoinHandle<Result<(), h2::Error>>>,
    authority: String,
}

impl H2Client {
    /// Connects and says HTTP/2 at once (prior knowledge).
    pub async fn connect(addr: SocketAddr) -> H2Client {
        let tcp = TcpStream::connect(addr).await.expect("the gateway accepts");
        let (send, connection) = h2::client::handshake(tcp)
            .await
            .expect("an HTTP/2 handshake over cleartext");
        H2Client {
            send,
            connection: Some(tokio::spawn(connection)),
            authority: addr.to_string(),
        }
    }

    /// Another handle on the same connection, for a stream on another task.
    pub fn handle(&self) -> H2Client {
        H2Client {
            send: self.send.clone(),
            connection: None,
            authority: self.authority.clone(),
        }
    }

    /// A request head for `path`, with `headers`.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> http::Request<()> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.authority));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).expect("a valid request")
    }

    /// Sends a request (a body when `body` is not empty) and opens the answer's stream.
    pub async fn open(
        &mut self,
        request: http::Request<()>,
        body: &str,
    ) -> Result<(http::response::Parts, h2::RecvStream, h2::SendStream<Bytes>), h2::Error> {
        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(request, body.is_empty())?;
        if !body.is_empty() {
            stream.send_data(Bytes::copy_from_slice(body.as_bytes()), true)?;
        }
        let (parts, answer) = response.await?.into_parts();
        Ok((parts, answer, stream))
    }

    /// Sends a request and reads its whole answer.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<H2Response, h2::Error> {
        let request = self.request(method, path, headers);
        let (parts, mut answer, _stream) = self.open(request, body).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = answer.data().await {
            let chunk = chunk?;
            let _ = answer.flow_control().release_capacity(chunk.len());
            bytes.extend_from_slice(&chunk);
        }
        Ok(H2Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: bytes.into(),
        })
    }

    /// `POST /v1/chat/completions` with `key` and a JSON `body`.
    pub async fn chat(&mut self, key: &str, body: &str) -> H2Response {
        let auth = format!("Bearer {key}");
        self.send(
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body,
        )
        .await
        .expect("an answer over HTTP/2")
    }

    /// `GET path`, with `key` when given.
    pub async fn get(&mut self, path: &str, key: Option<&str>) -> H2Response {
        let auth = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        self.send("GET", path, &headers, "")
            .await
            .expect("an answer over HTTP/2")
    }
}

/// One frame as read off the wire.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// Frame types (RFC 9113 §6).
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
pub const CONTINUATION: u8 = 0x9;

/// A connection spoken to frame by frame.
pub struct RawH2 {
    tcp: TcpStream,
}

impl RawH2 {
    /// Connects, sends the preface and an empty SETTINGS frame.
    pub async fn connect(addr: SocketAddr) -> RawH2 {
        let mut tcp = TcpStream::connect(addr).await.expect("the gateway accepts");
        tcp.write_all(PREFACE).await.unwrap();
        let mut raw = RawH2 { tcp };
        raw.write_frame(SETTINGS, 0, 0, &[]).await;
        raw
    }

    pub async fn write_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.write_frames(&[(kind, flags, stream, payload)]).await;
    }

    /// Several frames in one write (one segment on loopback): the server reads them
    /// together.
    pub async fn write_frames(&mut self, frames: &[(u8, u8, u32, &[u8])]) {
        let mut wire = Vec::new();
        for (kind, flags, stream, payload) in frames {
            wire.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
            wire.push(*kind);
            wire.push(*flags);
            wire.extend_from_slice(&stream.to_be_bytes());
            wire.extend_from_slice(payload);
        }
        // The server may close while frames are still being sent (a flood it refused).
        let _ = self.tcp.write_all(&wire).await;
    }

    /// The next frame; `None` once the server closed the connection.
    pub async fn read_frame(&mut self) -> Option<Frame> {
        let mut head = [0u8; 9];
        self.tcp.read_exact(&mut head).await.ok()?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; length];
        self.tcp.read_exact(&mut payload).await.ok()?;
        Some(Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload,
        })
    }

    /// The server's first SETTINGS frame, as (identifier, value) pairs.
    pub async fn server_settings(&mut self) -> Vec<(u16, u32)> {
        loop {
            let frame = self.read_frame().await.expect("the server's SETTINGS");
            if frame.kind == SETTINGS && frame.flags & 0x1 == 0 {
                return frame
                    .payload
                    .chunks_exact(6)
                    .map(|s| {
                        (
                            u16::from_be_bytes([s[0], s[1]]),
                            u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
                        )
                    })
                    .collect();
            }
        }
    }

    /// The error code of the GOAWAY frame the server sends before it closes; `None` if it
    /// closed without one.
    pub async fn goaway(&mut self) -> Option<u32> {
        while let Some(frame) = self.read_frame().await {
            if frame.kind == GOAWAY {
                let code = &frame.payload[4..8];
                return Some(u32::from_be_bytes([code[0], code[1], code[2], code[3]]));
            }
        }
        None
    }
}

/// A header block (HPACK, no dynamic table, no Huffman coding) for `GET path` at
/// `authority`, each field short enough for a one-byte length.
pub fn get_block(authority: &str, path: &str) -> Vec<u8> {
    // :method GET, :scheme http (static table entries 2 and 6).
    let mut block = vec![0x82, 0x86];
    // :path and :authority as literals without indexing, named by static entries 4 and 1.
    for (name_index, value) in [(0x04, path), (0x01, authority)] {
        block.push(name_index);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}
