//! The entry points: a configuration file and the keys file it names read (bounded, a
//! regular file), then parsed and validated section by section, every error at once.

use super::*;

/// Reads the configuration file and the keys file it names, then validates both.
pub fn load_files(path: &Path) -> Result<Config, ConfigErrors> {
    load_files_with(path, HostLookup::Resolve)
}

/// Whether upstream host names are looked up while validating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLookup {
    /// Resolve them: what serving needs.
    Resolve,
    /// Check the URLs only, for `sluice check --no-resolve` where the serving network's
    /// names (a cluster's Services) do not resolve. Such a configuration is never served.
    Skip,
}

/// [`load_files`], choosing whether host names are resolved.
pub fn load_files_with(path: &Path, lookup: HostLookup) -> Result<Config, ConfigErrors> {
    let read = |p: &Path| {
        read_text_file(p).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: p.display().to_string(),
                message: format!("cannot read: {e}"),
            }])
        })
    };
    let text = read(path)?;
    let keys_file =
        keys_file_of(&text).map(|name| path.parent().unwrap_or(Path::new(".")).join(name));
    let keys_text = match &keys_file {
        Some(keys_path) => Some((keys_path.display().to_string(), read(keys_path)?)),
        None => None,
    };
    let env = |name: &str| std::env::var(name).ok();
    let mut config = parse_with(
        &path.display().to_string(),
        &text,
        keys_text.as_ref().map(|(p, t)| (p.as_str(), t.as_str())),
        &env,
        lookup,
    )?;
    config.keys_file = keys_file;
    Ok(config)
}

/// A configuration or keys file's text, as the loader reads it.
pub fn read_file(path: &Path) -> std::io::Result<String> {
    read_text_file(path)
}

/// Largest configuration or keys file read.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// A configuration file's text. Only a regular file of bounded size is read: a FIFO or a
/// device in its place would block a reload or read without end.
fn read_text_file(path: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    std::fs::read_to_string(path)
}

/// The `keys_file` named by a configuration text, if it names one and parses at all.
fn keys_file_of(text: &str) -> Option<String> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    value.get("keys_file")?.as_str().map(str::to_owned)
}

/// Validates configuration text. `keys` is the keys file (its name for messages, and its
/// text) when the configuration names one; `env` looks up environment variables.
pub fn parse(
    file: &str,
    text: &str,
    keys: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    parse_with(file, text, keys, env, HostLookup::Resolve)
}

/// [`parse`], choosing whether host names are resolved.
pub fn parse_with(
    file: &str,
    text: &str,
    keys: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
    lookup: HostLookup,
) -> Result<Config, ConfigErrors> {
    let mut errors = Errors::new(file);
    let Some(parsed) = errors.document::<RawConfig>(text) else {
        return Err(ConfigErrors(errors.list));
    };
    // Section by section: the errors come out in this order.
    let settings = server::settings(&mut errors, &parsed);
    let edge = tls::edge(&mut errors, &parsed.raw);
    let tracing = tracing::tracing(&mut errors, parsed.raw.tracing.as_ref());
    // A list that could not be read was reported; what refers to it is not checked.
    let upstreams_readable = !parsed.unreadable("upstreams");
    let keys_readable = !parsed.unreadable("keys");
    let raw = parsed.raw;
    let (upstreams, declared) = upstream::upstreams(&mut errors, raw.upstreams, env, lookup);
    let models = model::models(
        &mut errors,
        raw.models,
        upstreams_readable.then_some(declared.as_slice()),
    );
    let environment = raw
        .environment
        .as_deref()
        .unwrap_or(server::DEFAULT_ENVIRONMENT);
    let limits_store =
        store::limits_store(&mut errors, raw.limits_store.as_ref(), environment, env);
    let admin_tokens = admin::admin_tokens(
        &mut errors,
        raw.admin_token_env.as_deref(),
        raw.admin_tokens,
        settings.admin_listen(),
        env,
    );
    let serves_responses = models.iter().any(|m| {
        m.endpoints
            .contains(&crate::endpoint::EndpointType::Responses)
    });
    let response_ids = response_ids::response_ids(
        &mut errors,
        raw.response_ids.as_ref(),
        serves_responses,
        env,
    );
    let model_ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    let before_keys = errors.list.len();
    let keys = key::keys(
        &mut errors,
        raw.keys,
        raw.keys_file.is_some(),
        keys,
        &model_ids,
        SystemWallClock.unix_millis(),
    );
    // Whether a label is used by some key is only known when every key could be read.
    let keys_complete = errors.list.len() == before_keys && keys_readable;
    let metric_labels = key::metric_labels(
        &mut errors,
        raw.metric_labels.unwrap_or_default(),
        keys_complete.then_some(keys.as_slice()),
    );
    let owners = budget::owners(&mut errors, raw.owners);
    budget::check_budgets(&mut errors, &owners, &keys, &models);
    if !errors.list.is_empty() {
        return Err(ConfigErrors(errors.list));
    }
    let mut config = settings.into_config(upstreams, models, keys, metric_labels, errors.warnings);
    config.limits_store = limits_store;
    config.tracing = tracing;
    config.response_ids = response_ids;
    config.admin_tokens = admin_tokens;
    config.owners = owners;
    config.tls = edge.tls;
    config.admin_tls = edge.admin_tls;
    Ok(config)
}
