//! TLS for tests: a certificate authority made at run time (rcgen), the server and client
//! certificates it signs, and a rustls client that connects to a gateway's TLS listener.

use super::client::Conn;
use super::gateway::{config_with, TestGateway};
use super::mock::MockUpstream;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A certificate authority of one test.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA's own certificate, PEM.
    pub pem: String,
    der: CertificateDer<'static>,
}

/// A certificate the CA signed, with its key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Leaf {
    /// Writes `<stem>.pem` and `<stem>.key` in `dir`; returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (DNS SANs; the first is also its CN), valid until
    /// `not_after` (year, month, day) when given.
    pub fn server(&self, names: &[&str], not_after: Option<(i32, u8, u8)>) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0].as_str());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        if let Some((year, month, day)) = not_after {
            params.not_after = rcgen::date_time_ymd(year, month, day);
        }
        self.sign(params)
    }

    /// A client certificate whose subject is `O=<organization>, CN=<common_name>`.
    pub fn client(&self, organization: &str, common_name: &str) -> Leaf {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        // Written in this order (rcgen's default name has a CN first).
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, organization);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: rcgen::CertificateParams) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Writes the CA certificate to `dir/<stem>.pem`.
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

/// How a test client connects.
pub struct ClientSetup<'a> {
    /// Trusted for the server's certificate.
    pub ca: &'a TestCa,
    /// The SNI sent (and the name the certificate is checked against).
    pub server_name: &'a str,
    /// The TLS versions offered; empty: 1.2 and 1.3.
    pub versions: &'a [&'static rustls::SupportedProtocolVersion],
    /// A client certificate to present.
    pub identity: Option<&'a Leaf>,
    /// The ALPN protocols offered.
    pub alpn: &'a [&'a [u8]],
}

impl<'a> ClientSetup<'a> {
    pub fn new(ca: &'a TestCa, server_name: &'a str) -> Self {
        ClientSetup {
            ca,
            server_name,
            versions: &[],
            identity: None,
            alpn: &[b"http/1.1"],
        }
    }

    fn config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = if self.versions.is_empty() {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        } else {
            self.versions
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match self.identity {
            Some(leaf) => {
                let key = rustls_pemfile::private_key(&mut leaf.key_pem.as_bytes())
                    .unwrap()
                    .unwrap();
                builder
                    .with_client_auth_cert(vec![leaf.der.clone()], key)
                    .unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// The TLS handshake with `addr`; the stream, or the handshake's error.
    pub async fn connect(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let connector = tokio_rustls::TlsConnector::from(self.config());
        let name = ServerName::try_from(self.server_name.to_string()).unwrap();
        connector.connect(name, tcp).await
    }

    /// A [`Conn`] over a TLS connection to `addr` (its handshake must succeed).
    pub async fn open(&self, addr: SocketAddr) -> Conn {
        Conn::over(
            self.connect(addr)
                .await
                .expect("the TLS handshake succeeds"),
        )
    }
}

/// The DNS names of the certificate the server presented on `stream`.
pub fn served_names(
    stream: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> Vec<String> {
    let leaf = &stream.get_ref().1.peer_certificates().unwrap()[0];
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).unwrap();
    let names = parsed.subject_alternative_name().unwrap().unwrap();
    names
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect()
}

/// The certificate the server presented on `stream`.
pub fn served_certificate(
    stream: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// `tls:` (or `admin_tls:` with `section`) naming `certificates` (cert, key file pairs),
/// with `more` lines under it (`  min_version: "1.3"`).
pub fn tls_section(section: &str, certificates: &[(&Path, &Path)], more: &str) -> String {
    let mut yaml = format!("{section}:\n  certificates:\n");
    for (cert, key) in certificates {
        yaml.push_str(&format!(
            "    - {{cert_file: {}, key_file: {}}}\n",
            cert.display(),
            key.display()
        ));
    }
    yaml.push_str(more);
    yaml
}

/// A gateway whose client listener serves `certificates` (files written in `dir`), with
/// `more` under `tls:` and `extra` at the top of the configuration.
pub async fn tls_gateway(
    mock: &MockUpstream,
    certificates: &[(&Path, &Path)],
    more: &str,
    extra: &str,
) -> TestGateway {
    let section = tls_section("tls", certificates, more);
    TestGateway::start(&config_with(&mock.url(), &format!("{extra}\n{section}"))).await
}
