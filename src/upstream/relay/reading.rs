//! What the gateway reads of a successful answer as it passes: its usage (a JSON
//! document, whole or in pieces, or an event stream) and the model it names.

use crate::translate::MessagesUsageReader;
use crate::usage::{whole_usage, EventUsage, JsonScan, Usage};

/// Reading the usage of an answer: a JSON document, or an event stream (an Anthropic
/// stream's usage is spread over `message_start` and `message_delta`).
pub(in crate::upstream) enum Reading {
    Json(JsonScan),
    /// A JSON answer read whole ([`Reading::whole`]): its usage; nothing more comes.
    JsonWhole(Option<Usage>),
    Events(EventUsage),
    MessagesEvents(MessagesUsageReader),
}

impl Reading {
    /// `messages_api`: the upstream speaks Anthropic's Messages API.
    pub fn for_answer(event_stream: bool, messages_api: bool) -> Reading {
        match (event_stream, messages_api) {
            (true, true) => Reading::MessagesEvents(MessagesUsageReader::default()),
            (true, false) => Reading::Events(EventUsage::default()),
            (false, _) => Reading::Json(JsonScan::copying()),
        }
    }

    /// Reads `body`, all of the answer, before anything of it was fed: a JSON answer in one
    /// pass by serde_json (`usage::whole_usage`), which costs a fraction of following it.
    pub fn whole(&mut self, body: &[u8]) {
        match self {
            Reading::Json(_) => *self = Reading::JsonWhole(whole_usage(body)),
            reading => reading.feed(body),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        match self {
            Reading::Json(scan) => scan.feed(bytes),
            // The answer was read whole: these are its bytes again, passing.
            Reading::JsonWhole(_) => {}
            Reading::Events(events) => events.feed(bytes),
            Reading::MessagesEvents(events) => events.feed(bytes),
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        match self {
            Reading::Json(scan) => scan.usage(),
            Reading::JsonWhole(usage) => *usage,
            Reading::Events(events) => events.last(),
            Reading::MessagesEvents(events) => events.usage(),
        }
    }
}

/// How much of a successful answer is kept to find the model it names: OpenAI-shaped
/// answers (and a stream's first chunk) name it before their content.
pub(in crate::upstream) const HEAD_BYTES: usize = 1024;

/// The first `"model": "..."` string in an answer's first bytes: the model that answered
/// (`gen_ai.response.model`). A value with escapes is taken as written.
pub(in crate::upstream) fn model_named(head: &[u8]) -> Option<String> {
    let at = memchr::memmem::find(head, b"\"model\"")? + b"\"model\"".len();
    let rest = &head[at..];
    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = rest.get(colon..)?.strip_prefix(b":")?;
    let quote = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = rest.get(quote..)?.strip_prefix(b"\"")?;
    let mut end = 0;
    while end < rest.len() && rest[end] != b'"' {
        end += if rest[end] == b'\\' { 2 } else { 1 };
    }
    if end >= rest.len() {
        return None;
    }
    let name = std::str::from_utf8(rest.get(..end)?).ok()?;
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::model_named;

    #[test]
    fn the_model_an_answer_names_is_found_in_its_first_bytes() {
        let answer = br#"{"id":"x","object":"chat.completion","model" : "org/m-1","choices":[]}"#;
        assert_eq!(model_named(answer).as_deref(), Some("org/m-1"));
        let chunk = b"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[]}\n\n";
        assert_eq!(model_named(chunk).as_deref(), Some("m"));
        assert_eq!(
            model_named(br#"{"model":"cut-of"#),
            None,
            "a name cut short is none"
        );
        assert_eq!(model_named(br#"{"model":3}"#), None);
        assert_eq!(model_named(br#"{"content":"the \"model\": \"x\""}"#), None);
    }
}
