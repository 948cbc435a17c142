//! The keys file applied on its own, while the configuration file has an error: a
//! revocation must not wait for someone else's fix (`reload.rs`).

use super::{parse_with, Config, ConfigErrors, HostLookup};
use std::path::Path;

/// `running` with its keys read again from `keys_text` (the keys file) alone, so a change
/// to the keys file (a revocation) applies even while the configuration file has an error.
/// `config_text` is the configuration as it was last loaded: it is checked again with the
/// new keys (names and hashes unique, labels, patterns), without resolving host names,
/// and only the keys (and the warnings about them) are taken from it.
pub fn with_keys_file(
    running: &Config,
    config_file: &Path,
    config_text: &str,
    keys_file: &Path,
    keys_text: &str,
) -> Result<Config, ConfigErrors> {
    let env = |name: &str| std::env::var(name).ok();
    let checked = parse_with(
        &config_file.display().to_string(),
        config_text,
        Some((&keys_file.display().to_string(), keys_text)),
        &env,
        HostLookup::Skip,
    )?;
    let mut config = running.clone();
    config.keys = checked.keys;
    config.warnings = checked.warnings;
    Ok(config)
}
