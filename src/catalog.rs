//! The catalog snapshot: upstreams (addresses resolved), models and keys, immutable once
//! built. A request loads it once from the `ArcSwap` and keeps that `Arc` to its end.

use crate::config::{Config, ProviderStyle, UpstreamConfig, UpstreamPolicy};
use crate::endpoint::EndpointType;
use crate::peer::PoolPeer;
use crate::response_id::IdKeys;
use crate::secret::{KeyHash, Secret};
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

mod key;
mod series;

use key::build_key;
pub use key::Key;
pub use series::{Held, KeySeries, ModelCounter};

/// One backend that serves models: where it is and how to call it.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// Prebuilt peer: address resolved at load, TLS and SNI set, timeouts applied.
    pub peer: PoolPeer,
    /// `Host` header value sent upstream.
    pub host_header: String,
    /// The URL's path without a trailing slash, e.g. `/v1`.
    pub base_path: String,
    /// `scheme://authority`, for logs (the configured URL carries no secret).
    pub origin: String,
    pub credential: Option<Secret>,
    /// Where the credential goes; the headers and query parameters every request carries.
    pub style: ProviderStyle,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub policy: UpstreamPolicy,
}

/// One upstream that serves a model, under the name it knows the model by.
#[derive(Debug)]
pub struct Target {
    pub upstream: Arc<Upstream>,
    pub weight: NonZeroU32,
    pub upstream_model: Option<String>,
}

/// A catalog entry.
#[derive(Debug)]
pub struct Model {
    pub id: String,
    pub targets: Vec<Target>,
    pub streaming: bool,
    pub tool_calling: bool,
    /// The models that may take a request this one cannot serve, in the order they are
    /// tried: its `fallbacks`, each followed by its own, every model once.
    pub fallbacks: Vec<String>,
    /// What the model is, and every endpoint type whose routes it serves.
    pub endpoint_type: EndpointType,
    pub endpoints: Vec<EndpointType>,
    /// The entry as `/v1/models` shows it, rendered once at load.
    pub entry_json: Bytes,
    /// Output tokens reserved for a request that names no limit of its own.
    pub default_max_tokens: u64,
    /// `default_max_tokens` is written into a request that sets no output limit.
    pub enforce_output_limit: bool,
    /// What its tokens cost, in micro-dollars per million; `None`: unpriced (free).
    pub price: Option<crate::config::Price>,
    /// The API its upstreams speak (`upstream_api`).
    pub upstream_api: crate::endpoint::UpstreamApi,
    /// Its `sluice_request_duration_seconds`, resolved at its first request's end.
    pub request_duration: Held<prometheus::Histogram>,
}

/// The immutable snapshot every request reads.
#[derive(Debug)]
pub struct Catalog {
    pub generation: u64,
    pub environment: String,
    pub max_body_bytes: usize,
    pub hosts: Vec<String>,
    /// Gateway-wide cap on requests in flight (load shedding).
    pub max_concurrent: Option<NonZeroU32>,
    /// Longest wait on a client read or write.
    pub client_timeout: Duration,
    pub retry_attempts: u32,
    pub retry_backoff: Duration,
    /// The shared limits store as configured (used from the start; a change needs a restart).
    pub limits_store: Option<crate::config::LimitsStoreConfig>,
    pub upstreams: Vec<Arc<Upstream>>,
    models: Vec<Arc<Model>>,
    model_index: HashMap<String, usize>,
    keys: HashMap<KeyHash, Arc<Key>>,
    /// The same keys in configuration order, for the admin view.
    ordered_keys: Vec<Arc<Key>>,
    /// Key labels exported as labels of `sluice_key_info`.
    pub metric_labels: Vec<String>,
    /// The configured secrets of stored-response IDs (`response_ids`); `None`: the
    /// gateway's own secret of this process signs them.
    pub response_ids: Option<IdKeys>,
    /// The admin listener's tokens (`admin_tokens`, `admin_token_env`).
    pub admin_tokens: Vec<crate::config::AdminToken>,
    /// The client and admin listeners' TLS as loaded (certificates read), for new
    /// handshakes (`tls.rs`).
    pub tls: Option<crate::listener::tls::TlsSettings>,
    pub admin_tls: Option<crate::listener::tls::TlsSettings>,
}

impl Catalog {
    /// Builds a snapshot from a validated configuration (addresses already resolved).
    pub fn build(config: &Config, generation: u64) -> Catalog {
        let upstreams: Vec<Arc<Upstream>> = config
            .upstreams
            .iter()
            .map(|u| Arc::new(build_upstream(u)))
            .collect();
        let by_name: HashMap<&str, &Arc<Upstream>> =
            upstreams.iter().map(|u| (u.name.as_str(), u)).collect();
        let models: Vec<Arc<Model>> = config
            .models
            .iter()
            .map(|m| {
                let targets = m
                    .targets
                    .iter()
                    .map(|t| Target {
                        upstream: Arc::clone(by_name[t.upstream.as_str()]),
                        weight: t.weight,
                        upstream_model: t.upstream_model.clone(),
                    })
                    .collect();
                let entry = serde_json::json!({
                    "id": m.id,
                    "object": "model",
                    "created": m.created,
                    "owned_by": m.owned_by,
                    "endpoint_type": m.endpoint_type.name(),
                    "endpoints": m.endpoints.iter().map(|e| e.name()).collect::<Vec<_>>(),
                    "capabilities": {"streaming": m.streaming, "tool_calling": m.tool_calling},
                });
                Arc::new(Model {
                    id: m.id.clone(),
                    targets,
                    streaming: m.streaming,
                    tool_calling: m.tool_calling,
                    fallbacks: fallback_order(config, &m.id),
                    endpoint_type: m.endpoint_type,
                    endpoints: m.endpoints.clone(),
                    entry_json: Bytes::from(entry.to_string()),
                    default_max_tokens: m.default_max_tokens,
                    enforce_output_limit: m.enforce_output_limit,
                    price: m.price,
                    upstream_api: m.upstream_api,
                    request_duration: Default::default(),
                })
            })
            .collect();
        let model_index = models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.clone(), i))
            .collect();
        let ordered_keys: Vec<Arc<Key>> = config
            .keys
            .iter()
            .map(|k| Arc::new(build_key(k, &config.owners)))
            .collect();
        let keys = config
            .keys
            .iter()
            .zip(&ordered_keys)
            .map(|(k, key)| (k.hash, Arc::clone(key)))
            .collect();
        Catalog {
            generation,
            environment: config.environment.clone(),
            max_body_bytes: config.max_body_bytes,
            hosts: config.hosts.clone(),
            max_concurrent: config.max_concurrent,
            client_timeout: config.client_timeout,
            retry_attempts: config.retry_attempts,
            retry_backoff: config.retry_backoff,
            limits_store: config.limits_store.clone(),
            upstreams,
            models,
            model_index,
            keys,
            ordered_keys,
            metric_labels: config.metric_labels.clone(),
            admin_tokens: config.admin_tokens.clone(),
            tls: config.tls.clone(),
            admin_tls: config.admin_tls.clone(),
            response_ids: config.response_ids.as_ref().map(|secrets| {
                IdKeys::new(
                    secrets.current.expose().as_bytes(),
                    secrets.previous.as_ref().map(|p| p.expose().as_bytes()),
                )
            }),
        }
    }

    /// The names of every key (limit state of other names can go).
    pub fn key_names(&self) -> impl Iterator<Item = &str> {
        self.ordered_keys.iter().map(|k| k.name.as_str())
    }

    /// Every key, in configuration order.
    pub fn keys(&self) -> &[Arc<Key>] {
        &self.ordered_keys
    }

    /// The key of this name, if any (the admin view; requests look keys up by hash).
    pub fn key_named(&self, name: &str) -> Option<&Arc<Key>> {
        self.ordered_keys.iter().find(|k| k.name == name)
    }

    /// The key whose hash this is, if any.
    pub fn key(&self, hash: &KeyHash) -> Option<&Arc<Key>> {
        self.keys.get(hash)
    }

    /// The model, if it exists and the key may see it. A hidden model and a missing one
    /// look the same to the caller.
    pub fn model_for(&self, key: &Key, id: &str) -> Option<&Arc<Model>> {
        let model = &self.models[*self.model_index.get(id)?];
        key.may_use(id).then_some(model)
    }

    /// The models this key may use that take a request `model` cannot serve, in order.
    pub fn fallbacks_for<'a>(
        &'a self,
        key: &'a Key,
        model: &'a Model,
    ) -> impl Iterator<Item = &'a Arc<Model>> + 'a {
        model
            .fallbacks
            .iter()
            .filter_map(move |id| self.model_for(key, id))
    }

    /// Every model and each model that may serve in its place (for the series of
    /// `sluice_model_fallbacks_total`, declared at zero).
    pub fn fallback_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.models.iter().flat_map(|m| {
            m.fallbacks
                .iter()
                .map(move |fallback| (m.id.as_str(), fallback.as_str()))
        })
    }

    /// `GET /v1/models` for this key: the OpenAI list envelope of the entries it may see.
    pub fn render_list(&self, key: &Key) -> Bytes {
        let mut out = Vec::with_capacity(64 + self.models.len() * 160);
        out.extend_from_slice(b"{\"object\":\"list\",\"data\":[");
        let mut first = true;
        for model in self.models.iter().filter(|m| key.may_use(&m.id)) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&model.entry_json);
        }
        out.extend_from_slice(b"]}");
        Bytes::from(out)
    }

    /// Whether a request's Host header is allowed (`hosts` empty allows any).
    pub fn host_allowed(&self, host: &str) -> bool {
        if self.hosts.is_empty() {
            return true;
        }
        let name = strip_port(host).to_ascii_lowercase();
        self.hosts.contains(&name)
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // "[::1]:8080" -> "[::1]"; a bracket never closed is left whole (and matches nothing).
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            name
        } else {
            host
        }
    })
}

/// The fallbacks of model `id`, depth first: each fallback, then its own, every model once
/// and never `id` itself. Configuration has no cycles, so this ends.
fn fallback_order(config: &Config, id: &str) -> Vec<String> {
    fn visit(config: &Config, from: &str, order: &mut Vec<String>, root: &str) {
        let Some(model) = config.models.iter().find(|m| m.id == from) else {
            return;
        };
        for next in &model.fallbacks {
            if next != root && !order.contains(next) {
                order.push(next.clone());
                visit(config, next, order, root);
            }
        }
    }
    let mut order = Vec::new();
    visit(config, id, &mut order, id);
    order
}

fn build_upstream(config: &UpstreamConfig) -> Upstream {
    let url = &config.url;
    let tls = url.scheme_str() == Some("https");
    let host = url
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addr = config.addr;
    let mut peer = HttpPeer::new(addr, tls, host.clone());
    peer.options.connection_timeout = Some(config.connect_timeout);
    peer.options.total_connection_timeout = Some(config.connect_timeout);
    peer.options.write_timeout = Some(config.first_byte_timeout);
    peer.options.idle_timeout = Some(Duration::from_secs(60));
    peer.options.ca = config.ca.clone();
    let authority = url
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    Upstream {
        name: config.name.clone(),
        peer: PoolPeer::new(peer),
        host_header: authority.clone(),
        base_path: url.path().trim_end_matches('/').to_string(),
        origin: format!("{}://{authority}", url.scheme_str().unwrap_or("http")),
        credential: config.credential.clone(),
        style: config.style.clone(),
        first_byte_timeout: config.first_byte_timeout,
        idle_timeout: config.idle_timeout,
        policy: config.policy.clone(),
    }
}

#[cfg(test)]
mod tests;
