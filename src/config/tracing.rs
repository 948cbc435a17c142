//! The `tracing:` section: the OTLP/HTTP collector traces go to, the service name, how many
//! requests are traced, headers for the collector, and whether an incoming `traceparent` is
//! trusted as the parent. Absent, nothing is traced. Messages name a header, never its value.

use super::raw::RawTracing;
use super::values::Errors;
use super::TracingConfig;
use crate::secret::Secret;
use http::{HeaderName, HeaderValue, Uri};

/// `service.name` when `service_name` is not written.
const DEFAULT_SERVICE_NAME: &str = "sluice";
/// The OTLP/HTTP path of traces, added to an endpoint written without a path.
const TRACES_PATH: &str = "/v1/traces";

/// The section, checked; `None` when it is absent or has an error (reported).
pub(super) fn tracing(errors: &mut Errors, raw: Option<&RawTracing>) -> Option<TracingConfig> {
    let raw = raw?;
    let before = errors.list.len();
    let otlp_endpoint = endpoint(errors, raw.otlp_endpoint.as_deref());
    let service_name = raw
        .service_name
        .clone()
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.into());
    if service_name.trim().is_empty() {
        errors.push("tracing.service_name", "must not be empty");
    }
    let sample_ratio = raw.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        errors.push(
            "tracing.sample_ratio",
            format!("{sample_ratio} is out of range: must be from 0 to 1"),
        );
    }
    let mut headers = Vec::new();
    for (name, value) in raw.headers.iter().flatten() {
        let at = format!("tracing.headers.{name}");
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Err(_), _) => errors.push(at, format!("'{name}' is not a valid header name")),
            (_, Err(_)) => errors.push(at, "is not a valid header value"),
            (Ok(name), Ok(_)) => headers.push((name, Secret::new(value.clone()))),
        }
    }
    if errors.list.len() > before {
        return None;
    }
    Some(TracingConfig {
        otlp_endpoint: otlp_endpoint?,
        service_name,
        sample_ratio,
        headers,
        trust_incoming: raw.trust_incoming.unwrap_or(false),
    })
}

/// `otlp_endpoint`: an `http://` URL; a bare base URL gets the OTLP traces path.
fn endpoint(errors: &mut Errors, text: Option<&str>) -> Option<Uri> {
    const AT: &str = "tracing.otlp_endpoint";
    let Some(text) = text else {
        errors.push(
            AT,
            "is required (the collector's OTLP/HTTP URL, such as http://otel-collector:4318)",
        );
        return None;
    };
    let uri: Uri = match text.parse() {
        Ok(uri) => uri,
        Err(_) => {
            errors.push(AT, format!("'{text}' is not a URL"));
            return None;
        }
    };
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        errors.push(
            AT,
            format!("'{text}' must be an http:// URL with a host (send to a collector agent beside the gateway for TLS)"),
        );
        return None;
    }
    if uri.path() == "/" || uri.path().is_empty() {
        let full = format!("{}{TRACES_PATH}", text.trim_end_matches('/'));
        return full.parse().ok();
    }
    Some(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(endpoint: &str) -> RawTracing {
        RawTracing {
            otlp_endpoint: Some(endpoint.into()),
            service_name: None,
            sample_ratio: None,
            headers: None,
            trust_incoming: None,
        }
    }

    #[test]
    fn a_base_url_gets_the_traces_path_and_defaults_apply() {
        let mut errors = Errors::new("test.yaml");
        let config = tracing(&mut errors, Some(&raw("http://collector:4318"))).unwrap();
        assert_eq!(config.otlp_endpoint, "http://collector:4318/v1/traces");
        assert_eq!(config.service_name, "sluice");
        assert_eq!(config.sample_ratio, 1.0);
        assert!(
            !config.trust_incoming,
            "an incoming parent is not trusted by default: the gateway is an edge"
        );
        let written = tracing(&mut errors, Some(&raw("http://c:4318/custom/path"))).unwrap();
        assert_eq!(written.otlp_endpoint, "http://c:4318/custom/path");
        assert!(errors.list.is_empty(), "no errors: {:?}", errors.list);
    }

    #[test]
    fn bad_values_are_reported_with_their_path() {
        let mut errors = Errors::new("test.yaml");
        let mut bad = raw("https://collector:4318");
        bad.sample_ratio = Some(1.5);
        bad.headers = Some([("bad name".to_string(), "x".to_string())].into());
        assert!(tracing(&mut errors, Some(&bad)).is_none());
        let paths: Vec<&str> = errors.list.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "test.yaml: tracing.otlp_endpoint",
                "test.yaml: tracing.sample_ratio",
                "test.yaml: tracing.headers.bad name"
            ]
        );
    }
}
