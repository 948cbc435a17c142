//! The gateway's shared state, built once in `main` (or by a test) and passed explicitly:
//! the catalog snapshot, limit state, upstream state (with the connection pool), metrics and
//! the logs.

use crate::access_log::AccessLog;
use crate::catalog::Catalog;
use crate::clock::{Clock, SystemWallClock, WallClock};
use crate::config::TracingConfig;
use crate::key_switches::KeySwitches;
use crate::limits::{AdminStore, Budgets, Limiter, Store};
use crate::metrics::Metrics;
use crate::response_id::IdKeys;
use crate::telemetry::Telemetry;
use crate::tls::ListenerTls;
use crate::upstream::{Availability, CheckContext, Upstreams};
use arc_swap::ArcSwap;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Everything requests share.
pub struct Gateway {
    catalog: ArcSwap<Catalog>,
    pub limiter: Limiter,
    /// Money budgets of keys and owners, on the wall clock's calendar.
    pub budgets: Budgets,
    /// Upstream health, load, queues and the connection pool (`upstream.rs`).
    pub upstreams: Upstreams,
    pub metrics: Metrics,
    pub access_log: AccessLog,
    /// What a key's `expires_at` and `not_before` are compared with, at each request.
    pub wall_clock: Arc<dyn WallClock>,
    /// Limits shared with every replica (`limits_store`), set from the first catalog.
    pub limits_store: Option<Arc<Store>>,
    /// The admin listener's own handle on the limits store (its view of keys, the key
    /// switches), when there is one.
    pub admin_store: Option<Arc<AdminStore>>,
    /// Keys switched off at run time through the admin API.
    pub key_switches: KeySwitches,
    /// The tracer, when `tracing:` is configured (fixed until restart).
    pub telemetry: Option<Telemetry>,
    /// The listeners' TLS terminators, their certificates replaced with each catalog.
    pub tls: ListenerTls,
    /// Signs stored-response IDs when the catalog has no `response_ids` secret: made at
    /// start, kept across reloads.
    pub ephemeral_ids: IdKeys,
    draining: AtomicBool,
    /// Turns true at the end of `shutdown_grace`: requests still running end there.
    cut: tokio::sync::watch::Sender<bool>,
}

impl Gateway {
    pub fn new(catalog: Catalog, clock: Arc<dyn Clock>, access_log: AccessLog) -> Self {
        let metrics = Metrics::new();
        declare_series(&metrics, &catalog);
        metrics.config_generation.set(catalog.generation as i64);
        metrics.config_last_success.set(unix_seconds());
        if catalog.limits_store.is_some() {
            metrics.declare_limits_store();
        }
        let admin_store = catalog.limits_store.as_ref().and_then(|config| {
            AdminStore::new(config)
                .map_err(|e| log::error!(target: "sluice::admin", error:% = e; "limits store not usable by the admin listener"))
                .ok()
                .map(Arc::new)
        });
        let limits_store = catalog.limits_store.clone().and_then(|config| {
            Store::new(config, &metrics)
                .map_err(|e| log::error!(target: "sluice::limits", error:% = e; "limits store not usable; limits stay in this process"))
                .ok()
                .map(Arc::new)
        });
        let tls = ListenerTls::new(&catalog, &metrics.tls);
        Gateway {
            tls,
            limits_store,
            admin_store,
            key_switches: KeySwitches::default(),
            catalog: ArcSwap::from_pointee(catalog),
            limiter: Limiter::new(Arc::clone(&clock)),
            upstreams: Upstreams::new(clock),
            metrics,
            access_log,
            wall_clock: Arc::new(SystemWallClock),
            budgets: Budgets::new(Arc::new(SystemWallClock)),
            telemetry: None,
            ephemeral_ids: IdKeys::ephemeral(),
            draining: AtomicBool::new(false),
            cut: tokio::sync::watch::Sender::new(false),
        }
    }

    /// The same gateway, with key validity checked against `wall_clock` (tests set the
    /// date with it).
    pub fn with_wall_clock(mut self, wall_clock: Arc<dyn WallClock>) -> Self {
        self.budgets = Budgets::new(Arc::clone(&wall_clock));
        self.wall_clock = wall_clock;
        self
    }

    /// The same gateway, tracing requests as `tracing` says (nothing when it is `None`).
    pub fn with_tracing(mut self, tracing: Option<&TracingConfig>) -> Result<Self, String> {
        if let Some(config) = tracing {
            let dropped = self.metrics.trace_spans_dropped.clone();
            self.telemetry = Some(Telemetry::start(config, dropped)?);
        }
        Ok(self)
    }

    /// The snapshot a request uses from start to end.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Serves a new snapshot from the next request on; requests in flight keep theirs.
    pub fn swap_catalog(&self, catalog: Catalog) {
        self.metrics
            .config_generation
            .set(catalog.generation as i64);
        self.metrics.config_last_success.set(unix_seconds());
        declare_series(&self.metrics, &catalog);
        self.tls.replace(&catalog, &self.metrics.tls);
        let catalog = Arc::new(catalog);
        self.catalog.store(Arc::clone(&catalog));
        // Name sets built once: a lookup per tracked key, not a scan of the catalog each.
        let key_names: HashSet<&str> = catalog.key_names().collect();
        self.limiter.retain_keys(|name| key_names.contains(name));
        if let Some(store) = &self.limits_store {
            store.forget_refusals();
        }
        let upstream_names: HashSet<&str> =
            catalog.upstreams.iter().map(|u| u.name.as_str()).collect();
        self.upstreams.retain(|name| upstream_names.contains(name));
    }

    /// Stops admitting new requests (they get 503 `overloaded`); `/readyz` turns 503.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The end of `shutdown_grace`: every request still running ends now, with its log line
    /// (`cut_by_shutdown`), rather than vanishing with its task.
    pub fn cut_requests(&self) {
        self.cut.send_replace(true);
    }

    /// Resolves once [`Gateway::cut_requests`] was called (at once if it was already).
    pub async fn requests_cut(&self) {
        let mut cut = self.cut.subscribe();
        let _ = cut.wait_for(|cut| *cut).await;
    }

    /// Sets the gauges that describe state at a point in time (upstream availability) and
    /// renders every series: what `GET /metrics` serves.
    pub fn render_metrics(&self) -> Vec<u8> {
        for upstream in &self.catalog().upstreams {
            let available = self.upstreams.availability(&upstream.name) == Availability::Available;
            self.metrics
                .upstream_available
                .with_label_values(&[&upstream.name])
                .set(i64::from(available));
        }
        self.metrics
            .access_log_dropped
            .set(self.access_log.dropped_lines() as i64);
        self.metrics.render()
    }
}

impl CheckContext for Gateway {
    fn catalog(&self) -> Arc<Catalog> {
        Gateway::catalog(self)
    }

    fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Every series of the catalog's upstreams and keys, at zero until it moves, and the
/// series that describe the keys.
fn declare_series(metrics: &Metrics, catalog: &Catalog) {
    metrics.declare(
        catalog.upstreams.iter().map(|u| u.name.as_str()),
        catalog.key_names(),
    );
    for (model, fallback) in catalog.fallback_pairs() {
        metrics
            .model_fallbacks
            .with_label_values(&[model, fallback]);
    }
    metrics.describe_keys(catalog.keys(), &catalog.metric_labels);
}

fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Reads the store's key switches every [`REFRESH_INTERVAL`] until `stop` turns true (only
/// with a limits store). A store that does not answer leaves the switches as last read.
/// Here rather than in `key_switches.rs`, which the gateway holds and so cannot name it.
///
/// [`REFRESH_INTERVAL`]: crate::key_switches::REFRESH_INTERVAL
pub async fn keep_key_switches_fresh(
    gateway: Arc<Gateway>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(store) = gateway.admin_store.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(crate::key_switches::REFRESH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let mark = gateway.key_switches.mark();
        if let Some(switches) = store.switches().await {
            gateway.key_switches.replace(mark, switches);
        }
    }
}
