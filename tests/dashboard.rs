//! The Grafana dashboard (`deploy/grafana/sluice.json`) cannot rot: every query parses, and
//! names only series, and labels of them, that a live gateway's `/metrics` exports. The
//! ConfigMap the Kubernetes monitoring overlay ships carries the same dashboard.

mod common;
use common::promql::check;
use common::*;
use std::collections::{BTreeMap, BTreeSet};

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read("deploy/grafana/sluice.json")).expect("the dashboard is JSON")
}

/// Every query of every panel (rows' panels included), with its panel's title.
fn queries(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("each target has an expr");
            out.push((title.clone(), expr.to_string()));
        }
        queries(&panel["panels"], out);
    }
}

/// Each series name in a text exposition, with the label names it has.
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).expect("a sample line");
        let labels = series.entry(line[..name_end].to_string()).or_default();
        if let Some(inner) = line[name_end..].strip_prefix('{') {
            let mut rest = inner;
            while let Some(eq) = rest.find("=\"") {
                labels.insert(rest[..eq].trim_start_matches(',').to_string());
                // Past the quoted value (values may hold escaped quotes).
                let value = &rest[eq + 2..];
                let mut end = 0;
                let bytes = value.as_bytes();
                while bytes[end] != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                rest = &value[end + 1..];
            }
        }
    }
    series
}

/// A gateway with every kind of series present: an upstream with a queue, a model with a
/// fallback, a request answered with usage, and a limits store (its series exist only
/// where one is configured).
async fn live_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let redis = common::redis_server::RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - name: mock
    url: {url}
    max_concurrent: 4
models:
  - id: chat-model
    upstream: mock
    fallbacks: [backup]
  - id: backup
    upstream: mock
keys:
  - {{name: alpha, sha256: {hash}}}
limits_store:
  url: {store}
"#,
        store = redis.url(),
        url = mock.url(),
        hash = key_hash(ALPHA)
    );
    let gw = TestGateway::start(&yaml).await;
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    gw.log_lines(1).await;
    let metrics = get(gw.admin(), "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    exported(&metrics.text())
}

#[tokio::test]
async fn every_dashboard_query_parses_and_names_exported_series_and_labels() {
    let exported = live_metrics().await;
    let mut all = Vec::new();
    queries(&dashboard()["panels"], &mut all);
    assert!(
        all.len() >= 20,
        "the dashboard has its queries: {}",
        all.len()
    );
    let mut named = BTreeSet::new();
    for (title, expr) in &all {
        let uses = check(expr).unwrap_or_else(|e| panic!("{title}: {expr} does not parse: {e}"));
        assert!(!uses.is_empty(), "{title}: {expr} names a series");
        for series in uses {
            let labels = exported.get(&series.metric).unwrap_or_else(|| {
                panic!("{title}: {} is not exported by the gateway", series.metric)
            });
            for label in &series.labels {
                assert!(
                    labels.contains(label),
                    "{title}: {} has no label {label} (it has {labels:?})",
                    series.metric
                );
            }
            named.insert(series.metric);
        }
    }
    // The issue's list: each is on the dashboard.
    for wanted in [
        "sluice_requests_total",
        "sluice_request_duration_seconds_bucket",
        "sluice_overhead_seconds_bucket",
        "sluice_upstream_ttfb_seconds_bucket",
        "sluice_in_flight_requests",
        "sluice_rejections_total",
        "sluice_upstream_available",
        "sluice_upstream_ejections_total",
        "sluice_tokens_total",
        "sluice_config_reloads_total",
        "sluice_limits_store_up",
    ] {
        assert!(named.contains(wanted), "the dashboard shows {wanted}");
    }
}

#[test]
fn the_monitoring_overlay_ships_the_same_dashboard() {
    let manifest: serde_yaml::Value =
        serde_yaml::from_str(&read("deploy/kubernetes/monitoring/grafana-dashboard.yaml"))
            .expect("the ConfigMap is YAML");
    assert_eq!(manifest["kind"], "ConfigMap");
    assert_eq!(
        manifest["metadata"]["labels"]["grafana_dashboard"], "1",
        "labelled for Grafana's sidecar"
    );
    let shipped: serde_json::Value = serde_json::from_str(
        manifest["data"]["sluice.json"]
            .as_str()
            .expect("the dashboard is in data"),
    )
    .expect("the shipped dashboard is JSON");
    assert_eq!(
        shipped,
        dashboard(),
        "deploy/kubernetes/monitoring/grafana-dashboard.yaml carries deploy/grafana/sluice.json"
    );
    let kustomization = read("deploy/kubernetes/monitoring/kustomization.yaml");
    assert!(kustomization.contains("grafana-dashboard.yaml"));
}

#[test]
fn the_promql_checker_accepts_dashboard_queries_and_refuses_broken_ones() {
    let uses = check(
        r#"histogram_quantile(0.95, sum by (le, upstream) (rate(x_bucket{a=~"b",c!="d"}[$__rate_interval])))"#,
    )
    .unwrap();
    assert_eq!(uses[0].metric, "x_bucket");
    assert_eq!(uses[0].labels, ["a", "c", "le", "upstream"]);
    assert!(check(r#"sum(rate(a[5m])) / sum(rate(b{s=~"5.."}[1h30m]))"#).is_ok());
    for broken in [
        "sum(rate(a[5m])",
        "rate(a)",
        "sum by (k (a)",
        "a{b=c}",
        "a[5q]",
        "nosuchfunction(a)",
        "a +",
        "histogram_quantile(a)",
        "a[5m]",
    ] {
        assert!(check(broken).is_err(), "{broken} is refused");
    }
}
