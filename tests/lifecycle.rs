//! The binary's lifecycle: SIGHUP reloads, SIGTERM drains (readiness turns 503, a stream in
//! flight completes, the process exits as soon as it is done, not after the grace period).

mod common;
use common::*;
use std::time::{Duration, Instant};

fn write_config(dir: &std::path::Path, upstream: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("gateway.yaml");
    let text = config_with(upstream, extra).replace("    api_key_env: TEST_UPSTREAM_KEY\n", "");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_configuration() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("sighup");
    // A watcher that never fires: only the signal can explain the reload.
    let path = write_config(&dir, &mock.url(), "watch_interval: 1h");
    let process = GatewayProcess::start(&path, &[]);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(
            "models:\n",
            "models:\n  - id: after-hup\n    upstream: mock\n",
        ),
    )
    .unwrap();
    assert_eq!(
        chat(process.addr, ALPHA, &chat_body("after-hup"))
            .await
            .status,
        404,
        "not before the signal"
    );
    process.signal("HUP");
    let started = Instant::now();
    loop {
        if chat(process.addr, ALPHA, &chat_body("after-hup"))
            .await
            .status
            == 200
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "SIGHUP reloads within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, _, stderr) = process.stop();
    assert_eq!(code, Some(0));
    assert!(stderr.contains("configuration reloaded"), "{stderr}");
    assert!(
        stderr.contains("\"trigger\":\"Signal\""),
        "the log names the trigger: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_stream_in_flight_finish_then_exits_at_once() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("sigterm");
    let path = write_config(&dir, &mock.url(), "shutdown_grace: 30s");
    let process = GatewayProcess::start(&path, &[]);
    assert_eq!(get(process.admin, "/readyz", None).await.status, 200);
    mock.push(Reply::stream(8, Duration::from_millis(150)));
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let mut stream = EventStream::open(process.addr, ALPHA, body).await;
    stream.next_event().await.expect("the stream has started");

    process.signal("TERM");
    let ready = loop {
        // The admin listener stays up during the drain and says so.
        let readiness = get(process.admin, "/readyz", None).await;
        if readiness.status != 200 {
            break readiness;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        ready.status,
        503,
        "/readyz turns 503 while draining: {}\nstderr: {}",
        ready.text(),
        process.stderr()
    );
    assert_eq!(ready.json()["status"], "draining");
    // Readiness turns first; the listener closes a scheduling step later.
    let closing_by = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(process.addr).await.is_ok() {
        assert!(
            Instant::now() < closing_by,
            "the client listener stops accepting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rest = stream.rest().await;
    assert_eq!(rest.len(), 8, "the stream in flight completes: {rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"));
    let finished = Instant::now();
    let (code, stdout, stderr) = process.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        finished.elapsed() < Duration::from_secs(10),
        "exits when nothing is in flight, not after 30 s"
    );
    assert!(
        stderr.contains("\"abandoned\":\"0\""),
        "nothing was cut: {stderr}"
    );
    assert!(
        stdout.contains("\"status\":200") && stdout.contains("\"stream\":true"),
        "the stream was logged"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nothing_in_flight_exits_immediately() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("sigterm-idle");
    let path = write_config(&dir, &mock.url(), "shutdown_grace: 60s");
    let process = GatewayProcess::start(&path, &[]);
    assert_eq!(
        chat(process.addr, ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let started = Instant::now();
    let (code, _, _) = process.stop();
    assert_eq!(code, Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no fixed grace sleep: {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_stuck_on_its_keys_file_does_not_hold_up_shutdown() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("fifo-keys");
    let path = write_config(&dir, &mock.url(), "watch_interval: 1h\nshutdown_grace: 60s");
    // The keys move to a keys file, which is then replaced by a FIFO: a read of it would
    // block, as a hung mount does.
    let text = std::fs::read_to_string(&path).unwrap();
    let (main, keys) = text.split_once("keys:\n").unwrap();
    std::fs::write(&path, format!("keys_file: keys.yaml\n{main}")).unwrap();
    let keys_path = dir.join("keys.yaml");
    std::fs::write(&keys_path, format!("keys:\n{keys}")).unwrap();
    let process = GatewayProcess::start(&path, &[]);
    assert_eq!(
        chat(process.addr, ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    std::fs::remove_file(&keys_path).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&keys_path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    process.signal("HUP");
    let (code, _, stderr) = process.stop();
    assert_eq!(code, Some(0), "exits after SIGTERM: {stderr}");
    assert!(
        stderr.contains("not a regular file"),
        "the reload is refused with a reason: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
