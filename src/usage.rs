//! Token usage, read from answers as they pass: a JSON answer's `usage`, or the last non-null
//! `usage` of an event stream, wherever the provider puts it (a chunk of its own with
//! `choices: []`, the chunk with `finish_reason`, a Responses API `response.completed` event).
//!
//! Nothing is held or copied but the `usage` value itself: [`JsonScan`] follows a JSON
//! document's structure as it arrives in pieces, and [`EventUsage`] finds the `data:` lines
//! of an event stream and feeds them to it. [`strip_event`] takes out of one event what an
//! injected `stream_options.include_usage` added, for a client that did not ask for it.

use serde::Deserialize;
use serde_json::Number;

mod events;
mod json_scan;

pub use events::{strip_event, EventUsage, Stripped};
pub use json_scan::{JsonScan, Member};

/// Largest `usage` value read; a bigger one is malformed.
const MAX_USAGE_BYTES: usize = 4096;

/// Largest token count believed; more is malformed (it would put a key in endless debt).
const MAX_COUNT: u64 = 1 << 40;

/// The tokens an answer says it used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Input tokens served from the provider's prompt cache, when reported.
    pub cached: Option<u64>,
    /// Output tokens spent on reasoning, when reported.
    pub reasoning: Option<u64>,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }

    /// Reads a `usage` value: OpenAI's `prompt_tokens`/`completion_tokens`, the Responses
    /// API's `input_tokens`/`output_tokens`, `total_tokens` alone (embeddings, rerank), or a
    /// transcription billed by duration (no tokens). `None` for `null` and for a malformed
    /// value: a count that is not a non-negative integer, or no count at all.
    pub fn parse(raw: &[u8]) -> Option<Usage> {
        // Typed, so reading it allocates nothing; any field of the wrong type (a string, a
        // list) makes the whole value malformed, and a count must be a non-negative integer.
        let raw: RawUsage = serde_json::from_slice(raw).ok()?;
        let count = |n: Option<Number>| -> Result<Option<u64>, ()> {
            match n {
                None => Ok(None),
                Some(n) => n.as_u64().filter(|&n| n <= MAX_COUNT).map(Some).ok_or(()),
            }
        };
        let input = count(raw.prompt_tokens)
            .ok()?
            .or(count(raw.input_tokens).ok()?);
        let output = count(raw.completion_tokens)
            .ok()?
            .or(count(raw.output_tokens).ok()?);
        let total = count(raw.total_tokens).ok()?;
        let by_duration = raw.kind.as_deref() == Some("duration");
        let (input, output) = match (input, output, total) {
            (None, None, Some(total)) => (total, 0),
            (None, None, None) if by_duration => (0, 0),
            (None, None, None) => return None,
            (input, output, _) => (input.unwrap_or(0), output.unwrap_or(0)),
        };
        let cached = raw.prompt_tokens_details.or(raw.input_tokens_details);
        let reasoning = raw.completion_tokens_details.or(raw.output_tokens_details);
        // Anthropic's Messages API leaves cached input out of `input_tokens`: tokens written
        // to and read from its prompt cache are input all the same.
        let cache_created = count(raw.cache_creation_input_tokens).ok()?;
        let cache_read = count(raw.cache_read_input_tokens).ok()?;
        let input = input
            .saturating_add(cache_created.unwrap_or(0))
            .saturating_add(cache_read.unwrap_or(0));
        Some(Usage {
            input,
            output,
            cached: cache_read.or(count(cached.and_then(|d| d.cached_tokens)).ok()?),
            reasoning: count(reasoning.and_then(|d| d.reasoning_tokens)).ok()?,
        })
    }
}

/// The `usage` fields read; others are ignored.
#[derive(Deserialize)]
struct RawUsage<'a> {
    prompt_tokens: Option<Number>,
    completion_tokens: Option<Number>,
    input_tokens: Option<Number>,
    output_tokens: Option<Number>,
    total_tokens: Option<Number>,
    prompt_tokens_details: Option<Details>,
    input_tokens_details: Option<Details>,
    completion_tokens_details: Option<Details>,
    output_tokens_details: Option<Details>,
    cache_creation_input_tokens: Option<Number>,
    cache_read_input_tokens: Option<Number>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<Number>,
    reasoning_tokens: Option<Number>,
}

#[cfg(test)]
mod tests;
