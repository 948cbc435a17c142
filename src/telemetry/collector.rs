//! The collector the export thread posts to: each batch as one OTLP/HTTP protobuf request
//! (`ExportTraceServiceRequest`, the resource and scope once per batch, encoded by prost),
//! over a plain TCP connection of its own, every step under a timeout, retried as OTLP
//! says. Its bytes are written and read by the HTTP layer's blocking client
//! (`http1/blocking_client.rs`); an export happens about once a second, so a connection
//! per export costs nothing, and exporting brings no HTTP client stack or async runtime.

use super::export::{Batch, Sender};
use crate::http1::blocking_client;
use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::{encode_key, encode_varint, message, WireType};
use prost::Message;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Largest collector answer read, head and body (an OTLP answer is a few bytes; an error
/// page, more); a longer one is an export error.
const MAX_ANSWER_BYTES: usize = 64 << 10;
/// Retries of an export after its first try, and the wait before the first (doubled for
/// each further one, up to the last): OTLP's recommended policy.
const RETRIES: u32 = 3;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const LAST_RETRY_DELAY: Duration = Duration::from_millis(1600);

/// Where and how spans are posted.
#[derive(Debug)]
pub(super) struct Collector {
    pub endpoint: Uri,
    /// `tracing.headers`, then ours.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The `service.name` and the SDK's resource attributes, sent with every batch.
    pub resource: Resource,
    pub resource_schema: String,
    /// Longest one export may take, retries included; also each step's timeout.
    pub timeout: Duration,
}

/// Why an export try failed.
struct Failure {
    message: String,
    retry: bool,
    /// How long the collector asked us to wait (`Retry-After`).
    after: Option<Duration>,
}

impl Collector {
    /// Posts an export, retrying a try that failed on the network or with 429, 502, 503
    /// or 504 until [`Collector::timeout`] has passed. `Ok` has how many spans the
    /// collector said it rejected (a partial success).
    pub(super) fn export(&self, request: &Request<Bytes>) -> Result<u64, String> {
        let started = Instant::now();
        let mut delay = FIRST_RETRY_DELAY;
        let mut retries = 0;
        loop {
            let failure = match self.post(request) {
                Ok(rejected) => return Ok(rejected),
                Err(failure) => failure,
            };
            let wait = failure.after.unwrap_or(delay);
            if !failure.retry || retries == RETRIES || started.elapsed() + wait >= self.timeout {
                return Err(failure.message);
            }
            std::thread::sleep(wait);
            retries += 1;
            delay = (delay * 2).min(LAST_RETRY_DELAY);
        }
    }

    /// The POST of one batch (its buffer begun with [`Sender::prefix`]), the resource and
    /// scope once.
    pub(super) fn request(&self, batch: BytesMut) -> Result<Request<Bytes>, String> {
        let body = frame_batch(&self.resource, &self.resource_schema, batch);
        let mut request = Request::post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(USER_AGENT, concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .body(body)
            .map_err(|e| e.to_string())?;
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        Ok(request)
    }

    fn post(&self, request: &Request<Bytes>) -> Result<u64, Failure> {
        let network = |message: String| Failure {
            message,
            retry: true,
            after: None,
        };
        let uri = request.uri();
        let host = uri
            .host()
            .ok_or_else(|| network("the collector URL has no host".into()))?;
        let port = uri.port_u16().unwrap_or(80);
        let address = (host, port)
            .to_socket_addrs()
            .map_err(|e| network(e.to_string()))?
            .next()
            .ok_or_else(|| network("the collector's host name has no address".into()))?;
        let mut stream = TcpStream::connect_timeout(&address, self.timeout)
            .and_then(|stream| {
                stream.set_write_timeout(Some(self.timeout))?;
                stream.set_read_timeout(Some(self.timeout))?;
                // The body is written apart from the head: its last segment must not wait
                // for the head's acknowledgement.
                stream.set_nodelay(true)?;
                Ok(stream)
            })
            .map_err(|e| network(e.to_string()))?;
        let answer = blocking_client::exchange(&mut stream, request, MAX_ANSWER_BYTES)
            .map_err(|e| network(e.to_string()))?;
        if !answer.status.is_success() {
            let throttled = matches!(answer.status.as_u16(), 429 | 503);
            return Err(Failure {
                message: format!("the collector answered {}", answer.status),
                retry: throttled
                    || matches!(
                        answer.status,
                        StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
                    ),
                after: answer
                    .headers
                    .get("retry-after")
                    .filter(|_| throttled)
                    .and_then(|v| v.to_str().ok()?.trim().parse().ok())
                    .map(Duration::from_secs),
            });
        }
        // A partial success names the spans it rejected; an empty or other body, none.
        Ok(ExportTraceServiceResponse::decode(answer.body)
            .ok()
            .and_then(|answer| answer.partial_success)
            .map_or(0, |partial| partial.rejected_spans.max(0) as u64))
    }
}

/// The export thread's batches go to the collector.
impl Sender for Collector {
    /// Room for the messages around the spans (written last, [`frame_batch`]), then the
    /// scope, which comes before the spans in their `ScopeSpans`.
    fn prefix(&self) -> Vec<u8> {
        batch_prefix(&self.resource)
    }

    fn send(&self, batch: Batch) -> (u64, Option<BytesMut>) {
        let count = batch.spans as u64;
        let request = match self.request(batch.bytes) {
            Ok(request) => request,
            Err(e) => {
                log::debug!(target: "sluice::telemetry", spans = count, error:% = e; "trace export failed; spans dropped");
                return (count, None);
            }
        };
        let lost = match self.export(&request) {
            Ok(rejected) => {
                if rejected > 0 {
                    log::debug!(target: "sluice::telemetry", spans = rejected; "the collector rejected spans");
                }
                rejected
            }
            Err(e) => {
                log::debug!(target: "sluice::telemetry", spans = count, error:% = e; "trace export failed; spans dropped");
                count
            }
        };
        // The body's buffer, for another batch (the request held its only reference).
        (lost, request.into_body().try_into_mut().ok())
    }
}

/// What a batch's buffer starts with: [`room`], then the scope (`sluice`).
fn batch_prefix(resource: &Resource) -> Vec<u8> {
    let mut prefix = vec![0; room(resource)];
    let scope = InstrumentationScope {
        name: "sluice".into(),
        ..InstrumentationScope::default()
    };
    message::encode(1, &scope, &mut prefix);
    prefix
}

/// Bytes left in front of a batch's scope and spans for the messages around them: three
/// one-byte keys, three lengths of at most ten bytes and the resource.
fn room(resource: &Resource) -> usize {
    3 * (1 + 10) + resource.encoded_len()
}

/// A batch as the bytes of an `ExportTraceServiceRequest` with one `ResourceSpans` holding
/// one `ScopeSpans` (scope `sluice`) of its spans: the bytes prost's derived encoding
/// writes for that message. `batch` holds [`room`] bytes, then the scope and the spans as
/// fields of the `ScopeSpans` (see `span.rs`); the messages around them are written last,
/// into the room in front, so the spans are not copied. Fields go in tag order and an
/// empty schema URL is left out, as prost does.
fn frame_batch(resource: &Resource, resource_schema: &str, mut batch: BytesMut) -> Bytes {
    // ExportTraceServiceRequest { 1: ResourceSpans { 1: resource, 2: ScopeSpans { 1: scope,
    // 2: span, 2: span... }, 3: schema_url } }
    let room = room(resource);
    let scope_spans = batch.len() - room;
    if !resource_schema.is_empty() {
        encode_key(3, WireType::LengthDelimited, &mut batch);
        encode_varint(resource_schema.len() as u64, &mut batch);
        batch.extend_from_slice(resource_schema.as_bytes());
    }
    let mut around = Vec::with_capacity(room);
    message::encode(1, resource, &mut around);
    encode_key(2, WireType::LengthDelimited, &mut around);
    encode_varint(scope_spans as u64, &mut around);
    let resource_spans = around.len() + (batch.len() - room);
    let mut head = Vec::with_capacity(room);
    encode_key(1, WireType::LengthDelimited, &mut head);
    encode_varint(resource_spans as u64, &mut head);
    head.extend_from_slice(&around);
    let start = room - head.len();
    batch[start..room].copy_from_slice(&head);
    batch.freeze().slice(start..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn attribute(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        }
    }

    /// What prost's derived encoding writes for the same batch.
    fn derived(resource: &Resource, schema: &str, spans: &[Span]) -> Vec<u8> {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "sluice".into(),
                        ..InstrumentationScope::default()
                    }),
                    spans: spans.to_vec(),
                    schema_url: String::new(),
                }],
                schema_url: schema.into(),
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn a_batch_is_the_bytes_of_the_derived_encoding() {
        let resource = Resource {
            attributes: vec![attribute(
                "service.name",
                any_value::Value::StringValue("sluice".into()),
            )],
            ..Resource::default()
        };
        let span = |n: u8| Span {
            trace_id: vec![n; 16],
            span_id: vec![n; 8],
            name: format!("POST /v1/chat/completions {n}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(n),
            end_time_unix_nano: 1_700_000_000_500_000_000,
            // Long enough that a length takes two varint bytes.
            attributes: (0..u32::from(n) * 8)
                .map(|i| attribute(&format!("a.{i}"), any_value::Value::IntValue(i.into())))
                .collect(),
            flags: 0x301,
            ..Span::default()
        };
        for spans in [vec![], vec![span(1)], (0..20).map(span).collect::<Vec<_>>()] {
            for schema in ["", "https://opentelemetry.io/schemas/1.26.0"] {
                // The spans as `span.rs` writes them: fields of the `ScopeSpans`.
                let mut batch = BytesMut::from(&batch_prefix(&resource)[..]);
                for span in &spans {
                    message::encode(2, span, &mut batch);
                }
                assert_eq!(
                    frame_batch(&resource, schema, batch).to_vec(),
                    derived(&resource, schema, &spans),
                    "{} spans, schema {schema:?}",
                    spans.len()
                );
            }
        }
    }
}
