//! Token usage, read from answers as they pass: a JSON answer's `usage`, or the last non-null
//! `usage` of an event stream, wherever the provider puts it (a chunk of its own with
//! `choices: []`, the chunk with `finish_reason`, a Responses API `response.completed` event).
//!
//! Nothing is held or copied but the `usage` value itself: [`JsonScan`] follows a JSON
//! document's structure as it arrives in pieces, and [`EventUsage`] finds the `data:` lines
//! of an event stream and feeds them to it. [`strip_event`] takes out of one event what an
//! injected `stream_options.include_usage` added, for a client that did not ask for it.

use crate::json_object::each_member;
use serde::Deserialize;
use serde_json::Number;

mod events;
mod json_scan;

pub use events::{strip_event, EventUsage, Stripped};
pub use json_scan::{JsonScan, Member};

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
        // The usual value is read in one pass of our own, with the same result.
        let raw: RawUsage = match RawUsage::plain(raw) {
            Some(raw) => raw,
            None => serde_json::from_slice(raw).ok()?,
        };
        Usage::from_raw(raw)
    }

    /// The usage its fields give, `None` where they are malformed.
    fn from_raw(raw: RawUsage) -> Option<Usage> {
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
#[derive(Deserialize, Default)]
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

#[derive(Deserialize, Default)]
struct Details {
    cached_tokens: Option<Number>,
    reasoning_tokens: Option<Number>,
}

impl<'a> RawUsage<'a> {
    /// The fields of the usual `usage` value, read in one pass of our own instead of
    /// serde_json's typed reading (~2.3k instructions for an answer's usage): an object
    /// whose fields read are each `null`, plain digits that fit a `u64`, a string (`type`)
    /// or such an object (the details), none of them twice. `None` for anything else:
    /// serde_json then reads it, and refuses what it refuses (a field given twice, a count
    /// that is a float or negative, a value of another type).
    fn plain(raw: &'a [u8]) -> Option<Self> {
        let mut usage = RawUsage::default();
        let mut seen = 0u16;
        each_member(std::str::from_utf8(raw).ok()?, |name, value| {
            let field = match name {
                "prompt_tokens" => 0,
                "completion_tokens" => 1,
                "input_tokens" => 2,
                "output_tokens" => 3,
                "total_tokens" => 4,
                "cache_creation_input_tokens" => 5,
                "cache_read_input_tokens" => 6,
                "prompt_tokens_details" => 7,
                "input_tokens_details" => 8,
                "completion_tokens_details" => 9,
                "output_tokens_details" => 10,
                "type" => 11,
                _ => return Some(()),
            };
            if seen & 1 << field != 0 {
                return None;
            }
            seen |= 1 << field;
            match field {
                0 => usage.prompt_tokens = plain_count(value)?,
                1 => usage.completion_tokens = plain_count(value)?,
                2 => usage.input_tokens = plain_count(value)?,
                3 => usage.output_tokens = plain_count(value)?,
                4 => usage.total_tokens = plain_count(value)?,
                5 => usage.cache_creation_input_tokens = plain_count(value)?,
                6 => usage.cache_read_input_tokens = plain_count(value)?,
                7 => usage.prompt_tokens_details = Details::plain(value)?,
                8 => usage.input_tokens_details = Details::plain(value)?,
                9 => usage.completion_tokens_details = Details::plain(value)?,
                10 => usage.output_tokens_details = Details::plain(value)?,
                _ if value == "null" => usage.kind = None,
                _ => usage.kind = Some(crate::json_object::string(value)?),
            }
            Some(())
        })?;
        Some(usage)
    }
}

impl Details {
    /// A details value read as [`RawUsage::plain`] reads the usage: `null`, or an object
    /// whose counts are `null` or plain digits, none twice.
    fn plain(text: &str) -> Option<Option<Self>> {
        if text == "null" {
            return Some(None);
        }
        let mut details = Details::default();
        let mut seen = [false; 2];
        each_member(text, |name, value| {
            let (field, slot) = match name {
                "cached_tokens" => (0, &mut details.cached_tokens),
                "reasoning_tokens" => (1, &mut details.reasoning_tokens),
                _ => return Some(()),
            };
            if std::mem::replace(&mut seen[field], true) {
                return None;
            }
            *slot = plain_count(value)?;
            Some(())
        })?;
        Some(Some(details))
    }
}

/// A count's JSON text read as serde_json's `Number` would give it a `u64`: `null` is no
/// count, plain digits are one; `None` for any other text (left to serde_json).
fn plain_count(text: &str) -> Option<Option<Number>> {
    match text {
        "null" => Some(None),
        // Valid JSON digits have no leading zero; more than 19 may not fit.
        digits
            if (1..=19).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            digits.parse::<u64>().ok().map(|n| Some(Number::from(n)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
