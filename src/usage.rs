//! Token usage, read from answers as they pass: a JSON answer's `usage`, or the last non-null
//! `usage` of an event stream, wherever the provider puts it (a chunk of its own with
//! `choices: []`, the chunk with `finish_reason`, a Responses API `response.completed` event).
//!
//! A JSON answer that is here whole is read by serde_json in one pass ([`whole_usage`]).
//! One relayed in pieces is followed as it passes, nothing held or copied but the `usage`
//! value itself: [`JsonScan`] follows a JSON document's structure as it arrives in pieces,
//! and [`EventUsage`] finds the `data:` lines of an event stream and feeds them to it.
//! [`strip_event`] takes out of one event what an injected
//! `stream_options.include_usage` added, for a client that did not ask for it.

use serde::Deserialize;
use serde_json::Number;

mod events;
mod json_scan;
mod whole;

pub use events::{strip_event, EventUsage, Stripped};
pub use json_scan::{JsonScan, Member};
pub use whole::whole_usage;

/// Largest `usage` value read; a bigger one is malformed.
const MAX_USAGE_BYTES: usize = 4096;

/// Every count an answer reports must stay below this (2^24, about 16.7 million tokens) to
/// be believed: no model reads or writes that much in one request, and a larger count
/// would put a key in debt for years.
pub const MAX_PLAUSIBLE_COUNT: u64 = 1 << 24;

/// Tokens an answer's output may exceed the request's own output limit by and still be
/// believed (an eighth of the limit, at least 64): providers count a closing token or
/// a tool call's framing outside the limit now and then.
pub fn output_slack(limit: u64) -> u64 {
    (limit / 8).max(64)
}

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
        self.input.saturating_add(self.output)
    }

    /// Whether the usage can be believed of a request whose output was limited to
    /// `output_limit` tokens (`None`: the request set no limit): every count below
    /// [`MAX_PLAUSIBLE_COUNT`], and the output within the limit plus [`output_slack`].
    /// Usage that is not plausible is treated as missing: the reservation stands.
    pub fn plausible(&self, output_limit: Option<u64>) -> bool {
        let counts = [
            Some(self.input),
            Some(self.output),
            self.cached,
            self.reasoning,
        ];
        let small = counts
            .iter()
            .flatten()
            .all(|&count| count < MAX_PLAUSIBLE_COUNT);
        let within = output_limit
            .is_none_or(|limit| self.output <= limit.saturating_add(output_slack(limit)));
        small && within
    }

    /// Reads a `usage` value: OpenAI's `prompt_tokens`/`completion_tokens`, the Responses
    /// API's `input_tokens`/`output_tokens`, `total_tokens` alone (embeddings, rerank), or a
    /// transcription billed by duration (no tokens). `None` for `null` and for a malformed
    /// value: a count that is not a non-negative integer, or no count at all. Whether the
    /// counts are believable is [`Usage::plausible`]'s question.
    pub fn parse(raw: &[u8]) -> Option<Usage> {
        // Typed, so reading it allocates nothing; any field of the wrong type (a string, a
        // list) makes the whole value malformed, and a count must be a non-negative integer.
        serde_json::from_slice::<RawUsage>(raw).ok()?.usage()
    }
}

impl RawUsage<'_> {
    /// The usage these fields give, as [`Usage::parse`] reads them.
    pub(super) fn usage(self) -> Option<Usage> {
        let raw = self;
        let count = |n: Option<Number>| -> Result<Option<u64>, ()> {
            match n {
                None => Ok(None),
                Some(n) => n.as_u64().map(Some).ok_or(()),
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
pub(super) struct RawUsage<'a> {
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
