//! Money: `price` per model, `budget` per key and per owner (the `owners:` section), held
//! as integer micro-dollars (DESIGN 5.5). A key whose budget (its own or its owner's) may
//! be spent on a model without a price is warned about: such requests cost nothing.

use super::parsed::{items, Parsed};
use super::values::{check_unique, required, text_problem, Errors};
use super::{KeyConfig, ModelConfig};
use crate::glob;
use serde::Deserialize;

/// Micro-dollars in one US dollar.
pub const MICROS_PER_USD: u64 = 1_000_000;

/// Micro-dollars as decimal USD without trailing zeros (`12.5`, `0.000125`, `3`).
/// Written digit by digit: it is on every answer to a budgeted key, where two `format!`s
/// cost about 1,300 instructions.
pub fn format_usd(micros: u64) -> String {
    let (whole, fraction) = (micros / MICROS_PER_USD, micros % MICROS_PER_USD);
    let mut text = String::with_capacity(28);
    text.push_str(itoa::Buffer::new().format(whole));
    if fraction != 0 {
        text.push('.');
        let mut divisor = MICROS_PER_USD / 10;
        let mut rest = fraction;
        while rest != 0 {
            let digit = rest / divisor;
            text.push(char::from(b'0' + digit as u8));
            rest -= digit * divisor;
            divisor /= 10;
        }
    }
    text
}
/// The largest price per million tokens accepted, in USD.
const MAX_PRICE_USD: f64 = 1_000_000.0;
/// The largest budget accepted, in USD (a billion: far beyond any real budget, and well
/// inside 64 bits in micro-dollars).
const MAX_BUDGET_USD: f64 = 1_000_000_000.0;

/// A model's price, in micro-dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: u64,
    /// Input tokens served from the provider's prompt cache.
    pub cached_input: u64,
    pub output: u64,
}

/// A budget in micro-dollars per calendar window (UTC); at least one is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub per_day: Option<u64>,
    pub per_month: Option<u64>,
}

/// An entry of `owners:`: the budget shared by every key whose `owner` is `name`.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    pub name: String,
    pub budget: Budget,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    pub(super) input_per_mtok: Option<f64>,
    pub(super) cached_input_per_mtok: Option<f64>,
    pub(super) output_per_mtok: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    pub(super) usd_per_day: Option<f64>,
    pub(super) usd_per_month: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOwner {
    pub(super) name: Option<String>,
    pub(super) budget: Option<RawBudget>,
}

/// USD as micro-dollars (rounded to the nearest), or an error at `path`.
fn micros(errors: &mut Errors, path: &str, usd: f64, max: f64, positive: bool) -> Option<u64> {
    let bad = !usd.is_finite() || usd < 0.0 || usd > max || (positive && usd <= 0.0);
    if bad {
        let floor = if positive { "above 0" } else { "at least 0" };
        errors.push(
            path,
            format!("must be a number of USD {floor} and at most {max}"),
        );
        return None;
    }
    Some((usd * MICROS_PER_USD as f64).round() as u64)
}

/// A model's `price`: input and output are required; cached input defaults to the input
/// price.
pub(super) fn price(errors: &mut Errors, path: &str, raw: &RawPrice) -> Option<Price> {
    let before = errors.list.len();
    let mut field = |name: &str, value: Option<f64>| {
        let path = format!("{path}.{name}");
        value.and_then(|usd| micros(errors, &path, usd, MAX_PRICE_USD, false))
    };
    let input = field("input_per_mtok", raw.input_per_mtok);
    let cached = field("cached_input_per_mtok", raw.cached_input_per_mtok);
    let output = field("output_per_mtok", raw.output_per_mtok);
    for (name, value) in [
        ("input_per_mtok", raw.input_per_mtok),
        ("output_per_mtok", raw.output_per_mtok),
    ] {
        if value.is_none() {
            errors.push(format!("{path}.{name}"), "is required in a price");
        }
    }
    if errors.list.len() > before {
        return None;
    }
    let input = input?;
    Some(Price {
        input,
        cached_input: cached.unwrap_or(input),
        output: output?,
    })
}

/// A `budget` of a key or an owner: at least one window, each above 0.
pub(super) fn budget(errors: &mut Errors, path: &str, raw: &RawBudget) -> Option<Budget> {
    let before = errors.list.len();
    let per_day = raw.usd_per_day.and_then(|usd| {
        micros(
            errors,
            &format!("{path}.usd_per_day"),
            usd,
            MAX_BUDGET_USD,
            true,
        )
    });
    let per_month = raw.usd_per_month.and_then(|usd| {
        micros(
            errors,
            &format!("{path}.usd_per_month"),
            usd,
            MAX_BUDGET_USD,
            true,
        )
    });
    if raw.usd_per_day.is_none() && raw.usd_per_month.is_none() {
        errors.push(path, "needs usd_per_day or usd_per_month");
    }
    (errors.list.len() == before).then_some(Budget { per_day, per_month })
}

/// The `owners:` section: unique names, each with a budget.
pub(super) fn owners(errors: &mut Errors, values: Vec<serde_yaml::Value>) -> Vec<OwnerConfig> {
    let raw: Vec<Parsed<RawOwner>> = items(errors, "owners", values);
    let names = raw
        .iter()
        .filter_map(|o| Some((o.path.as_str(), o.raw.name.as_deref()?)));
    check_unique(errors, "name", names);
    raw.into_iter()
        .filter_map(|parsed| {
            let before = errors.list.len();
            let name = required(
                errors,
                parsed.at("name"),
                parsed.raw.name.clone(),
                parsed.unreadable("name"),
            );
            if let Some(problem) = name.as_deref().and_then(text_problem) {
                errors.push(parsed.at("name"), problem);
            }
            let budget = match &parsed.raw.budget {
                Some(raw) => budget(errors, &parsed.at("budget"), raw),
                None => {
                    if !parsed.unreadable("budget") {
                        errors.push(parsed.at("budget"), "is required for an owner");
                    }
                    None
                }
            };
            if errors.list.len() > before || parsed.has_unreadable() {
                return None;
            }
            Some(OwnerConfig {
                name: name?,
                budget: budget?,
            })
        })
        .collect()
}

/// Warnings: an owner no key belongs to, and a budgeted key (by its own budget or its
/// owner's) that may use a model without a price, whose requests would cost nothing.
pub(super) fn check_budgets(
    errors: &mut Errors,
    owners: &[OwnerConfig],
    keys: &[KeyConfig],
    models: &[ModelConfig],
) {
    for (i, owner) in owners.iter().enumerate() {
        if !keys.iter().any(|k| k.owner.as_deref() == Some(&owner.name)) {
            errors.warn(
                format!("owners[{i}].name"),
                format!(
                    "no key has the owner '{}': its budget applies to nothing",
                    owner.name
                ),
            );
        }
    }
    let unpriced: Vec<(&str, Vec<char>)> = models
        .iter()
        .filter(|m| m.price.is_none())
        .map(|m| (m.id.as_str(), m.id.chars().collect()))
        .collect();
    if unpriced.is_empty() {
        return;
    }
    for key in keys {
        let owned = key
            .owner
            .as_deref()
            .is_some_and(|name| owners.iter().any(|o| o.name == name));
        if key.budget.is_none() && !owned {
            continue;
        }
        let usable: Vec<&str> = unpriced
            .iter()
            .filter(|(_, id)| match &key.models {
                None => true,
                Some(patterns) => patterns
                    .iter()
                    .any(|p| glob::matches(&p.chars().collect::<Vec<_>>(), id)),
            })
            .map(|(name, _)| *name)
            .collect();
        if !usable.is_empty() {
            errors.warn(
                format!("key '{}'", key.name),
                format!(
                    "has a budget but may use models without a price ({}): their requests \
                     cost nothing against it",
                    usable.join(", ")
                ),
            );
        }
    }
}
