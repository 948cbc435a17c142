//! A mock OpenAI-compatible upstream on 127.0.0.1:0. Each request takes the next queued
//! [`Reply`] (or the default) and is recorded, body and headers included.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How a stream ends.
#[derive(Clone, Debug)]
pub enum StreamEnd {
    /// The final chunk, as a well-behaved server sends it.
    Done,
    /// The socket is closed without the final chunk.
    Cut,
    /// Nothing more is sent; the connection stays open.
    Stall,
}

/// What the mock answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
        delay: Duration,
        close: bool,
    },
    /// `events` are sent as `data: <event>\n\n`, each after its delay.
    Sse {
        events: Vec<(Duration, String)>,
        end: StreamEnd,
        close: bool,
    },
    /// Read the request, then close the connection without a byte of answer.
    CloseAfterReading,
    /// Answer bytes that are not HTTP.
    Garbage,
    /// Read the request and never answer.
    Silent,
    /// A chat completion, sent only once the test calls [`MockUpstream::open_gate`].
    Gated,
    /// This reply, sent only once the test calls [`MockUpstream::open_gate`].
    GatedWith(Box<Reply>),
    /// The start of a response head, then the connection closes.
    PartialThenClose,
    /// These bytes as they are, then the connection closes (a close-delimited body).
    Raw(Vec<u8>),
    /// These bytes as soon as the request head is read, then the connection closes without
    /// reading the body (an upstream refusing a body over its limit).
    EarlyAnswer(Vec<u8>),
}

impl Reply {
    pub fn json(status: u16, body: &str) -> Reply {
        Reply::Json {
            status,
            headers: vec![],
            body: body.to_string(),
            delay: Duration::ZERO,
            close: false,
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Json { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// The same JSON reply, sent `delay` after the request came.
    pub fn delayed(mut self, delay: Duration) -> Reply {
        if let Reply::Json { delay: after, .. } = &mut self {
            *after = delay;
        }
        self
    }

    /// The same reply, with the connection closed after it (no `connection: close` said).
    pub fn closing(mut self) -> Reply {
        if let Reply::Json { close, .. } | Reply::Sse { close, .. } = &mut self {
            *close = true;
        }
        self
    }

    pub fn completion() -> Reply {
        Reply::json(
            200,
            r#"{"id":"chatcmpl-mock","object":"chat.completion","created":1,"model":"mock","choices":[{"index":0,"message":{"role":"assistant","content":"hello from mock"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}"#,
        )
    }

    /// `count` chat completion chunks `gap` apart, then `[DONE]`.
    pub fn stream(count: usize, gap: Duration) -> Reply {
        let mut events: Vec<(Duration, String)> = (0..count)
            .map(|i| {
                let chunk = format!(
                    r#"{{"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1,"model":"mock","choices":[{{"index":0,"delta":{{"content":"t{i} "}},"finish_reason":null}}]}}"#
                );
                (if i == 0 { Duration::ZERO } else { gap }, chunk)
            })
            .collect();
        events.push((Duration::ZERO, "[DONE]".into()));
        Reply::Sse {
            events,
            end: StreamEnd::Done,
            close: false,
        }
    }
}

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which accepted connection (0-based) carried it.
    pub connection: usize,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    queue: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    connections: AtomicUsize,
    /// Connections the gateway closed while the mock was still answering.
    abandoned: AtomicUsize,
    /// Connections that ended (closed by either side).
    closed: AtomicUsize,
    /// Record a body's SHA-256 instead of the body (large uploads, flat memory).
    digest_bodies: std::sync::atomic::AtomicBool,
    changed: Notify,
    gate: tokio::sync::watch::Sender<bool>,
}

pub struct MockUpstream {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl MockUpstream {
    pub async fn start() -> MockUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock upstream");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            queue: Mutex::default(),
            default: Mutex::default(),
            requests: Mutex::default(),
            connections: AtomicUsize::default(),
            abandoned: AtomicUsize::default(),
            closed: AtomicUsize::default(),
            digest_bodies: std::sync::atomic::AtomicBool::new(false),
            changed: Notify::new(),
            gate: tokio::sync::watch::channel(false).0,
        });
        let accept_state = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let index = accept_state.connections.fetch_add(1, Ordering::SeqCst);
                let state = Arc::clone(&accept_state);
                tokio::spawn(async move {
                    serve_connection(socket, index, Arc::clone(&state)).await;
                    state.closed.fetch_add(1, Ordering::SeqCst);
                    state.changed.notify_waiters();
                });
            }
        });
        MockUpstream { addr, state }
    }

    /// The base URL to configure, ending in `/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues the reply for the next request.
    pub fn push(&self, reply: Reply) {
        self.state.queue.lock().unwrap().push_back(reply);
    }

    /// The reply once the queue is empty (a chat completion unless set).
    pub fn set_default(&self, reply: Reply) {
        *self.state.default.lock().unwrap() = Some(reply);
    }

    /// Lets every [`Reply::Gated`] answer go.
    pub fn open_gate(&self) {
        self.state.gate.send_replace(true);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// From now on, a request's recorded `body` is the SHA-256 of its body, which is read
    /// without being held.
    pub fn digest_bodies(&self) {
        self.state.digest_bodies.store(true, Ordering::SeqCst);
    }

    /// Connections that have ended.
    pub fn closed(&self) -> usize {
        self.state.closed.load(Ordering::SeqCst)
    }

    pub fn abandoned(&self) -> usize {
        self.state.abandoned.load(Ordering::SeqCst)
    }

    /// Waits (event-driven, bounded) until `done` holds for the mock's counters.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&MockUpstream) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let changed = self.state.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if done(self) {
                    return;
                }
                changed.await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "mock upstream: timed out waiting for {what}"
        );
    }
}

async fn serve_connection(mut socket: TcpStream, index: usize, state: Arc<State>) {
    let mut buffer = Vec::new();
    loop {
        let Some(head) = read_head(&mut socket, &mut buffer, index).await else {
            return;
        };
        let early = {
            let mut queue = state.queue.lock().unwrap();
            match queue.front() {
                Some(Reply::EarlyAnswer(_)) => queue.pop_front(),
                _ => None,
            }
        };
        if let Some(Reply::EarlyAnswer(bytes)) = early {
            state.requests.lock().unwrap().push(head.0);
            state.changed.notify_waiters();
            let _ = socket.write_all(&bytes).await;
            return;
        }
        let digest = state.digest_bodies.load(Ordering::SeqCst);
        let Some(request) = read_body(&mut socket, &mut buffer, head, digest).await else {
            return;
        };
        state.requests.lock().unwrap().push(request);
        state.changed.notify_waiters();
        let reply = state.queue.lock().unwrap().pop_front();
        let reply = reply
            .or_else(|| state.default.lock().unwrap().clone())
            .unwrap_or_else(Reply::completion);
        let keep_open = answer(&mut socket, reply, &state).await;
        if !keep_open {
            return;
        }
    }
}

/// Writes the reply; returns whether the connection may carry another request.
async fn answer(socket: &mut TcpStream, reply: Reply, state: &State) -> bool {
    match reply {
        Reply::Json {
            status,
            headers,
            body,
            delay,
            close,
        } => {
            if wait_or_closed(socket, delay).await {
                abandoned(state);
                return false;
            }
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let sent = socket.write_all(head.as_bytes()).await.is_ok()
                && socket.write_all(body.as_bytes()).await.is_ok();
            sent && !close
        }
        Reply::Sse { events, end, close } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
            if socket.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            for (delay, event) in events {
                if wait_or_closed(socket, delay).await {
                    abandoned(state);
                    return false;
                }
                let data = format!("data: {event}\n\n");
                let chunk = format!("{:x}\r\n{data}\r\n", data.len());
                if socket.write_all(chunk.as_bytes()).await.is_err() {
                    abandoned(state);
                    return false;
                }
            }
            match end {
                StreamEnd::Done => socket.write_all(b"0\r\n\r\n").await.is_ok() && !close,
                StreamEnd::Cut => false,
                StreamEnd::Stall => {
                    wait_or_closed(socket, Duration::from_secs(30)).await;
                    abandoned(state);
                    false
                }
            }
        }
        Reply::CloseAfterReading => false,
        Reply::Garbage => {
            let _ = socket
                .write_all(b"this is not an HTTP response\r\n\r\n")
                .await;
            false
        }
        Reply::Silent => {
            wait_or_closed(socket, Duration::from_secs(30)).await;
            abandoned(state);
            false
        }
        Reply::PartialThenClose => {
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-").await;
            false
        }
        Reply::Raw(bytes) | Reply::EarlyAnswer(bytes) => {
            let _ = socket.write_all(&bytes).await;
            false
        }
        Reply::Gated => {
            Box::pin(answer(
                socket,
                Reply::GatedWith(Box::new(Reply::completion())),
                state,
            ))
            .await
        }
        Reply::GatedWith(reply) => {
            let mut gate = state.gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            Box::pin(answer(socket, *reply, state)).await
        }
    }
}

fn abandoned(state: &State) {
    state.abandoned.fetch_add(1, Ordering::SeqCst);
    state.changed.notify_waiters();
}

/// Waits `delay`, or less if the peer closes the connection; returns whether it closed.
async fn wait_or_closed(socket: &mut TcpStream, delay: Duration) -> bool {
    if delay.is_zero() {
        return false;
    }
    let mut probe = [0u8; 1];
    tokio::select! {
        _ = tokio::time::sleep(delay) => false,
        read = socket.peek(&mut probe) => matches!(read, Ok(0) | Err(_)),
    }
}

/// A request head read off the connection (its body not yet) and the body's length.
struct Head(Recorded, usize);

async fn read_head(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    connection: usize,
) -> Option<Head> {
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 65536];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    parsed.parse(&buffer[..head_end]).ok()?;
    let method = parsed.method?.to_string();
    let path = parsed.path?.to_string();
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    buffer.drain(..head_end);
    Some(Head(
        Recorded {
            method,
            path,
            headers,
            body: Vec::new(),
            connection,
        },
        length,
    ))
}

async fn read_body(
    socket: &mut TcpStream,
    buffer: &mut Vec<u8>,
    head: Head,
    digest: bool,
) -> Option<Recorded> {
    let Head(mut request, length) = head;
    if digest {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        let mut left = length;
        let first = buffer.len().min(left);
        hasher.update(&buffer[..first]);
        buffer.drain(..first);
        left -= first;
        let mut chunk = vec![0u8; 64 << 10];
        while left > 0 {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            let used = n.min(left);
            hasher.update(&chunk[..used]);
            buffer.extend_from_slice(&chunk[used..n]);
            left -= used;
        }
        request.body = hasher.finalize().to_vec();
        return Some(request);
    }
    while buffer.len() < length {
        let mut chunk = vec![0u8; 1 << 20];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    request.body = buffer.drain(..length).collect();
    Some(request)
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
