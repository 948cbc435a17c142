//! Reloading: read and validate the whole configuration again, and swap the snapshot only
//! if all of it is good. A bad file leaves the running catalog untouched, with one
//! exception: a changed keys file is applied on its own when the configuration file has an
//! error, so a revocation never waits for someone else's fix. Every reload that takes
//! logs what it changed (keys added, removed, disabled, enabled; models added, removed).
//!
//! Two triggers share one path: SIGHUP, and a watcher that fingerprints the contents of the
//! configuration and keys files, and the TLS listeners' certificate, key and client CA
//! files, every `watch_interval` (a new certificate is a reload like any other: read,
//! checked, and refused whole if it is bad). Reading contents (not inode or
//! mtime) sees every way a file gets replaced: in place, by rename (editors), or by a
//! symlink swap (Kubernetes ConfigMap and Secret volumes).

use crate::catalog::Catalog;
use crate::config::{load_files, read_file, with_keys_file, Config};
use crate::gateway::Gateway;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What asked for a reload, for the log line.
#[derive(Debug, Clone, Copy)]
pub enum Trigger {
    Signal,
    FileChange,
}

/// Holds the running configuration and reloads it on request.
pub struct Reloader {
    gateway: Arc<Gateway>,
    path: PathBuf,
    running: Mutex<Config>,
    /// Fingerprint of the files as last loaded (or last rejected), so one change is tried once.
    seen: Mutex<u64>,
    /// Held for a whole reload: a signal and the watcher never reload at the same time.
    reloading: Mutex<()>,
    /// The configuration file's text as last loaded, and the keys file's fingerprint as
    /// last applied: what a keys-file-only reload starts from.
    applied: Mutex<Applied>,
}

struct Applied {
    config_text: String,
    keys: u64,
}

impl Reloader {
    /// Serves a configuration that loaded: its warnings logged, its catalog swapped in,
    /// the reload counted; what changed since `running`.
    fn apply(&self, running: &Config, config: &Config, generation: u64) -> Changes {
        log_warnings(config);
        self.gateway
            .swap_catalog(Catalog::build(config, generation));
        self.gateway
            .metrics
            .config_reloads
            .with_label_values(&["success"])
            .inc();
        Changes::between(running, config)
    }

    pub fn new(gateway: Arc<Gateway>, path: &Path, running: Config) -> Self {
        let seen = fingerprint(path, &watched(&running));
        let applied = Applied {
            config_text: read_file(path).unwrap_or_default(),
            keys: keys_fingerprint(running.keys_file.as_deref()),
        };
        Reloader {
            gateway,
            path: path.to_path_buf(),
            running: Mutex::new(running),
            seen: Mutex::new(seen),
            reloading: Mutex::new(()),
            applied: Mutex::new(applied),
        }
    }

    /// The configuration in force.
    pub fn running(&self) -> Config {
        self.lock_running().clone()
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Config> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads the files again (blocking: run it off the async workers) and swaps the
    /// catalog in if they are valid. Returns whether the new configuration is in force.
    pub fn reload(&self, trigger: Trigger) -> bool {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let (keys_file, watched_files) = {
            let running = self.lock_running();
            (running.keys_file.clone(), watched(&running))
        };
        let before = fingerprint(&self.path, &watched_files);
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = before;
        let generation = self.gateway.catalog().generation + 1;
        let config_text = read_file(&self.path).unwrap_or_default();
        let keys_seen = keys_fingerprint(keys_file.as_deref());
        match load_files(&self.path) {
            Ok(config) => {
                let mut running = self.lock_running();
                for setting in restart_only_changes(&running, &config) {
                    log::warn!(target: "sluice::reload", setting; "setting changed but needs a restart to take effect");
                }
                let changes = self.apply(&running, &config, generation);
                log::info!(
                    target: "sluice::reload",
                    generation,
                    trigger:? = trigger,
                    keys_added:% = changes.keys_added,
                    keys_removed:% = changes.keys_removed,
                    keys_disabled:% = changes.keys_disabled,
                    keys_enabled:% = changes.keys_enabled,
                    models_added:% = changes.models_added,
                    models_removed:% = changes.models_removed;
                    "configuration reloaded"
                );
                *self.applied.lock().unwrap_or_else(|p| p.into_inner()) = Applied {
                    config_text,
                    keys: keys_fingerprint(config.keys_file.as_deref()),
                };
                // The new configuration may name other files: watch those now. Files that
                // changed while they were read (a certificate swapped between its and its
                // key's read) keep the fingerprint of before: the next check loads again.
                let settled = fingerprint(&self.path, &watched_files) == before;
                if settled {
                    *self.seen.lock().unwrap_or_else(|p| p.into_inner()) =
                        fingerprint(&self.path, &watched(&config));
                }
                *running = config;
                true
            }
            Err(errors) => {
                self.gateway
                    .metrics
                    .config_reloads
                    .with_label_values(&["failure"])
                    .inc();
                log::error!(
                    target: "sluice::reload",
                    trigger:? = trigger,
                    errors:% = errors;
                    "configuration rejected; still serving the previous one"
                );
                self.reload_keys_file(keys_seen, generation);
                false
            }
        }
    }

    /// Applies a changed keys file on its own, against the configuration as last loaded
    /// (the configuration file has an error just now).
    fn reload_keys_file(&self, keys_seen: u64, generation: u64) {
        let mut running = self.lock_running();
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        let Some(keys_file) = running.keys_file.clone() else {
            return;
        };
        if keys_seen == applied.keys {
            return;
        }
        let checked = read_file(&keys_file)
            .map_err(|e| format!("{}: cannot read: {e}", keys_file.display()))
            .and_then(|keys_text| {
                with_keys_file(
                    &running,
                    &self.path,
                    &applied.config_text,
                    &keys_file,
                    &keys_text,
                )
                .map_err(|errors| errors.to_string())
            });
        // Tried once per change of the keys file, taken or not.
        applied.keys = keys_seen;
        match checked {
            Ok(config) => {
                let changes = self.apply(&running, &config, generation);
                log::warn!(
                    target: "sluice::reload",
                    generation,
                    keys_added:% = changes.keys_added,
                    keys_removed:% = changes.keys_removed,
                    keys_disabled:% = changes.keys_disabled,
                    keys_enabled:% = changes.keys_enabled;
                    "keys file reloaded on its own; the configuration file's change is still rejected"
                );
                *running = config;
            }
            Err(errors) => {
                log::error!(
                    target: "sluice::reload",
                    errors:% = errors;
                    "keys file rejected too; still serving the previous keys"
                );
            }
        }
    }

    /// Whether the files differ from what was last loaded or rejected.
    fn changed(&self) -> bool {
        let watched_files = watched(&self.lock_running());
        let now = fingerprint(&self.path, &watched_files);
        now != *self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks the files every `watch_interval` until `stop` turns true.
    pub async fn watch(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let interval = self.lock_running().watch_interval;
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let reloader = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || {
                if reloader.changed() {
                    reloader.reload(Trigger::FileChange);
                }
            })
            .await;
        }
    }
}

/// Logs what a valid configuration probably got wrong (`sluice check` prints the same),
/// at startup and on every reload that takes it.
pub fn log_warnings(config: &Config) {
    for warning in &config.warnings {
        log::warn!(
            target: "sluice::config",
            path:% = warning.path,
            problem:% = warning.message;
            "configuration warning"
        );
    }
}

/// The files besides the configuration file whose change reloads it: the keys file, and
/// the TLS listeners' certificate, key and client CA files.
fn watched(config: &Config) -> Vec<PathBuf> {
    let tls = config.tls.iter().chain(&config.admin_tls);
    config
        .keys_file
        .iter()
        .cloned()
        .chain(tls.flat_map(|t| t.files().map(Path::to_path_buf)))
        .collect()
}

/// A hash of the files' contents (or of why they cannot be read), following symlinks.
/// Only regular files are read: a FIFO or a device put in a file's place would block the
/// watcher or read without end.
fn fingerprint(config: &Path, others: &[PathBuf]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for path in std::iter::once(config).chain(others.iter().map(PathBuf::as_path)) {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => match std::fs::read(path) {
                Ok(bytes) => bytes.hash(&mut hasher),
                Err(e) => e.kind().hash(&mut hasher),
            },
            Ok(meta) => format!("{:?}", meta.file_type()).hash(&mut hasher),
            Err(e) => e.kind().hash(&mut hasher),
        }
    }
    hasher.finish()
}

/// What a reload changed, each a comma-separated list of names (empty: nothing).
struct Changes {
    keys_added: String,
    keys_removed: String,
    keys_disabled: String,
    keys_enabled: String,
    models_added: String,
    models_removed: String,
}

impl Changes {
    fn between(old: &Config, new: &Config) -> Changes {
        let names = |list: Vec<&str>| list.join(",");
        let disabled =
            |config: &Config, name: &str| config.keys.iter().any(|k| k.name == name && k.disabled);
        let old_keys: Vec<&str> = old.keys.iter().map(|k| k.name.as_str()).collect();
        let new_keys: Vec<&str> = new.keys.iter().map(|k| k.name.as_str()).collect();
        let old_models: Vec<&str> = old.models.iter().map(|m| m.id.as_str()).collect();
        let new_models: Vec<&str> = new.models.iter().map(|m| m.id.as_str()).collect();
        let kept = || new_keys.iter().copied().filter(|n| old_keys.contains(n));
        Changes {
            keys_added: names(
                new_keys
                    .iter()
                    .copied()
                    .filter(|n| !old_keys.contains(n))
                    .collect(),
            ),
            keys_removed: names(
                old_keys
                    .iter()
                    .copied()
                    .filter(|n| !new_keys.contains(n))
                    .collect(),
            ),
            keys_disabled: names(
                kept()
                    .filter(|n| !disabled(old, n) && disabled(new, n))
                    .collect(),
            ),
            keys_enabled: names(
                kept()
                    .filter(|n| disabled(old, n) && !disabled(new, n))
                    .collect(),
            ),
            models_added: names(
                new_models
                    .iter()
                    .copied()
                    .filter(|m| !old_models.contains(m))
                    .collect(),
            ),
            models_removed: names(
                old_models
                    .iter()
                    .copied()
                    .filter(|m| !new_models.contains(m))
                    .collect(),
            ),
        }
    }
}

/// The keys file's fingerprint alone (0 without one).
fn keys_fingerprint(keys_file: Option<&Path>) -> u64 {
    let mut hasher = DefaultHasher::new();
    match keys_file.map(read_file) {
        Some(Ok(text)) => text.hash(&mut hasher),
        Some(Err(e)) => e.kind().hash(&mut hasher),
        None => return 0,
    }
    hasher.finish()
}

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
    if old.tracing != new.tracing {
        changed.push("tracing");
    }
    if old.log_level != new.log_level {
        changed.push("log_level");
    }
    if old.client_header_timeout != new.client_header_timeout {
        changed.push("client_header_timeout");
    }
    if old.client_idle_timeout != new.client_idle_timeout {
        changed.push("client_idle_timeout");
    }
    if old.max_connections != new.max_connections {
        changed.push("max_connections");
    }
    if old.max_header_bytes != new.max_header_bytes {
        changed.push("max_header_bytes");
    }
    if old.http2 != new.http2 {
        changed.push("http2");
    }
    if old.h2c != new.h2c {
        changed.push("h2c");
    }
    if old.max_streams_per_connection != new.max_streams_per_connection {
        changed.push("max_streams_per_connection");
    }
    // Certificates reload; whether a listener speaks TLS at all does not.
    if old.tls.is_some() != new.tls.is_some() {
        changed.push("tls");
    }
    if old.admin_tls.is_some() != new.admin_tls.is_some() {
        changed.push("admin_tls");
    }
    changed
}
