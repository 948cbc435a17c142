//! Upstreams: the URL checked and its host resolved, the private CA file, the credential
//! from the environment and how the provider wants it (`provider.rs`), the timeouts and the
//! protection policy (with `retry_on.rs`).

use super::parsed::{items, Parsed};
use super::raw::RawUpstream;
use super::values::{
    ca_file, check_unique, duration, nonzero, optional_duration, required, required_name, Bounds,
    Errors,
};
use super::{HostLookup, StreamUsage, UpstreamConfig, UpstreamPolicy};
use crate::secret::Secret;
use pingora::protocols::tls::CaType;
use pingora::utils::tls::{parse_x509, WrappedX509};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// The valid upstreams, and the names of all that were read (valid or not) for the
/// models to refer to.
pub(super) fn upstreams(
    errors: &mut Errors,
    values: Vec<serde_yaml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    lookup: HostLookup,
) -> (Vec<UpstreamConfig>, Vec<String>) {
    // Names are checked on every item that was read, valid or not, so one bad upstream
    // does not also turn up as "no upstream named ..." in each model that uses it.
    let raw_upstreams: Vec<Parsed<RawUpstream>> = items(errors, "upstreams", values);
    let declared: Vec<String> = raw_upstreams
        .iter()
        .filter_map(|u| u.raw.name.clone())
        .collect();
    let names = raw_upstreams
        .iter()
        .filter_map(|u| Some((u.path.as_str(), u.raw.name.as_deref()?)));
    check_unique(errors, "name", names);
    let upstreams = raw_upstreams
        .into_iter()
        .filter_map(|parsed| upstream(errors, parsed, env, lookup))
        .collect();
    (upstreams, declared)
}

fn upstream(
    errors: &mut Errors,
    parsed: Parsed<RawUpstream>,
    env: &dyn Fn(&str) -> Option<String>,
    lookup: HostLookup,
) -> Option<UpstreamConfig> {
    let before = errors.list.len();
    let path = parsed.path.as_str();
    let raw = &parsed.raw;
    let name = required_name(
        errors,
        parsed.at("name"),
        raw.name.as_deref(),
        parsed.unreadable("name"),
    );
    let url_text = required(
        errors,
        parsed.at("url"),
        raw.url.as_deref(),
        parsed.unreadable("url"),
    );
    let (url, addr) = match url_text {
        Some(text) => url_and_addr(errors, path, text, lookup),
        None => (None, None),
    };
    let ca = raw
        .ca_file
        .as_deref()
        .and_then(|name| ca(errors, path, name, url.as_ref()));
    let credential = raw
        .api_key_env
        .as_deref()
        .and_then(|name| credential(errors, &format!("{path}.api_key_env"), name, env));
    let style = super::provider::style(errors, path, raw);
    let connect_timeout = duration(
        errors,
        &format!("{path}.connect_timeout"),
        raw.connect_timeout.as_deref(),
        Duration::from_secs(5),
        Bounds::CONNECT,
    );
    let first_byte_timeout = duration(
        errors,
        &format!("{path}.first_byte_timeout"),
        raw.first_byte_timeout.as_deref(),
        Duration::from_secs(120),
        Bounds::LONG,
    );
    let idle_timeout = duration(
        errors,
        &format!("{path}.idle_timeout"),
        raw.idle_timeout.as_deref(),
        Duration::from_secs(60),
        Bounds::LONG,
    );
    let policy = policy(errors, &parsed);
    if errors.list.len() > before || parsed.has_unreadable() {
        return None;
    }
    Some(UpstreamConfig {
        name: name?.to_string(),
        url: url?,
        addr: addr?,
        ca,
        credential,
        style,
        connect_timeout: connect_timeout?,
        first_byte_timeout: first_byte_timeout?,
        idle_timeout: idle_timeout?,
        policy,
    })
}

/// The checked `url` and, when it is one, the address its host resolves to.
fn url_and_addr(
    errors: &mut Errors,
    path: &str,
    text: &str,
    lookup: HostLookup,
) -> (Option<http::Uri>, Option<SocketAddr>) {
    let url = match check_url(text) {
        Ok(url) => Some(url),
        Err(message) => {
            errors.push(format!("{path}.url"), message);
            None
        }
    };
    // Resolved now, never on the request path (and again on every reload).
    let addr = url.as_ref().and_then(|url| match resolve(url, lookup) {
        Ok(addr) => Some(addr),
        Err(message) => {
            errors.push(format!("{path}.url"), message);
            None
        }
    });
    (url, addr)
}

/// The `ca_file` called `name`, as pingora's per-peer CA list.
fn ca(errors: &mut Errors, path: &str, name: &str, url: Option<&http::Uri>) -> Option<Arc<CaType>> {
    let field = format!("{path}.ca_file");
    if url.is_some_and(|u| u.scheme_str() != Some("https")) {
        errors.push(field.clone(), "only applies to an https:// url");
    }
    let file = ca_file(errors, &field, name)?;
    let certificates: Vec<WrappedX509> = file
        .certificates
        .into_iter()
        .map(|der| WrappedX509::new(der, parse_x509))
        .collect();
    Some(Arc::from(certificates.into_boxed_slice()))
}

/// The credential held by the environment variable `name` (`api_key_env`), without the
/// whitespace around it (`echo` into a Kubernetes Secret leaves a newline at the end);
/// never empty, never with a control character inside (it goes into a header). Messages
/// name the variable, never its value.
pub(super) fn credential(
    errors: &mut Errors,
    field: &str,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Secret> {
    let value = env(name).unwrap_or_default();
    let trimmed = value.trim();
    let problem = if value.is_empty() {
        "is not set or empty"
    } else if trimmed.is_empty() {
        "holds only whitespace"
    } else if trimmed.chars().any(char::is_control) {
        "holds a control character (such as a line break) inside its value"
    } else {
        return Some(Secret::new(trimmed.to_string()));
    };
    errors.push(field, format!("environment variable {name} {problem}"));
    None
}

fn policy(errors: &mut Errors, parsed: &Parsed<RawUpstream>) -> UpstreamPolicy {
    let (path, raw) = (parsed.path.as_str(), &parsed.raw);
    let total_timeout = optional_duration(
        errors,
        &format!("{path}.total_timeout"),
        raw.total_timeout.as_deref(),
        Bounds::LONG,
    );
    let health_check_interval = optional_duration(
        errors,
        &format!("{path}.health_check_interval"),
        raw.health_check_interval.as_deref(),
        Bounds::LONG,
    );
    let (max_concurrent, max_queue, queue_timeout) = queue(errors, parsed);
    let rate_limit_cooldown = duration(
        errors,
        &format!("{path}.rate_limit_cooldown"),
        raw.rate_limit_cooldown.as_deref(),
        Duration::from_secs(5),
        Bounds::WAIT,
    );
    let retry_on =
        super::retry_on::retry_on(errors, &format!("{path}.retry_on"), raw.retry_on.as_deref());
    let (eject_after_failures, eject_duration, eject_duration_max) = ejection(errors, parsed);
    let stream_usage = match raw.stream_usage.as_deref() {
        None | Some("inject") => StreamUsage::Inject,
        Some("passthrough") => StreamUsage::Passthrough,
        Some("off") => StreamUsage::Off,
        Some(other) => {
            errors.push(
                format!("{path}.stream_usage"),
                format!("'{other}' is not one of inject, passthrough, off"),
            );
            StreamUsage::Inject
        }
    };
    UpstreamPolicy {
        total_timeout,
        max_concurrent,
        max_queue,
        queue_timeout,
        rate_limit_cooldown: rate_limit_cooldown.unwrap_or_default(),
        retry_on,
        eject_after_failures,
        eject_duration,
        eject_duration_max,
        health_check_interval,
        stream_usage,
    }
}

/// `max_concurrent`, `max_queue` (four waiting per slot by default) and `queue_timeout`.
fn queue(errors: &mut Errors, parsed: &Parsed<RawUpstream>) -> (Option<NonZeroU32>, u32, Duration) {
    let (path, raw) = (parsed.path.as_str(), &parsed.raw);
    let max_concurrent = nonzero(
        errors,
        &format!("{path}.max_concurrent"),
        raw.max_concurrent,
    );
    // Only when max_concurrent is not written at all: a bad one is its own error.
    if raw.max_queue.is_some()
        && raw.max_concurrent.is_none()
        && !parsed.unreadable("max_concurrent")
    {
        errors.push(format!("{path}.max_queue"), "needs max_concurrent");
    }
    let max_queue = raw
        .max_queue
        .unwrap_or_else(|| max_concurrent.map_or(0, |m| m.get().saturating_mul(4)));
    let queue_timeout = duration(
        errors,
        &format!("{path}.queue_timeout"),
        raw.queue_timeout.as_deref(),
        Duration::from_secs(5),
        Bounds::WAIT,
    );
    (max_concurrent, max_queue, queue_timeout.unwrap_or_default())
}

/// `eject_after_failures`, `eject_duration` and `eject_duration_max`.
fn ejection(errors: &mut Errors, parsed: &Parsed<RawUpstream>) -> (u32, Duration, Duration) {
    let (path, raw) = (parsed.path.as_str(), &parsed.raw);
    let eject_after_failures = raw.eject_after_failures.unwrap_or(5);
    if eject_after_failures == 0 {
        errors.push(format!("{path}.eject_after_failures"), "must be at least 1");
    }
    let eject_duration = duration(
        errors,
        &format!("{path}.eject_duration"),
        raw.eject_duration.as_deref(),
        Duration::from_secs(5),
        Bounds::LONG,
    );
    let eject_duration_max = duration(
        errors,
        &format!("{path}.eject_duration_max"),
        raw.eject_duration_max.as_deref(),
        Duration::from_secs(120),
        Bounds::LONG,
    );
    // Compared only when both are valid: a bad one is its own error, not this one too.
    let written = |field| !parsed.unreadable(field);
    if let (Some(first), Some(longest), true, true) = (
        eject_duration,
        eject_duration_max,
        written("eject_duration"),
        written("eject_duration_max"),
    ) {
        if longest < first {
            errors.push(
                format!("{path}.eject_duration_max"),
                "must not be shorter than eject_duration",
            );
        }
    }
    (
        eject_after_failures,
        eject_duration.unwrap_or_default(),
        eject_duration_max.unwrap_or_default(),
    )
}

/// An absolute http(s) URL without credentials or query string.
fn check_url(text: &str) -> Result<http::Uri, String> {
    let url: http::Uri = text.parse().map_err(|e| format!("not a URL: {e}"))?;
    let scheme_ok = matches!(url.scheme_str(), Some("http") | Some("https"));
    if !scheme_ok || url.host().is_none_or(str::is_empty) {
        return Err("must be an absolute http:// or https:// URL".into());
    }
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err("must not carry credentials; use api_key_env".into());
    }
    if url.query().is_some() {
        return Err("must not carry a query string".into());
    }
    check_port(&url)?;
    Ok(url)
}

/// A port written in the URL must be one a connection can use: `http::Uri` accepts any
/// digits there, and reports a port it cannot read as none, which would mean the scheme's
/// default port.
fn check_port(url: &http::Uri) -> Result<(), String> {
    let authority = url.authority().map_or("", |a| a.as_str());
    let after_host = authority
        .strip_prefix(url.host().unwrap_or_default())
        .unwrap_or_default();
    let Some(port) = after_host.strip_prefix(':') else {
        return Ok(());
    };
    match port.parse::<u16>() {
        Ok(1..) => Ok(()),
        _ => Err(format!(
            "port '{port}' is not a port number from 1 to 65535"
        )),
    }
}

/// The first address the URL's host resolves to (default port by scheme).
fn resolve(url: &http::Uri, lookup: HostLookup) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let tls = url.scheme_str() == Some("https");
    let host = url.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(if tls { 443 } else { 80 });
    if lookup == HostLookup::Skip {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_must_be_from_1_to_65535() {
        for good in [
            "http://127.0.0.1/v1",
            "http://127.0.0.1:1/v1",
            "https://h.example:65535/v1",
            "http://[::1]:8000/v1",
            "http://[::1]/v1",
        ] {
            assert!(check_url(good).is_ok(), "{good} is accepted");
        }
        for bad in [
            "http://127.0.0.1:99999/v1",
            "http://127.0.0.1:65536/v1",
            "http://127.0.0.1:0/v1",
            "http://h.example:/v1",
            "http://[::1]:70000/v1",
        ] {
            let error = check_url(bad).expect_err(bad);
            assert!(error.contains("1 to 65535"), "{bad}: {error}");
        }
    }
}
