//! Limits shared by every replica, in Redis (or Valkey): one script call checks and
//! reserves every bucket of a key (request rate, token windows), takes a concurrency lease
//! and reserves the request's cost in the key's and its owner's money budgets, atomically,
//! on Redis's clock (the budgets on the replica's calendar): refused for any, it takes
//! nothing. At the end of the request its tokens and money are settled and its lease given
//! back, off the response path.
//!
//! A replica has at most one call per key in flight: admissions and settlements of the key
//! that arrive meanwhile wait and travel together in the next call (`batch.lua`). An
//! admission waits at most one call more than it would alone; under load, calls carry many
//! requests each, so the store's cost per request falls as the load rises.
//!
//! Limit values travel with each call, so a reload applies at once and keeps usage. All of
//! a key's Redis keys start with the store's namespace and share one hash tag: `{name}`,
//! or `{owner/OWNER}` for a key whose owner has a budget (`store/budget.rs`), so Redis
//! Cluster runs the call on one slot. A lease expires by itself unless its
//! replica refreshes it (every third of its lifetime while the request runs), so a replica
//! that dies holds nothing for longer than one lifetime.
//!
//! A call that cannot reach the store or takes longer than `timeout` marks the store down:
//! admissions stop calling it (the caller applies `on_error`) and a probe pings it once a
//! second until it answers. An error the store answers for one key's script (a value of
//! the wrong type under its name, say) fails that call only: the store stays up for every
//! other key. A key refused by the store is refused here, without a call, until its wait
//! is over (the local gate), so an abusive client cannot load Redis.
//!
//! Leases survive a store that lost them: every refresh re-creates the leases of this
//! replica's requests in flight, and when a store that was down answers again, the leases
//! of every request still running here (those admitted in this process meanwhile
//! included) are written to it before shared admission resumes.

mod answer;
mod budget;
mod calls;
mod leases;
mod packed;

use super::connection::{Client, Connection};
use super::{RateStatus, TokenStatus, Window};
use crate::catalog::Key;
use crate::config::LimitsStoreConfig;
use crate::error::RequestError;
use crate::metrics::Metrics;
use answer::with_wait;
pub use answer::{Position, Refusal, Shared};
pub use calls::Grant;
use calls::{Money, Queue, Waiting};
use dashmap::DashMap;
use prometheus::{Histogram, IntCounterVec, IntGauge};
use redis::Script;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify, OnceCell};

/// How often a store that failed is asked whether it is back.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The store and what this replica knows of it.
pub struct Store {
    pub config: LimitsStoreConfig,
    client: Client,
    connection: OnceCell<Connection>,
    batch: Script,
    /// Per key: the call in flight, and what waits for the next.
    queues: DashMap<String, Arc<Mutex<Queue>>>,
    up: AtomicBool,
    probing: AtomicBool,
    /// Keys refused by the store: when, until when, and with what.
    gate: DashMap<String, (Instant, Instant, Refusal)>,
    /// Leases of requests in flight on this replica, by key.
    leases: leases::Leases,
    /// Per key: where the store last said it stood, and when, for the headers of an
    /// answer this replica gives without asking the store.
    positions: DashMap<String, (Instant, Position)>,
    refreshing: AtomicBool,
    next_lease: AtomicU64,
    /// Tells lease ids of replicas apart.
    replica: u64,
    lease_lifetime: Duration,
    recovered: Notify,
    up_gauge: IntGauge,
    errors: IntCounterVec,
    duration: Histogram,
}

/// The Redis keys of a key's limits, after the store's namespace (`limits_store.namespace`):
/// request rate, token windows, leases. Under the key's own name as their hash tag, or,
/// for a key whose owner has a budget, under the owner's with the key's name after it, so
/// one call reaches them and the owner's budget account on one Redis Cluster slot.
pub(super) fn redis_keys(namespace: &str, key: &Key) -> [String; 3] {
    let name = &key.name;
    ["requests", "tokens", "leases"].map(|what| match budget::owner_tag(key) {
        Some(owner) => format!("{namespace}:sluice:{{owner/{owner}}}:key:{name}:{what}"),
        None => format!("{namespace}:sluice:{{{name}}}:{what}"),
    })
}

impl Store {
    pub fn new(config: LimitsStoreConfig, metrics: &Metrics) -> redis::RedisResult<Store> {
        let client = Client::new(&config)?;
        metrics.limits_store_up.set(1);
        Ok(Store {
            client,
            connection: OnceCell::new(),
            batch: Script::new(include_str!("batch.lua")),
            queues: DashMap::new(),
            up: AtomicBool::new(true),
            probing: AtomicBool::new(false),
            gate: DashMap::new(),
            leases: leases::Leases::default(),
            positions: DashMap::new(),
            refreshing: AtomicBool::new(false),
            next_lease: AtomicU64::new(0),
            replica: rand::random(),
            lease_lifetime: config.lease_lifetime,
            recovered: Notify::new(),
            up_gauge: metrics.limits_store_up.clone(),
            errors: metrics.limits_store_errors.clone(),
            duration: metrics.limits_store_duration.clone(),
            config,
        })
    }

    /// Asks the store once, at start: one that does not answer is down from the first
    /// scrape and the first request on (gauge, `/readyz`, `on_error`), and probed.
    pub async fn check(self: &Arc<Self>) {
        let ping = |mut c: Connection| async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        };
        if self.call(ping).await.is_some() {
            log::info!(target: "sluice::limits", "limits store answers");
        } else {
            self.probe();
        }
    }

    /// Whether the store answered its last call.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Resolves once the store answers again after a failure (for tests and readiness).
    pub async fn recovered(&self) {
        let notified = self.recovered.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_up() {
            return;
        }
        notified.await;
    }

    /// The refusal a key still has from the store, without asking it (the local gate):
    /// its waits and resets counted down since, the remaining counts as the store gave them.
    pub fn gated(&self, name: &str) -> Option<Refusal> {
        let entry = self.gate.get(name)?;
        let (at, until, refusal) = &*entry;
        let now = Instant::now();
        let left = until.checked_duration_since(now)?;
        Some(Refusal {
            error: with_wait(&refusal.error, left),
            position: refusal.position.counted_down(now.duration_since(*at)),
        })
    }

    /// Where the key stood as the store last told this replica, its resets counted down
    /// since (all `None` before its first answer).
    pub fn last_position(&self, name: &str) -> Position {
        match self.positions.get(name) {
            Some(entry) => {
                let (at, position) = *entry;
                position.counted_down(at.elapsed())
            }
            None => Position::default(),
        }
    }

    /// Forgets the refusals of the local gate (a reload may have changed the limits).
    pub fn forget_refusals(&self) {
        self.gate.clear();
    }

    /// Checks and reserves every limit of `key` for one request of `estimate` tokens, and
    /// `cost` micro-dollars in its budgets and its owner's (`None`: no money to reserve),
    /// all at once: refused for any of them, it takes nothing. `now_ms`: the wall clock,
    /// whose calendar the budgets' windows follow.
    pub async fn admit(
        self: &Arc<Self>,
        key: &Arc<Key>,
        estimate: u64,
        cost: Option<u64>,
        now_ms: i64,
    ) -> Shared {
        if !self.is_up() {
            self.probe();
            return Shared::Unavailable;
        }
        self.start_refreshing();
        let lease = key.max_concurrent.map(|_| self.new_lease());
        let (sender, receiver) = oneshot::channel();
        let waiting = Waiting {
            estimate,
            lease,
            cost,
            now_ms,
            answer: sender,
        };
        self.enqueue(&key.name, |queue| {
            queue.key = Some(Arc::clone(key));
            queue.admissions.push(waiting);
        });
        let Ok(Some((answer, windows))) = receiver.await else {
            self.probe();
            return Shared::Unavailable;
        };
        // Waits and resets within what the script bounds them to, whatever it answered.
        let bound = (super::MAX_DEBT + Window::Day.period()).as_micros() as i64;
        let micros = |n: i64| Duration::from_micros(n.clamp(0, bound) as u64);
        let rate = (answer[2] >= 0).then(|| RateStatus {
            limit: key.requests_per_minute.map_or(0, |n| n.get()),
            remaining: answer[2] as u32,
            reset: micros(answer[3]),
        });
        let tokens = match answer[4] {
            1 | 2 => Some(TokenStatus {
                window: if answer[4] == 1 {
                    Window::Minute
                } else {
                    Window::Day
                },
                limit: answer[5] as u64,
                remaining: answer[6].max(0) as u64,
                reset: micros(answer[7]),
            }),
            _ => None,
        };
        let budget = (answer[10] >= 0).then_some(answer[10] as u64);
        let wait = micros(answer[1]);
        let position = Position {
            rate,
            tokens,
            budget,
        };
        match self.positions.get_mut(&key.name) {
            Some(mut known) => *known = (Instant::now(), position),
            None => {
                self.positions
                    .insert(key.name.clone(), (Instant::now(), position));
            }
        }
        let error = match answer[0] {
            0 => {
                if let Some(lease) = lease {
                    self.leases.hold(&key.name, lease);
                }
                // Money is reserved where the key has a budget (the store reported one).
                let money = cost
                    .filter(|_| budget.is_some())
                    .map(|reserved| Money { reserved, windows });
                let grant = Grant::new(self, &key.name, lease, [answer[8], answer[9]], money);
                return Shared::Admitted { grant, position };
            }
            1 => RequestError::RateLimited { retry_after: wait },
            2 => RequestError::ConcurrencyLimited {
                retry_after: super::CONCURRENCY_RETRY_HINT,
            },
            3 => {
                let window = tokens.map_or(Window::Minute, |t| t.window);
                RequestError::TokensLimited {
                    retry_after: wait,
                    window: window.name(),
                    limit: tokens.map_or(0, |t| t.limit),
                    estimate,
                }
            }
            _ => {
                let named = [answer[11], answer[12], answer[13], answer[14]];
                budget::refusal(key, named, cost.unwrap_or(0), &windows, now_ms)
            }
        };
        let refusal = Refusal { error, position };
        if matches!(answer[0], 1 | 3) {
            // Refused for a wait the store measured: the same request is refused here until
            // it is over, without a call. (A budget's refusal depends on the request's
            // cost, so a cheaper one may pass: it is not gated.)
            let now = Instant::now();
            self.gate
                .insert(key.name.clone(), (now, now + wait, refusal.clone()));
        }
        Shared::Refused(refusal)
    }

    /// One call within the timeout, timed and counted. A failure to reach the store (or
    /// the store itself refusing work: loading, read-only, cluster down) marks it down; an
    /// error confined to the call's key (its script failed on that key's data) does not.
    async fn call<T, F, Fut>(&self, call: F) -> Option<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let started = Instant::now();
        let outcome = tokio::time::timeout(self.config.timeout, async {
            let connection = self.connection().await?;
            call(connection).await
        })
        .await;
        self.duration.observe(started.elapsed().as_secs_f64());
        let kind = match outcome {
            Ok(Ok(value)) => return Some(value),
            Err(_elapsed) => "timeout",
            Ok(Err(e)) if e.is_timeout() => "timeout",
            Ok(Err(e))
                if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() =>
            {
                "connection"
            }
            Ok(Err(e)) if confined_to_key(&e) => {
                self.script_failed();
                return None;
            }
            Ok(Err(_)) => "server",
        };
        self.errors.with_label_values(&[kind]).inc();
        log::warn!(target: "sluice::limits", kind = kind; "limits store call failed; admitting by on_error until it answers");
        self.mark_down();
        None
    }

    /// A call whose script failed on its key's data: counted and logged; the store stays
    /// up, and only the requests of that call apply `on_error`.
    fn script_failed(&self) {
        self.errors.with_label_values(&["script"]).inc();
        log::warn!(target: "sluice::limits", kind = "script"; "limits store script failed for one key; its requests apply on_error, the store stays up");
    }

    async fn connection(&self) -> redis::RedisResult<Connection> {
        let connection = self
            .connection
            .get_or_try_init(|| self.client.connect(self.config.timeout))
            .await?;
        Ok(connection.clone())
    }

    /// Stops using the store and pings it once a second until it answers.
    fn mark_down(&self) {
        self.up.store(false, Ordering::Release);
        self.up_gauge.set(0);
        self.gate.clear();
    }

    /// Starts the probe of a store that is down, if none runs (called by the gateway's
    /// admission path, which owns an `Arc` of the store).
    pub fn probe(self: &Arc<Self>) {
        if self.is_up() || self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_INTERVAL);
            loop {
                tick.tick().await;
                let answered = tokio::time::timeout(store.config.timeout, async {
                    let mut connection = store.connection().await?;
                    redis::cmd("PING")
                        .query_async::<String>(&mut connection)
                        .await
                })
                .await;
                if matches!(answered, Ok(Ok(_))) {
                    break;
                }
            }
            // Before any admission is decided there again: the store may have lost the
            // leases of requests still running here, or never had those admitted here.
            store.restore_leases().await;
            store.up.store(true, Ordering::Release);
            store.up_gauge.set(1);
            store.probing.store(false, Ordering::Release);
            log::info!(target: "sluice::limits", "limits store answers again; shared limits resume");
            store.recovered.notify_waiters();
        });
    }
}

/// Whether a store's error concerns only the call's key (the script failed on its data,
/// or answered something unreadable), not the store as a whole.
fn confined_to_key(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::ExecAbort)
            | ErrorKind::Extension
            | ErrorKind::UnexpectedReturnType
            | ErrorKind::Parse
    )
}
