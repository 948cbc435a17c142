//! The TLS listeners' series: each certificate's expiry, and handshakes that failed.

use prometheus::core::Collector;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use std::collections::BTreeMap;

#[derive(Clone)]
pub struct TlsMetrics {
    /// `sluice_tls_certificate_expiry_timestamp_seconds{name}`.
    pub certificate_expiry: IntGaugeVec,
    /// `sluice_tls_handshake_failures_total{reason}`, handed to each listener's terminator.
    pub handshake_failures: IntCounterVec,
}

impl TlsMetrics {
    pub(super) fn new() -> Self {
        TlsMetrics {
            certificate_expiry: IntGaugeVec::new(
                Opts::new(
                    "sluice_tls_certificate_expiry_timestamp_seconds",
                    "Unix time of a served certificate's notAfter, by its first DNS name (or file name); set at each load.",
                ),
                &["name"],
            )
            .expect("valid metric"),
            handshake_failures: IntCounterVec::new(
                Opts::new(
                    "sluice_tls_handshake_failures_total",
                    "TLS handshakes on the client and admin listeners that failed, by reason.",
                ),
                &["reason"],
            )
            .expect("valid metric"),
        }
    }

    pub(super) fn collectors(&self) -> [Box<dyn Collector>; 2] {
        [
            Box::new(self.certificate_expiry.clone()),
            Box::new(self.handshake_failures.clone()),
        ]
    }

    /// Replaces the expiry series with those of the certificates served now, each
    /// `(name, notAfter)`. Two certificates of one name show the one that expires first,
    /// which is what an alert must see.
    pub fn describe_certificates<'a>(&self, certificates: impl Iterator<Item = (&'a str, i64)>) {
        let mut earliest: BTreeMap<&str, i64> = BTreeMap::new();
        for (name, not_after) in certificates {
            let at = earliest.entry(name).or_insert(not_after);
            *at = (*at).min(not_after);
        }
        self.certificate_expiry.reset();
        for (name, not_after) in earliest {
            self.certificate_expiry
                .with_label_values(&[name])
                .set(not_after);
        }
    }
}
