//! What a TLS listener terminates with: the rustls server configuration of one load (its
//! certificates behind the SNI lookup, the versions, the client-certificate check, the
//! ALPN protocols), swapped whole on a reload, and the handshake of each connection under
//! the connection's head deadline, its failures counted by a fixed set of reasons.

use super::certificate::{Certificate, CertificateError, Culprit};
use super::resolver::SniResolver;
use super::stream::TlsStream;
use arc_swap::ArcSwap;
use pingora_core::protocols::Stream;
use std::io;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::rustls::server::danger::ClientCertVerifier;
use tokio_rustls::rustls::ServerConfig;

/// The oldest TLS version a listener accepts (`min_version`). Nothing before 1.2 exists
/// in rustls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

/// ALPN protocol names, in the server's order of preference.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// One load of a listener's TLS: everything a handshake uses, checked and built.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The certificates, the first being the default; for the expiry gauge and the watch
    /// of their files.
    pub certificates: Vec<Certificate>,
    pub min_version: MinVersion,
    /// `client_ca_file`, when client certificates are required.
    pub client_ca_file: Option<std::path::PathBuf>,
    server_config: Arc<ServerConfig>,
}

impl TlsSettings {
    /// Builds the server configuration. `client_verifier`: client certificates signed by
    /// these roots are required (mTLS). `alpn`: the protocols offered, preferred first.
    pub fn new(
        certificates: Vec<Certificate>,
        min_version: MinVersion,
        client_ca: Option<(std::path::PathBuf, Arc<rustls::RootCertStore>)>,
        alpn: &[&[u8]],
    ) -> Result<TlsSettings, CertificateError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = match min_version {
            MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            MinVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(|e| CertificateError {
                culprit: Culprit::Certificate,
                message: format!("TLS versions not usable: {e}"),
            })?;
        let (client_ca_file, builder) = match client_ca {
            Some((file, roots)) => {
                let verifier: Arc<dyn ClientCertVerifier> =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                        .build()
                        .map_err(|e| CertificateError {
                            culprit: Culprit::Certificate,
                            message: format!("{}: client CA not usable: {e}", file.display()),
                        })?;
                (Some(file), builder.with_client_cert_verifier(verifier))
            }
            None => (None, builder.with_no_client_auth()),
        };
        let mut server_config =
            builder.with_cert_resolver(Arc::new(SniResolver::new(&certificates)));
        server_config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // Early data (0-RTT) can be replayed: a POST must never be.
        server_config.max_early_data_size = 0;
        Ok(TlsSettings {
            certificates,
            min_version,
            client_ca_file,
            server_config: Arc::new(server_config),
        })
    }

    /// Every file this load read: certificates, keys, the client CA.
    pub fn files(&self) -> impl Iterator<Item = &std::path::Path> {
        self.certificates
            .iter()
            .flat_map(|c| [c.cert_file.as_path(), c.key_file.as_path()])
            .chain(self.client_ca_file.as_deref())
    }
}

/// Why a handshake failed: the `reason` label of `sluice_tls_handshake_failures_total`.
pub const FAILURE_REASONS: [&str; 8] = [
    "timeout",
    "closed",
    "incompatible",
    "no_client_certificate",
    "bad_client_certificate",
    "client_alert",
    "malformed",
    "other",
];

/// Terminates TLS for one listener.
pub struct Terminator {
    /// What new handshakes use.
    settings: ArcSwap<TlsSettings>,
    /// `sluice_tls_handshake_failures_total{reason}`.
    failures: prometheus::IntCounterVec,
}

impl Terminator {
    pub fn new(settings: &TlsSettings, failures: prometheus::IntCounterVec) -> Self {
        for reason in FAILURE_REASONS {
            failures.with_label_values(&[reason]);
        }
        Terminator {
            settings: ArcSwap::from_pointee(settings.clone()),
            failures,
        }
    }

    /// Serves `settings` from the next handshake on; open connections keep theirs.
    pub fn replace(&self, settings: &TlsSettings) {
        self.settings.store(Arc::new(settings.clone()));
    }

    /// What new handshakes use now.
    pub fn settings(&self) -> Arc<TlsSettings> {
        self.settings.load_full()
    }

    /// The handshake on an accepted connection, which must end by `deadline`; `None` (the
    /// failure counted, the connection to be closed) when it does not succeed.
    pub async fn accept(&self, stream: Stream, deadline: Option<Instant>) -> Option<TlsStream> {
        let config = Arc::clone(&self.settings.load().server_config);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let handshake = acceptor.accept(stream);
        let result = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, handshake).await,
            None => Ok(handshake.await),
        };
        let reason = match result {
            Ok(Ok(tls)) => return Some(TlsStream::new(tls)),
            Ok(Err(e)) => failure_reason(&e),
            Err(_elapsed) => "timeout",
        };
        log::debug!(target: "sluice::tls", reason; "TLS handshake failed");
        self.failures.with_label_values(&[reason]).inc();
        None
    }
}

/// The reason a failed handshake is counted under (one of [`FAILURE_REASONS`]).
fn failure_reason(error: &io::Error) -> &'static str {
    use rustls::Error as E;
    match error.get_ref().and_then(|e| e.downcast_ref::<E>()) {
        Some(E::NoCertificatesPresented) => "no_client_certificate",
        Some(E::InvalidCertificate(_)) => "bad_client_certificate",
        Some(E::PeerIncompatible(_) | E::NoApplicationProtocol) => "incompatible",
        // The client refused the handshake, usually our certificate (an unknown CA, an
        // expired or misnamed certificate).
        Some(E::AlertReceived(_)) => "client_alert",
        Some(E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::PeerMisbehaved(_)) => {
            "malformed"
        }
        Some(_) => "other",
        None => match error.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted => "closed",
            _ => "other",
        },
    }
}
