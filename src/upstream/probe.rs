//! Active health checks: for each upstream with a `health_check_interval`, a `GET {url}/models`
//! that must answer 2xx in time. A pass clears a passive ejection at once; a failure counts
//! like a failed request, and confirms a streak of one tenant's failures (both through
//! [`Upstreams::record`]).

use super::health::{HealthEffect, Witness};
use super::request::check_header;
use super::Upstreams;
use crate::catalog::{Catalog, Upstream};
use crate::http1::client::Http1;
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the schedule is looked at; each upstream is checked at its own interval.
const TICK: Duration = Duration::from_millis(250);
/// A check never waits longer than this, whatever the upstream's first_byte_timeout.
const CHECK_TIMEOUT_MAX: Duration = Duration::from_secs(10);

/// What the checks need of the process's shared state (the gateway implements it; this
/// folder does not depend on the gateway).
pub trait CheckContext: Send + Sync + 'static {
    /// The catalog in force, read at every tick so reloads apply.
    fn catalog(&self) -> Arc<Catalog>;
    fn upstreams(&self) -> &Upstreams;
    fn metrics(&self) -> &Metrics;
}

/// Why a check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckFailure {
    /// No connection could be opened.
    Connect,
    /// The request could not be built or written, or no valid answer was read.
    Exchange,
    /// It answered, with a status other than 2xx.
    Status(u16),
    /// No answer within the check's time limit.
    Timeout,
}

/// Runs the checks of the catalog in force until `stop` turns true.
pub async fn run<C: CheckContext>(context: Arc<C>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut last_started: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        for upstream in &context.catalog().upstreams {
            let Some(every) = upstream.policy.health_check_interval else {
                continue;
            };
            if last_started
                .get(&upstream.name)
                .is_some_and(|at| at.elapsed() < every)
            {
                continue;
            }
            last_started.insert(upstream.name.clone(), Instant::now());
            let (context, upstream) = (Arc::clone(&context), Arc::clone(upstream));
            tokio::spawn(
                async move { check(context.upstreams(), context.metrics(), &upstream).await },
            );
        }
    }
}

/// One check, recorded in the upstream's health and in metrics.
pub async fn check(
    upstreams: &Upstreams,
    metrics: &Metrics,
    upstream: &Upstream,
) -> Result<(), CheckFailure> {
    let limit = upstream.first_byte_timeout.min(CHECK_TIMEOUT_MAX);
    let result = tokio::time::timeout(limit, models_answer(upstreams, upstream))
        .await
        .unwrap_or(Err(CheckFailure::Timeout));
    let (label, effect) = match result {
        Ok(()) => ("pass", HealthEffect::CheckPassed),
        Err(_) => ("fail", HealthEffect::Failure),
    };
    metrics
        .upstream_health_checks
        .with_label_values(&[&upstream.name, label])
        .inc();
    upstreams.record(upstream, effect, metrics, Witness::Check);
    result
}

/// `GET {url}/models` answers 2xx (the body is read and discarded).
async fn models_answer(upstreams: &Upstreams, upstream: &Upstream) -> Result<(), CheckFailure> {
    let peer: &pingora_core::upstreams::peer::HttpPeer = &upstream.peer;
    let header = check_header(upstream).map_err(|_| CheckFailure::Exchange)?;
    // A fresh connection: a pooled one the backend has closed (llama.cpp closes after each
    // streamed response) would fail the check for nothing.
    let stream = super::connect::connect(&upstreams.checks, peer)
        .await
        .map_err(|_| CheckFailure::Connect)?;
    let mut connection = Http1::new(stream);
    let exchange_failed = |_| CheckFailure::Exchange;
    connection
        .send(header.wire(), header.is_head(), &bytes::Bytes::new())
        .await
        .map_err(exchange_failed)?;
    let status = connection
        .read_head()
        .await
        .map_err(exchange_failed)?
        .status;
    // Read whole, then closed (dropped): a check's connection is never reused.
    while let Ok(Some(_)) = connection.read_body().await {}
    if status.is_success() {
        Ok(())
    } else {
        Err(CheckFailure::Status(status.as_u16()))
    }
}
