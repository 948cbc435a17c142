//! How a provider wants to be called: `auth_header` and `auth_scheme` (where the
//! credential goes), `headers` added to every request and `query` parameters added to its
//! URL. Messages name a header or parameter, never its value: an operator may have put
//! something private there.

use super::raw::RawUpstream;
use super::values::Errors;
use super::ProviderStyle;
use crate::percent::percent_encode;
use http::{HeaderName, HeaderValue};
use std::collections::BTreeMap;

/// Header fields the gateway sets itself or that describe one connection: never from
/// `auth_header` or `headers`.
const GATEWAY_HEADERS: [&str; 12] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "x-request-id",
    "x-forwarded-for",
];

/// The upstream's style, checked; `path` is the upstream's key path.
pub(super) fn style(errors: &mut Errors, path: &str, raw: &RawUpstream) -> ProviderStyle {
    let mut style = ProviderStyle::default();
    if raw.api_key_env.is_none() {
        for (field, written) in [
            ("auth_header", raw.auth_header.is_some()),
            ("auth_scheme", raw.auth_scheme.is_some()),
        ] {
            if written {
                errors.warn(
                    format!("{path}.{field}"),
                    "has no effect without api_key_env",
                );
            }
        }
    }
    if let Some(name) = &raw.auth_header {
        if let Some(name) = header_name(errors, &format!("{path}.auth_header"), name) {
            style.auth_header = name;
        }
    }
    if let Some(scheme) = &raw.auth_scheme {
        if scheme.chars().any(|c| !c.is_ascii_graphic()) {
            errors.push(
                format!("{path}.auth_scheme"),
                "must be one word of visible ASCII characters (such as Bearer), or empty for the bare key",
            );
        }
        style.auth_scheme = scheme.clone();
    }
    for (name, value) in raw.headers.iter().flatten() {
        let at = format!("{path}.headers.{name}");
        let Some(header) = header_name(errors, &at, name) else {
            continue;
        };
        if header == style.auth_header {
            errors.push(
                at,
                "is where the credential goes: set it with api_key_env, never in the file",
            );
            continue;
        }
        let value = scalar(value).and_then(|text| HeaderValue::from_str(&text).ok());
        match value {
            Some(value) => style.headers.push((header, value)),
            None => errors.push(
                at,
                "must be a string, number or boolean of visible characters",
            ),
        }
    }
    style.query = query(errors, path, raw.query.as_ref());
    style
}

/// A header name an upstream request may carry from configuration.
fn header_name(errors: &mut Errors, at: &str, name: &str) -> Option<HeaderName> {
    let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
        errors.push(at, format!("'{name}' is not a valid header name"));
        return None;
    };
    if GATEWAY_HEADERS.contains(&header.as_str()) {
        errors.push(at, format!("'{name}' is set by the gateway"));
        return None;
    }
    Some(header)
}

/// The `query` parameters, percent-encoded and joined (`a=1&b=2`).
fn query(
    errors: &mut Errors,
    path: &str,
    written: Option<&BTreeMap<String, serde_yaml::Value>>,
) -> String {
    let mut pairs = Vec::new();
    for (name, value) in written.into_iter().flatten() {
        let at = format!("{path}.query.{name}");
        if name.is_empty() {
            errors.push(at, "a parameter needs a name");
            continue;
        }
        match scalar(value) {
            Some(value) => pairs.push(format!(
                "{}={}",
                percent_encode(name),
                percent_encode(&value)
            )),
            None => errors.push(at, "must be a string, number or boolean"),
        }
    }
    pairs.join("&")
}

/// A YAML scalar as text (`api-version: 2024-06-01` and `x-version: 2` both work).
fn scalar(value: &serde_yaml::Value) -> Option<String> {
    match value {
        serde_yaml::Value::String(text) => Some(text.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (ProviderStyle, Vec<String>) {
        let raw: RawUpstream = serde_yaml::from_str(yaml).unwrap();
        let mut errors = Errors::new("f.yaml");
        let style = style(&mut errors, "upstreams[0]", &raw);
        (style, errors.list.into_iter().map(|e| e.path).collect())
    }

    #[test]
    fn azure_style_is_read() {
        let (style, errors) = read(
            "api_key_env: K\nauth_header: api-key\nauth_scheme: ''\nheaders: {x-team: search, x-version: 2}\nquery: {api-version: 2024-06-01, q: a b&c}",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(style.auth_header.as_str(), "api-key");
        assert_eq!(style.auth_scheme, "");
        assert_eq!(style.headers.len(), 2);
        assert_eq!(style.headers[1].1, "2");
        assert_eq!(style.query, "api-version=2024-06-01&q=a%20b%26c");
    }

    #[test]
    fn unwritten_is_bearer_in_authorization() {
        let (style, errors) = read("api_key_env: K");
        assert!(errors.is_empty());
        assert_eq!(style, ProviderStyle::default());
        assert_eq!(style.auth_header.as_str(), "authorization");
    }

    #[test]
    fn gateway_fields_and_the_credential_header_are_refused_by_path() {
        let (_, errors) = read(
            "api_key_env: K\nauth_header: host\nauth_scheme: 'Two words'\nheaders: {Authorization: x, 'bad name': y, content-length: 3}",
        );
        assert_eq!(
            errors,
            [
                "f.yaml: upstreams[0].auth_header",
                "f.yaml: upstreams[0].auth_scheme",
                "f.yaml: upstreams[0].headers.Authorization",
                "f.yaml: upstreams[0].headers.bad name",
                "f.yaml: upstreams[0].headers.content-length",
            ]
        );
    }
}
