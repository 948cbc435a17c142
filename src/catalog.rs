//! The catalog snapshot: upstreams (addresses resolved), models and keys, immutable once
//! built. A request loads it once from the `ArcSwap` and keeps that `Arc` to its end.

use crate::config::{Config, KeyConfig, UpstreamConfig, UpstreamPolicy};
use crate::endpoint::EndpointType;
use crate::glob;
use crate::secret::{KeyHash, Secret};
use bytes::Bytes;
use pingora::upstreams::peer::HttpPeer;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// One backend that serves models: where it is and how to call it.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// Prebuilt peer: address resolved at load, TLS and SNI set, timeouts applied.
    pub peer: HttpPeer,
    /// `Host` header value sent upstream.
    pub host_header: String,
    /// The URL's path without a trailing slash, e.g. `/v1`.
    pub base_path: String,
    /// `scheme://authority`, for logs (the configured URL carries no secret).
    pub origin: String,
    pub credential: Option<Secret>,
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
    /// What the model is, and every endpoint type whose routes it serves.
    pub endpoint_type: EndpointType,
    pub endpoints: Vec<EndpointType>,
    /// The entry as `/v1/models` shows it, rendered once at load.
    pub entry_json: Bytes,
}

/// A client API key's settings. The key itself is never held, only its hash.
#[derive(Debug)]
pub struct Key {
    pub name: String,
    pub enabled: bool,
    /// Glob patterns over model IDs, as characters; `None` means every model.
    patterns: Option<Vec<Vec<char>>>,
    pub requests_per_minute: Option<NonZeroU32>,
    pub burst: Option<NonZeroU32>,
    pub max_concurrent: Option<NonZeroU32>,
}

impl Key {
    /// Whether this key's view of the catalog includes the model.
    pub fn may_use(&self, model_id: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(patterns) => {
                let id: Vec<char> = model_id.chars().collect();
                patterns.iter().any(|pattern| glob::matches(pattern, &id))
            }
        }
    }
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
    pub upstreams: Vec<Arc<Upstream>>,
    models: Vec<Arc<Model>>,
    model_index: HashMap<String, usize>,
    keys: HashMap<KeyHash, Arc<Key>>,
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
                    endpoint_type: m.endpoint_type,
                    endpoints: m.endpoints.clone(),
                    entry_json: Bytes::from(entry.to_string()),
                })
            })
            .collect();
        let model_index = models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.clone(), i))
            .collect();
        let keys = config
            .keys
            .iter()
            .map(|k| (k.hash, Arc::new(build_key(k))))
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
            upstreams,
            models,
            model_index,
            keys,
        }
    }

    /// The names of every key (limit state of other names can go).
    pub fn key_names(&self) -> impl Iterator<Item = &str> {
        self.keys.values().map(|k| k.name.as_str())
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

fn build_key(key: &KeyConfig) -> Key {
    Key {
        name: key.name.clone(),
        enabled: key.enabled,
        patterns: key
            .models
            .as_ref()
            .map(|list| list.iter().map(|p| p.chars().collect()).collect()),
        requests_per_minute: key.requests_per_minute,
        burst: key.burst,
        max_concurrent: key.max_concurrent,
    }
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
        peer,
        host_header: authority.clone(),
        base_path: url.path().trim_end_matches('/').to_string(),
        origin: format!("{}://{authority}", url.scheme_str().unwrap_or("http")),
        credential: config.credential.clone(),
        first_byte_timeout: config.first_byte_timeout,
        idle_timeout: config.idle_timeout,
        policy: config.policy.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_is_ignored_when_filtering_hosts() {
        assert_eq!(strip_port("api.example.com:8080"), "api.example.com");
        assert_eq!(strip_port("api.example.com"), "api.example.com");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("[x"), "[x", "an unclosed bracket does not panic");
        assert_eq!(strip_port("["), "[");
    }
}
