//! Which of our routes a method and path name. Everything else is 404 `unknown_route`.

use crate::endpoint::{Endpoint, ENDPOINTS};
use crate::error::RequestError;
use http::Method;

/// A route the gateway serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    ListModels,
    /// `GET /v1/models/{id}`; the ID is percent-decoded and may contain `/`.
    GetModel(String),
    /// A `POST` to a model named in the body: chat, completions, embeddings, ...
    Create(Endpoint),
    /// A stored response, by the ID the gateway gave it.
    StoredResponse {
        id: String,
        action: StoredAction,
    },
}

/// What a request does to a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredAction {
    /// `GET /v1/responses/{id}`
    Retrieve,
    /// `DELETE /v1/responses/{id}`
    Delete,
    /// `POST /v1/responses/{id}/cancel`
    Cancel,
    /// `GET /v1/responses/{id}/input_items`
    InputItems,
}

impl StoredAction {
    /// The path under `/v1/responses/{id}` on the upstream.
    pub fn suffix(self) -> &'static str {
        match self {
            StoredAction::Retrieve | StoredAction::Delete => "",
            StoredAction::Cancel => "/cancel",
            StoredAction::InputItems => "/input_items",
        }
    }
}

const PREFIX: &str = "/v1";

impl Route {
    /// The route as a template, IDs left out (`/v1/models/{id}`): a trace's `http.route`.
    pub fn template(&self) -> String {
        match self {
            Route::ListModels => format!("{PREFIX}/models"),
            Route::GetModel(_) => format!("{PREFIX}/models/{{id}}"),
            Route::Create(endpoint) => format!("{PREFIX}{}", endpoint.path),
            Route::StoredResponse { action, .. } => {
                format!("{PREFIX}/responses/{{id}}{}", action.suffix())
            }
        }
    }
}

/// Matches method and path together: GET on the completions path is 404 too.
pub fn route(method: &Method, path: &str) -> Result<Route, RequestError> {
    let unknown = RequestError::UnknownRoute {
        repeated_prefix: path.starts_with("/v1/v1/") || path == "/v1/v1",
    };
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Err(unknown);
    };
    if method == Method::POST {
        if let Some(endpoint) = ENDPOINTS.iter().find(|e| e.path == rest) {
            return Ok(Route::Create(*endpoint));
        }
    }
    if let Some(stored) = rest.strip_prefix("/responses/") {
        return stored_response(method, stored).ok_or(unknown);
    }
    match (method, rest) {
        (&Method::GET, "/models") => Ok(Route::ListModels),
        (&Method::GET, _) => match rest.strip_prefix("/models/") {
            Some(id) if !id.is_empty() => percent_decode(id).map(Route::GetModel).ok_or(unknown),
            _ => Err(unknown),
        },
        _ => Err(unknown),
    }
}

/// `{id}`, `{id}/cancel` or `{id}/input_items` under `/v1/responses/`, with its method.
fn stored_response(method: &Method, rest: &str) -> Option<Route> {
    let (id, action) = match rest.split_once('/') {
        None if method == Method::GET => (rest, StoredAction::Retrieve),
        None if method == Method::DELETE => (rest, StoredAction::Delete),
        Some((id, "cancel")) if method == Method::POST => (id, StoredAction::Cancel),
        Some((id, "input_items")) if method == Method::GET => (id, StoredAction::InputItems),
        _ => return None,
    };
    let id = percent_decode(id).filter(|id| !id.is_empty())?;
    Some(Route::StoredResponse { id, action })
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
    fn a_template_leaves_ids_out() {
        let template = |method: &Method, path: &str| route(method, path).unwrap().template();
        assert_eq!(
            template(&Method::POST, "/v1/chat/completions"),
            "/v1/chat/completions"
        );
        assert_eq!(
            template(&Method::GET, "/v1/models/org%2Fm"),
            "/v1/models/{id}"
        );
        assert_eq!(
            template(&Method::POST, "/v1/responses/resp_x/cancel"),
            "/v1/responses/{id}/cancel"
        );
    }

    #[test]
    fn routes_match_method_and_path_together() {
        assert_eq!(route(&Method::GET, "/v1/models"), Ok(Route::ListModels));
        let create = |path: &str| match route(&Method::POST, path) {
            Ok(Route::Create(endpoint)) => Some(endpoint.kind.name()),
            _ => None,
        };
        assert_eq!(create("/v1/chat/completions"), Some("chat"));
        assert_eq!(create("/v1/completions"), Some("completions"));
        assert_eq!(create("/v1/embeddings"), Some("embeddings"));
        assert_eq!(create("/v1/responses"), Some("responses"));
        assert_eq!(create("/v1/responses/input_tokens"), Some("responses"));
        assert_eq!(create("/v1/rerank"), Some("rerank"));
        assert_eq!(
            create("/v1/audio/transcriptions"),
            Some("audio_transcription")
        );
        assert_eq!(
            create("/v1/audio/translations"),
            Some("audio_transcription")
        );
        assert_eq!(create("/v1/audio/speech"), Some("audio_speech"));
        assert_eq!(create("/v1/moderations"), Some("moderation"));
        let stored = |method: Method, path: &str| match route(&method, path) {
            Ok(Route::StoredResponse { id, action }) => Some((id, action)),
            _ => None,
        };
        assert_eq!(
            stored(Method::GET, "/v1/responses/resp_1"),
            Some(("resp_1".into(), StoredAction::Retrieve))
        );
        assert_eq!(
            stored(Method::DELETE, "/v1/responses/resp_1"),
            Some(("resp_1".into(), StoredAction::Delete))
        );
        assert_eq!(
            stored(Method::POST, "/v1/responses/resp_1/cancel"),
            Some(("resp_1".into(), StoredAction::Cancel))
        );
        assert_eq!(
            stored(Method::GET, "/v1/responses/resp_1/input_items"),
            Some(("resp_1".into(), StoredAction::InputItems))
        );
        assert_eq!(stored(Method::POST, "/v1/responses/resp_1"), None);
        assert_eq!(stored(Method::GET, "/v1/responses/resp_1/other"), None);
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
            (Method::GET, "/v1/embeddings"),
            (Method::GET, "/v1/responses/"),
            (Method::PUT, "/v1/responses/resp_1"),
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
