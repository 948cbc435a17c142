//! The binary's lifecycle: SIGHUP reloads, SIGTERM drains (readiness turns 503, a stream in
//! flight completes, the process exits as soon as it is done, not after the grace period;
//! what is still running when the grace ends is cut and logged).

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Runs `probe` until `done` holds, yielding between tries, and returns what it gave; panics
/// after 5 s. Only for a state change of the process that follows an event the test has
/// already seen, a scheduling step later, with no event of its own.
async fn soon<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut, done: impl Fn(&T) -> bool) -> T
where
    Fut: std::future::Future<Output = T>,
{
    let tries = async {
        loop {
            let seen = probe().await;
            if done(&seen) {
                return seen;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), tries)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 5 s"))
}

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
    // The reload announces itself once the new catalog is in force.
    let reloaded = process.log_record("configuration reloaded").await;
    assert_eq!(
        reloaded["trigger"], "Signal",
        "the log names the trigger: {reloaded}"
    );
    assert_eq!(
        reloaded["generation"], 2,
        "one reload, the second catalog: {reloaded}"
    );
    assert_eq!(
        chat(process.addr, ALPHA, &chat_body("after-hup"))
            .await
            .status,
        200,
        "the new model is served once the reload is logged"
    );
    let (code, _, stderr) = process.stop();
    assert_eq!(code, Some(0), "a clean exit: {stderr}");
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
    let draining = process.log_record("draining").await;
    assert_eq!(
        draining["in_flight"], 1,
        "the drain starts with the stream in flight: {draining}"
    );
    // `draining` is logged just before the drain begins: `/readyz` turns and the client
    // listener closes a scheduling step after the line, and neither has an event of its
    // own, so each is looked at again (no sleep) until it shows, within a bound.
    let ready = soon(
        "/readyz turns from 200 once draining is logged",
        || get(process.admin, "/readyz", None),
        |readiness| readiness.status != 200,
    )
    .await;
    assert_eq!(
        ready.status,
        503,
        "/readyz turns 503 while draining: {}\nstderr: {}",
        ready.text(),
        process.stderr()
    );
    assert_eq!(
        ready.json()["status"],
        "draining",
        "/readyz says why: {}",
        ready.text()
    );
    soon(
        "the client listener stops accepting once draining is logged",
        || tokio::net::TcpStream::connect(process.addr),
        |connected| connected.is_err(),
    )
    .await
    .expect_err("connections are refused while draining");
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
        stderr.contains("\"abandoned\":0"),
        "nothing was cut: {stderr}"
    );
    assert!(
        stdout.contains("\"status\":200") && stdout.contains("\"stream\":true"),
        "the stream was logged"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_still_running_when_the_grace_ends_are_cut_and_logged() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("sigterm-cut");
    let path = write_config(&dir, &mock.url(), "shutdown_grace: 200ms");
    let process = GatewayProcess::start(&path, &[]);
    // A stream far longer than the grace, and a request its upstream never answers.
    mock.push(Reply::stream(1000, Duration::from_millis(100)));
    let body = r#"{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let mut stream = EventStream::open(process.addr, ALPHA, body).await;
    stream.next_event().await.expect("the stream has started");
    mock.push(Reply::Silent);
    let addr = process.addr;
    let waiting = tokio::spawn(async move { chat(addr, ALPHA, &chat_body("chat-model")).await });
    mock.wait_until("both requests reach the upstream", |m| {
        m.requests().len() == 2
    })
    .await;

    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || process.stop())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("\"abandoned\":2"),
        "both were cut: {stderr}"
    );
    let unanswered = waiting.await.unwrap();
    assert_eq!(
        (unanswered.status, unanswered.error().2.as_str()),
        (503, "overloaded"),
        "a request with no answer yet gets 503, not a closed connection: {}",
        unanswered.text()
    );
    let rest = stream.rest().await;
    assert_ne!(
        rest.last().map(String::as_str),
        Some("[DONE]"),
        "the stream was cut: {rest:?}"
    );

    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let cut: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["cut_by_shutdown"] == true)
        .collect();
    assert_eq!(cut.len(), 2, "one line each, marked: {stdout}");
    assert!(
        cut.iter().any(|l| l["status"] == 200
            && l["stream"] == true
            && l["upstream"] == "mock"
            && l["cut"] == true),
        "the stream's line has the status its client saw: {stdout}"
    );
    assert!(
        cut.iter()
            .any(|l| l["status"] == 503 && l["error_code"] == "overloaded"),
        "the unanswered request's line has the 503 it got: {stdout}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["cut_by_shutdown"].is_null() || l["cut_by_shutdown"] == true),
        "the field is only there when true"
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
    let (code, _, stderr) = process.stop();
    assert_eq!(code, Some(0), "a clean exit: {stderr}");
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
    // The FIFO is not read (it would block the reload): the reload is refused, with why.
    let rejected = process
        .log_record("configuration rejected; still serving the previous one")
        .await;
    assert!(
        rejected.to_string().contains("not a regular file"),
        "the reload is refused with a reason: {rejected}"
    );
    // And the watcher, which checks the same files, does not hang on it either: the
    // gateway still serves and stops at once.
    assert_eq!(
        chat(process.addr, ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    let (code, _, stderr) = process.stop();
    assert_eq!(code, Some(0), "exits after SIGTERM: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostic_lines_name_the_request_they_are_about() {
    // An upstream nobody listens on: the connect failure is logged.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let dir = temp_dir("request-ids");
    let path = write_config(&dir, &url, "log_level: trace\nretry_attempts: 0");
    let process = GatewayProcess::start(&path, &[]);
    let auth = format!("Bearer {ALPHA}");
    let response = send(
        process.addr,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("x-request-id", "trace-me-1"),
        ],
        chat_body("chat-model").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 502);
    let failed = process.log_record("upstream connect failed").await;
    assert_eq!(failed["request_id"], "trace-me-1", "{failed}");
    let finished = process.log_record("request finished").await;
    assert_eq!(
        finished["request_id"], "trace-me-1",
        "one line per request at trace: {finished}"
    );
    assert_eq!(
        finished["status"], 502,
        "numbers are JSON numbers: {finished}"
    );
    let (code, _, _) = process.stop();
    assert_eq!(code, Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

/// Sends a 3 MiB transcription upload (past the 1 MiB kept in memory) and returns its status.
async fn upload_3_mib(addr: std::net::SocketAddr) -> Response {
    let mut body =
        b"--zz\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--zz\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
            .to_vec();
    body.extend((0..3u32 << 20).map(|i| (i % 251) as u8));
    body.extend_from_slice(b"\r\n--zz--\r\n");
    send(
        addr,
        "POST",
        "/v1/audio/transcriptions",
        &[
            ("authorization", &format!("Bearer {ALPHA}")),
            ("content-type", "multipart/form-data; boundary=zz"),
        ],
        &body,
    )
    .await
}

/// The shipped Deployment's read-only root filesystem is why it mounts an emptyDir at /tmp
/// (deploy/check asserts it): an upload past 1 MiB spools to the temporary directory, so
/// that directory must be writable, and with one it arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_uploads_spool_into_a_writable_temporary_directory_only() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("spool-tmpdir");
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nupstreams:\n  - {{name: mock, url: {}}}\n\
             models:\n  - {{id: whisper, upstream: mock, endpoint_type: audio_transcription}}\n\
             keys:\n  - {{name: alpha, sha256: {}}}\n",
            mock.url(),
            key_hash(ALPHA)
        ),
    )
    .unwrap();
    let writable = dir.join("tmp");
    std::fs::create_dir(&writable).unwrap();
    let gw = GatewayProcess::start(&path, &[("TMPDIR", writable.to_str().unwrap())]);
    let answer = upload_3_mib(gw.addr).await;
    assert_eq!(
        answer.status,
        200,
        "spooled in the writable TMPDIR: {}",
        answer.text()
    );
    assert_eq!(
        std::fs::read_dir(&writable).unwrap().count(),
        0,
        "the spool file was unlinked at once"
    );
    gw.stop();

    // What a read-only root without the emptyDir gives: no temporary file, no upload.
    let missing = dir.join("not-there");
    let gw = GatewayProcess::start(&path, &[("TMPDIR", missing.to_str().unwrap())]);
    let refused = upload_3_mib(gw.addr).await;
    assert_eq!(refused.status, 500, "{}", refused.text());
    gw.stop();
    let _ = std::fs::remove_dir_all(dir);
}
