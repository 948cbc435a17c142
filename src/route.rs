//! Which of our routes a method and path name. Everything else is 404 `unknown_route`.

use crate::error::RequestError;
use http::Method;

/// A route the gateway serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    ListModels,
    /// `GET /v1/models/{id}`; the ID is percent-decoded and may contain `/`.
    GetModel(String),
    ChatCompletions,
}

const PREFIX: &str = "/v1";

/// Matches method and path together: GET on the completions path is 404 too.
pub fn route(method: &Method, path: &str) -> Result<Route, RequestError> {
    let unknown = RequestError::UnknownRoute {
        repeated_prefix: path.starts_with("/v1/v1/") || path == "/v1/v1",
    };
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Err(unknown);
    };
    match (method, rest) {
        (&Method::GET, "/models") => Ok(Route::ListModels),
        (&Method::POST, "/chat/completions") => Ok(Route::ChatCompletions),
        (&Method::GET, _) => match rest.strip_prefix("/models/") {
            Some(id) if !id.is_empty() => percent_decode(id).map(Route::GetModel).ok_or(unknown),
            _ => Err(unknown),
        },
        _ => Err(unknown),
    }
}

/// Decodes `%XX` escapes; `None` for a malformed escape or a result that is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_method_and_path_together() {
        assert_eq!(route(&Method::GET, "/v1/models"), Ok(Route::ListModels));
        assert_eq!(
            route(&Method::POST, "/v1/chat/completions"),
            Ok(Route::ChatCompletions)
        );
        assert_eq!(
            route(&Method::GET, "/v1/models/meta-llama/Llama-3"),
            Ok(Route::GetModel("meta-llama/Llama-3".into()))
        );
        assert_eq!(
            route(&Method::GET, "/v1/models/a%2Fb"),
            Ok(Route::GetModel("a/b".into()))
        );
        for (method, path) in [
            (Method::GET, "/v1/chat/completions"),
            (Method::POST, "/v1/models"),
            (Method::GET, "/v1/models/"),
            (Method::GET, "/models"),
            (Method::GET, "/v1/models/%zz"),
            (Method::DELETE, "/v1/models/x"),
        ] {
            assert_eq!(
                route(&method, path),
                Err(RequestError::UnknownRoute {
                    repeated_prefix: false
                }),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn a_repeated_prefix_is_named() {
        assert_eq!(
            route(&Method::POST, "/v1/v1/chat/completions"),
            Err(RequestError::UnknownRoute {
                repeated_prefix: true
            })
        );
    }
}
