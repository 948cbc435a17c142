//! Active health checks: for each upstream with a `health_check_interval`, a `GET {url}/models`
//! that must answer 2xx in time. A pass clears a passive ejection at once; a failure counts
//! like a failed request.

use crate::catalog::Upstream;
use crate::gateway::Gateway;
use crate::upstream::upstream_path;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::HttpSession as UpstreamSession;
use pingora::upstreams::peer::Peer;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the schedule is looked at; each upstream is checked at its own interval.
const TICK: Duration = Duration::from_millis(250);
/// A check never waits longer than this, whatever the upstream's first_byte_timeout.
const CHECK_TIMEOUT_MAX: Duration = Duration::from_secs(10);

/// Runs the checks of the catalog in force until `stop` turns true.
pub async fn run(gateway: Arc<Gateway>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut last_started: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        for upstream in &gateway.catalog().upstreams {
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
            let (gateway, upstream) = (Arc::clone(&gateway), Arc::clone(upstream));
            tokio::spawn(async move { check(&gateway, &upstream).await });
        }
    }
}

/// One check, recorded in the upstream's health and in metrics.
pub async fn check(gateway: &Gateway, upstream: &Upstream) -> bool {
    let limit = upstream.first_byte_timeout.min(CHECK_TIMEOUT_MAX);
    let passed = tokio::time::timeout(limit, models_answers(gateway, upstream))
        .await
        .unwrap_or(false);
    let result = if passed { "pass" } else { "fail" };
    gateway
        .metrics
        .upstream_health_checks
        .with_label_values(&[&upstream.name, result])
        .inc();
    if passed {
        gateway.upstreams.record_check_passed(&upstream.name);
    } else if gateway.upstreams.record_failure(upstream).is_some() {
        gateway
            .metrics
            .upstream_ejections
            .with_label_values(&[&upstream.name])
            .inc();
    }
    passed
}

/// Whether `GET {url}/models` answers 2xx (the body is read and discarded).
async fn models_answers(gateway: &Gateway, upstream: &Upstream) -> bool {
    let peer = &upstream.peer;
    // A fresh connection: a pooled one the backend has closed (llama.cpp closes after each
    // streamed response) would fail the check for nothing.
    let Ok(stream) = gateway.connector.new_stream(peer).await else {
        return false;
    };
    let mut session = UpstreamSession::new_with_options(stream, peer);
    let Ok(mut header) = RequestHeader::build(
        "GET",
        upstream_path(upstream, "/models", None).as_bytes(),
        Some(3),
    ) else {
        return false;
    };
    let filled = header
        .insert_header("host", upstream.host_header.as_str())
        .is_ok()
        && upstream.credential.as_ref().is_none_or(|c| {
            header
                .insert_header("authorization", format!("Bearer {}", c.expose()))
                .is_ok()
        });
    if !filled
        || session
            .write_request_header(Box::new(header))
            .await
            .is_err()
        || session.finish_body().await.is_err()
    {
        return false;
    }
    if session.read_response().await.is_err() {
        return false;
    }
    let ok = session.resp_header().is_some_and(|h| h.status.is_success());
    while let Ok(Some(_)) = session.read_body_bytes().await {}
    session.respect_keepalive();
    if let Some(stream) = session.reuse().await {
        gateway
            .connector
            .release_stream(stream, peer.reuse_hash(), peer.idle_timeout());
    }
    ok
}
