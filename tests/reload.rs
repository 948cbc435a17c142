//! Hot reload: file changes (in place, by rename, by symlink swap) and explicit reloads swap
//! the catalog atomically; invalid files keep the old one; requests never fail across swaps.

mod common;
use common::*;
use sluice::reload::Trigger;
use std::path::Path;
use std::time::{Duration, Instant};

const NEW_KEY: &str = "sk-test-new-key-0123456789";

/// The standard test catalog without the upstream credential (files use the real
/// environment), watched every 50 ms.
fn file_config(upstream: &str) -> String {
    config_with(upstream, "watch_interval: 50ms")
        .replace("    api_key_env: TEST_UPSTREAM_KEY\n", "")
}

/// Writes `text` the way editors do: a new file renamed over the old one.
fn replace_by_rename(path: &Path, text: &str) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Waits until `probe` (a real request, or the gateway's state) holds, for at most `limit`,
/// and returns how long that took. It is tried once, then again at each record the gateway
/// logs: a reload, applied or rejected, logs after it took effect. The clock is the real
/// one: the watcher reads real files every `watch_interval` of tokio time, and the probes
/// are real requests.
async fn within<F, Fut>(limit: Duration, what: &str, probe: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    if tokio::time::timeout(limit, until_logged(probe))
        .await
        .is_err()
    {
        panic!("{what}: not seen within {limit:?}");
    }
    started.elapsed()
}

async fn model_ids(gw: &TestGateway, key: &str) -> Vec<String> {
    let listing = get(gw.addr(), "/v1/models", Some(key)).await.json();
    listing["data"].as_array().map_or(vec![], |l| {
        l.iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    })
}

#[tokio::test]
async fn a_new_model_is_served_within_a_second_of_the_write() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-model");
    let path = dir.join("gateway.yaml");
    let text = file_config(&mock.url());
    std::fs::write(&path, &text).unwrap();
    let gw = TestGateway::start_file(&path).await;
    assert!(!model_ids(&gw, ALPHA)
        .await
        .contains(&"fresh-model".to_string()));

    let added = text.replace(
        "models:\n",
        "models:\n  - id: fresh-model\n    upstream: mock\n",
    );
    replace_by_rename(&path, &added);
    let took = within(Duration::from_secs(1), "the new model", || async {
        chat(gw.addr(), ALPHA, &chat_body("fresh-model"))
            .await
            .status
            == 200
    })
    .await;
    assert!(
        took < Duration::from_secs(1),
        "served within a second of the write, took {took:?}"
    );
    assert_eq!(gw.gateway().catalog().generation, 2);
    assert_eq!(
        gw.metric(r#"sluice_config_reloads_total{result="success"}"#),
        1.0
    );
    assert_eq!(gw.metric("sluice_config_generation"), 2.0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_key_revoked_in_a_symlinked_keys_file_is_refused_within_a_second() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-keys");
    // Kubernetes mounts a Secret as keys.yaml -> ..data/keys.yaml, ..data -> a timestamped folder.
    let write_generation = |name: &str, keys: &[(&str, &str)]| {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let list: String = keys
            .iter()
            .map(|(n, k)| format!("  - {{name: {n}, sha256: {}}}\n", key_hash(k)))
            .collect();
        std::fs::write(folder.join("keys.yaml"), format!("keys:\n{list}")).unwrap();
        let link = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(name, &link).unwrap();
        std::fs::rename(&link, dir.join("..data")).unwrap();
    };
    write_generation("gen-1", &[("alpha", ALPHA), ("fresh", NEW_KEY)]);
    std::os::unix::fs::symlink("..data/keys.yaml", dir.join("keys.yaml")).unwrap();
    let main = file_config(&mock.url());
    let main = format!(
        "keys_file: keys.yaml\n{}",
        &main[..main.find("keys:\n").unwrap()]
    );
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, main).unwrap();
    let gw = TestGateway::start_file(&path).await;
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(NEW_KEY)).await.status,
        200
    );

    write_generation("gen-2", &[("alpha", ALPHA)]);
    within(Duration::from_secs(1), "the revocation", || async {
        get(gw.addr(), "/v1/models", Some(NEW_KEY)).await.status == 401
    })
    .await;
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(ALPHA)).await.status,
        200,
        "the remaining key still works"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_invalid_file_keeps_the_old_catalog_and_counts_the_failure() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-invalid");
    let path = dir.join("gateway.yaml");
    let text = file_config(&mock.url());
    std::fs::write(&path, &text).unwrap();
    let gw = TestGateway::start_file(&path).await;
    std::fs::write(
        &path,
        text.replace(
            "models:\n",
            "models:\n  - id: broken\n    upstream: nowhere\n",
        ),
    )
    .unwrap();
    within(Duration::from_secs(2), "the failed reload", || async {
        gw.metric(r#"sluice_config_reloads_total{result="failure"}"#) == 1.0
    })
    .await;
    assert_eq!(
        gw.gateway().catalog().generation,
        1,
        "the old snapshot stays"
    );
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200,
        "and keeps serving"
    );
    assert_eq!(
        gw.metric(r#"sluice_config_reloads_total{result="failure"}"#),
        1.0,
        "one change, one attempt"
    );
    std::fs::write(&path, &text).unwrap();
    within(Duration::from_secs(2), "the fixed file", || async {
        gw.metric(r#"sluice_config_reloads_total{result="success"}"#) == 1.0
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_reload_logs_the_warnings_of_the_new_configuration() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-warnings");
    let path = dir.join("gateway.yaml");
    let text = file_config(&mock.url());
    std::fs::write(&path, &text).unwrap();
    let process = GatewayProcess::start(&path, &[]);
    assert!(
        !process.stderr().contains("configuration warning"),
        "the standard catalog has nothing to warn about"
    );
    let key = format!(
        "keys:\n  - name: typo\n    sha256: {}\n    models: [\"pubic-*\"]\n",
        key_hash(NEW_KEY)
    );
    replace_by_rename(&path, &text.replace("keys:\n", &key));
    // The process's own stderr is watched: its lines are not this test process's logs.
    process.log_record("configuration warning").await;
    let (_, _, stderr) = process.stop();
    let warning = stderr
        .lines()
        .find(|l| l.contains("configuration warning"))
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(warning).unwrap();
    assert_eq!(record["level"], "warn");
    assert!(
        record["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("gateway.yaml: keys[0].models[0]")),
        "the warning names the pattern's path: {warning}"
    );
    assert!(
        record["problem"]
            .as_str()
            .is_some_and(|p| p.contains("'pubic-*' matches no model")),
        "{warning}"
    );
    assert!(
        stderr.contains("configuration reloaded"),
        "a warning does not stop the reload: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_reloads_under_load_fail_no_request() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-load");
    let path = dir.join("gateway.yaml");
    let text = file_config(&mock.url()).replace("watch_interval: 50ms", "watch_interval: 1h");
    std::fs::write(&path, &text).unwrap();
    let gw = TestGateway::start_file(&path).await;
    let reloader = gw.reloader.clone().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..4 {
        let (addr, stopped, answered) = (gw.addr(), stopped.clone(), answered.clone());
        tokio::spawn(async move {
            while !*stopped.borrow() {
                let _ = answered.send(chat(addr, ALPHA, &chat_body("chat-model")).await.status);
            }
        });
    }
    drop(answered);
    let mut statuses = Vec::new();
    for round in 0..50 {
        // Alternate between two valid catalogs that differ in a model and the environment.
        let next = if round % 2 == 0 {
            text.replace("environment: test", &format!("environment: round-{round}"))
                .replace("models:\n", "models:\n  - id: extra\n    upstream: mock\n")
        } else {
            text.clone()
        };
        std::fs::write(&path, next).unwrap();
        let reloader = reloader.clone();
        let reloaded = tokio::task::spawn_blocking(move || reloader.reload(Trigger::Signal))
            .await
            .unwrap();
        assert!(reloaded, "round {round} reloads");
        // Let requests run against each new snapshot before the next swap.
        for _ in 0..4 {
            statuses.push(answers.recv().await.unwrap());
        }
    }
    stop.send(true).unwrap();
    while let Some(status) = answers.recv().await {
        statuses.push(status);
    }
    assert!(
        statuses.len() >= 200,
        "the clients kept sending during the reloads"
    );
    assert!(
        statuses.iter().all(|s| *s == 200),
        "every request succeeded: {statuses:?}"
    );
    assert_eq!(gw.gateway().catalog().generation, 51);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_revocation_in_the_keys_file_applies_while_gateway_yaml_has_an_error() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("reload-keys-alone");
    let keys = |list: &[(&str, &str, bool)]| {
        let lines: String = list
            .iter()
            .map(|(n, k, off)| {
                format!(
                    "  - {{name: {n}, sha256: {}, disabled: {off}}}\n",
                    key_hash(k)
                )
            })
            .collect();
        format!("keys:\n{lines}")
    };
    std::fs::write(
        dir.join("keys.yaml"),
        keys(&[("alpha", ALPHA, false), ("fresh", NEW_KEY, false)]),
    )
    .unwrap();
    let main = file_config(&mock.url());
    let main = format!(
        "keys_file: keys.yaml\n{}",
        &main[..main.find("keys:\n").unwrap()]
    );
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, &main).unwrap();
    let gw = TestGateway::start_file(&path).await;
    let reloader = gw.reloader.clone().expect("started from a file");
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(NEW_KEY)).await.status,
        200
    );

    // Someone's unrelated edit breaks gateway.yaml; then security revokes `fresh`.
    replace_by_rename(
        &path,
        &main.replace(
            "models:\n",
            "models:\n  - id: broken\n    upstream: nowhere\n",
        ),
    );
    replace_by_rename(
        &dir.join("keys.yaml"),
        &keys(&[("alpha", ALPHA, false), ("fresh", NEW_KEY, true)]),
    );
    let applied = tokio::task::spawn_blocking(move || reloader.reload(Trigger::Signal))
        .await
        .unwrap();
    assert!(!applied, "gateway.yaml's change is still rejected");
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(NEW_KEY)).await.status,
        401,
        "the revocation applied on its own"
    );
    assert_eq!(get(gw.addr(), "/v1/models", Some(ALPHA)).await.status, 200);
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("broken")).await.status,
        404,
        "nothing of the broken file is served"
    );
    assert_eq!(gw.gateway().catalog().generation, 2);
    assert_eq!(
        gw.metric(r#"sluice_config_reloads_total{result="failure"}"#),
        1.0
    );

    // Fixing gateway.yaml later loads both files, the revocation kept.
    replace_by_rename(
        &path,
        &main.replace("models:\n", "models:\n  - id: fixed\n    upstream: mock\n"),
    );
    within(
        Duration::from_secs(2),
        "the fixed configuration",
        || async { chat(gw.addr(), ALPHA, &chat_body("fixed")).await.status == 200 },
    )
    .await;
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(NEW_KEY)).await.status,
        401
    );
    let _ = std::fs::remove_dir_all(dir);
}
