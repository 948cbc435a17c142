//! An answer from an upstream that speaks the other API than the client's route: what
//! the client gets instead (`crate::translate` does the translating).

use crate::respond::ErrorShape;
use crate::translate::{
    chat_answer_to_messages, error_to_chat, error_to_messages, messages_answer_to_chat, ChatChunks,
    MessagesEvents, StreamTranslation,
};

/// How a model's answer is translated for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerTranslation {
    /// A chat completion answer, for a client of `/v1/messages`.
    ToMessages,
    /// A Messages answer, for a client of `/v1/chat/completions`; `include_usage`: it
    /// asked for the usage chunk of a stream.
    ToChat { include_usage: bool },
}

impl AnswerTranslation {
    /// The envelope the client reads errors in.
    pub fn error_shape(self) -> ErrorShape {
        match self {
            AnswerTranslation::ToMessages => ErrorShape::Messages,
            AnswerTranslation::ToChat { .. } => ErrorShape::OpenAi,
        }
    }

    /// The translator of a streamed answer.
    pub(super) fn stream(self) -> StreamTranslation {
        match self {
            AnswerTranslation::ToMessages => StreamTranslation::ToMessages(MessagesEvents::new()),
            AnswerTranslation::ToChat { include_usage } => {
                StreamTranslation::ToChat(ChatChunks::new(include_usage, unix_seconds()))
            }
        }
    }

    /// A whole answer body in the client's API: a successful answer, or an error body in
    /// the client's envelope. `None` for a successful answer that is not one.
    pub(super) fn body(self, status: u16, body: &[u8]) -> Option<Vec<u8>> {
        let success = (200..300).contains(&status);
        match (self, success) {
            (AnswerTranslation::ToMessages, true) => chat_answer_to_messages(body),
            (AnswerTranslation::ToMessages, false) => Some(error_to_messages(body, status)),
            (AnswerTranslation::ToChat { .. }, true) => {
                messages_answer_to_chat(body, unix_seconds())
            }
            (AnswerTranslation::ToChat { .. }, false) => Some(error_to_chat(body)),
        }
    }
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
