//! What the admin listener reads and writes in the limits store, on a connection of its
//! own (admission's calls never wait behind it): a key's windows as the store holds them,
//! read without changing anything, and the key switches (`key_switches.rs`).
//!
//! The windows are computed the way `batch.lua` computes them for an answer's headers,
//! from the same stored values, on Redis's clock.

use super::connection::{Client, Connection};
use super::{RateStatus, TokenStatus, Window};
use crate::catalog::Key;
use crate::config::LimitsStoreConfig;
use crate::key_switches::Switch;
use redis::{AsyncCommands, Script};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The hash of every key switch, after the store's namespace: key name to its switch, as
/// JSON.
fn switches_key(namespace: &str) -> String {
    format!("{namespace}:sluice:key-switches")
}

/// Reads the key's stored values and Redis's clock, changing nothing. Numbers come back as
/// text: Lua would cut a large one to a float.
const VIEW: &str = r#"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local stored = redis.call('HMGET', KEYS[2], 'mt', 'ml', 'dt', 'dl')
local leases = redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%.0f', now), '+inf')
return {string.format('%.0f', now), redis.call('GET', KEYS[1]) or '0', stored[1] or '0',
  stored[2] or '0', stored[3] or '0', stored[4] or '0', tostring(leases)}
"#;

/// A key's limits as the store holds them now, for every replica together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLimits {
    /// `None` for a key without a request rate.
    pub rate: Option<RateStatus>,
    /// One per token window the key has.
    pub tokens: Vec<TokenStatus>,
    /// Leases held by requests in flight on every replica.
    pub in_flight: u64,
}

/// The admin listener's handle on the store.
pub struct AdminStore {
    client: Client,
    connection: OnceCell<Connection>,
    timeout: Duration,
    view: Script,
    /// `limits_store.namespace`: what every Redis key name starts with.
    namespace: String,
}

impl AdminStore {
    pub fn new(config: &LimitsStoreConfig) -> redis::RedisResult<AdminStore> {
        Ok(AdminStore {
            client: Client::new(config)?,
            connection: OnceCell::new(),
            timeout: config.timeout,
            view: Script::new(VIEW),
            namespace: config.namespace.clone(),
        })
    }

    /// One call within the timeout; `None` when it fails.
    async fn call<T, F, Fut>(&self, call: F) -> Option<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let outcome = tokio::time::timeout(self.timeout, async {
            let connection = self
                .connection
                .get_or_try_init(|| self.client.connect(self.timeout))
                .await?
                .clone();
            call(connection).await
        })
        .await;
        match outcome {
            Ok(Ok(value)) => Some(value),
            Ok(Err(error)) => {
                log::warn!(target: "sluice::admin", error:% = error; "limits store call of the admin listener failed");
                None
            }
            Err(_) => {
                log::warn!(target: "sluice::admin", error = "timeout"; "limits store call of the admin listener failed");
                None
            }
        }
    }

    /// The key's windows as the store holds them; `None` when the store does not answer.
    pub async fn limits(&self, key: &Key) -> Option<StoredLimits> {
        let mut invocation = self.view.prepare_invoke();
        // The names `store.rs` gives them (their hash tag is the key's name).
        for redis_key in super::store::redis_keys(&self.namespace, key) {
            invocation.key(redis_key);
        }
        let values: Vec<String> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await?;
        let number = |i: usize| {
            values
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let now = number(0);
        Some(StoredLimits {
            rate: rate(key, now, number(1)),
            tokens: [
                (Window::Minute, key.tokens_per_minute, number(2), number(3)),
                (Window::Day, key.tokens_per_day, number(4), number(5)),
            ]
            .into_iter()
            .filter_map(|(window, limit, tat, stored_limit)| {
                limit.map(|limit| tokens(window, limit.get(), now, tat, stored_limit))
            })
            .collect(),
            in_flight: number(6) as u64,
        })
    }

    /// Writes a key's switch (`None`: the key is switched on again). Whether the store
    /// took it.
    pub async fn switch(&self, name: &str, switch: Option<&Switch>) -> bool {
        let name = name.to_owned();
        let hash = switches_key(&self.namespace);
        match switch {
            Some(switch) => {
                let Ok(value) = serde_json::to_string(switch) else {
                    return false;
                };
                self.call(|mut c| async move { c.hset::<_, _, _, i64>(hash, name, value).await })
                    .await
                    .is_some()
            }
            None => self
                .call(|mut c| async move { c.hdel::<_, _, i64>(hash, name).await })
                .await
                .is_some(),
        }
    }

    /// Every key switch the store holds; `None` when it does not answer. An entry that is
    /// not a switch (written by hand) still switches its key off, by nobody known.
    pub async fn switches(&self) -> Option<HashMap<String, Switch>> {
        let hash = switches_key(&self.namespace);
        let stored: HashMap<String, String> = self
            .call(|mut c| async move { c.hgetall(hash).await })
            .await?;
        Some(
            stored
                .into_iter()
                .map(|(name, value)| {
                    let switch = serde_json::from_str(&value).unwrap_or(Switch {
                        by: "unknown".into(),
                        at_unix_ms: 0,
                    });
                    (name, switch)
                })
                .collect(),
        )
    }
}

/// The request rate's position (GCRA): requests left of the burst, and the time until the
/// burst is whole again.
fn rate(key: &Key, now: f64, tat: f64) -> Option<RateStatus> {
    let per_minute = key.requests_per_minute?.get();
    let burst = key.burst.map_or(per_minute, |b| b.get());
    let interval = 60_000_000.0 / f64::from(per_minute);
    let backlog = (tat - now).max(0.0);
    let remaining = ((interval * f64::from(burst) - backlog) / interval).floor();
    Some(RateStatus {
        limit: per_minute,
        remaining: remaining.clamp(0.0, f64::from(burst)) as u32,
        reset: Duration::from_micros(backlog.ceil() as u64),
    })
}

/// A token window's position: the tokens it holds (under the limit they were counted
/// with) set against today's limit, as the admission script does when a limit changed.
fn tokens(window: Window, limit: u64, now: f64, tat: f64, stored_limit: f64) -> TokenStatus {
    let period = match window {
        Window::Minute => 60e6,
        Window::Day => 86_400e6,
    };
    let held = if stored_limit > 0.0 {
        (tat - now).max(0.0) * stored_limit / period
    } else {
        0.0
    };
    let limit_f = limit as f64;
    TokenStatus {
        window,
        limit,
        remaining: (limit_f - held).floor().clamp(0.0, limit_f) as u64,
        reset: Duration::from_micros((held * period / limit_f).ceil() as u64),
    }
}
