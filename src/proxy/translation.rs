//! A request to a model whose upstream speaks the other API than the route it came on
//! (`upstream_api`): the body and path it goes up with, and how its answer comes back.
//! Where route and upstream agree, nothing changes: the bytes pass through.

use crate::catalog::Model;
use crate::endpoint::{EndpointType, UpstreamApi, COUNT_TOKENS_PATH};
use crate::error::RequestError;
use crate::request_body::{inspect, ModelRequest};
use crate::translate::{chat_to_messages, messages_to_chat, Untranslatable};
use crate::upstream::{AnswerTranslation, RequestBody};
use bytes::Bytes;

/// A request as the model's upstream will read it.
pub(super) struct Translated {
    pub bytes: Bytes,
    pub request: ModelRequest,
    /// The path under the upstream's URL.
    pub path: &'static str,
    pub answer: AnswerTranslation,
}

impl Translated {
    pub fn body(&self) -> RequestBody<'_> {
        RequestBody::Json {
            bytes: self.bytes.clone(),
            request: &self.request,
        }
    }
}

/// The request translated for `model`'s upstream; `None` when route and upstream agree.
pub(super) fn translated(
    kind: EndpointType,
    path: &str,
    body: &RequestBody<'_>,
    model: &Model,
) -> Result<Option<Translated>, RequestError> {
    let RequestBody::Json { bytes, request } = body else {
        return Ok(None);
    };
    match (kind, model.upstream_api) {
        (EndpointType::Messages, UpstreamApi::OpenAi) if path != COUNT_TOKENS_PATH => {
            let chat = Bytes::from(messages_to_chat(bytes).map_err(refused)?);
            let request = inspect(&chat, EndpointType::Chat)?;
            Ok(Some(Translated {
                bytes: chat,
                request,
                path: "/chat/completions",
                answer: AnswerTranslation::ToMessages,
            }))
        }
        (EndpointType::Chat, UpstreamApi::Anthropic) => {
            let messages = chat_to_messages(bytes, model.default_max_tokens).map_err(refused)?;
            let messages = Bytes::from(messages);
            let include_usage = request.include_usage;
            let request = inspect(&messages, EndpointType::Messages)?;
            Ok(Some(Translated {
                bytes: messages,
                request,
                path: "/messages",
                answer: AnswerTranslation::ToChat { include_usage },
            }))
        }
        _ => Ok(None),
    }
}

/// The answer to `count_tokens` for a model whose upstream cannot count (an OpenAI
/// upstream has no such route): the gateway's own input estimate, a quarter of the body's
/// bytes, as its token limits use.
pub(super) fn counted_locally(body_bytes: usize) -> Bytes {
    let estimate = body_bytes as u64 / 4;
    Bytes::from(format!("{{\"input_tokens\":{estimate}}}"))
}

fn refused(untranslatable: Untranslatable) -> RequestError {
    RequestError::InvalidParameter {
        param: untranslatable.param,
        message: untranslatable.message,
    }
}
