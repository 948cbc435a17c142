//! The access log: one JSON line per request on stdout, with the fields DESIGN §1 names.
//! Nothing secret is ever a field: no Authorization, no query string, no upstream credential.

mod json;

use serde::Serialize;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

/// One request's record. Written by `json::write_record`; the derived `Serialize` is the
/// reference its tests compare against.
#[derive(Debug, Default, Serialize)]
pub struct AccessRecord<'a> {
    pub ts: String,
    pub environment: &'a str,
    pub request_id: &'a str,
    /// The request's trace, when tracing is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
    pub host: &'a str,
    /// The protocol the request came in: `"1.1"` or `"2"`.
    pub http_version: &'a str,
    pub key: Option<&'a str>,
    /// The key's `owner` and `labels`, when it has them (free text from the configuration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_owner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_labels: Option<&'a std::collections::BTreeMap<String, String>>,
    pub model: Option<&'a str>,
    /// The catalog model that served: the one asked for, or a fallback of it.
    pub served_model: Option<&'a str>,
    pub upstream: Option<&'a str>,
    pub upstream_url: Option<&'a str>,
    pub status: u16,
    pub stream: bool,
    pub duration_ms: f64,
    pub upstream_ms: Option<f64>,
    pub ttfb_ms: Option<f64>,
    pub bytes_out: usize,
    /// The answer started and was broken off (the upstream cut it): the client got its head
    /// and part of its body. Only present when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_previous_ms: Option<f64>,
    /// An upstream's own error answer (a 4xx or 5xx passed on): its status, its error code
    /// and its request id (its message is `error_message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_error_code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_request_id: Option<&'a str>,
    /// The request was still running at the end of `shutdown_grace` and was ended there:
    /// written (`true`) only then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut_by_shutdown: bool,
    /// The tokens the answer reported, and those reserved for a key with token limits.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub reserved_tokens: Option<u64>,
    /// What the request cost in micro-dollars at its model's price (written as USD,
    /// `cost_usd`); absent for an unpriced model.
    #[serde(
        rename = "cost_usd",
        serialize_with = "micros_as_usd",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<u64>,
    /// The TLS version of the client's connection (`TLSv1.3`); absent on cleartext.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<&'a str>,
    /// The client certificate's subject (RFC 4514), on a listener with `client_ca_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_subject: Option<&'a str>,
}

/// Micro-dollars written as decimal USD.
fn micros_as_usd<S: serde::Serializer>(micros: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match micros {
        Some(m) => s.serialize_f64(*m as f64 / 1_000_000.0),
        None => s.serialize_none(),
    }
}

/// How often the background writer writes what requests logged.
const FLUSH_INTERVAL: Duration = Duration::from_millis(10);
/// Past this many bytes waiting (stdout blocked), new lines are dropped and counted.
const MAX_PENDING_BYTES: usize = 8 << 20;

/// Where access records go: stdout in the binary, a buffer in tests.
///
/// A request only appends its line to a buffer; a background thread writes the buffer out
/// every 10 ms. A write per request would cost a system call on every request's path.
/// Lines are never reordered; [`AccessLog::flush`] writes what is pending (at shutdown).
pub struct AccessLog {
    shared: Arc<Shared>,
    dropped: AtomicU64,
}

struct Shared {
    pending: Mutex<Vec<u8>>,
    out: Mutex<Box<dyn Write + Send>>,
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn drain(&self) {
        // Holding `out` across the swap keeps lines in order between two drains.
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if !batch.is_empty() {
            let _ = out.write_all(&batch);
            let _ = out.flush();
        }
    }
}

impl AccessLog {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Vec::with_capacity(64 << 10)),
            out: Mutex::new(out),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let writer = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || loop {
                let stopped = {
                    let guard = writer.stopped.lock().unwrap_or_else(|p| p.into_inner());
                    let (guard, _) = writer
                        .wake
                        .wait_timeout(guard, FLUSH_INTERVAL)
                        .unwrap_or_else(|p| p.into_inner());
                    *guard
                };
                writer.drain();
                if stopped {
                    return;
                }
            });
        if spawned.is_err() {
            // Without a writer thread every line is written by the request that logs it.
            *shared.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        }
        AccessLog {
            shared,
            dropped: AtomicU64::new(0),
        }
    }

    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()))
    }

    /// Appends one record as one line. Logging never fails a request: a failed write is
    /// dropped.
    pub fn write(&self, record: &AccessRecord) {
        let writer_running = !*self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if writer_running && pending.len() > MAX_PENDING_BYTES {
                // stdout is not draining (a blocked log pipe): drop the line rather than
                // block a request on it, and count it.
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            json::write_record(&mut pending, record);
            pending.push(b'\n');
        }
        if !writer_running {
            self.shared.drain();
        }
    }

    /// Lines dropped because stdout did not keep up.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes every pending line now.
    pub fn flush(&self) {
        self.shared.drain();
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        self.shared.drain();
    }
}

/// Milliseconds with three decimals, for log fields.
pub fn millis(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// The current time as RFC 3339 UTC with milliseconds, e.g. `2026-11-25T23:18:06.123Z`.
pub fn now_rfc3339() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since_epoch.as_millis() as i64)
}

fn rfc3339(epoch_millis: i64) -> String {
    let seconds = epoch_millis.div_euclid(1000);
    let millis = epoch_millis.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    // Digits written in place: `format!` cost about 1 % of the gateway's CPU per request.
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: u64| {
        for slot in text[at..at + width].iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year.clamp(0, 9999) as u64);
    put(5, 2, month.into());
    put(8, 2, day.into());
    put(11, 2, (of_day / 3600) as u64);
    put(14, 2, (of_day % 3600 / 60) as u64);
    put(17, 2, (of_day % 60) as u64);
    put(20, 3, millis as u64);
    String::from_utf8_lossy(&text).into_owned()
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_millis() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_648_686_123), "2026-11-25T23:18:06.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
