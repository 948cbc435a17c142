//! An access record as one JSON object, written by hand: the bytes serde_json writes for
//! the record's `Serialize` (the tests below hold the two equal for records with every
//! field, escapes, labels and absent values), at about a third of the cost. serde_json
//! spent ~7,500 instructions a line, most of them escaping strings a byte at a time
//! (`benches/README.md`, callgrind).

use super::AccessRecord;
use crate::json_object::next_special;

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
    object.millis("duration_ms", Some(record.duration_ms));
    object.millis("upstream_ms", record.upstream_ms);
    object.millis("ttfb_ms", record.ttfb_ms);
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
        object.millis("since_previous_ms", Some(ms));
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
        object.usd("cost_usd", micros);
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
    /// are; a label's name (free text) goes through [`quoted`]. Inlined, as the members
    /// that call it, so that each name is copied as a constant.
    #[inline(always)]
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

    #[inline(always)]
    fn string(&mut self, name: &str, value: &str) {
        self.name(name);
        quoted(self.out, value);
    }

    #[inline(always)]
    fn nullable_string(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(value) => self.string(name, value),
            None => self.null(name),
        }
    }

    #[inline(always)]
    fn integer(&mut self, name: &str, value: u64) {
        self.name(name);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    #[inline(always)]
    fn nullable_integer(&mut self, name: &str, value: Option<u64>) {
        match value {
            Some(value) => self.integer(name, value),
            None => self.null(name),
        }
    }

    /// A duration in milliseconds as serde_json writes the `f64` (the shortest form that
    /// reads back the same; `null` for NaN, infinities or an absent value). The record's
    /// durations are whole microseconds (`access_log::millis`): written as fixed-point
    /// digits, which is that same form, without float formatting.
    fn millis(&mut self, name: &str, value: Option<f64>) {
        match value.filter(|v| v.is_finite()) {
            Some(value) => {
                self.name(name);
                // The value is an exact number of thousandths (checked): then the shortest
                // form that reads back the same is those digits (a value this small is far
                // from a neighbour with fewer digits), written without trailing zeros.
                let thousandths = (value * 1000.0).round();
                if value.is_sign_positive()
                    && (0.0..MAX_FIXED).contains(&thousandths)
                    && thousandths / 1000.0 == value
                {
                    fixed::<3>(self.out, thousandths as u64);
                } else {
                    float(self.out, value);
                }
            }
            None => self.null(name),
        }
    }

    /// Micro-dollars written as USD, as serde_json writes the `f64` `micros / 10^6`.
    fn usd(&mut self, name: &str, micros: u64) {
        self.name(name);
        // Below 10 micro-dollars the shortest form is written with an exponent (`5e-6`).
        if (10..MAX_FIXED as u64).contains(&micros) {
            fixed::<6>(self.out, micros);
        } else {
            float(self.out, micros as f64 / 1_000_000.0);
        }
    }

    #[inline(always)]
    fn null(&mut self, name: &str) {
        self.name(name);
        self.out.extend_from_slice(b"null");
    }
}

/// Values written as fixed-point digits stay below this many units (thousandths of a
/// millisecond, micro-dollars): 10^15 is far below 2^53, where every such count is exact,
/// and the value far below where a neighbouring double would have fewer digits.
const MAX_FIXED: f64 = 1e15;

/// `value` as serde_json writes an `f64` (the shortest form that reads back the same).
fn float(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
}

/// `units / 10^DECIMALS` as the shortest float form writes it: the whole part, a point,
/// then the decimals without trailing zeros (`.0` when there are none).
fn fixed<const DECIMALS: usize>(out: &mut Vec<u8>, units: u64) {
    let scale = 10u64.pow(DECIMALS as u32);
    let (whole, mut part) = (units / scale, units % scale);
    out.extend_from_slice(itoa::Buffer::new().format(whole).as_bytes());
    // The point and the decimals, written from the last; at most six of them.
    let mut text = [b'.', b'0', b'0', b'0', b'0', b'0', b'0'];
    for slot in text[1..=DECIMALS].iter_mut().rev() {
        *slot = b'0' + (part % 10) as u8;
        part /= 10;
    }
    let mut end = DECIMALS + 1;
    while end > 2 && text[end - 1] == b'0' {
        end -= 1;
    }
    out.extend_from_slice(&text[..end]);
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
    loop {
        let at = next_special(bytes, start);
        out.extend_from_slice(&bytes[start..at]);
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        start = at + 1;
        match ESCAPE[usize::from(byte)] {
            b'u' => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
            escape => {
                out.push(b'\\');
                out.push(escape);
            }
        }
    }
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
mod tests;
