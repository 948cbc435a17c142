//! The gateway's TLS listeners: a terminator per listener with `tls:` or `admin_tls:`,
//! made from the first catalog, its settings replaced by each later one (a reload, whether
//! the configuration file or a certificate file changed), and the expiry gauge kept to
//! the certificates served.
//!
//! Whether a listener speaks TLS at all is fixed at start: a reload that adds or removes
//! `tls:` is logged as needing a restart (`reload.rs`), and the terminator keeps what it
//! has.

use crate::catalog::Catalog;
use crate::listener::tls::{Terminator, TlsSettings};
use crate::metrics::TlsMetrics;
use std::sync::Arc;

/// The TLS terminators of the client and admin listeners (`None`: cleartext).
pub struct ListenerTls {
    pub client: Option<Arc<Terminator>>,
    pub admin: Option<Arc<Terminator>>,
}

impl ListenerTls {
    /// Terminators for the listeners `catalog` configures with TLS.
    pub fn new(catalog: &Catalog, metrics: &TlsMetrics) -> Self {
        let terminator = |settings: &Option<TlsSettings>| {
            settings.as_ref().map(|settings| {
                Arc::new(Terminator::new(
                    settings,
                    metrics.handshake_failures.clone(),
                ))
            })
        };
        let tls = ListenerTls {
            client: terminator(&catalog.tls),
            admin: terminator(&catalog.admin_tls),
        };
        tls.describe(metrics);
        tls
    }

    /// New handshakes use `catalog`'s certificates from now on; open connections keep
    /// theirs.
    pub fn replace(&self, catalog: &Catalog, metrics: &TlsMetrics) {
        for (terminator, settings) in [
            (&self.client, &catalog.tls),
            (&self.admin, &catalog.admin_tls),
        ] {
            if let (Some(terminator), Some(settings)) = (terminator, settings) {
                terminator.replace(settings);
            }
        }
        self.describe(metrics);
    }

    /// The expiry gauge, for the certificates the listeners serve now (a listener whose
    /// `tls:` a reload removed keeps serving its own until the restart).
    fn describe(&self, metrics: &TlsMetrics) {
        let served: Vec<_> = self
            .client
            .iter()
            .chain(&self.admin)
            .map(|terminator| terminator.settings())
            .collect();
        metrics.describe_certificates(
            served
                .iter()
                .flat_map(|settings| &settings.certificates)
                .map(|c| (c.name.as_str(), c.not_after)),
        );
    }
}
