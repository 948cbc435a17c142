//! `gateway.yaml`: raw serde shapes, validated into typed settings with every error at once.
//!
//! Loading takes text, never a path (`load_files` is the thin wrapper that reads them), so
//! tests, `sluice check` and the reloader share one path. Each list item is parsed on its
//! own, and a field that cannot be read is reported and left out of the rest of the
//! checks, so every real error comes out once, all at once.
//!
//! This module holds the validated types; `load` the entry points. Each section of
//! `gateway.yaml` is validated in its own submodule: `server` (the top-level settings),
//! `upstream`, `model` and `key`, from the serde shapes in `raw` as `parsed` reads them,
//! with the error collector and scalar checks of `values`.

mod admin;
mod budget;
mod key;
mod keys_alone;
mod load;
mod model;
mod parsed;
mod provider;
mod raw;
mod response_ids;
mod retry_on;
mod server;
mod store;
mod syntax;
mod tls;
mod tracing;
mod upstream;
mod values;

pub use admin::{AdminToken, ENV_TOKEN_NAME};
pub use budget::{format_usd, Budget, OwnerConfig, Price, MICROS_PER_USD};
pub use keys_alone::with_keys_file;
pub use load::{load_files, load_files_with, parse, parse_with, read_file, HostLookup};
pub use values::{name_problem, parse_size, text_problem};

use crate::clock::{SystemWallClock, WallClock};
use crate::endpoint::EndpointType;
use crate::secret::{KeyHash, Secret};
use pingora_core::protocols::tls::CaType;
use raw::RawConfig;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use values::Errors;

/// One configuration problem, with the file and the key path it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// Something valid that is probably a mistake (a key's pattern that matches no model):
/// shown by `sluice check` and logged at load and reload, never a reason to refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {}", error.path, error.message)?;
        }
        Ok(())
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub environment: String,
    pub max_body_bytes: usize,
    /// Lower-case host names a request may name; empty means any.
    pub hosts: Vec<String>,
    pub threads: std::num::NonZeroUsize,
    pub max_concurrent: Option<NonZeroU32>,
    pub shutdown_grace: Duration,
    pub client_timeout: Duration,
    /// A request head must arrive whole within it.
    pub client_header_timeout: Duration,
    /// An idle keep-alive client connection closes after it.
    pub client_idle_timeout: Duration,
    /// Client connections open at once; past it the listener stops accepting.
    pub max_connections: NonZeroU32,
    /// Largest request head (request line and fields), an HTTP/2 header list too; past
    /// it 431.
    pub max_header_bytes: usize,
    /// HTTP/2 offered by ALPN on the TLS client listener (default true; nothing without
    /// `tls`).
    pub http2: bool,
    /// HTTP/2 by prior knowledge on a cleartext listener.
    pub h2c: bool,
    /// Streams open at once on one HTTP/2 connection.
    pub max_streams_per_connection: NonZeroU32,
    /// Resends after a failure that provably did not reach the upstream.
    pub retry_attempts: u32,
    /// First pause before a resend; doubled each time, with jitter.
    pub retry_backoff: Duration,
    /// How often the configuration and keys files are checked for changes.
    pub watch_interval: Duration,
    pub log_level: log::LevelFilter,
    pub echo_upstream: Option<SocketAddr>,
    pub keys_file: Option<PathBuf>,
    pub upstreams: Vec<UpstreamConfig>,
    pub models: Vec<ModelConfig>,
    pub keys: Vec<KeyConfig>,
    /// Names of key `labels` that become labels of `sluice_key_info`.
    pub metric_labels: Vec<String>,
    /// What a valid configuration probably got wrong, in file order.
    pub warnings: Vec<ConfigWarning>,
    /// Where limits shared by every replica live; `None`: in this process.
    pub limits_store: Option<LimitsStoreConfig>,
    /// `tracing:`: traces exported over OTLP; `None` (the section absent) traces nothing.
    pub tracing: Option<TracingConfig>,
    /// `response_ids:`: what stored-response IDs are signed with; `None`: a secret of
    /// this process alone.
    pub response_ids: Option<ResponseIdSecrets>,
    /// `admin_tokens` and `admin_token_env`: the tokens of the admin listener's protected
    /// endpoints; empty: only a loopback admin listener serves them (docs/operations.md).
    pub admin_tokens: Vec<AdminToken>,
    /// `owners:`: budgets shared by every key of an owner.
    pub owners: Vec<OwnerConfig>,
    /// `tls:`: TLS on the client listener, its files read; `None`: cleartext.
    pub tls: Option<crate::listener::tls::TlsSettings>,
    /// `admin_tls:`: TLS on the admin listener; `None`: cleartext.
    pub admin_tls: Option<crate::listener::tls::TlsSettings>,
}

/// `response_ids`: the secrets (from the environment) that sign stored-response IDs.
#[derive(Debug, Clone)]
pub struct ResponseIdSecrets {
    /// Signs new IDs and reads them.
    pub current: Secret,
    /// Still reads IDs made before a rotation.
    pub previous: Option<Secret>,
}

/// `limits_store`: the Redis (or Valkey) that holds the limits every replica shares.
#[derive(Debug, Clone)]
pub struct LimitsStoreConfig {
    /// `redis://` or `rediss://` (TLS), without a password.
    pub url: String,
    /// `url` is one node of a Redis Cluster: the client learns the others from it and
    /// sends each key's calls to the node that holds its slot.
    pub cluster: bool,
    pub password: Option<Secret>,
    /// `ca_file` (PEM), for a `rediss://` store whose certificate the system's roots do not
    /// sign.
    pub ca: Option<Vec<u8>>,
    /// Longest wait for one call; past it the call counts as failed.
    pub timeout: Duration,
    pub on_error: OnStoreError,
    /// With `on_error: local`, each replica enforces the limits divided by this.
    pub expected_replicas: NonZeroU32,
    /// How long a concurrency lease lives without a refresh (a dead replica's leases are
    /// gone after it).
    pub lease_lifetime: Duration,
    /// What every Redis key of the store starts with (`namespace`, default the
    /// configuration's `environment`), so deployments sharing one Redis keep apart.
    pub namespace: String,
}

/// What admission does while the limits store cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// In-process limits, each divided by `expected_replicas`.
    Local,
    /// Admit without limits.
    Open,
    /// Refuse with 503 `limits_unavailable`.
    Closed,
}

/// `tracing:`: where the gateway's traces go, and which requests are traced.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP traces URL (`http://collector:4318/v1/traces`).
    pub otlp_endpoint: http::Uri,
    /// `service.name` of every span.
    pub service_name: String,
    /// The share of requests whose spans are recorded, 0 to 1: always the gateway's
    /// decision, drawn per request, whatever an incoming `traceparent` says.
    pub sample_ratio: f64,
    /// Sent with every export (a collector's credentials): values are redacted.
    pub headers: Vec<(http::HeaderName, Secret)>,
    /// An incoming `traceparent` becomes the parent of the request's span (its trace ID is
    /// kept); `false` (the default) links it instead, and the request starts a trace of
    /// its own.
    pub trust_incoming: bool,
}

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub name: String,
    pub url: http::Uri,
    /// The URL's host, resolved when the configuration was loaded.
    pub addr: SocketAddr,
    /// Certificate authorities trusted for this https upstream instead of the system's.
    pub ca: Option<Arc<CaType>>,
    pub credential: Option<Secret>,
    /// Where the credential goes, and what else every request to it carries.
    pub style: ProviderStyle,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub policy: UpstreamPolicy,
}

/// How the gateway protects an upstream and itself from it (docs/routing.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamPolicy {
    /// Longest whole exchange, first byte to last; none by default.
    pub total_timeout: Option<Duration>,
    /// Requests in flight to this upstream at once; more wait in a queue.
    pub max_concurrent: Option<NonZeroU32>,
    /// Requests that may wait for a slot; more are refused at once.
    pub max_queue: u32,
    /// Longest wait in the queue before 503 `upstream_saturated`.
    pub queue_timeout: Duration,
    /// Cooldown after a 429 that names no `Retry-After`.
    pub rate_limit_cooldown: Duration,
    /// The failures that move a request to another target of its model.
    pub retry_on: Vec<RetryOn>,
    /// Consecutive failures that eject the upstream.
    pub eject_after_failures: u32,
    /// First ejection; each further one in a row doubles it, up to `eject_duration_max`.
    pub eject_duration: Duration,
    pub eject_duration_max: Duration,
    /// Active check (`GET {url}/models`) period; none by default.
    pub health_check_interval: Option<Duration>,
    /// What the gateway does to streamed chat and completions requests to read their usage.
    pub stream_usage: StreamUsage,
}

/// How usage is obtained from an upstream's streams (`stream_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamUsage {
    /// Ask for the usage chunk (`stream_options.include_usage`), and take it out again for a
    /// client that did not ask.
    #[default]
    Inject,
    /// Forward request and stream as they are; usage is read when the client asked for it.
    Passthrough,
    /// Never touch the request body (for upstreams that refuse `stream_options`).
    Off,
}

/// A failure that moves a request to another target of its model (`retry_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOn {
    /// No connection could be opened: the upstream never saw the request.
    ConnectFailure,
    /// No response header within `first_byte_timeout`: the upstream may have processed it.
    FirstByteTimeout,
    /// The upstream answered with this status (429, 500, 502, 503 or 504).
    Status(u16),
}

impl RetryOn {
    /// Without `retry_on`: the failures that say the upstream did not process the request.
    pub const DEFAULT: [RetryOn; 3] = [
        RetryOn::ConnectFailure,
        RetryOn::Status(429),
        RetryOn::Status(503),
    ];
}

/// How a provider wants to be called: the header and scheme of the credential, and the
/// headers and query parameters every request to it carries (Azure OpenAI's `api-key` and
/// `api-version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderStyle {
    /// `Authorization` unless `auth_header` says otherwise.
    pub auth_header: http::HeaderName,
    /// Written before the credential with a space (`Bearer`); empty: the bare credential.
    pub auth_scheme: String,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The `query` parameters, encoded (`api-version=2024-06-01`); empty when none.
    pub query: String,
}

impl Default for ProviderStyle {
    fn default() -> Self {
        ProviderStyle {
            auth_header: http::header::AUTHORIZATION,
            auth_scheme: "Bearer".into(),
            headers: Vec::new(),
            query: String::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub id: String,
    pub targets: Vec<TargetConfig>,
    /// What the model is (shown in `/v1/models`).
    pub endpoint_type: EndpointType,
    /// Every endpoint type whose routes it serves, `endpoint_type` first.
    pub endpoints: Vec<EndpointType>,
    pub streaming: bool,
    pub tool_calling: bool,
    /// Model IDs that take a request this model cannot serve, in order.
    pub fallbacks: Vec<String>,
    pub owned_by: String,
    pub created: u64,
    /// Output tokens reserved for a request that names no limit of its own.
    pub default_max_tokens: u64,
    /// A request that sets no output limit gets `default_max_tokens` written into it, so
    /// what is reserved is a ceiling.
    pub enforce_output_limit: bool,
    /// What its tokens cost (`price`), in micro-dollars per million; `None`: unpriced.
    pub price: Option<Price>,
    /// The API its upstreams speak: requests on the other API's route are translated.
    pub upstream_api: crate::endpoint::UpstreamApi,
}

#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub upstream: String,
    pub weight: NonZeroU32,
    pub upstream_model: Option<String>,
}

#[derive(Debug, Clone)]
pub struct KeyConfig {
    pub name: String,
    pub hash: KeyHash,
    /// `disabled: true` (or the older `enabled: false`): refused until re-enabled.
    pub disabled: bool,
    /// Refused before this instant, in milliseconds since the Unix epoch.
    pub not_before_unix_ms: Option<i64>,
    /// Refused from this instant on, in milliseconds since the Unix epoch.
    pub expires_at_unix_ms: Option<i64>,
    /// Who the key belongs to: free text for logs and the admin view.
    pub owner: Option<String>,
    /// Free-text labels for logs and the admin view; in metrics only through
    /// `metric_labels` and `sluice_key_info`.
    pub labels: BTreeMap<String, String>,
    /// Glob patterns over model IDs; `None` means every model.
    pub models: Option<Vec<String>>,
    pub requests_per_minute: Option<NonZeroU32>,
    pub burst: Option<NonZeroU32>,
    pub max_concurrent: Option<NonZeroU32>,
    pub tokens_per_minute: Option<NonZeroU64>,
    pub tokens_per_day: Option<NonZeroU64>,
    /// The key's own money budget (its owner's is in `owners`).
    pub budget: Option<Budget>,
}
