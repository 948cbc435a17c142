//! The upstream's credential in what it sends back: an error answer may echo the key the
//! gateway gave it (`bad key: Bearer sk-...`). Its body, header fields and the access
//! log's record of it get `[redacted]` in its place (`Secret::redact` finds it).

use crate::catalog::Upstream;
use std::borrow::Cow;

/// `text` with the upstream's credential (and `<auth_scheme> <credential>`) redacted.
pub(super) fn redact<'t>(upstream: &Upstream, text: &'t [u8]) -> Cow<'t, [u8]> {
    match &upstream.credential {
        Some(credential) => credential.redact(text, &upstream.style.auth_scheme),
        None => Cow::Borrowed(text),
    }
}

/// Redacts the credential in the fields of an answer to the client (an upstream's
/// `x-request-id` that echoes it, now `x-upstream-request-id`...).
pub(super) fn redact_fields(upstream: &Upstream, header: &mut pingora::http::ResponseHeader) {
    let mut echoing: Vec<http::HeaderName> = Vec::new();
    for (name, value) in header.headers.iter() {
        if matches!(redact(upstream, value.as_bytes()), Cow::Owned(_)) && !echoing.contains(name) {
            echoing.push(name.clone());
        }
    }
    for name in echoing {
        let values: Vec<Vec<u8>> = header
            .headers
            .get_all(&name)
            .iter()
            .map(|v| redact(upstream, v.as_bytes()).into_owned())
            .collect();
        header.remove_header(&name);
        for value in values {
            // Still a valid field value: `[redacted]` is plain text.
            header.append_header(name.clone(), value.as_slice()).ok();
        }
    }
}

/// [`redact`], as a string (invalid UTF-8 replaced), for a header value that is kept.
pub(super) fn redacted(upstream: &Upstream, text: &[u8]) -> String {
    String::from_utf8_lossy(&redact(upstream, text)).into_owned()
}
