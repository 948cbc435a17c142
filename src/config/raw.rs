//! The serde shapes of `gateway.yaml` and the keys file, exactly as written; every struct
//! denies unknown fields, so a misspelt key is an error with its path, never ignored.
//! Required fields are `Option`s too: validation reports one that is missing, unless it
//! was written but could not be read (`parsed::Parsed::unreadable`), already reported.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) listen: Option<String>,
    pub(super) admin_listen: Option<String>,
    pub(super) environment: Option<String>,
    pub(super) max_body_bytes: Option<RawSize>,
    #[serde(default)]
    pub(super) hosts: Vec<String>,
    pub(super) threads: Option<usize>,
    pub(super) max_concurrent: Option<u32>,
    pub(super) shutdown_grace: Option<RawDuration>,
    pub(super) client_timeout: Option<RawDuration>,
    pub(super) client_header_timeout: Option<RawDuration>,
    pub(super) client_idle_timeout: Option<RawDuration>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_header_bytes: Option<RawSize>,
    pub(super) http2: Option<bool>,
    pub(super) h2c: Option<bool>,
    pub(super) max_streams_per_connection: Option<u32>,
    pub(super) retry_attempts: Option<u32>,
    pub(super) retry_backoff: Option<RawDuration>,
    pub(super) watch_interval: Option<RawDuration>,
    pub(super) log_level: Option<String>,
    pub(super) echo_upstream: Option<RawEcho>,
    pub(super) keys_file: Option<String>,
    pub(super) metric_labels: Option<Vec<String>>,
    pub(super) limits_store: Option<RawLimitsStore>,
    pub(super) tracing: Option<RawTracing>,
    pub(super) response_ids: Option<RawResponseIds>,
    pub(super) tls: Option<RawTls>,
    pub(super) admin_tls: Option<RawTls>,
    pub(super) admin_token_env: Option<String>,
    pub(super) admin_tokens: Option<Vec<serde_yaml::Value>>,
    #[serde(default)]
    pub(super) upstreams: Vec<serde_yaml::Value>,
    #[serde(default)]
    pub(super) models: Vec<serde_yaml::Value>,
    #[serde(default)]
    pub(super) keys: Vec<serde_yaml::Value>,
    #[serde(default)]
    pub(super) owners: Vec<serde_yaml::Value>,
}

/// A duration as written (`30s`), checked by `values::duration`. A bare number is refused
/// here with a hint, since it has no unit: serde alone would say "expected a string".
pub(super) struct RawDuration(String);

impl std::ops::Deref for RawDuration {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

struct DurationVisitor;

impl DurationVisitor {
    fn bare<E: serde::de::Error>(number: impl std::fmt::Display) -> E {
        E::custom(format!(
            "`{number}` is a bare number: add a unit, e.g. 30s (150ms, 2s, 5m, 1h)"
        ))
    }
}

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = RawDuration;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a duration with a unit, e.g. 30s")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RawDuration, E> {
        Ok(RawDuration(text.to_string()))
    }

    fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<RawDuration, E> {
        Err(Self::bare(number))
    }

    fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<RawDuration, E> {
        Err(Self::bare(number))
    }

    fn visit_f64<E: serde::de::Error>(self, number: f64) -> Result<RawDuration, E> {
        Err(Self::bare(number))
    }
}

/// `max_body_bytes`: a plain byte count, or text with a unit for [`super::parse_size`].
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimitsStore {
    pub(super) url: Option<String>,
    pub(super) cluster: Option<bool>,
    pub(super) password_env: Option<String>,
    pub(super) ca_file: Option<String>,
    pub(super) timeout: Option<RawDuration>,
    pub(super) on_error: Option<String>,
    pub(super) expected_replicas: Option<u32>,
    pub(super) lease_lifetime: Option<RawDuration>,
    pub(super) namespace: Option<String>,
}

/// `response_ids:` (validated in `response_ids.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResponseIds {
    pub(super) secret_env: Option<String>,
    pub(super) previous_secret_env: Option<String>,
}

/// `tls:` and `admin_tls:` (validated in `tls.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) certificates: Option<Vec<RawCertificate>>,
    /// `"1.2"` or `"1.3"`; a bare `1.2` reads as a number, which is accepted too.
    pub(super) min_version: Option<serde_yaml::Value>,
    pub(super) client_ca_file: Option<String>,
}

/// One entry of `tls.certificates`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCertificate {
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
}

/// One entry of `admin_tokens` (validated in `admin.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdminToken {
    pub(super) name: Option<String>,
    pub(super) sha256: Option<String>,
    pub(super) token_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEcho {
    pub(super) listen: String,
}

/// `tracing:` (validated in `tracing.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracing {
    pub(super) otlp_endpoint: Option<String>,
    pub(super) service_name: Option<String>,
    pub(super) sample_ratio: Option<f64>,
    pub(super) headers: Option<std::collections::BTreeMap<String, String>>,
    pub(super) trust_incoming: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeysFile {
    #[serde(default)]
    pub(super) keys: Vec<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub(super) name: Option<String>,
    pub(super) url: Option<String>,
    pub(super) ca_file: Option<String>,
    pub(super) api_key_env: Option<String>,
    pub(super) auth_header: Option<String>,
    pub(super) auth_scheme: Option<String>,
    pub(super) headers: Option<std::collections::BTreeMap<String, serde_yaml::Value>>,
    pub(super) query: Option<std::collections::BTreeMap<String, serde_yaml::Value>>,
    pub(super) connect_timeout: Option<RawDuration>,
    pub(super) first_byte_timeout: Option<RawDuration>,
    pub(super) idle_timeout: Option<RawDuration>,
    pub(super) total_timeout: Option<RawDuration>,
    pub(super) max_concurrent: Option<u32>,
    pub(super) max_queue: Option<u32>,
    pub(super) queue_timeout: Option<RawDuration>,
    pub(super) rate_limit_cooldown: Option<RawDuration>,
    pub(super) retry_on: Option<Vec<serde_yaml::Value>>,
    pub(super) eject_after_failures: Option<u32>,
    pub(super) eject_duration: Option<RawDuration>,
    pub(super) eject_duration_max: Option<RawDuration>,
    pub(super) health_check_interval: Option<RawDuration>,
    pub(super) stream_usage: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) id: Option<String>,
    pub(super) upstream: Option<String>,
    pub(super) upstream_model: Option<String>,
    pub(super) targets: Option<Vec<RawTarget>>,
    pub(super) endpoint_type: Option<String>,
    pub(super) endpoints: Option<Vec<String>>,
    #[serde(default)]
    pub(super) capabilities: Vec<String>,
    pub(super) fallbacks: Option<Vec<String>>,
    pub(super) owned_by: Option<String>,
    pub(super) created: Option<u64>,
    pub(super) default_max_tokens: Option<u64>,
    pub(super) enforce_output_limit: Option<bool>,
    pub(super) price: Option<super::budget::RawPrice>,
    pub(super) upstream_api: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) upstream: Option<String>,
    pub(super) weight: Option<u32>,
    pub(super) upstream_model: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub(super) name: Option<String>,
    pub(super) sha256: Option<String>,
    pub(super) enabled: Option<bool>,
    pub(super) disabled: Option<bool>,
    pub(super) not_before: Option<String>,
    pub(super) expires_at: Option<String>,
    pub(super) owner: Option<String>,
    pub(super) labels: Option<std::collections::BTreeMap<String, String>>,
    pub(super) models: Option<Vec<String>>,
    pub(super) requests_per_minute: Option<u32>,
    pub(super) burst: Option<u32>,
    pub(super) max_concurrent: Option<u32>,
    pub(super) tokens_per_minute: Option<u64>,
    pub(super) tokens_per_day: Option<u64>,
    pub(super) budget: Option<super::budget::RawBudget>,
}
