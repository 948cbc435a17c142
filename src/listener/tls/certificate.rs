//! A listener's certificate: its chain and private key read from PEM files, checked to
//! belong together, with what the SNI lookup and the expiry gauge need from the leaf (its
//! DNS names, its `notAfter`). Also the client CA file of mTLS. Read when the configuration
//! loads (startup, every reload): a file that does not make a usable certificate is a
//! configuration error, never a handshake that fails later.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;

/// Largest certificate, key or CA file read: a chain is a few KiB, a CA bundle some hundreds.
const MAX_PEM_BYTES: u64 = 4 << 20;

/// One certificate of a listener, ready to serve.
#[derive(Clone)]
pub struct Certificate {
    /// The chain (leaf first) and the key that signs for it.
    pub key: Arc<CertifiedKey>,
    /// The leaf's DNS names (subject alternative names), lower-case; `*.example.com` for a
    /// wildcard.
    pub dns_names: Vec<String>,
    /// The leaf's `notAfter`, in seconds since the Unix epoch.
    pub not_after: i64,
    /// What the expiry gauge calls it: the first DNS name, else the certificate file's name.
    pub name: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl std::fmt::Debug for Certificate {
    // Never the key: only what names the certificate.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("name", &self.name)
            .field("dns_names", &self.dns_names)
            .field("not_after", &self.not_after)
            .field("cert_file", &self.cert_file)
            .finish()
    }
}

/// Why a certificate, key or CA file cannot be used; the message names the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateError {
    /// Which file is at fault.
    pub culprit: Culprit,
    pub message: String,
}

/// The file a [`CertificateError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Culprit {
    /// The certificate (or client CA) file.
    Certificate,
    /// The private key file.
    Key,
}

impl CertificateError {
    fn certificate(message: String) -> Self {
        CertificateError {
            culprit: Culprit::Certificate,
            message,
        }
    }

    fn key(message: String) -> Self {
        CertificateError {
            culprit: Culprit::Key,
            message,
        }
    }
}

impl std::fmt::Display for CertificateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Certificate {
    /// Reads `cert_file` (PEM chain, leaf first) and `key_file` (PEM private key: PKCS#8,
    /// PKCS#1 or SEC1) and checks that the key is the leaf's.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Certificate, CertificateError> {
        let chain = read_certificates(cert_file).map_err(CertificateError::certificate)?;
        let leaf = leaf_facts(cert_file, &chain[0]).map_err(CertificateError::certificate)?;
        let key = read_private_key(key_file).map_err(CertificateError::key)?;
        let provider = rustls::crypto::ring::default_provider();
        let key = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
            CertificateError::key(match e {
                rustls::Error::InconsistentKeys(_) => format!(
                    "{} is not the private key of {}",
                    key_file.display(),
                    cert_file.display()
                ),
                other => format!("{}: key not usable: {other}", key_file.display()),
            })
        })?;
        let name = leaf.dns_names.first().cloned().unwrap_or_else(|| {
            cert_file
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        });
        Ok(Certificate {
            key: Arc::new(key),
            dns_names: leaf.dns_names,
            not_after: leaf.not_after,
            name,
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
        })
    }
}

/// The certificates of a client CA file (mTLS), each checked to parse.
pub fn load_client_roots(ca_file: &Path) -> Result<Arc<rustls::RootCertStore>, CertificateError> {
    let mut roots = rustls::RootCertStore::empty();
    for der in read_certificates(ca_file).map_err(CertificateError::certificate)? {
        roots.add(der).map_err(|e| {
            CertificateError::certificate(format!(
                "{}: a CA certificate is not usable: {e}",
                ca_file.display()
            ))
        })?;
    }
    Ok(Arc::new(roots))
}

/// What the leaf says of itself.
struct LeafFacts {
    dns_names: Vec<String>,
    not_after: i64,
}

fn leaf_facts(file: &Path, leaf: &CertificateDer<'_>) -> Result<LeafFacts, String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| {
        format!(
            "{}: the first certificate does not parse: {e}",
            file.display()
        )
    })?;
    let mut dns_names = Vec::new();
    if let Ok(Some(names)) = parsed.subject_alternative_name() {
        for name in &names.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                dns_names.push(dns.to_ascii_lowercase());
            }
        }
    }
    Ok(LeafFacts {
        dns_names,
        not_after: parsed.validity().not_after.timestamp(),
    })
}

/// A PEM file's text, read only if it is a regular file of bounded size.
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| cannot(&e))?;
    if !meta.is_file() {
        return Err(cannot(&"not a regular file"));
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(cannot(&format!("larger than {MAX_PEM_BYTES} bytes")));
    }
    std::fs::read(path).map_err(|e| cannot(&e))
}

/// Every certificate of a PEM file, at least one, each checked to parse.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    certificates_in(&read_pem(path)?, path)
}

/// Every certificate of `pem` (the text of the file at `path`, named in errors), at least
/// one, each checked to parse with the parser pingora's would panic on.
pub fn certificates_in(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut certificates = Vec::new();
    for item in rustls_pemfile::certs(&mut &pem[..]) {
        let der =
            item.map_err(|e| format!("{}: not a PEM certificate file: {e}", path.display()))?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|e| format!("{}: a certificate does not parse: {e}", path.display()))?;
        certificates.push(der);
    }
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certificates)
}

/// The one private key of a PEM file.
fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_pem(path)?;
    match rustls_pemfile::private_key(&mut pem.as_slice()) {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(format!(
            "{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        )),
        // The reader's message never quotes the key's bytes.
        Err(e) => Err(format!(
            "{}: not a PEM private key file: {e}",
            path.display()
        )),
    }
}
