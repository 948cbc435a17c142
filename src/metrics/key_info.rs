//! `sluice_key_info`: a collector whose label names follow the configuration.

use crate::catalog::Key;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType};
use std::sync::{Arc, Mutex};

/// `sluice_key_info{key, <each of metric_labels>} 1`: the one series that carries key
/// labels, to be joined onto any series with a `key` label. Its label names change with
/// `metric_labels` on a reload, which a fixed-label vector cannot do, so it is collected
/// from rows rebuilt at each load.
#[derive(Clone)]
pub(super) struct KeyInfo {
    desc: Arc<Desc>,
    rows: Arc<Mutex<Vec<Metric>>>,
}

impl KeyInfo {
    const NAME: &'static str = "sluice_key_info";

    pub(super) fn new() -> Self {
        let desc = Desc::new(
            Self::NAME.into(),
            "Always 1; a key's labels listed in metric_labels, to join on the key label.".into(),
            Vec::new(),
            Default::default(),
        )
        .expect("valid metric");
        KeyInfo {
            desc: Arc::new(desc),
            rows: Arc::default(),
        }
    }

    pub(super) fn replace(&self, keys: &[Arc<Key>], metric_labels: &[String]) {
        let pair = |name: &str, value: &str| {
            let mut pair = LabelPair::default();
            pair.set_name(name.into());
            pair.set_value(value.into());
            pair
        };
        let rows = keys
            .iter()
            .map(|key| {
                let mut labels = vec![pair("key", &key.name)];
                for name in metric_labels {
                    let value = key.labels.get(name).map_or("", String::as_str);
                    labels.push(pair(name, value));
                }
                let mut gauge = Gauge::default();
                gauge.set_value(1.0);
                let mut metric = Metric::default();
                metric.set_label(labels);
                metric.set_gauge(gauge);
                metric
            })
            .collect();
        *self.rows.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }
}

impl Collector for KeyInfo {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if rows.is_empty() {
            return Vec::new();
        }
        let mut family = MetricFamily::default();
        family.set_name(Self::NAME.into());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::GAUGE);
        family.set_metric(rows);
        vec![family]
    }
}
