//! Endpoint types: the families of routes a model can serve (DESIGN §4.2), and for each
//! route how the gateway finds the model and what it checks of the request.

/// What a model serves. A model has one `endpoint_type` and may accept the routes of more
/// through `endpoints`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointType {
    Chat,
    Completions,
    Embeddings,
    Responses,
    Rerank,
    AudioTranscription,
    AudioSpeech,
    Moderation,
    /// Anthropic's Messages API (`POST /v1/messages`).
    Messages,
}

/// The API a model's upstream speaks (`upstream_api`): where it differs from the route's,
/// requests and answers are translated (`translate.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamApi {
    /// OpenAI's (chat completions and the rest), and what OpenAI-compatible servers speak.
    #[default]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl UpstreamApi {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "openai" => Some(UpstreamApi::OpenAi),
            "anthropic" => Some(UpstreamApi::Anthropic),
            _ => None,
        }
    }
}

impl EndpointType {
    pub const ALL: [EndpointType; 9] = [
        EndpointType::Chat,
        EndpointType::Completions,
        EndpointType::Embeddings,
        EndpointType::Responses,
        EndpointType::Rerank,
        EndpointType::AudioTranscription,
        EndpointType::AudioSpeech,
        EndpointType::Moderation,
        EndpointType::Messages,
    ];

    /// The name in the configuration and in `/v1/models`.
    pub fn name(self) -> &'static str {
        match self {
            EndpointType::Chat => "chat",
            EndpointType::Completions => "completions",
            EndpointType::Embeddings => "embeddings",
            EndpointType::Responses => "responses",
            EndpointType::Rerank => "rerank",
            EndpointType::AudioTranscription => "audio_transcription",
            EndpointType::AudioSpeech => "audio_speech",
            EndpointType::Moderation => "moderation",
            EndpointType::Messages => "messages",
        }
    }

    /// `gen_ai.operation.name` of a request to an upstream (the GenAI conventions' name
    /// where they have one: `chat`, `text_completion`, `embeddings`).
    pub fn operation(self) -> &'static str {
        match self {
            EndpointType::Chat | EndpointType::Responses | EndpointType::Messages => "chat",
            EndpointType::Completions => "text_completion",
            EndpointType::Embeddings => "embeddings",
            EndpointType::Rerank => "rerank",
            EndpointType::AudioTranscription => "transcription",
            EndpointType::AudioSpeech => "speech",
            EndpointType::Moderation => "moderation",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The route a client calls for it, as a message names it.
    pub fn route(self) -> &'static str {
        match self {
            EndpointType::Chat => "POST /v1/chat/completions",
            EndpointType::Completions => "POST /v1/completions",
            EndpointType::Embeddings => "POST /v1/embeddings",
            EndpointType::Responses => "POST /v1/responses",
            EndpointType::Rerank => "POST /v1/rerank",
            EndpointType::AudioTranscription => "POST /v1/audio/transcriptions",
            EndpointType::AudioSpeech => "POST /v1/audio/speech",
            EndpointType::Moderation => "POST /v1/moderations",
            EndpointType::Messages => "POST /v1/messages",
        }
    }

    /// Whether `stream: true` is a thing on it (then the model needs `streaming`).
    pub fn streams(self) -> bool {
        matches!(
            self,
            EndpointType::Chat
                | EndpointType::Completions
                | EndpointType::Responses
                | EndpointType::AudioTranscription
                | EndpointType::Messages
        )
    }

    /// Whether it writes text that counts as output tokens (reserved before the answer).
    pub fn generates_text(self) -> bool {
        matches!(
            self,
            EndpointType::Chat
                | EndpointType::Completions
                | EndpointType::Responses
                | EndpointType::AudioTranscription
                | EndpointType::Messages
        )
    }

    /// Whether its answers report usage by contract.
    pub fn reports_usage(self) -> bool {
        matches!(
            self,
            EndpointType::Chat
                | EndpointType::Completions
                | EndpointType::Responses
                | EndpointType::Embeddings
                | EndpointType::Messages
        )
    }

    /// Whether `tools` is a thing on it (then the model needs `tool_calling`).
    pub fn takes_tools(self) -> bool {
        matches!(
            self,
            EndpointType::Chat | EndpointType::Responses | EndpointType::Messages
        )
    }

    /// The fields its JSON body must have besides `model` (`messages` for chat is checked
    /// in depth on its own).
    pub fn required_fields(self) -> &'static [&'static str] {
        match self {
            EndpointType::Chat | EndpointType::Messages => &["messages"],
            EndpointType::Completions => &["prompt"],
            EndpointType::Embeddings | EndpointType::Moderation | EndpointType::AudioSpeech => {
                &["input"]
            }
            EndpointType::Rerank => &["query", "documents"],
            EndpointType::Responses | EndpointType::AudioTranscription => &[],
        }
    }
}

/// How a route's request names its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON object with `model`.
    Json,
    /// `multipart/form-data` with a `model` field.
    Multipart,
}

/// A route that sends a request to a model named in its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub kind: EndpointType,
    /// The path under `/v1`, the same on the client side and under an upstream's URL.
    pub path: &'static str,
    pub body: BodyKind,
}

/// Every route that creates something from a model named in the body.
pub const ENDPOINTS: [Endpoint; 12] = [
    json(EndpointType::Chat, "/chat/completions"),
    json(EndpointType::Completions, "/completions"),
    json(EndpointType::Embeddings, "/embeddings"),
    json(EndpointType::Responses, "/responses"),
    json(EndpointType::Responses, "/responses/input_tokens"),
    json(EndpointType::Rerank, "/rerank"),
    Endpoint {
        kind: EndpointType::AudioTranscription,
        path: "/audio/transcriptions",
        body: BodyKind::Multipart,
    },
    Endpoint {
        kind: EndpointType::AudioTranscription,
        path: "/audio/translations",
        body: BodyKind::Multipart,
    },
    json(EndpointType::AudioSpeech, "/audio/speech"),
    json(EndpointType::Moderation, "/moderations"),
    json(EndpointType::Messages, "/messages"),
    json(EndpointType::Messages, "/messages/count_tokens"),
];

/// The path of Messages' `count_tokens`, answered by the gateway when the model's upstream
/// does not speak Anthropic's API.
pub const COUNT_TOKENS_PATH: &str = "/messages/count_tokens";

const fn json(kind: EndpointType, path: &'static str) -> Endpoint {
    Endpoint {
        kind,
        path,
        body: BodyKind::Json,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_every_type_has_a_route() {
        for kind in EndpointType::ALL {
            assert_eq!(EndpointType::parse(kind.name()), Some(kind));
            assert!(
                ENDPOINTS.iter().any(|e| e.kind == kind),
                "{} is served somewhere",
                kind.name()
            );
        }
        assert_eq!(EndpointType::parse("chat_completions"), None);
    }
}

#[cfg(test)]
mod body_tests {
    use super::EndpointType;
    use crate::error::RequestError;
    use crate::request_body::{for_target, inspect, Edits};
    use bytes::Bytes;

    #[test]
    fn each_endpoint_type_requires_its_own_fields() {
        let missing = |body: &str, kind| match inspect(body.as_bytes(), kind) {
            Err(RequestError::MissingParameter { param }) => Some(param),
            _ => None,
        };
        assert_eq!(
            missing(r#"{"model":"m"}"#, EndpointType::Embeddings),
            Some("input")
        );
        assert_eq!(
            missing(r#"{"model":"m"}"#, EndpointType::Completions),
            Some("prompt")
        );
        assert_eq!(
            missing(r#"{"model":"m","query":"q"}"#, EndpointType::Rerank),
            Some("documents")
        );
        assert_eq!(
            missing(r#"{"input":"x"}"#, EndpointType::Moderation),
            Some("model")
        );
        assert!(inspect(
            br#"{"model":"m","input":["a","b"]}"#,
            EndpointType::Embeddings
        )
        .is_ok());
        assert!(inspect(br#"{"model":"m"}"#, EndpointType::Responses).is_ok());
    }

    #[test]
    fn tools_count_where_they_mean_something() {
        let tools = br#"{"model":"m","input":"x","tools":[{"type":"web_search"}]}"#;
        assert!(inspect(tools, EndpointType::Responses).unwrap().uses_tools);
        let embed = br#"{"model":"m","input":"x","tools":[{"type":"web_search"}]}"#;
        assert!(!inspect(embed, EndpointType::Embeddings).unwrap().uses_tools);
    }

    #[test]
    fn the_previous_response_and_the_model_are_both_spliced() {
        let body =
            Bytes::from_static(br#"{"model":"m","previous_response_id":"resp_ours","input":"x"}"#);
        let request = inspect(&body, EndpointType::Responses).unwrap();
        assert_eq!(request.previous_response.as_ref().unwrap().0, "resp_ours");
        let edits = Edits {
            model: Some("org/m"),
            previous_response: Some("resp_theirs"),
            include_usage: false,
        };
        let sent = for_target(&body, &request, edits);
        assert_eq!(
            &sent[..],
            &br#"{"model":"org/m","previous_response_id":"resp_theirs","input":"x"}"#[..]
        );
        assert_eq!(
            for_target(&body, &request, Edits::default()),
            body,
            "nothing to change"
        );
    }
}
