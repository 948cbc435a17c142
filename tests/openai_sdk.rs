//! The official `openai` SDKs as real clients, through the gateway to the built-in echo
//! backend. Python: listing, retrieval, a chat completion and stream (with its usage chunk
//! when asked, without any usage when not), the SDK's own error
//! classes for our 404 and 401, its retry after our 429, then embeddings, legacy
//! completions, the Responses API (a response found again by the ID the gateway gave it)
//! and audio transcriptions. Node: embeddings, completions and the Responses API.
//!
//! The Python interpreter comes from `SLUICE_PYTHON` (set by `tests/run`, which installs
//! the SDK in a virtual environment), else `python3`; Node from `SLUICE_NODE`, else `node`,
//! with the SDK installed in `tests/node/node_modules` (`npm ci --prefix tests/node`, which
//! `tests/run` does). A missing SDK fails the test: it is part of the suite, not optional.

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
    let (addr, _) = sluice::listener::listen(
        any_port,
        echo,
        sluice::listener::ClientPolicy::standard(),
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
  - {{id: echo-completions, upstream: echo, endpoint_type: completions, capabilities: [streaming]}}
  - {{id: echo-embeddings, upstream: echo, endpoint_type: embeddings}}
  - {{id: echo-responses, upstream: echo, endpoint_type: responses, capabilities: [streaming]}}
  - {{id: echo-transcription, upstream: echo, endpoint_type: audio_transcription, capabilities: [streaming]}}
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
    let checks = &[
        "check_models",
        "check_completion",
        "check_stream",
        "check_model_not_found",
        "check_authentication_error",
        "check_request_id",
        "check_stream_usage",
    ];
    let stdout = run_python(&gw, checks).await;
    assert_ran(&stdout, checks);
}

fn assert_ran(stdout: &str, checks: &[&str]) {
    for check in checks {
        assert!(
            stdout.contains(&format!("ok {check}\n")),
            "{check} ran:\n{stdout}"
        );
    }
}

/// Each access-log line as `METHOD path status model`, with response IDs written `{id}`.
async fn requests_seen(gw: &TestGateway, count: usize) -> Vec<String> {
    gw.log_lines(count)
        .await
        .iter()
        .map(|line| {
            let path = line["path"].as_str().unwrap_or("");
            let path = match path.strip_prefix("/v1/responses/resp_") {
                Some(rest) => match rest.split_once('/') {
                    Some((_, action)) => format!("/v1/responses/{{id}}/{action}"),
                    None => "/v1/responses/{id}".to_string(),
                },
                None => path.to_string(),
            };
            format!(
                "{} {path} {} {}",
                line["method"].as_str().unwrap_or(""),
                line["status"],
                line["model"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_uses_embeddings_completions_and_stored_responses() {
    require_sdk();
    let (upstream, _echo_running) = echo_backend().await;
    let gw = TestGateway::start(&sdk_config(&upstream, "")).await;
    let checks = &[
        "check_embeddings",
        "check_legacy_completion",
        "check_legacy_completion_stream",
        "check_responses",
        "check_responses_stream",
    ];
    let stdout = run_python(&gw, checks).await;
    assert_ran(&stdout, checks);
    // Every call went through the gateway, and each one naming a stored response by the
    // ID the gateway gave reached the model that made it.
    assert_eq!(
        requests_seen(&gw, 13).await,
        [
            "POST /v1/embeddings 200 echo-embeddings",
            "POST /v1/embeddings 200 echo-embeddings",
            "POST /v1/embeddings 200 echo-embeddings",
            "POST /v1/completions 200 echo-completions",
            "POST /v1/completions 200 echo-completions",
            "POST /v1/responses 200 echo-responses",
            "GET /v1/responses/{id} 200 echo-responses",
            "POST /v1/responses 200 echo-responses",
            "GET /v1/responses/{id}/input_items 200 echo-responses",
            "DELETE /v1/responses/{id} 200 echo-responses",
            "GET /v1/responses/{id} 404 echo-responses",
            "POST /v1/responses 200 echo-responses",
            "GET /v1/responses/{id} 200 echo-responses",
        ]
    );
}

/// Needs the gateway to forward `multipart/form-data`: run it alone with
/// `cargo test --test openai_sdk transcri`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_transcribes_audio_through_the_gateway() {
    require_sdk();
    let (upstream, _echo_running) = echo_backend().await;
    let gw = TestGateway::start(&sdk_config(&upstream, "")).await;
    let stdout = run_python(&gw, &["check_transcription"]).await;
    assert_ran(&stdout, &["check_transcription"]);
    assert_eq!(
        requests_seen(&gw, 4).await,
        [
            "POST /v1/audio/transcriptions 200 echo-transcription",
            "POST /v1/audio/transcriptions 200 echo-transcription",
            "POST /v1/audio/translations 200 echo-transcription",
            "POST /v1/audio/transcriptions 200 echo-transcription",
        ]
    );
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

fn node() -> String {
    std::env::var("SLUICE_NODE").unwrap_or_else(|_| "node".into())
}

/// Runs every check of `tests/node/openai_client.mjs` against the gateway.
async fn run_node(gw: &TestGateway) -> String {
    let dir = format!("{}/tests/node", env!("CARGO_MANIFEST_DIR"));
    assert!(
        std::path::Path::new(&dir)
            .join("node_modules/openai")
            .is_dir(),
        "the Node SDK is installed (run `npm ci --prefix tests/node`, or `bash tests/run`)"
    );
    let base_url = format!("http://{}/v1", gw.addr());
    let run = move || {
        Command::new(node())
            .arg(format!("{dir}/openai_client.mjs"))
            .env("SLUICE_BASE_URL", base_url)
            .env("SLUICE_KEY", ALPHA)
            .output()
            .expect("run node (set SLUICE_NODE to its path)")
    };
    let output = tokio::task::spawn_blocking(run).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "Node SDK checks pass:\n{stdout}\n{stderr}"
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_node_sdk_uses_embeddings_completions_stored_responses_and_transcriptions() {
    let (upstream, _echo_running) = echo_backend().await;
    let gw = TestGateway::start(&sdk_config(&upstream, "")).await;
    let stdout = run_node(&gw).await;
    assert_ran(
        &stdout,
        &[
            "checkEmbeddings",
            "checkCompletion",
            "checkCompletionStream",
            "checkResponses",
            "checkResponsesStream",
            "checkTranscription",
        ],
    );
    assert_eq!(
        requests_seen(&gw, 9).await,
        [
            "POST /v1/embeddings 200 echo-embeddings",
            "POST /v1/embeddings 200 echo-embeddings",
            "POST /v1/completions 200 echo-completions",
            "POST /v1/completions 200 echo-completions",
            "POST /v1/responses 200 echo-responses",
            "GET /v1/responses/{id} 200 echo-responses",
            "POST /v1/responses 200 echo-responses",
            "GET /v1/responses/{id} 200 echo-responses",
            "POST /v1/audio/transcriptions 200 echo-transcription",
        ],
        "every call went through the gateway; each retrieve found its model by the ID"
    );
}
