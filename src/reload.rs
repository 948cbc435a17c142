//! Reloading: read and validate the whole configuration again, and swap the snapshot only
//! if all of it is good. A bad file leaves the running catalog untouched.

use crate::catalog::Catalog;
use crate::config::{load_files, Config};
use crate::gateway::Gateway;
use std::path::Path;

/// Settings that only take effect on restart, named when a reload changes them.
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.listen != new.listen {
        changed.push("listen");
    }
    if old.admin_listen != new.admin_listen {
        changed.push("admin_listen");
    }
    if old.echo_upstream != new.echo_upstream {
        changed.push("echo_upstream");
    }
    if old.threads != new.threads {
        changed.push("threads");
    }
    if old.log_level != new.log_level {
        changed.push("log_level");
    }
    changed
}

/// Loads `path` again and swaps the catalog in on success. Returns the new configuration,
/// or `None` when it was rejected (the reason is logged and counted).
pub fn reload(gateway: &Gateway, path: &Path, running: &Config) -> Option<Config> {
    let generation = gateway.catalog().generation + 1;
    let loaded = load_files(path).map(|config| {
        let catalog = Catalog::build(&config, generation);
        (config, catalog)
    });
    match loaded {
        Ok((config, catalog)) => {
            for setting in restart_only_changes(running, &config) {
                log::warn!(target: "sluice::reload", setting; "setting changed but needs a restart to take effect");
            }
            gateway.swap_catalog(catalog);
            gateway
                .metrics
                .config_reloads
                .with_label_values(&["success"])
                .inc();
            log::info!(target: "sluice::reload", generation; "configuration reloaded");
            Some(config)
        }
        Err(errors) => {
            gateway
                .metrics
                .config_reloads
                .with_label_values(&["failure"])
                .inc();
            log::error!(target: "sluice::reload", errors:% = errors; "configuration rejected; still serving the previous one");
            None
        }
    }
}
