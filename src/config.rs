//! `gateway.yaml`: raw serde shapes, validated into typed settings with every error at once.
//!
//! Loading takes text, never a path (`load_files` is the thin wrapper that reads them), so
//! tests, `sluice check` and the reloader share one path. Each list item is parsed on its
//! own, so one bad upstream does not hide the errors of the next.

use crate::secret::{KeyHash, Secret};
use pingora::protocols::tls::CaType;
use pingora::utils::tls::{parse_x509, WrappedX509};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One configuration problem, with the file and the key path it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
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
    pub threads: usize,
    pub max_concurrent: Option<NonZeroU32>,
    pub shutdown_grace: Duration,
    pub client_timeout: Duration,
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
    /// Consecutive failures that eject the upstream.
    pub eject_after_failures: u32,
    /// First ejection; each further one in a row doubles it, up to `eject_duration_max`.
    pub eject_duration: Duration,
    pub eject_duration_max: Duration,
    /// Active check (`GET {url}/models`) period; none by default.
    pub health_check_interval: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub id: String,
    pub targets: Vec<TargetConfig>,
    pub endpoint_type: String,
    pub streaming: bool,
    pub tool_calling: bool,
    pub owned_by: String,
    pub created: u64,
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
    pub enabled: bool,
    /// Glob patterns over model IDs; `None` means every model.
    pub models: Option<Vec<String>>,
    pub requests_per_minute: Option<NonZeroU32>,
    pub burst: Option<NonZeroU32>,
    pub max_concurrent: Option<NonZeroU32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    admin_listen: Option<String>,
    environment: Option<String>,
    max_body_bytes: Option<RawSize>,
    #[serde(default)]
    hosts: Vec<String>,
    threads: Option<usize>,
    max_concurrent: Option<u32>,
    shutdown_grace: Option<String>,
    client_timeout: Option<String>,
    retry_attempts: Option<u32>,
    retry_backoff: Option<String>,
    watch_interval: Option<String>,
    log_level: Option<String>,
    echo_upstream: Option<RawEcho>,
    keys_file: Option<String>,
    #[serde(default)]
    upstreams: Vec<serde_yaml::Value>,
    #[serde(default)]
    models: Vec<serde_yaml::Value>,
    #[serde(default)]
    keys: Vec<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEcho {
    listen: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeysFile {
    #[serde(default)]
    keys: Vec<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: String,
    url: String,
    ca_file: Option<String>,
    api_key_env: Option<String>,
    connect_timeout: Option<String>,
    first_byte_timeout: Option<String>,
    idle_timeout: Option<String>,
    total_timeout: Option<String>,
    max_concurrent: Option<u32>,
    max_queue: Option<u32>,
    queue_timeout: Option<String>,
    rate_limit_cooldown: Option<String>,
    eject_after_failures: Option<u32>,
    eject_duration: Option<String>,
    eject_duration_max: Option<String>,
    health_check_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    id: String,
    upstream: Option<String>,
    upstream_model: Option<String>,
    targets: Option<Vec<RawTarget>>,
    endpoint_type: Option<String>,
    #[serde(default)]
    capabilities: Vec<String>,
    owned_by: Option<String>,
    created: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    upstream: String,
    weight: Option<u32>,
    upstream_model: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    name: String,
    sha256: String,
    enabled: Option<bool>,
    models: Option<Vec<String>>,
    requests_per_minute: Option<u32>,
    burst: Option<u32>,
    max_concurrent: Option<u32>,
}

/// Collects errors under a path prefix while validation goes on.
struct Errors {
    file: String,
    list: Vec<ConfigError>,
}

impl Errors {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = path.into();
        let path = if path.is_empty() {
            self.file.clone()
        } else {
            format!("{}: {path}", self.file)
        };
        self.list.push(ConfigError {
            path,
            message: message.into(),
        });
    }

    /// Parses one list item on its own, recording its error under `path`.
    fn item<T: DeserializeOwned>(&mut self, path: &str, value: serde_yaml::Value) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(item) => Some(item),
            Err(error) => {
                let inner = error.path().to_string();
                let full = if inner == "." {
                    path.to_string()
                } else {
                    format!("{path}.{inner}")
                };
                self.push(full, error.into_inner().to_string());
                None
            }
        }
    }
}

/// Reads the configuration file and the keys file it names, then validates both.
pub fn load_files(path: &Path) -> Result<Config, ConfigErrors> {
    load_files_with(path, HostLookup::Resolve)
}

/// Whether upstream host names are looked up while validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLookup {
    /// Resolve them: what serving needs.
    Resolve,
    /// Check the URLs only, for `sluice check --no-resolve` where the serving network's
    /// names (a cluster's Services) do not resolve. Such a configuration is never served.
    Skip,
}

/// [`load_files`], choosing whether host names are resolved.
pub fn load_files_with(path: &Path, lookup: HostLookup) -> Result<Config, ConfigErrors> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: p.display().to_string(),
                message: format!("cannot read: {e}"),
            }])
        })
    };
    let text = read(path)?;
    let keys_file =
        keys_file_of(&text).map(|name| path.parent().unwrap_or(Path::new(".")).join(name));
    let keys_text = match &keys_file {
        Some(keys_path) => Some((keys_path.display().to_string(), read(keys_path)?)),
        None => None,
    };
    let env = |name: &str| std::env::var(name).ok();
    let mut config = parse_with(
        &path.display().to_string(),
        &text,
        keys_text.as_ref().map(|(p, t)| (p.as_str(), t.as_str())),
        &env,
        lookup,
    )?;
    config.keys_file = keys_file;
    Ok(config)
}

/// The `keys_file` named by a configuration text, if it names one and parses at all.
fn keys_file_of(text: &str) -> Option<String> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    value.get("keys_file")?.as_str().map(str::to_owned)
}

/// Validates configuration text. `keys` is the keys file (its name for messages, and its
/// text) when the configuration names one; `env` looks up environment variables.
pub fn parse(
    file: &str,
    text: &str,
    keys: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    parse_with(file, text, keys, env, HostLookup::Resolve)
}

/// [`parse`], choosing whether host names are resolved.
pub fn parse_with(
    file: &str,
    text: &str,
    keys: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
    lookup: HostLookup,
) -> Result<Config, ConfigErrors> {
    let mut errors = Errors {
        file: file.to_string(),
        list: Vec::new(),
    };
    let raw: RawConfig =
        match serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)) {
            Ok(raw) => raw,
            Err(error) => {
                let path = error.path().to_string();
                errors.push(
                    if path == "." { String::new() } else { path },
                    error.into_inner().to_string(),
                );
                return Err(ConfigErrors(errors.list));
            }
        };

    let listen = socket_addr(
        &mut errors,
        "listen",
        raw.listen.as_deref().unwrap_or("0.0.0.0:8080"),
    );
    let admin_listen = socket_addr(
        &mut errors,
        "admin_listen",
        raw.admin_listen.as_deref().unwrap_or("127.0.0.1:9090"),
    );
    if let (Some(client), Some(admin)) = (listen, admin_listen) {
        if client == admin && client.port() != 0 {
            errors.push(
                "admin_listen",
                "must differ from `listen`: the admin listener is never the client port",
            );
        }
    }
    let max_body_bytes = match raw.max_body_bytes {
        None => 8 << 20,
        Some(RawSize::Bytes(n)) => n as usize,
        Some(RawSize::Text(text)) => parse_size(&text).unwrap_or_else(|| {
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
    let hosts = raw.hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
    let threads = raw
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    if threads == 0 {
        errors.push("threads", "must be at least 1");
    }
    let max_concurrent = nonzero(&mut errors, "max_concurrent", raw.max_concurrent);
    let shutdown_grace = duration(
        &mut errors,
        "shutdown_grace",
        raw.shutdown_grace.as_deref(),
        Duration::from_secs(30),
    );
    let client_timeout = duration(
        &mut errors,
        "client_timeout",
        raw.client_timeout.as_deref(),
        Duration::from_secs(60),
    );
    let retry_attempts = raw.retry_attempts.unwrap_or(2);
    if retry_attempts > 10 {
        errors.push(
            "retry_attempts",
            "at most 10: retries multiply load on a struggling backend",
        );
    }
    let retry_backoff = duration(
        &mut errors,
        "retry_backoff",
        raw.retry_backoff.as_deref(),
        Duration::from_millis(50),
    );
    let watch_interval = duration(
        &mut errors,
        "watch_interval",
        raw.watch_interval.as_deref(),
        Duration::from_millis(500),
    );
    let log_level = match raw.log_level.as_deref().unwrap_or("info").parse() {
        Ok(level) => level,
        Err(_) => {
            errors.push(
                "log_level",
                "must be one of off, error, warn, info, debug, trace",
            );
            log::LevelFilter::Info
        }
    };
    let echo_upstream = raw
        .echo_upstream
        .and_then(|echo| socket_addr(&mut errors, "echo_upstream.listen", &echo.listen));

    // Names are checked on every item that parsed, valid or not, so one bad upstream
    // does not also turn up as "no upstream named ..." in each model that uses it.
    let raw_upstreams: Vec<(String, RawUpstream)> = items(&mut errors, "upstreams", raw.upstreams);
    let upstream_names: Vec<&str> = raw_upstreams.iter().map(|(_, u)| u.name.as_str()).collect();
    check_unique(
        &mut errors,
        "upstreams",
        upstream_names.iter().copied(),
        "name",
    );
    let declared: Vec<String> = upstream_names.iter().map(|n| n.to_string()).collect();
    let upstreams: Vec<UpstreamConfig> = raw_upstreams
        .into_iter()
        .filter_map(|(path, raw)| upstream(&mut errors, &path, raw, env, lookup))
        .collect();

    let raw_models: Vec<(String, RawModel)> = items(&mut errors, "models", raw.models);
    check_unique(
        &mut errors,
        "models",
        raw_models.iter().map(|(_, m)| m.id.as_str()),
        "id",
    );
    let models: Vec<ModelConfig> = raw_models
        .into_iter()
        .filter_map(|(path, raw)| model(&mut errors, &path, raw, &declared))
        .collect();

    let mut key_list = parse_keys(&mut errors, raw.keys);
    if let Some((keys_name, keys_text)) = keys {
        if raw.keys_file.is_none() {
            errors.push(
                "keys_file",
                "a keys file was given but the configuration names none",
            );
        }
        // Errors inside the keys file name that file, not the configuration.
        let mut file_errors = Errors {
            file: keys_name.to_string(),
            list: Vec::new(),
        };
        match serde_path_to_error::deserialize::<_, RawKeysFile>(
            serde_yaml::Deserializer::from_str(keys_text),
        ) {
            Ok(file) => key_list.extend(parse_keys(&mut file_errors, file.keys)),
            Err(error) => {
                let path = error.path().to_string();
                file_errors.push(
                    if path == "." { String::new() } else { path },
                    error.into_inner().to_string(),
                )
            }
        }
        errors.list.extend(file_errors.list);
    }
    let keys = key_list;
    check_unique(
        &mut errors,
        "keys",
        keys.iter().map(|k| k.name.as_str()),
        "name",
    );
    let hashes: Vec<String> = keys.iter().map(|k| k.hash.to_hex()).collect();
    check_unique(
        &mut errors,
        "keys",
        hashes.iter().map(String::as_str),
        "sha256",
    );

    if !errors.list.is_empty() {
        return Err(ConfigErrors(errors.list));
    }
    Ok(Config {
        listen: listen.expect("checked above"),
        admin_listen: admin_listen.expect("checked above"),
        environment: raw.environment.unwrap_or_else(|| "production".into()),
        max_body_bytes,
        hosts,
        threads,
        max_concurrent,
        shutdown_grace,
        client_timeout,
        retry_attempts,
        retry_backoff,
        watch_interval,
        log_level,
        echo_upstream,
        keys_file: raw.keys_file.map(PathBuf::from),
        upstreams,
        models,
        keys,
    })
}

fn parse_keys(errors: &mut Errors, values: Vec<serde_yaml::Value>) -> Vec<KeyConfig> {
    let raw_keys: Vec<(String, RawKey)> = items(errors, "keys", values);
    raw_keys
        .into_iter()
        .filter_map(|(path, raw)| key(errors, &path, raw))
        .collect()
}

/// Parses each item of a list on its own, with its path (`upstreams[2]`).
fn items<T: DeserializeOwned>(
    errors: &mut Errors,
    list: &str,
    values: Vec<serde_yaml::Value>,
) -> Vec<(String, T)> {
    values
        .into_iter()
        .enumerate()
        .filter_map(|(i, value)| {
            let path = format!("{list}[{i}]");
            errors.item::<T>(&path, value).map(|item| (path, item))
        })
        .collect()
}

fn upstream(
    errors: &mut Errors,
    path: &str,
    raw: RawUpstream,
    env: &dyn Fn(&str) -> Option<String>,
    lookup: HostLookup,
) -> Option<UpstreamConfig> {
    let before = errors.list.len();
    check_name(errors, &format!("{path}.name"), &raw.name);
    let url = match check_url(&raw.url) {
        Ok(url) => Some(url),
        Err(message) => {
            errors.push(format!("{path}.url"), message);
            None
        }
    };
    // Resolved now, never on the request path (and again on every reload).
    let addr = url.as_ref().and_then(|url| match resolve(url, lookup) {
        Ok(addr) => Some(addr),
        Err(message) => {
            errors.push(format!("{path}.url"), message);
            None
        }
    });
    let ca = raw.ca_file.as_deref().and_then(|name| {
        if url
            .as_ref()
            .is_some_and(|u| u.scheme_str() != Some("https"))
        {
            errors.push(format!("{path}.ca_file"), "only applies to an https:// url");
        }
        let full = Path::new(&errors.file)
            .parent()
            .unwrap_or(Path::new(""))
            .join(name);
        match read_ca_file(&full) {
            Ok(ca) => Some(ca),
            Err(message) => {
                errors.push(format!("{path}.ca_file"), message);
                None
            }
        }
    });
    let credential = match &raw.api_key_env {
        None => None,
        Some(name) => match env(name) {
            Some(value) if !value.is_empty() => Some(Secret::new(value)),
            _ => {
                errors.push(
                    format!("{path}.api_key_env"),
                    format!("environment variable {name} is not set or empty"),
                );
                None
            }
        },
    };
    let connect_timeout = duration(
        errors,
        &format!("{path}.connect_timeout"),
        raw.connect_timeout.as_deref(),
        Duration::from_secs(5),
    );
    let first_byte_timeout = duration(
        errors,
        &format!("{path}.first_byte_timeout"),
        raw.first_byte_timeout.as_deref(),
        Duration::from_secs(120),
    );
    let idle_timeout = duration(
        errors,
        &format!("{path}.idle_timeout"),
        raw.idle_timeout.as_deref(),
        Duration::from_secs(60),
    );
    let policy = policy(errors, path, &raw);
    if errors.list.len() > before {
        return None;
    }
    Some(UpstreamConfig {
        name: raw.name,
        url: url?,
        addr: addr?,
        ca,
        credential,
        connect_timeout,
        first_byte_timeout,
        idle_timeout,
        policy,
    })
}

fn policy(errors: &mut Errors, path: &str, raw: &RawUpstream) -> UpstreamPolicy {
    let optional = |errors: &mut Errors, field: &str, text: &Option<String>| {
        text.as_ref()
            .map(|t| duration(errors, &format!("{path}.{field}"), Some(t), Duration::ZERO))
    };
    let total_timeout = optional(errors, "total_timeout", &raw.total_timeout);
    let health_check_interval =
        optional(errors, "health_check_interval", &raw.health_check_interval);
    let max_concurrent = nonzero(
        errors,
        &format!("{path}.max_concurrent"),
        raw.max_concurrent,
    );
    if raw.max_queue.is_some() && max_concurrent.is_none() {
        errors.push(format!("{path}.max_queue"), "needs max_concurrent");
    }
    let max_queue = raw
        .max_queue
        .unwrap_or_else(|| max_concurrent.map_or(0, |m| m.get().saturating_mul(4)));
    let queue_timeout = duration(
        errors,
        &format!("{path}.queue_timeout"),
        raw.queue_timeout.as_deref(),
        Duration::from_secs(5),
    );
    let rate_limit_cooldown = duration(
        errors,
        &format!("{path}.rate_limit_cooldown"),
        raw.rate_limit_cooldown.as_deref(),
        Duration::from_secs(5),
    );
    let eject_after_failures = raw.eject_after_failures.unwrap_or(5);
    if eject_after_failures == 0 {
        errors.push(format!("{path}.eject_after_failures"), "must be at least 1");
    }
    let eject_duration = duration(
        errors,
        &format!("{path}.eject_duration"),
        raw.eject_duration.as_deref(),
        Duration::from_secs(5),
    );
    let eject_duration_max = duration(
        errors,
        &format!("{path}.eject_duration_max"),
        raw.eject_duration_max.as_deref(),
        Duration::from_secs(120),
    );
    if eject_duration_max < eject_duration {
        errors.push(
            format!("{path}.eject_duration_max"),
            "must not be shorter than eject_duration",
        );
    }
    UpstreamPolicy {
        total_timeout,
        max_concurrent,
        max_queue,
        queue_timeout,
        rate_limit_cooldown,
        eject_after_failures,
        eject_duration,
        eject_duration_max,
        health_check_interval,
    }
}

fn model(
    errors: &mut Errors,
    path: &str,
    raw: RawModel,
    upstreams: &[String],
) -> Option<ModelConfig> {
    let before = errors.list.len();
    if raw.id.is_empty() || raw.id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        errors.push(
            format!("{path}.id"),
            "must be non-empty, without spaces or control characters",
        );
    }
    let single = raw.upstream.is_some();
    let targets = match (raw.upstream, raw.targets) {
        (Some(upstream), None) => vec![RawTarget {
            upstream,
            weight: None,
            upstream_model: raw.upstream_model,
        }],
        (None, Some(targets)) if !targets.is_empty() => {
            if raw.upstream_model.is_some() {
                errors.push(
                    format!("{path}.upstream_model"),
                    "goes inside each target when `targets` is used",
                );
            }
            targets
        }
        (None, Some(_)) => {
            errors.push(format!("{path}.targets"), "must list at least one target");
            Vec::new()
        }
        (Some(_), Some(_)) => {
            errors.push(
                path.to_string(),
                "give either `upstream` or `targets`, not both",
            );
            Vec::new()
        }
        (None, None) => {
            errors.push(path.to_string(), "needs `upstream` or `targets`");
            Vec::new()
        }
    };
    let targets: Vec<TargetConfig> = targets
        .into_iter()
        .enumerate()
        .filter_map(|(i, target)| {
            let target_path = if single {
                path.to_string()
            } else {
                format!("{path}.targets[{i}]")
            };
            if !upstreams.contains(&target.upstream) {
                errors.push(
                    format!("{target_path}.upstream"),
                    format!("no upstream is named '{}'", target.upstream),
                );
            }
            let weight = match NonZeroU32::new(target.weight.unwrap_or(1)) {
                Some(weight) => weight,
                None => {
                    errors.push(format!("{target_path}.weight"), "must be at least 1");
                    return None;
                }
            };
            Some(TargetConfig {
                upstream: target.upstream,
                weight,
                upstream_model: target.upstream_model,
            })
        })
        .collect();
    let endpoint_type = raw.endpoint_type.unwrap_or_else(|| "chat".into());
    if endpoint_type != "chat" {
        errors.push(format!("{path}.endpoint_type"), "only `chat` is served");
    }
    let mut streaming = false;
    let mut tool_calling = false;
    for (i, capability) in raw.capabilities.iter().enumerate() {
        match capability.as_str() {
            "streaming" => streaming = true,
            "tool_calling" => tool_calling = true,
            other => errors.push(
                format!("{path}.capabilities[{i}]"),
                format!("unknown capability '{other}' (known: streaming, tool_calling)"),
            ),
        }
    }
    if errors.list.len() > before {
        return None;
    }
    Some(ModelConfig {
        id: raw.id,
        targets,
        endpoint_type,
        streaming,
        tool_calling,
        owned_by: raw.owned_by.unwrap_or_else(|| "sluice".into()),
        created: raw.created.unwrap_or(0),
    })
}

fn key(errors: &mut Errors, path: &str, raw: RawKey) -> Option<KeyConfig> {
    let before = errors.list.len();
    check_name(errors, &format!("{path}.name"), &raw.name);
    let hash = KeyHash::from_hex(raw.sha256.trim_start_matches("sha256:"));
    if hash.is_none() {
        errors.push(
            format!("{path}.sha256"),
            "must be 64 hexadecimal digits (the SHA-256 of the key; `sluice key` prints one)",
        );
    }
    if let Some(patterns) = &raw.models {
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern.is_empty() {
                errors.push(
                    format!("{path}.models[{i}]"),
                    "an empty pattern matches nothing",
                );
            }
        }
    }
    let requests_per_minute = nonzero(
        errors,
        &format!("{path}.requests_per_minute"),
        raw.requests_per_minute,
    );
    let burst = nonzero(errors, &format!("{path}.burst"), raw.burst);
    if burst.is_some() && requests_per_minute.is_none() {
        errors.push(format!("{path}.burst"), "needs requests_per_minute");
    }
    let max_concurrent = nonzero(
        errors,
        &format!("{path}.max_concurrent"),
        raw.max_concurrent,
    );
    if errors.list.len() > before {
        return None;
    }
    Some(KeyConfig {
        name: raw.name,
        hash: hash?,
        enabled: raw.enabled.unwrap_or(true),
        models: raw.models,
        requests_per_minute,
        burst,
        max_concurrent,
    })
}

/// Every certificate of a PEM file, checked to parse, as pingora's per-peer CA list.
fn read_ca_file(path: &Path) -> Result<Arc<CaType>, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut certificates = Vec::new();
    for item in rustls_pemfile::certs(&mut text.as_slice()) {
        let der =
            item.map_err(|e| format!("{}: not a PEM certificate file: {e}", path.display()))?;
        // pingora's parser panics on a bad certificate: check it with the same parser first.
        x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("{}: a certificate does not parse: {e}", path.display()))?;
        certificates.push(WrappedX509::new(der.to_vec(), parse_x509));
    }
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(Arc::from(certificates.into_boxed_slice()))
}

/// An absolute http(s) URL without credentials or query string.
fn check_url(text: &str) -> Result<http::Uri, String> {
    let url: http::Uri = text.parse().map_err(|e| format!("not a URL: {e}"))?;
    let scheme_ok = matches!(url.scheme_str(), Some("http") | Some("https"));
    if !scheme_ok || url.host().is_none_or(str::is_empty) {
        return Err("must be an absolute http:// or https:// URL".into());
    }
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err("must not carry credentials; use api_key_env".into());
    }
    if url.query().is_some() {
        return Err("must not carry a query string".into());
    }
    Ok(url)
}

/// The first address the URL's host resolves to (default port by scheme).
fn resolve(url: &http::Uri, lookup: HostLookup) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let tls = url.scheme_str() == Some("https");
    let host = url.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(if tls { 443 } else { 80 });
    if lookup == HostLookup::Skip {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// Names become metric labels and log fields: keep them short and plain.
fn check_name(errors: &mut Errors, path: &str, name: &str) {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > 64 || !plain {
        errors.push(
            path,
            "must be 1-64 characters of letters, digits, '-', '_' or '.'",
        );
    }
}

fn check_unique<'a>(
    errors: &mut Errors,
    list: &str,
    values: impl Iterator<Item = &'a str>,
    field: &str,
) {
    let mut seen = std::collections::HashSet::new();
    for value in values {
        if !seen.insert(value) {
            let shown = if field == "sha256" { "(a hash)" } else { value };
            errors.push(list, format!("two entries share the {field} {shown}"));
        }
    }
}

fn socket_addr(errors: &mut Errors, path: &str, text: &str) -> Option<SocketAddr> {
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            errors.push(
                path,
                format!("'{text}' is not an address like 127.0.0.1:8080"),
            );
            None
        }
    }
}

fn nonzero(errors: &mut Errors, path: &str, value: Option<u32>) -> Option<NonZeroU32> {
    let value = value?;
    let nonzero = NonZeroU32::new(value);
    if nonzero.is_none() {
        errors.push(path, "must be at least 1 (leave it out for no limit)");
    }
    nonzero
}

fn duration(errors: &mut Errors, path: &str, text: Option<&str>, default: Duration) -> Duration {
    let Some(text) = text else { return default };
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => d,
        _ => {
            errors.push(
                path,
                format!("'{text}' is not a positive duration (examples: 150ms, 2s, 5m)"),
            );
            default
        }
    }
}

/// Parses `8MiB`, `512KiB`, `1MB`, `1048576`.
pub fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits.parse().ok()?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}
