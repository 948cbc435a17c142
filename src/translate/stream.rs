//! [`StreamTranslation`]: one of the two stream translators behind one face, fed whole
//! server-sent events as the relay cuts them; and [`MessagesUsageReader`], the usage of
//! an Anthropic stream read from its bytes as they pass.

use super::{event_data, ChatChunks, MessagesEvents, MessagesStreamUsage};
use crate::http1::sse::EventReader;
use crate::usage::Usage;

/// A stream being translated for its client.
#[derive(Debug)]
pub enum StreamTranslation {
    /// Chat completion chunks in, Anthropic's events out.
    ToMessages(MessagesEvents),
    /// Anthropic's events in, chat completion chunks out.
    ToChat(ChatChunks),
}

impl StreamTranslation {
    /// The client's bytes for one whole upstream event (its blank line included).
    pub fn event(&mut self, event: &[u8]) -> Vec<u8> {
        let Some(data) = event_data(event) else {
            return Vec::new();
        };
        match self {
            StreamTranslation::ToMessages(events) => events.event(&data),
            StreamTranslation::ToChat(chunks) => chunks.event(&data),
        }
    }

    /// The bytes that end the client's stream once the upstream's ended, or `None` when
    /// the upstream's stream stopped before its answer was finished (a cut stream).
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        match self {
            StreamTranslation::ToMessages(events) => events.finish(),
            StreamTranslation::ToChat(chunks) => chunks.is_finished().then(Vec::new),
        }
    }
}

/// The usage of an Anthropic event stream, from its bytes as they pass.
#[derive(Debug, Default)]
pub struct MessagesUsageReader {
    events: EventReader,
    usage: MessagesStreamUsage,
    /// An event grew past what the reader holds: nothing more is read.
    gave_up: bool,
}

impl MessagesUsageReader {
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.gave_up {
            return;
        }
        let usage = &mut self.usage;
        let read = self.events.feed(bytes, |event| {
            if let Some(data) = event_data(event) {
                usage.event(&data);
            }
        });
        self.gave_up = read.is_err();
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_bytes_cut_anywhere() {
        let stream = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\nevent: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\r\n\r\n";
        for cut in 1..stream.len() {
            let mut reader = MessagesUsageReader::default();
            reader.feed(&stream[..cut]);
            reader.feed(&stream[cut..]);
            let usage = reader.usage().map(|u| (u.input, u.output, u.cached));
            assert_eq!(usage, Some((10, 12, Some(3))), "cut at {cut}");
        }
    }

    #[test]
    fn a_translated_stream_that_stops_unfinished_is_cut() {
        let mut to_chat = StreamTranslation::ToChat(ChatChunks::new(false, 0));
        to_chat
            .event(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n");
        assert_eq!(to_chat.finish(), None);
        to_chat.event(b"data: {\"type\":\"message_stop\"}\n\n");
        assert_eq!(to_chat.finish(), Some(Vec::new()));
        let mut to_messages = StreamTranslation::ToMessages(MessagesEvents::new());
        let out =
            to_messages.event(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n");
        assert!(out.starts_with(b"event: message_start\n"));
        assert_eq!(to_messages.finish(), None);
    }
}
