//! Models: the targets each one routes to (one `upstream`, or weighted `targets`), its
//! endpoint type, its capabilities and its `fallbacks` (known models, never in a cycle).

use super::parsed::{items, Parsed};
use super::raw::{RawModel, RawTarget};
use super::values::{check_unique, required, Errors};
use super::{ModelConfig, TargetConfig};
use crate::endpoint::{EndpointType, UpstreamApi, MAX_OUTPUT_TOKENS};

/// Output tokens reserved for a request that names no limit, unless the model says.
const DEFAULT_MAX_TOKENS: u64 = 1024;
use std::num::NonZeroU32;

/// The valid models. `upstreams` names every upstream that was read, valid or not; `None`
/// when the `upstreams` list itself could not be read, so no reference can be checked.
pub(super) fn models(
    errors: &mut Errors,
    values: Vec<serde_yaml::Value>,
    upstreams: Option<&[String]>,
) -> Vec<ModelConfig> {
    let raw_models: Vec<Parsed<RawModel>> = items(errors, "models", values);
    let ids = raw_models
        .iter()
        .filter_map(|m| Some((m.path.as_str(), m.raw.id.as_deref()?)));
    check_unique(errors, "id", ids);
    check_fallbacks(errors, &raw_models);
    raw_models
        .into_iter()
        .filter_map(|parsed| model(errors, parsed, upstreams))
        .collect()
}

/// Each fallback names a model that was read (valid or not), and following fallbacks from
/// any model never leads back to it. A cycle is reported once, at its first model.
fn check_fallbacks(errors: &mut Errors, models: &[Parsed<RawModel>]) {
    let index = |id: &str| models.iter().position(|m| m.raw.id.as_deref() == Some(id));
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); models.len()];
    for (i, model) in models.iter().enumerate() {
        for (j, id) in model.raw.fallbacks.iter().flatten().enumerate() {
            match index(id) {
                Some(to) => edges[i].push(to),
                None => errors.push(
                    model.at(&format!("fallbacks[{j}]")),
                    format!("no model has the id '{id}'"),
                ),
            }
        }
    }
    let mut in_cycle = vec![false; models.len()];
    for start in 0..models.len() {
        if in_cycle[start] {
            continue;
        }
        if let Some(cycle) = cycle_from(start, &edges) {
            for &i in &cycle {
                in_cycle[i] = true;
            }
            let names: Vec<&str> = cycle
                .iter()
                .chain(std::iter::once(&cycle[0]))
                .map(|&i| models[i].raw.id.as_deref().unwrap_or("?"))
                .collect();
            errors.push(
                models[start].at("fallbacks"),
                format!("fallbacks form a cycle: {}", names.join(" -> ")),
            );
        }
    }
}

/// A cycle through `start` along `edges` (the models on it, `start` first), if there is one.
fn cycle_from(start: usize, edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    // Depth first, with the path held: a small graph, each node entered once.
    let mut path = vec![start];
    let mut next = vec![0usize];
    let mut seen = vec![false; edges.len()];
    seen[start] = true;
    while let Some(&node) = path.last() {
        let at = next.last_mut()?;
        match edges[node].get(*at) {
            Some(&to) => {
                *at += 1;
                if to == start {
                    return Some(path);
                }
                if !seen[to] {
                    seen[to] = true;
                    path.push(to);
                    next.push(0);
                }
            }
            None => {
                path.pop();
                next.pop();
            }
        }
    }
    None
}

fn model(
    errors: &mut Errors,
    parsed: Parsed<RawModel>,
    upstreams: Option<&[String]>,
) -> Option<ModelConfig> {
    let before = errors.list.len();
    let path = parsed.path.clone();
    let id = required(
        errors,
        parsed.at("id"),
        parsed.raw.id.clone(),
        parsed.unreadable("id"),
    );
    if id
        .as_deref()
        .is_some_and(|id| id.is_empty() || id.chars().any(|c| c.is_control() || c.is_whitespace()))
    {
        errors.push(
            parsed.at("id"),
            "must be non-empty, without spaces or control characters",
        );
    }
    let single = parsed.raw.upstream.is_some();
    // A `targets` or `upstream` that could not be read was reported: no "needs" error too.
    let unreadable_route = parsed.unreadable("upstream") || parsed.unreadable("targets");
    let intact = !parsed.has_unreadable();
    let Parsed { raw, .. } = parsed;
    let written = written_targets(
        errors,
        &path,
        raw.upstream,
        raw.upstream_model,
        raw.targets,
        unreadable_route,
    );
    let targets = targets(errors, &path, single, written, upstreams);
    let (endpoint_type, endpoints) = endpoint_types(
        errors,
        &path,
        raw.endpoint_type.as_deref(),
        raw.endpoints.as_deref(),
    );
    let (streaming, tool_calling) = capabilities(errors, &path, &raw.capabilities);
    let default_max_tokens = raw.default_max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if default_max_tokens > MAX_OUTPUT_TOKENS {
        errors.push(
            format!("{path}.default_max_tokens"),
            format!("must be at most {MAX_OUTPUT_TOKENS}"),
        );
    }
    let price = raw
        .price
        .as_ref()
        .and_then(|price| super::budget::price(errors, &format!("{path}.price"), price));
    let upstream_api = match raw.upstream_api.as_deref() {
        None => UpstreamApi::default(),
        Some(name) => UpstreamApi::parse(name).unwrap_or_else(|| {
            errors.push(
                format!("{path}.upstream_api"),
                "must be `openai` or `anthropic`",
            );
            UpstreamApi::default()
        }),
    };
    if errors.list.len() > before || !intact {
        return None;
    }
    Some(ModelConfig {
        id: id?,
        targets,
        endpoint_type,
        endpoints,
        streaming,
        tool_calling,
        fallbacks: raw.fallbacks.unwrap_or_default(),
        owned_by: raw.owned_by.unwrap_or_else(|| "sluice".into()),
        created: raw.created.unwrap_or(0),
        default_max_tokens,
        enforce_output_limit: raw.enforce_output_limit.unwrap_or(false),
        price,
        upstream_api,
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
    unreadable: bool,
) -> Vec<RawTarget> {
    match (upstream, targets) {
        (Some(upstream), None) => vec![RawTarget {
            upstream: Some(upstream),
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
            if !unreadable {
                errors.push(path.to_string(), "needs `upstream` or `targets`");
            }
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
    upstreams: Option<&[String]>,
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
            let upstream = required(
                errors,
                format!("{target_path}.upstream"),
                target.upstream,
                false,
            );
            if let (Some(upstream), Some(names)) = (&upstream, upstreams) {
                if !names.contains(upstream) {
                    errors.push(
                        format!("{target_path}.upstream"),
                        format!("no upstream is named '{upstream}'"),
                    );
                }
            }
            let weight = NonZeroU32::new(target.weight.unwrap_or(1));
            if weight.is_none() {
                errors.push(format!("{target_path}.weight"), "must be at least 1");
            }
            Some(TargetConfig {
                upstream: upstream?,
                weight: weight?,
                upstream_model: target.upstream_model,
            })
        })
        .collect()
}

/// The model's `endpoint_type` (default `chat`) and every type it serves: `endpoints` if
/// written, with `endpoint_type` always among them, first.
fn endpoint_types(
    errors: &mut Errors,
    path: &str,
    endpoint_type: Option<&str>,
    endpoints: Option<&[String]>,
) -> (EndpointType, Vec<EndpointType>) {
    let known = || {
        EndpointType::ALL
            .iter()
            .map(|t| format!("`{}`", t.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let main = match endpoint_type {
        None => EndpointType::Chat,
        Some(name) => EndpointType::parse(name).unwrap_or_else(|| {
            errors.push(
                format!("{path}.endpoint_type"),
                format!("'{name}' is not an endpoint type; use one of {}", known()),
            );
            EndpointType::Chat
        }),
    };
    let mut served = vec![main];
    for (i, name) in endpoints.unwrap_or_default().iter().enumerate() {
        match EndpointType::parse(name) {
            Some(kind) if served.contains(&kind) => {}
            Some(kind) => served.push(kind),
            None => errors.push(
                format!("{path}.endpoints[{i}]"),
                format!("'{name}' is not an endpoint type; use one of {}", known()),
            ),
        }
    }
    (main, served)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(yaml: &str) -> Vec<String> {
        let values: Vec<serde_yaml::Value> = serde_yaml::from_str(yaml).unwrap();
        let mut errors = Errors::new("f.yaml");
        let names = vec!["u".to_string()];
        models(&mut errors, values, Some(&names));
        errors
            .list
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn fallbacks_name_known_models_without_cycles() {
        assert!(errors_of(
            "[{id: a, upstream: u, fallbacks: [b, c]}, {id: b, upstream: u, fallbacks: [c]}, {id: c, upstream: u}]"
        )
        .is_empty(), "a diamond is not a cycle");
        assert_eq!(
            errors_of("[{id: a, upstream: u, fallbacks: [nope]}]"),
            ["f.yaml: models[0].fallbacks[0]: no model has the id 'nope'"]
        );
        assert_eq!(
            errors_of("[{id: a, upstream: u, fallbacks: [a]}]"),
            ["f.yaml: models[0].fallbacks: fallbacks form a cycle: a -> a"]
        );
        assert_eq!(
            errors_of(
                "[{id: x, upstream: u, fallbacks: [a]}, {id: a, upstream: u, fallbacks: [b]}, {id: b, upstream: u, fallbacks: [c]}, {id: c, upstream: u, fallbacks: [a]}]"
            ),
            ["f.yaml: models[1].fallbacks: fallbacks form a cycle: a -> b -> c -> a"],
            "reported once, at its first model; a model leading into it is not in it"
        );
    }
}
