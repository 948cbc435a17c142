//! Diagnostic logs: JSON lines on stderr (the access log has stdout to itself).
//!
//! Records of other crates are capped at `warn` whatever the level: pingora traces request
//! headers at `trace`, and a header can hold a key.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;

struct JsonLogger {
    level: LevelFilter,
}

/// Installs the logger for the process; later calls keep the first one.
pub fn init(level: LevelFilter) {
    if log::set_boxed_logger(Box::new(JsonLogger { level })).is_ok() {
        log::set_max_level(level.max(LevelFilter::Warn));
    }
}

fn ours(target: &str) -> bool {
    target == "sluice" || target.starts_with("sluice::")
}

impl Log for JsonLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        let cap = if ours(metadata.target()) {
            self.level
        } else {
            self.level.min(LevelFilter::Warn)
        };
        metadata.level() <= cap
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut fields = serde_json::Map::new();
        fields.insert("ts".into(), crate::access_log::now_rfc3339().into());
        fields.insert("level".into(), level_name(record.level()).into());
        fields.insert("target".into(), record.target().into());
        fields.insert("message".into(), record.args().to_string().into());
        let mut visitor = Fields(&mut fields);
        let _ = record.key_values().visit(&mut visitor);
        let mut line = serde_json::Value::Object(fields).to_string();
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

struct Fields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl<'kvs> log::kv::VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'kvs>,
        value: log::kv::Value<'kvs>,
    ) -> Result<(), log::kv::Error> {
        // Numbers and booleans stay JSON numbers and booleans; everything else is text.
        let value = if let Some(n) = value.to_u64() {
            n.into()
        } else if let Some(n) = value.to_i64() {
            n.into()
        } else if let Some(b) = value.to_bool() {
            b.into()
        } else if let Some(x) = value.to_f64().and_then(serde_json::Number::from_f64) {
            serde_json::Value::Number(x)
        } else {
            value.to_string().into()
        };
        self.0.insert(key.to_string(), value);
        Ok(())
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug => "debug",
        Level::Trace => "trace",
    }
}
