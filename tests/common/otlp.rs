//! A small OTLP/HTTP trace receiver: takes `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest`, decodes it with the protocol's own types, and keeps every
//! span (with its service name) for the test to look at.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One received span, the `service.name` of its resource, the resource's attributes and
/// the instrumentation scope it came under.
#[derive(Clone, Debug)]
pub struct Received {
    pub service: String,
    pub resource: Vec<KeyValue>,
    pub scope: Option<InstrumentationScope>,
    pub span: Span,
}

impl Received {
    pub fn name(&self) -> &str {
        &self.span.name
    }

    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    pub fn attribute(&self, key: &str) -> Option<Value> {
        attribute(&self.span.attributes, key)
    }

    pub fn text(&self, key: &str) -> Option<String> {
        match self.attribute(key)? {
            Value::StringValue(s) => Some(s),
            other => panic!("{key} is a string, not {other:?}"),
        }
    }

    /// A text attribute of the span's resource.
    pub fn resource_text(&self, key: &str) -> Option<String> {
        match attribute(&self.resource, key)? {
            Value::StringValue(s) => Some(s),
            other => panic!("{key} is a string, not {other:?}"),
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attribute(key)? {
            Value::IntValue(i) => Some(i),
            other => panic!("{key} is an integer, not {other:?}"),
        }
    }

    /// The span's status code: 0 unset, 1 ok, 2 error.
    pub fn status_code(&self) -> i32 {
        self.span.status.as_ref().map_or(0, |s| s.code)
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Default)]
struct State {
    spans: Mutex<Vec<Received>>,
    /// The headers of the last export.
    headers: Mutex<Vec<(String, String)>>,
    changed: Notify,
}

pub struct OtlpReceiver {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind OTLP receiver");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let accept_state = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(receive(socket, Arc::clone(&accept_state)));
            }
        });
        OtlpReceiver { addr, state }
    }

    /// The `otlp_endpoint` to configure (a base URL: the gateway adds `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Received> {
        self.state.spans.lock().unwrap().clone()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.state
            .headers
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }

    /// Waits until at least `count` spans arrived (10 s at most), then returns them all.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let changed = self.state.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let spans = self.spans();
                if spans.len() >= count {
                    return spans;
                }
                changed.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "expected {count} spans, have {:?}",
                self.spans().iter().map(Received::name).collect::<Vec<_>>()
            )
        })
    }
}

/// One export: the head, the protobuf body, then a `200` with an empty answer.
async fn receive(socket: TcpStream, state: Arc<State>) {
    let mut reader = BufReader::new(socket);
    let mut headers = Vec::new();
    let mut length = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            let (name, value) = (name.trim().to_string(), value.trim().to_string());
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().expect("a content-length number");
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).await.is_err() {
        return;
    }
    let export = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf body");
    let mut received = Vec::new();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| attribute(&r.attributes, "service.name"))
            .map(|v| match v {
                Value::StringValue(s) => s,
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        let resource = resource_spans
            .resource
            .map(|r| r.attributes)
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(Received {
                    service: service.clone(),
                    resource: resource.clone(),
                    scope: scope_spans.scope.clone(),
                    span,
                });
            }
        }
    }
    *state.headers.lock().unwrap() = headers;
    state.spans.lock().unwrap().extend(received);
    state.changed.notify_waiters();
    let mut socket = reader.into_inner();
    let _ = socket
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await;
    let _ = socket.shutdown().await;
}
