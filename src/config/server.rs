//! The top-level settings of `gateway.yaml`: listeners, body limit, hosts, threads, the
//! gateway-wide cap, timeouts, retries, the reload watch, log level and the echo backend.

use super::parsed::Parsed;
use super::raw::{RawConfig, RawSize};
use super::values::{duration, nonzero, parse_size, socket_addr, Bounds, Errors};
use super::{Config, ConfigWarning, KeyConfig, ModelConfig, UpstreamConfig};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

/// Client connections open at once when `max_connections` is not set.
/// `environment` when none is configured.
pub(super) const DEFAULT_ENVIRONMENT: &str = "production";

const DEFAULT_MAX_CONNECTIONS: NonZeroU32 = NonZeroU32::new(10_000).unwrap();

/// Everything of [`Config`] but its lists, checked; a listener is `None` only after an
/// error was recorded for it.
pub(super) struct Settings {
    listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    environment: String,
    max_body_bytes: usize,
    hosts: Vec<String>,
    threads: NonZeroUsize,
    max_concurrent: Option<NonZeroU32>,
    shutdown_grace: Duration,
    client_timeout: Duration,
    client_header_timeout: Duration,
    client_idle_timeout: Duration,
    max_connections: NonZeroU32,
    max_header_bytes: usize,
    http2: bool,
    h2c: bool,
    max_streams_per_connection: NonZeroU32,
    retry_attempts: u32,
    retry_backoff: Duration,
    watch_interval: Duration,
    log_level: log::LevelFilter,
    echo_upstream: Option<SocketAddr>,
    keys_file: Option<PathBuf>,
}

impl Settings {
    /// `admin_listen`, if it parsed.
    pub(super) fn admin_listen(&self) -> Option<SocketAddr> {
        self.admin_listen
    }

    /// The configuration: these settings and the validated lists. Only for a load that
    /// recorded no error.
    pub(super) fn into_config(
        self,
        upstreams: Vec<UpstreamConfig>,
        models: Vec<ModelConfig>,
        keys: Vec<KeyConfig>,
        metric_labels: Vec<String>,
        warnings: Vec<ConfigWarning>,
    ) -> Config {
        Config {
            listen: self.listen.expect("no error, so it parsed"),
            admin_listen: self.admin_listen.expect("no error, so it parsed"),
            environment: self.environment,
            max_body_bytes: self.max_body_bytes,
            hosts: self.hosts,
            threads: self.threads,
            max_concurrent: self.max_concurrent,
            shutdown_grace: self.shutdown_grace,
            client_timeout: self.client_timeout,
            client_header_timeout: self.client_header_timeout,
            client_idle_timeout: self.client_idle_timeout,
            max_connections: self.max_connections,
            max_header_bytes: self.max_header_bytes,
            http2: self.http2,
            h2c: self.h2c,
            max_streams_per_connection: self.max_streams_per_connection,
            retry_attempts: self.retry_attempts,
            retry_backoff: self.retry_backoff,
            watch_interval: self.watch_interval,
            log_level: self.log_level,
            echo_upstream: self.echo_upstream,
            keys_file: self.keys_file,
            upstreams,
            models,
            keys,
            metric_labels,
            tracing: None,
            response_ids: None,
            admin_tokens: Vec::new(),
            owners: Vec::new(),
            warnings,
            limits_store: None,
            tls: None,
            admin_tls: None,
        }
    }
}

/// Checks the top-level settings, in the order their errors are reported.
pub(super) fn settings(errors: &mut Errors, parsed: &Parsed<RawConfig>) -> Settings {
    let raw = &parsed.raw;
    let (listen, admin_listen) = listeners(errors, parsed);
    let max_body_bytes = body_limit(errors, raw.max_body_bytes.as_ref());
    let threads = threads(errors, raw.threads);
    let max_concurrent = nonzero(errors, "max_concurrent", raw.max_concurrent);
    let shutdown_grace = duration(
        errors,
        "shutdown_grace",
        raw.shutdown_grace.as_deref(),
        Duration::from_secs(30),
        Bounds::LONG,
    );
    let client_timeout = duration(
        errors,
        "client_timeout",
        raw.client_timeout.as_deref(),
        Duration::from_secs(60),
        Bounds::LONG,
    );
    let client_header_timeout = duration(
        errors,
        "client_header_timeout",
        raw.client_header_timeout.as_deref(),
        Duration::from_secs(10),
        Bounds::WAIT,
    );
    let client_idle_timeout = duration(
        errors,
        "client_idle_timeout",
        raw.client_idle_timeout.as_deref(),
        Duration::from_secs(60),
        Bounds::LONG,
    );
    let max_connections = match raw.max_connections.map(NonZeroU32::new) {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(Some(limit)) => limit,
        Some(None) => {
            errors.push(
                "max_connections",
                "must be at least 1 (leave it out for the default of 10000)",
            );
            DEFAULT_MAX_CONNECTIONS
        }
    };
    let max_header_bytes = header_limit(errors, raw.max_header_bytes.as_ref());
    let (http2, h2c, max_streams_per_connection) = http2(errors, raw);
    let (retry_attempts, retry_backoff) = retries(errors, raw);
    let watch_interval = duration(
        errors,
        "watch_interval",
        raw.watch_interval.as_deref(),
        Duration::from_millis(500),
        Bounds::WATCH,
    );
    let log_level = log_level(errors, raw.log_level.as_deref());
    let echo_upstream = raw
        .echo_upstream
        .as_ref()
        .and_then(|echo| socket_addr(errors, "echo_upstream.listen", &echo.listen));
    Settings {
        listen,
        admin_listen,
        environment: raw
            .environment
            .clone()
            .unwrap_or_else(|| DEFAULT_ENVIRONMENT.into()),
        max_body_bytes,
        hosts: raw.hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
        threads,
        max_concurrent,
        shutdown_grace: shutdown_grace.unwrap_or_default(),
        client_timeout: client_timeout.unwrap_or_default(),
        client_header_timeout: client_header_timeout.unwrap_or_default(),
        client_idle_timeout: client_idle_timeout.unwrap_or_default(),
        max_connections,
        max_header_bytes,
        http2,
        h2c,
        max_streams_per_connection,
        retry_attempts,
        retry_backoff,
        watch_interval: watch_interval.unwrap_or_default(),
        log_level,
        echo_upstream,
        keys_file: raw.keys_file.as_deref().map(PathBuf::from),
    }
}

/// The client and admin listeners, which must not share a port. One that could not be
/// read is `None`: its default is no stand-in for what was written.
fn listeners(
    errors: &mut Errors,
    parsed: &Parsed<RawConfig>,
) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let mut listener = |field: &str, written: Option<&str>, default: &str| {
        if parsed.unreadable(field) {
            return None;
        }
        socket_addr(errors, field, written.unwrap_or(default))
    };
    let listen = listener("listen", parsed.raw.listen.as_deref(), "0.0.0.0:8080");
    let admin_listen = listener(
        "admin_listen",
        parsed.raw.admin_listen.as_deref(),
        "127.0.0.1:9090",
    );
    if let (Some(client), Some(admin)) = (listen, admin_listen) {
        if client == admin && client.port() != 0 {
            errors.push(
                "admin_listen",
                "must differ from `listen`: the admin listener is never the client port",
            );
        }
    }
    (listen, admin_listen)
}

/// `max_body_bytes`: 8 MiB by default, never zero.
fn body_limit(errors: &mut Errors, size: Option<&RawSize>) -> usize {
    let max_body_bytes = match size {
        None => 8 << 20,
        Some(RawSize::Bytes(n)) => *n as usize,
        Some(RawSize::Text(text)) => parse_size(text).unwrap_or_else(|| {
            errors.push(
                "max_body_bytes",
                format!("'{text}' is not a size (examples: 8MiB, 512KiB, 1048576)"),
            );
            0
        }),
    };
    if max_body_bytes == 0
        && !errors
            .list
            .iter()
            .any(|e| e.path.ends_with("max_body_bytes"))
    {
        errors.push("max_body_bytes", "must be greater than zero");
    }
    max_body_bytes
}

/// Largest request head: 32 KiB by default, between 1 KiB and 1 MiB (a head must hold a
/// request line and its credentials; past 1 MiB one connection's head is a memory risk).
fn header_limit(errors: &mut Errors, size: Option<&RawSize>) -> usize {
    const BOUNDS: std::ops::RangeInclusive<usize> = (1 << 10)..=(1 << 20);
    let bytes = match size {
        None => return crate::http1::server::DEFAULT_MAX_HEAD_BYTES,
        Some(RawSize::Bytes(n)) => usize::try_from(*n).ok(),
        Some(RawSize::Text(text)) => parse_size(text),
    };
    match bytes {
        Some(bytes) if BOUNDS.contains(&bytes) => bytes,
        _ => {
            errors.push(
                "max_header_bytes",
                "must be a size from 1KiB to 1MiB (examples: 32KiB, 65536)",
            );
            crate::http1::server::DEFAULT_MAX_HEAD_BYTES
        }
    }
}

/// Most streams `max_streams_per_connection` may allow.
const MAX_STREAMS_PER_CONNECTION: u32 = 10_000;

/// `http2` (default true: it only acts on a TLS listener), `h2c` (default false; needs
/// `http2`) and `max_streams_per_connection` (default 100, at most 10000).
fn http2(errors: &mut Errors, raw: &RawConfig) -> (bool, bool, NonZeroU32) {
    let http2 = raw.http2.unwrap_or(true);
    let h2c = raw.h2c.unwrap_or(false);
    if h2c && !http2 {
        errors.push(
            "h2c",
            "needs `http2` (leave `http2` out, or set it to true)",
        );
    }
    let default =
        NonZeroU32::new(crate::http2::DEFAULT_MAX_CONCURRENT_STREAMS).unwrap_or(NonZeroU32::MIN);
    let streams = match raw.max_streams_per_connection {
        None => default,
        Some(n) => match NonZeroU32::new(n).filter(|n| n.get() <= MAX_STREAMS_PER_CONNECTION) {
            Some(n) => n,
            None => {
                errors.push(
                    "max_streams_per_connection",
                    "must be from 1 to 10000 (leave it out for the default of 100)",
                );
                default
            }
        },
    };
    (http2, h2c, streams)
}

/// Event loops serving clients: one per available core by default.
fn threads(errors: &mut Errors, threads: Option<usize>) -> NonZeroUsize {
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    NonZeroUsize::new(threads).unwrap_or_else(|| {
        errors.push("threads", "must be at least 1");
        NonZeroUsize::MIN
    })
}

/// `retry_attempts` (bounded) and `retry_backoff`.
fn retries(errors: &mut Errors, raw: &RawConfig) -> (u32, Duration) {
    let retry_attempts = raw.retry_attempts.unwrap_or(2);
    if retry_attempts > 10 {
        errors.push(
            "retry_attempts",
            "at most 10: retries multiply load on a struggling backend",
        );
    }
    let retry_backoff = duration(
        errors,
        "retry_backoff",
        raw.retry_backoff.as_deref(),
        Duration::from_millis(50),
        Bounds::BACKOFF,
    );
    (retry_attempts, retry_backoff.unwrap_or_default())
}

fn log_level(errors: &mut Errors, text: Option<&str>) -> log::LevelFilter {
    match text.unwrap_or("info").parse() {
        Ok(level) => level,
        Err(_) => {
            errors.push(
                "log_level",
                "must be one of off, error, warn, info, debug, trace",
            );
            log::LevelFilter::Info
        }
    }
}
