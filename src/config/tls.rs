//! `tls:` and `admin_tls:` (TLS on the client and admin listeners), with the protocols the
//! client listener offers by ALPN (`h2` when `http2`).
//!
//! The certificate, key and client CA files are read here, at every load: a file that is
//! missing, does not parse, or a key that is not its certificate's is an error of the load
//! (at startup it does not start; on a reload the previous certificates keep serving).

use super::raw::{RawConfig, RawTls};
use super::values::{beside_config, Errors};
use crate::listener::tls::{
    load_client_roots, Certificate, Culprit, MinVersion, TlsSettings, ALPN_H2, ALPN_HTTP1,
};

/// The listeners' TLS, checked.
pub(super) struct Edge {
    pub(super) tls: Option<TlsSettings>,
    pub(super) admin_tls: Option<TlsSettings>,
}

pub(super) fn edge(errors: &mut Errors, raw: &RawConfig) -> Edge {
    // On by default: it only acts on a TLS listener (ALPN); `config/server.rs` checks it
    // with `h2c` and `max_streams_per_connection`.
    let http2 = raw.http2.unwrap_or(true);
    let client_alpn: &[&[u8]] = if http2 {
        &[ALPN_H2, ALPN_HTTP1]
    } else {
        &[ALPN_HTTP1]
    };
    Edge {
        tls: raw
            .tls
            .as_ref()
            .and_then(|tls| settings(errors, "tls", tls, client_alpn)),
        admin_tls: raw
            .admin_tls
            .as_ref()
            .and_then(|tls| settings(errors, "admin_tls", tls, &[ALPN_HTTP1])),
    }
}

/// One listener's `tls:` section, its files read; `None` after an error (reported).
fn settings(errors: &mut Errors, field: &str, raw: &RawTls, alpn: &[&[u8]]) -> Option<TlsSettings> {
    let before = errors.list.len();
    let min_version = min_version(errors, field, raw.min_version.as_ref());
    let certificates = certificates(errors, field, raw);
    let client_ca = raw.client_ca_file.as_deref().and_then(|name| {
        let path = beside_config(errors, name);
        match load_client_roots(&path) {
            Ok(roots) => Some((path, roots)),
            Err(e) => {
                errors.push(format!("{field}.client_ca_file"), e.message);
                None
            }
        }
    });
    if errors.list.len() > before {
        return None;
    }
    match TlsSettings::new(certificates, min_version?, client_ca, alpn) {
        Ok(settings) => Some(settings),
        Err(e) => {
            errors.push(field, e.message);
            None
        }
    }
}

/// `min_version`: `"1.2"` (the default) or `"1.3"`.
fn min_version(
    errors: &mut Errors,
    field: &str,
    value: Option<&serde_yaml::Value>,
) -> Option<MinVersion> {
    let text = match value {
        None => return Some(MinVersion::Tls12),
        Some(serde_yaml::Value::String(text)) => text.clone(),
        // `min_version: 1.2` unquoted is a YAML number.
        Some(serde_yaml::Value::Number(number)) => number.to_string(),
        Some(_) => String::new(),
    };
    match text.as_str() {
        "1.2" => Some(MinVersion::Tls12),
        "1.3" => Some(MinVersion::Tls13),
        _ => {
            errors.push(
                format!("{field}.min_version"),
                "must be \"1.2\" or \"1.3\" (TLS 1.0 and 1.1 are not offered)",
            );
            None
        }
    }
}

/// `certificates`: at least one, each a `cert_file` and a `key_file` that belong together.
fn certificates(errors: &mut Errors, field: &str, raw: &RawTls) -> Vec<Certificate> {
    let list = raw.certificates.as_deref().unwrap_or_default();
    if list.is_empty() {
        errors.push(
            format!("{field}.certificates"),
            "at least one certificate is required: - {cert_file: server.pem, key_file: server.key}",
        );
    }
    let mut loaded = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{field}.certificates[{i}]");
        let mut file = |name: &str, value: Option<&str>| match value {
            Some(value) => Some(beside_config(errors, value)),
            None => {
                errors.push(format!("{at}.{name}"), "is required");
                None
            }
        };
        let cert_file = file("cert_file", entry.cert_file.as_deref());
        let key_file = file("key_file", entry.key_file.as_deref());
        let (Some(cert_file), Some(key_file)) = (cert_file, key_file) else {
            continue;
        };
        match Certificate::load(&cert_file, &key_file) {
            Ok(certificate) => loaded.push(certificate),
            Err(e) => {
                let culprit = match e.culprit {
                    Culprit::Certificate => "cert_file",
                    Culprit::Key => "key_file",
                };
                errors.push(format!("{at}.{culprit}"), e.message);
            }
        }
    }
    loaded
}
