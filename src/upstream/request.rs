//! What crosses to an upstream: the request header we send (credential injected in the
//! provider's style, its configured headers and query parameters added, client credentials,
//! hop-by-hop fields and any field whose name has a `_` removed, the client's address
//! appended to `X-Forwarded-For`).
//! [`authorize`] is the one place an upstream credential leaves its `Secret`. The way back
//! is `response.rs`.

use crate::catalog::Upstream;
use crate::http1::connection_tokens::ConnectionTokens;
use crate::percent::query_decode;
use http::{header, HeaderName, Method};
use pingora_http::RequestHeader;

/// A request head the gateway cannot send (what could not be): a byte in the target or in
/// a field value the gateway made that would break the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsendable(pub &'static str);

impl std::fmt::Display for Unsendable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

type Result<T> = std::result::Result<T, Unsendable>;

/// Fields never forwarded upstream: those that describe one connection (RFC 9110 §7.6.1),
/// the ones the gateway sets itself, and the client's credentials in any of the headers
/// clients put them in (a gateway key sent as `x-api-key` must not reach a third party).
///
/// A `match` rather than a list: every field is checked, and the compiled match compares
/// lengths first where a scan of the list compared the field with each name in turn.
fn not_forwarded_up(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "expect"
            | "host"
            | "content-length"
            | "authorization"
            | "cookie"
            | "x-api-key"
            | "api-key"
            | "x-forwarded-for"
    )
}

/// The chain of client addresses the request passed through.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The path of `route` (e.g. `/chat/completions`) under the upstream's base URL, without
/// a query string (for the access log).
pub fn upstream_path(upstream: &Upstream, route: &str) -> String {
    [upstream.base_path.as_str(), route].concat()
}

/// The path and query sent upstream: the upstream's `query` parameters first, then the
/// client's, less any whose name is one the upstream's configuration sets (the operator's
/// `api-version` wins). Names are compared as the upstream reads them, percent-decoded and
/// case-folded, so `api%2Dversion=` or `API-Version=` cannot shadow the operator's.
pub fn upstream_target(upstream: &Upstream, route: &str, client_query: Option<&str>) -> String {
    let configured = upstream.style.query.as_str();
    let path = upstream_path(upstream, route);
    let client_query = client_query.filter(|q| !q.is_empty());
    let Some(client_query) = client_query else {
        return if configured.is_empty() {
            path
        } else {
            format!("{path}?{configured}")
        };
    };
    let set_here: Vec<String> = configured
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(query_name)
        .collect();
    let client = client_query.split('&').filter(|pair| {
        !pair.is_empty() && (set_here.is_empty() || !set_here.contains(&query_name(pair)))
    });
    let query: Vec<&str> = std::iter::once(configured)
        .filter(|q| !q.is_empty())
        .chain(client)
        .collect();
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// The name of a query parameter (`name=value`, or a bare `name`) as an upstream compares
/// it: decoded and case-folded.
fn query_name(pair: &str) -> String {
    let name = pair.split_once('=').map_or(pair, |(name, _)| name);
    query_decode(name).to_lowercase()
}

/// A request head for an upstream, written as it goes on the wire: the request line, a
/// line per field, the blank line. No header map is built only to be written out again
/// (that cost ~5k instructions a request, benches/README.md). The client's fields come
/// from its parsed request and the gateway's are checked here, so every line is valid.
///
/// No `Debug`: the wire holds the upstream credential.
pub struct RequestHead {
    wire: Vec<u8>,
    head: bool,
}

impl RequestHead {
    /// The request line; `fields` is about how many field lines follow.
    fn new(method: &Method, target: &str, fields: usize) -> Result<Self> {
        // The target is the configured base path, the route and the client's parsed
        // query: a byte that would break the request line is refused all the same.
        if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(Unsendable("a request target that cannot be sent"));
        }
        let mut wire = Vec::with_capacity(target.len() + 24 + 48 * fields);
        wire.extend_from_slice(method.as_str().as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(target.as_bytes());
        wire.extend_from_slice(b" HTTP/1.1\r\n");
        Ok(RequestHead {
            wire,
            head: *method == Method::HEAD,
        })
    }

    /// A field whose value is already a valid field value (a parsed or configured one).
    fn field(&mut self, name: &HeaderName, value: &[u8]) {
        self.field_parts(wire_name(name), &[value]);
    }

    /// A field whose value the gateway made: refused when a byte could not be sent.
    fn checked_field(&mut self, name: &str, parts: &[&[u8]]) -> Result<()> {
        if !parts.iter().all(|part| is_field_value(part)) {
            return Err(Unsendable("a header value that cannot be sent"));
        }
        self.field_parts(name, parts);
        Ok(())
    }

    fn field_parts(&mut self, name: &str, parts: &[&[u8]]) {
        self.wire.extend_from_slice(name.as_bytes());
        self.wire.extend_from_slice(b": ");
        for part in parts {
            self.wire.extend_from_slice(part);
        }
        self.wire.extend_from_slice(b"\r\n");
    }

    /// Ends the head with its blank line.
    fn finish(mut self) -> Self {
        self.wire.extend_from_slice(b"\r\n");
        self
    }

    /// Adds a field the gateway sets when the client did not (a finished head stays one).
    pub fn add_field(&mut self, name: &str, value: &str) -> Result<()> {
        self.wire.truncate(self.wire.len().saturating_sub(2));
        let added = self.checked_field(name, &[value.as_bytes()]);
        self.wire.extend_from_slice(b"\r\n");
        added
    }

    /// The head's bytes, blank line included.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// A `HEAD` request (its answer has no body, whatever its framing says).
    pub fn is_head(&self) -> bool {
        self.head
    }

    /// The target and fields read back from the wire.
    #[cfg(test)]
    fn read_back(&self) -> (String, Vec<(String, String)>) {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut fields);
        assert!(request.parse(&self.wire).unwrap().is_complete());
        let target = request.path.unwrap().to_owned();
        let fields = request
            .headers
            .iter()
            .map(|f| {
                (
                    f.name.to_owned(),
                    String::from_utf8(f.value.to_vec()).unwrap(),
                )
            })
            .collect();
        (target, fields)
    }

    /// The value of the one field named `name` (any case), if any.
    #[cfg(test)]
    fn get(&self, name: &str) -> Option<String> {
        let (_, fields) = self.read_back();
        let mut found = fields
            .into_iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let value = found.next().map(|(_, v)| v);
        assert!(found.next().is_none(), "{name} is sent once");
        value
    }
}

/// A field name as written: the standard names a request carries title-cased, as pingora
/// wrote them when it wrote our requests, the rest as parsed (lower case).
fn wire_name(name: &HeaderName) -> &str {
    match *name {
        header::HOST => "Host",
        header::CONTENT_LENGTH => "Content-Length",
        header::CONTENT_TYPE => "Content-Type",
        header::CONTENT_ENCODING => "Content-Encoding",
        header::CACHE_CONTROL => "Cache-Control",
        header::DATE => "Date",
        _ => name.as_str(),
    }
}

/// What `HeaderValue` accepts: visible bytes, spaces and tabs (no line breaks).
fn is_field_value(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|&b| (b >= b' ' && b != 0x7f) || b == b'\t')
}

/// The trace context an upstream attempt is sent in place of the client's; a field with
/// an empty value is not sent.
pub struct TraceFields<'a> {
    /// Written by the gateway: hex digits and dashes, sent without a check.
    pub traceparent: &'a [u8],
    /// A trusted caller's entries, checked like any value the gateway sends.
    pub tracestate: &'a [u8],
}

/// The request head sent upstream for a request of `body_len` bytes, to `target` (path
/// and query, see [`upstream_target`]). `client_address` is appended to the client's
/// `X-Forwarded-For`; `trace`, when the request is traced, replaces the client's trace
/// context (`traceparent`, `tracestate`) so the upstream's spans join this attempt.
pub fn request_header(
    client: &RequestHeader,
    upstream: &Upstream,
    target: &str,
    request_id: &str,
    body_len: usize,
    client_address: Option<&str>,
    trace: Option<&TraceFields>,
) -> Result<RequestHead> {
    let style = &upstream.style;
    let mut head = RequestHead::new(
        &client.method,
        target,
        client.headers.len() + style.headers.len() + 6,
    )?;
    let named_by_connection = ConnectionTokens::of(&client.headers);
    // The client's `X-Forwarded-For` chain, gathered as the fields pass (not looked up).
    let mut chain = String::new();
    for (name, value) in client.headers.iter() {
        if *name == X_FORWARDED_FOR {
            let hop = value.to_str().ok().map(str::trim);
            if let Some(hop) = hop.filter(|hop| !hop.is_empty()) {
                add_hop(&mut chain, hop);
            }
            continue;
        }
        let lower = name.as_str();
        if not_forwarded_up(lower)
            // `Transfer_Encoding` reads as `Transfer-Encoding` where `_` maps to `-` (CGI,
            // WSGI): no such name is passed on (nginx's `underscores_in_headers off`).
            || memchr::memchr(b'_', lower.as_bytes()).is_some()
            || lower == "x-request-id"
            || *name == style.auth_header
            || named_by_connection.contains(lower)
            || (trace.is_some() && matches!(lower, "traceparent" | "tracestate"))
            // The upstream's configured `headers` take the place of the client's.
            || style.headers.iter().any(|(configured, _)| configured == name)
        {
            continue;
        }
        head.field(name, value.as_bytes());
    }
    head.checked_field("Host", &[upstream.host_header.as_bytes()])?;
    head.field_parts(
        "Content-Length",
        &[itoa::Buffer::new().format(body_len).as_bytes()],
    );
    head.checked_field(crate::request_id::HEADER.as_str(), &[request_id.as_bytes()])?;
    if let Some(address) = client_address {
        add_hop(&mut chain, address);
    }
    if !chain.is_empty() {
        head.checked_field("x-forwarded-for", &[chain.as_bytes()])?;
    }
    provider_fields(&mut head, upstream)?;
    if let Some(trace) = trace {
        if !trace.traceparent.is_empty() {
            head.field_parts("traceparent", &[trace.traceparent]);
        }
        if !trace.tracestate.is_empty() {
            head.checked_field("tracestate", &[trace.tracestate])?;
        }
    }
    Ok(head.finish())
}

/// The `GET` an active health check sends to `{url}/models`.
pub fn check_header(upstream: &Upstream) -> Result<RequestHead> {
    let target = upstream_target(upstream, "/models", None);
    let mut head = RequestHead::new(&Method::GET, &target, upstream.style.headers.len() + 2)?;
    head.checked_field("Host", &[upstream.host_header.as_bytes()])?;
    provider_fields(&mut head, upstream)?;
    Ok(head.finish())
}

/// The upstream's configured `headers` (the client's of the same names are left out),
/// then its credential.
fn provider_fields(head: &mut RequestHead, upstream: &Upstream) -> Result<()> {
    for (name, value) in &upstream.style.headers {
        head.field(name, value.as_bytes());
    }
    authorize(head, upstream)
}

/// Appends a hop to an `X-Forwarded-For` chain: one of the client's values (trimmed; an
/// empty one, or one not text, is left out), then the address the gateway saw.
fn add_hop(chain: &mut String, hop: &str) {
    if !chain.is_empty() {
        chain.push_str(", ");
    }
    chain.push_str(hop);
}

/// Adds the upstream's credential, when it has one, in its `auth_header` after its
/// `auth_scheme`: the only place it is exposed.
fn authorize(head: &mut RequestHead, upstream: &Upstream) -> Result<()> {
    let Some(credential) = &upstream.credential else {
        return Ok(());
    };
    let style = &upstream.style;
    let name = wire_name(&style.auth_header);
    let credential = credential.expose().as_bytes();
    let written = if style.auth_scheme.is_empty() {
        head.checked_field(name, &[credential])
    } else {
        head.checked_field(name, &[style.auth_scheme.as_bytes(), b" ", credential])
    };
    written.map_err(|_| Unsendable("the upstream credential is not a valid header value"))
}

#[cfg(test)]
mod tests;
