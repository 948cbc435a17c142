//! Real clients over HTTPS against the TLS client listener, with a CA made at run time:
//! curl with `--cacert` (HTTP/1.1, and HTTP/2 by ALPN), the openai Python SDK with the CA
//! in its HTTP client, and httpx with `http2=True` (HTTP/2 by ALPN).
//!
//! The Python interpreter comes from `SLUICE_PYTHON` (set by `tests/run`, which installs the
//! SDK in a virtual environment), else `python3`.

mod common;
use common::*;
use std::process::Command;

#[tokio::test]
async fn curl_speaks_https_to_the_gateway_with_the_test_ca() {
    let dir = temp_dir("tls-listener-curl");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let ca_file = ca.write(&dir, "ca");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    let url = format!("https://localhost:{}/v1/models", gw.addr().port());
    let resolve = format!("localhost:{}:127.0.0.1", gw.addr().port());
    let auth = format!("authorization: Bearer {ALPHA}");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "--http1.1",
                "--resolve",
                &resolve,
                "--cacert",
            ])
            .arg(&ca_file)
            .args(["-H", &auth, &url])
            .output()
            .expect("curl runs")
    })
    .await
    .unwrap();
    let body = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curl verifies the certificate and gets 200: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let models: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn curl_speaks_http2_over_https_by_alpn() {
    let version = Command::new("curl").arg("-V").output();
    if !version.is_ok_and(|v| String::from_utf8_lossy(&v.stdout).contains("HTTP2")) {
        eprintln!("skipped: this curl has no HTTP/2 (`curl -V` lists no HTTP2)");
        return;
    }
    let dir = temp_dir("tls-listener-curl-h2");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let ca_file = ca.write(&dir, "ca");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    let url = format!("https://localhost:{}/v1/models", gw.addr().port());
    let resolve = format!("localhost:{}:127.0.0.1", gw.addr().port());
    let auth = format!("authorization: Bearer {ALPHA}");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "--http2",
                "--resolve",
                &resolve,
                "--cacert",
            ])
            .arg(&ca_file)
            .args(["-w", "\n%{http_version}", "-H", &auth, &url])
            .output()
            .expect("curl runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curl gets 200: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.ends_with("\n2"), "HTTP/2 was chosen by ALPN: {text}");
    assert!(text.contains("chat-model"), "the model list: {text}");
    assert_eq!(gw.log_lines(1).await[0]["http_version"], "2");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_openai_python_sdk_talks_to_the_gateway_over_https() {
    let dir = temp_dir("tls-listener-sdk");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let ca_file = ca.write(&dir, "ca");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import os, ssl, openai
client = openai.OpenAI(
    base_url=os.environ["SLUICE_BASE_URL"],
    api_key=os.environ["SLUICE_KEY"],
    http_client=openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=os.environ["SLUICE_CA"])),
    max_retries=0,
)
answer = client.chat.completions.create(model="chat-model", messages=[{"role": "user", "content": "hi"}])
print(answer.choices[0].message.content)
"#;
    let base_url = format!("https://localhost:{}/v1", gw.addr().port());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["-c", script])
            .env("SLUICE_BASE_URL", base_url)
            .env("SLUICE_KEY", ALPHA)
            .env("SLUICE_CA", ca_file)
            .output()
            .expect("run the Python client")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK verifies the gateway with the test CA (run `bash tests/run` for the SDK): {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), "hello from mock");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn httpx_gets_http2_over_https_by_alpn() {
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let dir = temp_dir("tls-listener-httpx");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca
        .server(&["localhost", "127.0.0.1"], None)
        .write(&dir, "server");
    let ca_file = ca.write(&dir, "ca");
    let mock = MockUpstream::start().await;
    mock.push(Reply::completion());
    mock.push(Reply::stream(3, std::time::Duration::ZERO));
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    let output = tokio::process::Command::new(&python)
        .arg(format!(
            "{}/tests/python/httpx_http2.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(format!("https://localhost:{}", gw.addr().port()))
        .arg(ALPHA)
        .arg(&ca_file)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if let Some(why) = stdout.strip_prefix("SKIP ") {
        eprintln!("skipped: httpx with HTTP/2 is not installed for {python} ({why})");
        return;
    }
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        seen["versions"],
        serde_json::json!(["HTTP/2", "HTTP/2", "HTTP/2"])
    );
    assert_eq!(seen["content"], "hello from mock");
    assert_eq!(
        seen["events"].as_array().unwrap().len(),
        4,
        "3 chunks and [DONE]"
    );
    let _ = std::fs::remove_dir_all(dir);
}
