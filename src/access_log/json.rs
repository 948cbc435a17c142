//! An access record as one JSON object, written by hand: the bytes serde_json writes for
//! the record's `Serialize` (the tests below hold the two equal for records with every
//! field, escapes, labels and absent values), at about a third of the cost. serde_json
//! spent ~7,500 instructions a line, most of them escaping strings a byte at a time
//! (`benches/README.md`, callgrind).

use super::AccessRecord;

/// Appends `record` to `out` as a JSON object (no line end).
pub(super) fn write_record(out: &mut Vec<u8>, record: &AccessRecord) {
    let mut object = Object::open(out);
    object.string("ts", &record.ts);
    object.string("environment", record.environment);
    object.string("request_id", record.request_id);
    if let Some(trace_id) = &record.trace_id {
        object.string("trace_id", trace_id);
    }
    object.string("method", record.method);
    object.string("path", record.path);
    object.string("host", record.host);
    object.string("http_version", record.http_version);
    object.nullable_string("key", record.key);
    if let Some(owner) = record.key_owner {
        object.string("key_owner", owner);
    }
    if let Some(labels) = record.key_labels {
        object.name("key_labels");
        let mut inner = Object::open(object.out);
        for (name, value) in labels {
            inner.free_name(name);
            quoted(inner.out, value);
        }
        inner.close();
    }
    object.nullable_string("model", record.model);
    object.nullable_string("served_model", record.served_model);
    object.nullable_string("upstream", record.upstream);
    object.nullable_string("upstream_url", record.upstream_url);
    object.integer("status", record.status.into());
    object.name("stream");
    object
        .out
        .extend_from_slice(if record.stream { b"true" } else { b"false" });
    object.float("duration_ms", Some(record.duration_ms));
    object.float("upstream_ms", record.upstream_ms);
    object.float("ttfb_ms", record.ttfb_ms);
    object.integer("bytes_out", record.bytes_out as u64);
    if record.cut {
        object.name("cut");
        object.out.extend_from_slice(b"true");
    }
    if let Some(code) = record.error_code {
        object.string("error_code", code);
    }
    if let Some(message) = &record.error_message {
        object.string("error_message", message);
    }
    if let Some(ms) = record.retry_after_ms {
        object.integer("retry_after_ms", ms);
    }
    if let Some(ms) = record.since_previous_ms {
        object.float("since_previous_ms", Some(ms));
    }
    if let Some(status) = record.upstream_status {
        object.integer("upstream_status", status.into());
    }
    if let Some(code) = record.upstream_error_code {
        object.string("upstream_error_code", code);
    }
    if let Some(id) = record.upstream_request_id {
        object.string("upstream_request_id", id);
    }
    if record.cut_by_shutdown {
        object.name("cut_by_shutdown");
        object.out.extend_from_slice(b"true");
    }
    object.nullable_integer("input_tokens", record.input_tokens);
    object.nullable_integer("output_tokens", record.output_tokens);
    object.nullable_integer("reserved_tokens", record.reserved_tokens);
    if let Some(micros) = record.cost_usd {
        object.float("cost_usd", Some(micros as f64 / 1_000_000.0));
    }
    if let Some(version) = record.tls_version {
        object.string("tls_version", version);
    }
    if let Some(subject) = record.tls_client_subject {
        object.string("tls_client_subject", subject);
    }
    object.close();
}

/// An object being written: members are separated as they are added.
struct Object<'o> {
    out: &'o mut Vec<u8>,
    empty: bool,
}

impl<'o> Object<'o> {
    fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Object { out, empty: true }
    }

    fn close(self) {
        self.out.push(b'}');
    }

    /// A member's name: the record's own names need no escape and are copied as they
    /// are; a label's name (free text) goes through [`quoted`].
    fn name(&mut self, name: &str) {
        if !std::mem::take(&mut self.empty) {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn free_name(&mut self, name: &str) {
        if !std::mem::take(&mut self.empty) {
            self.out.push(b',');
        }
        quoted(self.out, name);
        self.out.push(b':');
    }

    fn string(&mut self, name: &str, value: &str) {
        self.name(name);
        quoted(self.out, value);
    }

    fn nullable_string(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(value) => self.string(name, value),
            None => self.null(name),
        }
    }

    fn integer(&mut self, name: &str, value: u64) {
        self.name(name);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn nullable_integer(&mut self, name: &str, value: Option<u64>) {
        match value {
            Some(value) => self.integer(name, value),
            None => self.null(name),
        }
    }

    /// As serde_json writes an `f64`: the shortest form that reads back the same, and
    /// `null` for what JSON cannot hold (NaN, infinities) or an absent value.
    fn float(&mut self, name: &str, value: Option<f64>) {
        match value.filter(|v| v.is_finite()) {
            Some(value) => {
                self.name(name);
                self.out
                    .extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
            }
            None => self.null(name),
        }
    }

    fn null(&mut self, name: &str) {
        self.name(name);
        self.out.extend_from_slice(b"null");
    }
}

/// A JSON string: runs that need no escape are copied whole; `"`, `\` and control
/// characters are escaped as serde_json escapes them (short forms where JSON has one,
/// `\u00xx` otherwise); everything else, UTF-8 included, passes as it is.
fn quoted(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape = ESCAPE[usize::from(byte)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// For each byte: 0 when it passes as it is, else the letter after the backslash (`u`:
/// written as `\u00xx`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn by_hand(record: &AccessRecord) -> String {
        let mut out = Vec::new();
        write_record(&mut out, record);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_record_with_every_field_is_written_as_serde_json_writes_it() {
        let labels = BTreeMap::from([
            ("team".to_string(), "search \"core\"".to_string()),
            ("tier\n".to_string(), "gold\\1".to_string()),
        ]);
        let record = AccessRecord {
            ts: "2026-11-26T22:00:00.123Z".into(),
            environment: "prod",
            request_id: "abc123",
            trace_id: Some("0af7651916cd43dd8448eb211c80319c"),
            method: "POST",
            path: "/v1/chat/completions",
            host: "gw.example:8080",
            http_version: "2",
            key: Some("alpha"),
            key_owner: Some("Zoë <ops@example.com>"),
            key_labels: Some(&labels),
            model: Some("chat\u{1}model\u{1f}\u{7f}"),
            served_model: Some("fallback"),
            upstream: Some("primary"),
            upstream_url: Some("http://127.0.0.1:9/v1/chat/completions"),
            status: 429,
            stream: true,
            duration_ms: 12.345,
            upstream_ms: Some(0.001),
            ttfb_ms: Some(1e21),
            bytes_out: 1_048_576,
            cut: true,
            error_code: Some("rate_limited"),
            error_message: Some("tab\there, cr\r, bs\u{8}, ff\u{c}, \"quoted\" \\ end".into()),
            retry_after_ms: Some(1500),
            since_previous_ms: Some(250.5),
            upstream_status: Some(503),
            upstream_error_code: Some("overloaded"),
            upstream_request_id: Some("req_9"),
            cut_by_shutdown: true,
            input_tokens: Some(12),
            output_tokens: Some(u64::MAX),
            reserved_tokens: Some(0),
            cost_usd: Some(1_234_567),
            tls_version: Some("TLSv1.3"),
            tls_client_subject: Some("CN=team \"a\"\\,O=acme"),
        };
        assert_eq!(by_hand(&record), serde_json::to_string(&record).unwrap());
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them_wherever_the_escape_falls() {
        for special in [
            '"', '\\', '\n', '\u{1}', '\u{1f}', '\u{7f}', 'é', ' ', '!', '#',
        ] {
            for length in 0..24 {
                for at in 0..length {
                    let text: String = (0..length)
                        .map(|i| {
                            if i == at {
                                special
                            } else {
                                char::from(b'a' + (i % 26) as u8)
                            }
                        })
                        .collect();
                    let mut out = Vec::new();
                    quoted(&mut out, &text);
                    assert_eq!(
                        String::from_utf8(out).unwrap(),
                        serde_json::to_string(&text).unwrap(),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn absent_values_are_null_or_left_out_as_serde_json_does() {
        let record = AccessRecord {
            ts: String::new(),
            duration_ms: f64::NAN,
            upstream_ms: Some(f64::INFINITY),
            ..AccessRecord::default()
        };
        let written = by_hand(&record);
        assert_eq!(written, serde_json::to_string(&record).unwrap());
        assert!(written.contains(r#""duration_ms":null"#), "{written}");
        let empty_labels = BTreeMap::new();
        let labelled = AccessRecord {
            key_labels: Some(&empty_labels),
            duration_ms: 0.0,
            ..AccessRecord::default()
        };
        assert_eq!(
            by_hand(&labelled),
            serde_json::to_string(&labelled).unwrap()
        );
    }
}
