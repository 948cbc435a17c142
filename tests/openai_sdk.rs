//! The official `openai` Python SDK as a real client: listing, retrieval, a completion, a
//! stream, and the SDK's own error classes for our 404 and 401.
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
pub async fn echo_backend() -> (String, tokio::sync::watch::Sender<bool>) {
    let (running, watch) = tokio::sync::watch::channel(false);
    let echo = Arc::new(sluice::echo::Echo {
        word_delay: Duration::from_millis(5),
    });
    let (addr, _) = sluice::server::listen("127.0.0.1:0".parse().unwrap(), echo, watch)
        .await
        .unwrap();
    (format!("http://{addr}/v1"), running)
}

fn python() -> String {
    std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into())
}

async fn run_python(base_url: String, key: &'static str) -> std::process::Output {
    let run = move || {
        Command::new(python())
            .arg(format!(
                "{}/tests/python/openai_client.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .env("SLUICE_BASE_URL", base_url)
            .env("SLUICE_KEY", key)
            .output()
            .expect("run the Python client")
    };
    tokio::task::spawn_blocking(run).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_against_the_gateway() {
    let sdk = Command::new(python())
        .args(["-c", "import openai; print(openai.__version__)"])
        .output();
    let sdk = sdk.expect("a Python interpreter");
    assert!(
        sdk.status.success(),
        "the openai SDK is installed (run `bash tests/run`): {}",
        String::from_utf8_lossy(&sdk.stderr)
    );

    let (upstream, _echo_running) = echo_backend().await;
    let yaml = format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: echo, url: "{upstream}"}}
models:
  - {{id: echo-model, upstream: echo, capabilities: [streaming]}}
keys:
  - {{name: sdk, sha256: {hash}}}
"#,
        hash = key_hash(ALPHA)
    );
    let gw = TestGateway::start(&yaml).await;
    let output = run_python(format!("http://{}/v1", gw.addr()), ALPHA).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "SDK checks pass:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
