//! The `sluice` command line: `check`, `key`, and the shipped demo configuration served by
//! the real binary.

mod common;
use common::*;
use std::process::Command;

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

fn shipped_config() -> String {
    format!("{}/gateway.yaml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_shipped_configuration_passes_check() {
    let output = sluice(&["check", "--config", &shipped_config()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with(&format!(
            "{}: OK (10 models, 1 upstream, 1 key",
            shipped_config()
        )),
        "the OK line counts what was loaded: {stdout}"
    );
}

#[test]
fn check_lists_every_error_with_its_key_path_and_fails() {
    let dir = temp_dir("check");
    let path = dir.join("bad.yaml");
    std::fs::write(
        &path,
        r#"
listen: 127.0.0.1:8080
upstreams:
  - name: a
    url: ftp://nowhere
  - name: b
    url: http://127.0.0.1:1/v1
    colour: blue
  - name: c
    url: http://127.0.0.1:1/v1
    api_key_env: SLUICE_TEST_SURELY_UNSET_VARIABLE
    first_byte_timeout: soon
models:
  - id: m
    upstream: nobody
    capabilities: [telepathy]
keys:
  - name: k
    sha256: not-a-hash
"#,
    )
    .unwrap();
    let output = sluice(&["check", "--config", path.to_str().unwrap()]);
    assert!(!output.status.success(), "check fails on errors");
    let errors = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "upstreams[0].url",
        "upstreams[1].colour: unknown field `colour`",
        "upstreams[2].api_key_env: environment variable SLUICE_TEST_SURELY_UNSET_VARIABLE is not set",
        "upstreams[2].first_byte_timeout",
        "models[0].upstream: no upstream is named 'nobody'",
        "models[0].capabilities[0]",
        "keys[0].sha256",
    ] {
        assert!(errors.contains(expected), "check names `{expected}`:\n{errors}");
    }
    assert!(errors.contains("bad.yaml"), "errors name the file");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_refuses_fallbacks_in_a_cycle_and_unknown_ones() {
    let dir = temp_dir("check-fallbacks");
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        r#"
upstreams:
  - {name: u, url: "http://127.0.0.1:9/v1", retry_on: [503, 418]}
models:
  - {id: a, upstream: u, fallbacks: [b]}
  - {id: b, upstream: u, fallbacks: [c, ghost]}
  - {id: c, upstream: u, fallbacks: [a]}
"#,
    )
    .unwrap();
    let output = sluice(&["check", "--config", path.to_str().unwrap()]);
    assert!(!output.status.success(), "check fails on a cycle");
    let errors = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "models[0].fallbacks: fallbacks form a cycle: a -> b -> c -> a",
        "models[1].fallbacks[1]: no model has the id 'ghost'",
        "upstreams[0].retry_on[1]: 418 is not a failure to retry on",
    ] {
        assert!(
            errors.contains(expected),
            "check names `{expected}`:\n{errors}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn key_prints_a_key_and_its_matching_hash_line() {
    let output = sluice(&["key", "--name", "team-a"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let key = text
        .lines()
        .find_map(|l| l.strip_prefix("key:"))
        .unwrap()
        .trim();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("config:"))
        .unwrap()
        .trim();
    assert!(
        key.starts_with("sk-sluice-") && key.len() >= 40,
        "a long random key: {key}"
    );
    let parsed: serde_yaml::Value = serde_yaml::from_str(line).expect("the config line is YAML");
    assert_eq!(parsed[0]["name"].as_str(), Some("team-a"));
    assert_eq!(parsed[0]["sha256"].as_str(), Some(key_hash(key).as_str()));
    let again = sluice(&["key"]);
    assert_ne!(
        String::from_utf8(again.stdout).unwrap(),
        text,
        "keys are random"
    );
}

#[test]
fn check_prints_warnings_and_passes_unless_strict() {
    let dir = temp_dir("check-warnings");
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "upstreams:\n  - {{name: u, url: \"http://127.0.0.1:9/v1\"}}\nmodels:\n  - {{id: m, upstream: u}}\nkeys:\n  - {{name: k, sha256: {}, models: [\"gpt-*\"]}}\n",
            key_hash(ALPHA)
        ),
    )
    .unwrap();
    let output = sluice(&["check", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "a warning is not an error: {stderr}"
    );
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("gateway.yaml: keys[0].models[0]: 'gpt-*' matches no model"),
        "check names the pattern and its path: {stderr}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .ends_with(": OK (1 model, 1 upstream, 1 key; 1 warning)\n"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    let strict = sluice(&["check", "--strict", "--config", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(1), "--strict fails on a warning");
    assert!(
        stderr.contains("'gpt-*' matches no model")
            && stderr.contains("1 warning(s), refused by --strict"),
        "--strict still names the warning: {stderr}"
    );
    assert!(strict.stdout.is_empty(), "no OK line under --strict");

    // Without warnings, --strict passes.
    std::fs::write(
        &path,
        format!(
            "upstreams:\n  - {{name: u, url: \"http://127.0.0.1:9/v1\"}}\nmodels:\n  - {{id: m, upstream: u}}\nkeys:\n  - {{name: k, sha256: {}}}\n",
            key_hash(ALPHA)
        ),
    )
    .unwrap();
    let clean = sluice(&["check", "--strict", "--config", path.to_str().unwrap()]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(String::from_utf8_lossy(&clean.stdout).ends_with(": OK (1 model, 1 upstream, 1 key)\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn key_refuses_a_name_the_configuration_would_refuse() {
    let output = sluice(&["key", "--name", "bad name!"]);
    assert!(!output.status.success(), "a bad name fails at once");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("sha256"),
        "no configuration line is printed: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'bad name!'")
            && stderr.contains("must be 1-64 characters of letters, digits, '-', '_' or '.'"),
        "the message names the value and the rule: {stderr}"
    );
    // A name that is valid but reads as YAML null still makes a line `check` accepts.
    let output = sluice(&["key", "--name", "null"]);
    let text = String::from_utf8(output.stdout).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("config:"))
        .unwrap();
    let parsed: serde_yaml::Value = serde_yaml::from_str(line.trim()).unwrap();
    assert_eq!(parsed[0]["name"].as_str(), Some("null"));
}

/// Runs `sluice --config FILE`, which must exit on its own within 30 s.
fn run_to_exit(config: &std::path::Path) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sluice");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice kept running instead of failing to start");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_taken_port_is_reported_with_its_address_and_listener() {
    let dir = temp_dir("taken-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for (listen, admin, setting) in [
        (
            format!("127.0.0.1:{port}"),
            "127.0.0.1:0".to_string(),
            "listen",
        ),
        (
            "127.0.0.1:0".to_string(),
            format!("127.0.0.1:{port}"),
            "admin_listen",
        ),
    ] {
        let path = dir.join(format!("{setting}.yaml"));
        std::fs::write(&path, format!("listen: {listen}\nadmin_listen: {admin}\n")).unwrap();
        let output = run_to_exit(&path);
        assert!(!output.status.success(), "a taken port stops the start");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!(
                "cannot listen on 127.0.0.1:{port} (`{setting}`): "
            )),
            "the error names the address and the setting: {stderr}"
        );
        assert!(stderr.contains("in use"), "and the cause: {stderr}");
    }
    drop(taken);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_port_another_gateway_serves_is_refused_too() {
    // Each event loop has its own SO_REUSEPORT listener; a second gateway binding the same
    // port that way would silently take half the connections. It is refused instead.
    let dir = temp_dir("shared-port");
    let first = dir.join("first.yaml");
    std::fs::write(
        &first,
        "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nthreads: 2\n",
    )
    .unwrap();
    let running = GatewayProcess::start(&first, &[]);
    let port = running.addr.port();
    let workers = std::fs::read_dir(format!("/proc/{}/task", running.pid()))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("sluice-worker-"))
        .count();
    assert_eq!(workers, 2, "`threads: 2` serves clients on two event loops");
    let second = dir.join("second.yaml");
    std::fs::write(
        &second,
        format!("listen: 127.0.0.1:{port}\nadmin_listen: 127.0.0.1:0\nthreads: 2\n"),
    )
    .unwrap();
    let output = run_to_exit(&second);
    assert!(
        !output.status.success(),
        "a second gateway on a served port does not start"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port} (`listen`): "))
            && stderr.contains("in use"),
        "the error names the address, the setting and the cause: {stderr}"
    );
    running.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_demo_serves_a_completion_and_a_stream_through_the_real_binary() {
    let dir = temp_dir("demo");
    let shipped = std::fs::read_to_string(shipped_config()).unwrap();
    let echo_url = "url: http://127.0.0.1:9901/v1";
    assert!(
        shipped.contains("listen: 127.0.0.1:9901") && shipped.contains(echo_url),
        "the demo runs the echo backend on 9901 and proxies to it"
    );
    // Every listener on port 0, the echo backend's too; the `echo` upstream still names
    // 9901 until the gateway has said which port the backend got.
    let yaml = shipped
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9090", "127.0.0.1:0")
        .replace("listen: 127.0.0.1:9901", "listen: 127.0.0.1:0");
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let process = GatewayProcess::start(&path, &[]);
    let echo = process
        .echo
        .expect("the listening line names the echo backend's address");
    // Renamed over the file, so the watcher never reads half of it.
    let pointed = dir.join("gateway.yaml.tmp");
    std::fs::write(
        &pointed,
        yaml.replace(echo_url, &format!("url: http://{echo}/v1")),
    )
    .unwrap();
    std::fs::rename(&pointed, &path).unwrap();
    process.signal("HUP");
    process.log_record("configuration reloaded").await;
    let demo_key = "sk-sluice-demo";
    let body = r#"{"model":"echo","messages":[{"role":"user","content":"hello through sluice"}]}"#;
    let answer = chat(process.addr, demo_key, body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "hello through sluice"
    );
    let mut stream = EventStream::open(
        process.addr,
        demo_key,
        &body.replace("\"model\"", "\"stream\":true,\"model\""),
    )
    .await;
    let events = stream.rest().await;
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "the stream ends with [DONE]: {events:?}"
    );
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(e).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(text, "hello through sluice", "the stream echoes the prompt");
    let models = get(process.addr, "/v1/models", Some(demo_key)).await.json();
    assert_eq!(models["data"][0]["id"], "echo", "the demo lists its model");
    let types: std::collections::BTreeSet<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["endpoint_type"].as_str())
        .collect();
    assert_eq!(
        types.len(),
        sluice::endpoint::EndpointType::ALL.len(),
        "the demo serves a model of each endpoint type: {types:?}"
    );
    // The README's embeddings and responses examples, through the echo backend.
    let auth = format!("Bearer {demo_key}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let post = |path: &'static str, body: &'static str| {
        send(process.addr, "POST", path, &headers, body.as_bytes())
    };
    let embeddings = post(
        "/v1/embeddings",
        r#"{"model":"echo-embeddings","input":["hello","through sluice"]}"#,
    )
    .await;
    assert_eq!(embeddings.status, 200, "{}", embeddings.text());
    assert_eq!(embeddings.json()["data"].as_array().map(Vec::len), Some(2));
    let created = post(
        "/v1/responses",
        r#"{"model":"echo-responses","input":"hello through sluice"}"#,
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_string();
    let path = format!("/v1/responses/{id}");
    let retrieved = get(process.addr, &path, Some(demo_key)).await;
    assert_eq!(retrieved.status, 200, "{}", retrieved.text());
    assert_eq!(
        retrieved.json()["output"][0]["content"][0]["text"],
        "hello through sluice",
        "the stored response is found by the ID the gateway gave"
    );
    // The README's Messages API example, with the key as Anthropic's SDKs send it: passed
    // through to the echo backend's own Messages route, and translated to its chat route.
    let messages_headers = [
        ("x-api-key", demo_key),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];
    for model in ["echo-messages", "echo-claude"] {
        let body = format!(
            r#"{{"model":"{model}","max_tokens":64,"messages":[{{"role":"user","content":"hello through sluice"}}]}}"#
        );
        let answer = send(
            process.addr,
            "POST",
            "/v1/messages",
            &messages_headers,
            body.as_bytes(),
        )
        .await;
        assert_eq!(answer.status, 200, "{model}: {}", answer.text());
        let message = answer.json();
        assert_eq!(message["type"], "message", "{model}: {message}");
        assert_eq!(
            message["content"][0]["text"], "hello through sluice",
            "{model} echoes in Anthropic's shape"
        );
    }
    let (code, stdout, stderr) = process.stop();
    assert_eq!(code, Some(0), "a clean exit: {stderr}");
    assert_eq!(stdout.lines().count(), 8, "eight access log lines");
    let _ = std::fs::remove_dir_all(dir);
}

/// The `config:` line of `sluice key`'s output.
fn entry_line(output: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("config:"))
        .unwrap_or_else(|| panic!("a config line in {text}"))
        .trim()
        .to_string()
}

/// `sluice check` of a configuration whose only key is `entry`.
fn check_with_key(dir: &std::path::Path, entry: &str) -> std::process::Output {
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "upstreams:\n  - {{name: u, url: \"http://127.0.0.1:9/v1\"}}\nmodels:\n  - {{id: m, upstream: u}}\nkeys:\n  {entry}\n"
        ),
    )
    .unwrap();
    sluice(&["check", "--config", path.to_str().unwrap()])
}

#[test]
fn key_with_expiry_and_owner_prints_an_entry_that_check_loads() {
    let dir = temp_dir("check-key-entry");
    let output = sluice(&[
        "key",
        "--name",
        "team-a",
        "--expires-in",
        "30d",
        "--owner",
        "O'Brien's team",
    ]);
    assert!(output.status.success());
    let line = entry_line(&output);
    let parsed: serde_yaml::Value = serde_yaml::from_str(&line).expect("the config line is YAML");
    assert_eq!(parsed[0]["owner"].as_str(), Some("O'Brien's team"));
    let expires_at = parsed[0]["expires_at"].as_str().expect("an expires_at");
    let expires_at = chrono::DateTime::parse_from_rfc3339(expires_at).expect("RFC 3339");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let ahead = expires_at.timestamp() - now;
    assert!(
        (30 * 86_400 - 60..=30 * 86_400).contains(&ahead),
        "30 days from when it ran: {ahead} s ahead in {line}"
    );
    let checked = check_with_key(&dir, &line);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "check loads the entry: {stderr}");
    assert!(
        !stderr.contains("warning"),
        "30 days away is no warning: {stderr}"
    );

    let soon = entry_line(&sluice(&["key", "--name", "soon", "--expires-in", "2d"]));
    let checked = check_with_key(&dir, &soon);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("keys[0].expires_at: the key expires in less than 7 days"),
        "check warns about a key that expires within a week: {stderr}"
    );

    let past = entry_line(&sluice(&[
        "key",
        "--name",
        "old",
        "--expires-at",
        "2020-01-01T00:00:00+02:00",
    ]));
    assert!(past.contains("expires_at: 2019-12-31T22:00:00Z"), "{past}");
    let checked = check_with_key(&dir, &past);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(
        checked.status.success() && stderr.contains("keys[0].expires_at: is in the past"),
        "an expired key is a warning, not an error: {stderr}"
    );

    let backwards = past.replace('}', ", not_before: 2021-01-01T00:00:00Z}");
    let checked = check_with_key(&dir, &backwards);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(
        !checked.status.success()
            && stderr.contains("keys[0].not_before: is not before expires_at"),
        "not_before after expires_at is an error: {stderr}"
    );

    let bad = sluice(&["key", "--expires-at", "next week"]);
    assert!(!bad.status.success(), "a bad date fails at once");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("'next week' is not an RFC 3339"));
    let _ = std::fs::remove_dir_all(dir);
}
