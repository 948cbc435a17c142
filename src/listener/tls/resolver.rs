//! Choosing a listener's certificate by SNI: the names each certificate's leaf lists (its
//! DNS subject alternative names, a wildcard `*.example.com` covering one label) select it;
//! a handshake without SNI, or with a name none lists, gets the first certificate. The
//! lookup is built once per load, so a handshake costs two hash look-ups at most.

use super::certificate::Certificate;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

/// The certificates of one load and their names.
#[derive(Debug)]
pub struct SniResolver {
    certificates: Vec<Arc<CertifiedKey>>,
    /// Exact names, each to the first certificate listing it.
    exact: HashMap<String, usize>,
    /// Wildcards by the part after `*.` (`example.com` for `*.example.com`).
    wildcard: HashMap<String, usize>,
}

impl SniResolver {
    /// The lookup over `certificates`, the first being the default. Not empty (the
    /// configuration refuses a listener without certificates).
    pub fn new(certificates: &[Certificate]) -> Self {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (index, certificate) in certificates.iter().enumerate() {
            for name in &certificate.dns_names {
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()).or_insert(index),
                    None => exact.entry(name.clone()).or_insert(index),
                };
            }
        }
        SniResolver {
            certificates: certificates.iter().map(|c| Arc::clone(&c.key)).collect(),
            exact,
            wildcard,
        }
    }

    /// The index of the certificate for `server_name` (the SNI), `0` when none lists it.
    pub fn choose(&self, server_name: Option<&str>) -> usize {
        let Some(name) = server_name else {
            return 0;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(index) = self.exact.get(&name) {
            return *index;
        }
        // A wildcard covers exactly one label: `a.example.com`, not `example.com` nor
        // `a.b.example.com` (RFC 6125 6.4.3).
        name.split_once('.')
            .filter(|(label, _)| !label.is_empty())
            .and_then(|(_, parent)| self.wildcard.get(parent))
            .copied()
            .unwrap_or(0)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let index = self.choose(client_hello.server_name());
        self.certificates.get(index).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(names: &[&[&str]]) -> SniResolver {
        let mut resolver = SniResolver {
            certificates: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        for (index, list) in names.iter().enumerate() {
            for name in *list {
                match name.strip_prefix("*.") {
                    Some(parent) => resolver.wildcard.entry(parent.into()).or_insert(index),
                    None => resolver.exact.entry(name.to_string()).or_insert(index),
                };
            }
        }
        resolver
    }

    #[test]
    fn names_select_their_certificate_and_anything_else_gets_the_first() {
        let r = resolver(&[
            &["api.example.com"],
            &["*.internal.example.com", "other.test"],
            &["api.example.com", "third.test"],
        ]);
        assert_eq!(r.choose(None), 0, "no SNI: the default");
        assert_eq!(r.choose(Some("api.example.com")), 0);
        assert_eq!(
            r.choose(Some("API.Example.COM.")),
            0,
            "case and a final dot"
        );
        assert_eq!(r.choose(Some("other.test")), 1);
        assert_eq!(r.choose(Some("a.internal.example.com")), 1, "one label");
        assert_eq!(
            r.choose(Some("a.b.internal.example.com")),
            0,
            "a wildcard covers one label only"
        );
        assert_eq!(
            r.choose(Some("internal.example.com")),
            0,
            "a wildcard does not cover its parent"
        );
        assert_eq!(r.choose(Some("third.test")), 2);
        assert_eq!(r.choose(Some("unknown.test")), 0);
    }
}
