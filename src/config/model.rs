//! Models: the targets each one routes to (one `upstream`, or weighted `targets`), its
//! endpoint type and its capabilities.

use super::raw::{RawModel, RawTarget};
use super::values::{check_unique, items, Errors};
use super::{ModelConfig, TargetConfig};
use std::num::NonZeroU32;

/// The valid models. `upstreams` names every upstream that parsed, valid or not.
pub(super) fn models(
    errors: &mut Errors,
    values: Vec<serde_yaml::Value>,
    upstreams: &[String],
) -> Vec<ModelConfig> {
    let raw_models: Vec<(String, RawModel)> = items(errors, "models", values);
    check_unique(
        errors,
        "models",
        raw_models.iter().map(|(_, m)| m.id.as_str()),
        "id",
    );
    raw_models
        .into_iter()
        .filter_map(|(path, raw)| model(errors, &path, raw, upstreams))
        .collect()
}

fn model(
    errors: &mut Errors,
    path: &str,
    raw: RawModel,
    upstreams: &[String],
) -> Option<ModelConfig> {
    let before = errors.list.len();
    if raw.id.is_empty() || raw.id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        errors.push(
            format!("{path}.id"),
            "must be non-empty, without spaces or control characters",
        );
    }
    let single = raw.upstream.is_some();
    let written = written_targets(errors, path, raw.upstream, raw.upstream_model, raw.targets);
    let targets = targets(errors, path, single, written, upstreams);
    let endpoint_type = raw.endpoint_type.unwrap_or_else(|| "chat".into());
    if endpoint_type != "chat" {
        errors.push(format!("{path}.endpoint_type"), "only `chat` is served");
    }
    let (streaming, tool_calling) = capabilities(errors, path, &raw.capabilities);
    if errors.list.len() > before {
        return None;
    }
    Some(ModelConfig {
        id: raw.id,
        targets,
        endpoint_type,
        streaming,
        tool_calling,
        owned_by: raw.owned_by.unwrap_or_else(|| "sluice".into()),
        created: raw.created.unwrap_or(0),
    })
}

/// The targets as written: a single `upstream` (with its `upstream_model`) is one target;
/// `targets` must list at least one, and the two do not mix.
fn written_targets(
    errors: &mut Errors,
    path: &str,
    upstream: Option<String>,
    upstream_model: Option<String>,
    targets: Option<Vec<RawTarget>>,
) -> Vec<RawTarget> {
    match (upstream, targets) {
        (Some(upstream), None) => vec![RawTarget {
            upstream,
            weight: None,
            upstream_model,
        }],
        (None, Some(targets)) if !targets.is_empty() => {
            if upstream_model.is_some() {
                errors.push(
                    format!("{path}.upstream_model"),
                    "goes inside each target when `targets` is used",
                );
            }
            targets
        }
        (None, Some(_)) => {
            errors.push(format!("{path}.targets"), "must list at least one target");
            Vec::new()
        }
        (Some(_), Some(_)) => {
            errors.push(
                path.to_string(),
                "give either `upstream` or `targets`, not both",
            );
            Vec::new()
        }
        (None, None) => {
            errors.push(path.to_string(), "needs `upstream` or `targets`");
            Vec::new()
        }
    }
}

/// Each target checked: a declared upstream and a weight of at least 1. A `single`
/// upstream's errors are reported at the model's own path, not at `targets[0]`.
fn targets(
    errors: &mut Errors,
    path: &str,
    single: bool,
    written: Vec<RawTarget>,
    upstreams: &[String],
) -> Vec<TargetConfig> {
    written
        .into_iter()
        .enumerate()
        .filter_map(|(i, target)| {
            let target_path = if single {
                path.to_string()
            } else {
                format!("{path}.targets[{i}]")
            };
            if !upstreams.contains(&target.upstream) {
                errors.push(
                    format!("{target_path}.upstream"),
                    format!("no upstream is named '{}'", target.upstream),
                );
            }
            let weight = match NonZeroU32::new(target.weight.unwrap_or(1)) {
                Some(weight) => weight,
                None => {
                    errors.push(format!("{target_path}.weight"), "must be at least 1");
                    return None;
                }
            };
            Some(TargetConfig {
                upstream: target.upstream,
                weight,
                upstream_model: target.upstream_model,
            })
        })
        .collect()
}

/// Whether the model streams and calls tools, from its `capabilities`.
fn capabilities(errors: &mut Errors, path: &str, capabilities: &[String]) -> (bool, bool) {
    let mut streaming = false;
    let mut tool_calling = false;
    for (i, capability) in capabilities.iter().enumerate() {
        match capability.as_str() {
            "streaming" => streaming = true,
            "tool_calling" => tool_calling = true,
            other => errors.push(
                format!("{path}.capabilities[{i}]"),
                format!("unknown capability '{other}' (known: streaming, tool_calling)"),
            ),
        }
    }
    (streaming, tool_calling)
}
