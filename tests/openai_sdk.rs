//! The official `openai` Python SDK as a real client: listing, retrieval, a completion, a
//! stream, the SDK's own error classes for our 404 and 401, and its retry after our 429.
//!
//! The interpreter comes from `SLUICE_PYTHON` (set by `tests/run`, which installs the SDK
//! in a virtual environment), else `python3`. A missing SDK fails the test: it is part of
//! the suite, not optional.

mod common;
use common::*;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Starts the built-in echo backend on an ephemeral port; returns its base URL and the
/// sender that keeps it running.
async fn echo_backend() -> (String, tokio::sync::watch::Sender<bool>) {
    let (running, watch) = tokio::sync::watch::channel(false);
    let echo = Arc::new(sluice::echo::Echo::new(Duration::from_millis(5)));
    let any_port = "127.0.0.1:0".parse().unwrap();
    let (addr, _) = sluice::server::listen(
        any_port,
        echo,
        sluice::connection::ClientPolicy::standard(),
        watch,
    )
    .await
    .unwrap();
    (format!("http://{addr}/v1"), running)
}

fn python() -> String {
    std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn require_sdk() {
    let sdk = Command::new(python())
        .args(["-c", "import openai"])
        .output();
    let sdk = sdk.expect("a Python interpreter");
    let stderr = String::from_utf8_lossy(&sdk.stderr);
    assert!(
        sdk.status.success(),
        "the openai SDK is installed (run `bash tests/run`): {stderr}"
    );
}

/// Runs the named checks of `tests/python/openai_client.py` (all default ones if none).
async fn run_python(gw: &TestGateway, checks: &'static [&'static str]) -> String {
    let base_url = format!("http://{}/v1", gw.addr());
    let run = move || {
        Command::new(python())
            .arg(format!(
                "{}/tests/python/openai_client.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(checks)
            .env("SLUICE_BASE_URL", base_url)
            .env("SLUICE_KEY", ALPHA)
            .output()
            .expect("run the Python client")
    };
    let output = tokio::task::spawn_blocking(run).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK checks pass:\n{stdout}\n{stderr}"
    );
    stdout
}

fn sdk_config(upstream: &str, key_limits: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: echo, url: "{upstream}"}}
models:
  - {{id: echo-model, upstream: echo, capabilities: [streaming]}}
keys:
  - {{name: sdk, sha256: {hash}{key_limits}}}
"#,
        hash = key_hash(ALPHA)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_against_the_gateway() {
    require_sdk();
    let (upstream, _echo_running) = echo_backend().await;
    let gw = TestGateway::start(&sdk_config(&upstream, "")).await;
    let stdout = run_python(&gw, &[]).await;
    for check in [
        "check_models",
        "check_completion",
        "check_stream",
        "check_model_not_found",
        "check_authentication_error",
        "check_request_id",
    ] {
        assert!(
            stdout.contains(&format!("ok {check}")),
            "{check} ran:\n{stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_retries_after_our_429_and_is_admitted() {
    require_sdk();
    let (upstream, _echo_running) = echo_backend().await;
    let yaml = sdk_config(&upstream, ", requests_per_minute: 60, burst: 1");
    let real_clock = Arc::new(sluice::clock::MonotonicClock::new());
    let gw = TestGateway::start_with_clock(&yaml, real_clock).await;
    let stdout = run_python(&gw, &["check_rate_limit_retry"]).await;
    assert!(stdout.contains("ok check_rate_limit_retry"), "{stdout}");
    let lines = gw.log_lines(4).await;
    let statuses: Vec<u64> = lines
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [200, 429, 429, 200],
        "one refusal without retries, one the SDK retried"
    );
}
