//! A real gateway, in-process, on ephemeral ports, with its access log captured and its
//! rate limiter on a clock the test moves.

use sluice::access_log::AccessLog;
use sluice::catalog::Catalog;
use sluice::clock::{Clock, SystemWallClock, WallClock};
use sluice::gateway::Gateway;
use sluice::reload::Reloader;
use sluice::secret::KeyHash;
use sluice::server::{start, start_on, EventLoops, Running};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Client keys of the standard test catalog.
pub const ALPHA: &str = "sk-test-alpha-0123456789";
pub const BETA: &str = "sk-test-beta-0123456789";
pub const DISABLED: &str = "sk-test-disabled-0123456789";
/// The credential the gateway sends upstream (from `TEST_UPSTREAM_KEY`).
pub const UPSTREAM_SECRET: &str = "upstream-secret-value-42";
/// `response_ids.secret_env: TEST_RESPONSE_ID_SECRET` signs stored-response IDs with it.
pub const RESPONSE_ID_SECRET: &str = "test-response-id-secret-0123456789abcdef";
/// `TEST_RESPONSE_ID_PREVIOUS`: the secret of before a rotation.
pub const PREVIOUS_RESPONSE_ID_SECRET: &str = "test-response-id-previous-0123456789abcdef";

/// The environment test configurations read their secrets from.
pub fn test_env(name: &str) -> Option<String> {
    match name {
        "TEST_UPSTREAM_KEY" => Some(UPSTREAM_SECRET),
        "TEST_RESPONSE_ID_SECRET" => Some(RESPONSE_ID_SECRET),
        "TEST_RESPONSE_ID_PREVIOUS" => Some(PREVIOUS_RESPONSE_ID_SECRET),
        _ => None,
    }
    .map(str::to_owned)
}

/// The ID the gateway gives `owner` for a response `upstream_id` made on `model` by
/// `upstream`, when it signs with `secret`.
pub fn response_id_for(
    secret: &str,
    owner: &str,
    model: &str,
    upstream: &str,
    upstream_id: &str,
) -> String {
    let keys = sluice::response_id::IdKeys::new(secret.as_bytes(), None);
    sluice::response_id::StoredResponseId {
        model: model.into(),
        upstream: upstream.into(),
        upstream_id: upstream_id.into(),
    }
    .encode(sluice::response_id::IdIssuer { keys: &keys, owner })
    .expect("a plain upstream ID")
}

/// What an ID made with `secret` for `owner` names, if it is one.
pub fn read_response_id(
    secret: &str,
    owner: &str,
    id: &str,
) -> Option<sluice::response_id::StoredResponseId> {
    let keys = sluice::response_id::IdKeys::new(secret.as_bytes(), None);
    sluice::response_id::StoredResponseId::decode(
        id,
        sluice::response_id::IdIssuer { keys: &keys, owner },
    )
}

pub fn key_hash(key: &str) -> String {
    KeyHash::of(key.as_bytes()).to_hex()
}

/// The standard catalog: models with and without capabilities, a renamed one, a key that
/// sees everything, one that sees `public-*`, a disabled one. `extra` is appended at the top.
pub fn config_with(upstream_url: &str, extra: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
environment: test
{extra}
upstreams:
  - name: mock
    url: {upstream_url}
    api_key_env: TEST_UPSTREAM_KEY
    connect_timeout: 1s
    first_byte_timeout: 2s
    idle_timeout: 1s
models:
  - id: chat-model
    upstream: mock
    capabilities: [streaming, tool_calling]
  - id: plain-model
    upstream: mock
  - id: renamed
    upstream: mock
    upstream_model: org/real-name
    capabilities: [streaming]
  - id: public-one
    upstream: mock
    capabilities: [streaming]
keys:
  - name: alpha
    sha256: {alpha}
  - name: beta
    sha256: {beta}
    models: ["public-*"]
  - name: disabled
    sha256: {disabled}
    enabled: false
"#,
        alpha = key_hash(ALPHA),
        beta = key_hash(BETA),
        disabled = key_hash(DISABLED),
    )
}

/// The API key of [`limited_config`]'s key `limited`.
pub const LIMITED: &str = "sk-test-limited-0123456789";

/// [`config_with`]'s catalog with one more key, `limited` ([`LIMITED`]), whose settings are
/// `key_limits` (YAML lines indented under the key).
pub fn limited_config(upstream: &str, key_limits: &str) -> String {
    config_with(upstream, "").replace(
        "keys:\n",
        &format!(
            "keys:\n  - name: limited\n    sha256: {}\n{key_limits}\n",
            key_hash(LIMITED)
        ),
    )
}

pub fn config(upstream_url: &str) -> String {
    config_with(upstream_url, "")
}

/// A clock the test moves by hand.
#[derive(Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        // Start far from zero, like a real monotonic clock.
        Duration::from_secs(1_000) + Duration::from_micros(self.0.load(Ordering::SeqCst))
    }
}

/// A wall clock the test sets by hand; it starts at the real time and stands still.
pub struct ManualWallClock(AtomicI64);

impl Default for ManualWallClock {
    fn default() -> Self {
        ManualWallClock(AtomicI64::new(SystemWallClock.unix_millis()))
    }
}

impl ManualWallClock {
    /// Sets the time, in milliseconds since the Unix epoch.
    pub fn set(&self, unix_ms: i64) {
        self.0.store(unix_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl WallClock for ManualWallClock {
    fn unix_millis(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Wakes [`until_logged`] at each record the gateway logs (`sluice` targets) in this test
/// process. Records are not kept: the tests of one binary share the logger, so a record is
/// only a reason for each waiting test to look at its own gateway again.
struct LogWakeUp;

static LOGGED: Notify = Notify::const_new();

impl log::Log for LogWakeUp {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        let target = metadata.target();
        target == "sluice" || target.starts_with("sluice::")
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            LOGGED.notify_waiters();
        }
    }

    fn flush(&self) {}
}

/// Waits until `holds` is true: tried once, then again after each record the gateway logs
/// (a state change that logs, such as a reload, does so once it took effect). Unbounded:
/// the caller puts a timeout around it.
pub async fn until_logged<F, Fut>(mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // The first call installs it; the later ones find it there.
    if log::set_logger(&LogWakeUp).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    loop {
        let logged = LOGGED.notified();
        tokio::pin!(logged);
        logged.as_mut().enable();
        if holds().await {
            return;
        }
        logged.await;
    }
}

/// Captured access log lines, with a wake-up for each write.
#[derive(Clone, Default)]
pub struct SharedLog {
    bytes: Arc<Mutex<Vec<u8>>>,
    written: Arc<Notify>,
}

impl Write for SharedLog {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.bytes.lock().unwrap().extend_from_slice(data);
        self.written.notify_waiters();
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedLog {
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.bytes.lock().unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).expect("access log lines are JSON"))
            .collect()
    }
}

pub struct TestGateway {
    pub running: Running,
    pub log: SharedLog,
    pub clock: Arc<ManualClock>,
    /// The date keys' `expires_at` and `not_before` are checked against.
    pub wall: Arc<ManualWallClock>,
    /// Set when started from a file: reloads it on request and watches it.
    pub reloader: Option<Arc<Reloader>>,
}

impl TestGateway {
    /// With the limiter on a [`ManualClock`] the test moves (`self.clock`).
    pub async fn start(yaml: &str) -> TestGateway {
        let clock = Arc::new(ManualClock::default());
        Self::launch(yaml, clock.clone(), clock, EventLoops::Caller).await
    }

    /// With its client connections served on `loops` (worker threads of their own, as
    /// in the binary, for `EventLoops::PerCore`).
    pub async fn start_on(yaml: &str, loops: EventLoops) -> TestGateway {
        let clock = Arc::new(ManualClock::default());
        Self::launch(yaml, clock.clone(), clock, loops).await
    }

    /// With the limiter on `limiter_clock` (a real one for clients that sleep, like the
    /// SDKs); `self.clock` then moves nothing.
    pub async fn start_with_clock(yaml: &str, limiter_clock: Arc<dyn Clock>) -> TestGateway {
        Self::launch(
            yaml,
            limiter_clock,
            Arc::new(ManualClock::default()),
            EventLoops::Caller,
        )
        .await
    }

    async fn launch(
        yaml: &str,
        limiter_clock: Arc<dyn Clock>,
        clock: Arc<ManualClock>,
        loops: EventLoops,
    ) -> TestGateway {
        let config = sluice::config::parse("test.yaml", yaml, None, &test_env)
            .unwrap_or_else(|e| panic!("test config is valid:\n{e}"));
        let catalog = Catalog::build(&config, 1);
        let log = SharedLog::default();
        let wall = Arc::new(ManualWallClock::default());
        let gateway = Arc::new(
            Gateway::new(
                catalog,
                limiter_clock,
                AccessLog::new(Box::new(log.clone())),
            )
            .with_wall_clock(wall.clone())
            .with_tracing(config.tracing.as_ref())
            .expect("the tracer starts"),
        );
        let running = start_on(&config, gateway, loops)
            .await
            .expect("gateway starts");
        TestGateway {
            running,
            log,
            clock,
            wall,
            reloader: None,
        }
    }

    /// From a configuration file, with its watcher running as in the binary.
    pub async fn start_file(path: &std::path::Path) -> TestGateway {
        let config =
            sluice::config::load_files(path).unwrap_or_else(|e| panic!("valid config file:\n{e}"));
        let catalog = Catalog::build(&config, 1);
        let log = SharedLog::default();
        let clock = Arc::new(ManualClock::default());
        let access_log = AccessLog::new(Box::new(log.clone()));
        let wall = Arc::new(ManualWallClock::default());
        let gateway = Arc::new(
            Gateway::new(catalog, clock.clone(), access_log).with_wall_clock(wall.clone()),
        );
        let running = start(&config, Arc::clone(&gateway))
            .await
            .expect("gateway starts");
        let reloader = Arc::new(Reloader::new(gateway, path, config));
        tokio::spawn(Arc::clone(&reloader).watch(running.stopped()));
        TestGateway {
            running,
            log,
            clock,
            wall,
            reloader: Some(reloader),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn admin(&self) -> SocketAddr {
        self.running.admin_addr
    }

    pub fn gateway(&self) -> &Gateway {
        &self.running.gateway
    }

    /// Waits until `holds` is true of the gateway's state, yielding between looks; panics
    /// after 10 s. Only for state with no event to wait on (a request reaching an upstream's
    /// queue, an active check's verdict): the gateway's tasks run on the test's runtime, so
    /// each yield lets them move on, and no time is slept.
    pub async fn until(&self, what: &str, holds: impl Fn(&Gateway) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while !holds(self.gateway()) {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{what}: not within 10 s");
    }

    /// Waits until the access log has at least `count` lines, then returns them all.
    pub async fn log_lines(&self, count: usize) -> Vec<serde_json::Value> {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let written = self.log.written.notified();
                tokio::pin!(written);
                written.as_mut().enable();
                let lines = self.log.lines();
                if lines.len() >= count {
                    return lines;
                }
                written.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "expected {count} access log lines, have {:?}",
                self.log.lines()
            )
        })
    }

    /// The value of one metric sample, e.g. `sluice_requests_total{key="alpha",...}`.
    pub fn metric(&self, series: &str) -> f64 {
        let text = String::from_utf8(self.gateway().metrics.render()).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                l.rsplit_once(' ')
                    .filter(|(name, _)| *name == series)
                    .map(|(_, v)| v.parse().unwrap())
            })
            .unwrap_or(0.0)
    }
}
