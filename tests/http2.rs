//! HTTP/2 on the client listener, by prior knowledge on cleartext (`h2c: true`): the same
//! routes, answers, limits, errors and log lines as HTTP/1.1, server-sent events that flow
//! as they come, several streams on one connection, a graceful shutdown, real clients
//! (curl, httpx) and the configuration's fields. The connection's protections are in
//! `tests/http2_protections.rs`.

mod common;
use common::h2_client::*;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn a_chat_completion_over_h2c_is_answered_and_logged_as_http2() {
    let (mock, gw) = h2c_gateway("").await;
    mock.push(Reply::completion());
    let mut client = H2Client::connect(gw.addr()).await;
    let answer = client.chat(ALPHA, &chat_body("chat-model")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "hello from mock"
    );
    assert!(
        answer.header("x-request-id").is_some(),
        "every answer has an id"
    );
    assert!(
        answer.header("connection").is_none() && answer.header("transfer-encoding").is_none(),
        "no HTTP/1 connection fields on HTTP/2: {:?}",
        answer.headers
    );
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["http_version"], "2");
    assert_eq!(line["status"], 200);
    assert_eq!(
        line["host"],
        gw.addr().to_string(),
        ":authority is the Host"
    );
    assert_eq!(line["key"], "alpha");

    // The same listener still serves HTTP/1.1.
    mock.push(Reply::completion());
    assert_eq!(
        chat(gw.addr(), ALPHA, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert_eq!(gw.log_lines(2).await[1]["http_version"], "1.1");
    assert_eq!(
        gw.metric(r#"sluice_requests_total{key="alpha",model="chat-model",status="200"}"#),
        2.0,
        "both protocols count in the same series"
    );
}

#[tokio::test]
async fn an_event_reaches_the_client_before_the_upstream_ends_the_stream() {
    let (mock, gw) = h2c_gateway("").await;
    mock.push(first_event_then_stall());
    let mut client = H2Client::connect(gw.addr()).await;
    let auth = format!("Bearer {ALPHA}");
    let request = client.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
    );
    let (head, mut events, _stream) = client.open(request, STREAM_BODY).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(head.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    // The upstream sends nothing after its first event: the event arrives unbuffered or
    // not at all.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("first") {
        let chunk = within("the first event", events.data())
            .await
            .expect("the stream is open")
            .expect("a data frame");
        let _ = events.flow_control().release_capacity(chunk.len());
        seen.extend_from_slice(&chunk);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("data: "));
}

#[tokio::test]
async fn several_streams_on_one_connection_are_served_at_once() {
    let (mock, gw) = h2c_gateway("").await;
    // Each request is held by the upstream until all four have reached it.
    mock.set_default(Reply::Gated);
    let client = H2Client::connect(gw.addr()).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        let mut client = client.handle();
        answers.push(tokio::spawn(async move {
            client.chat(ALPHA, &chat_body("chat-model")).await
        }));
    }
    mock.wait_until("four requests held upstream at once", |m| {
        m.requests().len() == 4
    })
    .await;
    mock.open_gate();
    for answer in answers {
        assert_eq!(within("an answer", answer).await.unwrap().status, 200);
    }
}

#[tokio::test]
async fn error_envelopes_are_those_of_http1() {
    let (mock, gw) = h2c_gateway("").await;
    let mut client = H2Client::connect(gw.addr()).await;
    let cases: [(&str, Option<&str>, u16); 2] = [
        ("/v1/models", None, 401),
        ("/v1/no-such-route", Some(ALPHA), 404),
    ];
    for (path, key, status) in cases {
        let over_h2 = client.get(path, key).await;
        let over_h1 = get(gw.addr(), path, key).await;
        assert_eq!(over_h2.status, status);
        assert_eq!(over_h1.status, status);
        assert_eq!(
            over_h2.json(),
            over_h1.json(),
            "the same envelope on {path}"
        );
        assert_eq!(
            over_h2.header("content-type"),
            over_h1.header("content-type")
        );
        assert!(over_h2.header("x-request-id").is_some());
    }
    mock.set_default(Reply::completion());
    assert_eq!(
        client.chat(SLOW, &chat_body("chat-model")).await.status,
        200
    );
    let over_h2 = client.chat(SLOW, &chat_body("chat-model")).await;
    let over_h1 = chat(gw.addr(), SLOW, &chat_body("chat-model")).await;
    assert_eq!((over_h2.status, over_h1.status), (429, 429));
    let (h2_error, h1_error) = (over_h2.json(), over_h1.json());
    assert_eq!(h2_error["error"]["code"], "rate_limit_exceeded");
    assert_eq!(h2_error["error"]["code"], h1_error["error"]["code"]);
    assert_eq!(h2_error["error"]["type"], h1_error["error"]["type"]);
    assert!(
        over_h2.header("retry-after").is_some(),
        "429 has Retry-After"
    );
    assert!(over_h2.header("x-ratelimit-limit-requests").is_some());
    assert!(over_h2.header("x-request-id").is_some());
}

#[tokio::test]
async fn a_shutdown_sends_goaway_and_lets_open_streams_finish() {
    let (mock, gw) = h2c_gateway("").await;
    mock.set_default(Reply::Gated);
    let mut client = H2Client::connect(gw.addr()).await;
    let mut held = client.handle();
    let answer = tokio::spawn(async move { held.chat(ALPHA, &chat_body("chat-model")).await });
    mock.wait_until("the request to be held upstream", |m| {
        m.requests().len() == 1
    })
    .await;
    let shutdown = gw.running.shutdown(Duration::from_secs(30));
    let after = async {
        // New streams are refused once the GOAWAY is in; the open one goes on.
        within("a new stream to be refused", async {
            while client.send("GET", "/v1/models", &[], "").await.is_ok() {}
        })
        .await;
        mock.open_gate();
        within("the held answer", answer).await.unwrap()
    };
    let (cut, answer) = tokio::join!(shutdown, after);
    assert_eq!(answer.status, 200, "the open stream finished");
    assert_eq!(cut, 0, "nothing was cut");
}

#[tokio::test]
async fn curl_speaks_http2_by_prior_knowledge() {
    let version = std::process::Command::new("curl").arg("-V").output();
    let supported = version
        .as_ref()
        .map(|v| String::from_utf8_lossy(&v.stdout).contains("HTTP2"))
        .unwrap_or(false);
    if !supported {
        eprintln!("skipped: this curl has no HTTP/2 (`curl -V` lists no HTTP2)");
        return;
    }
    let (_mock, gw) = h2c_gateway("").await;
    let output = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_version} %{http_code}",
        ])
        .arg("-H")
        .arg(format!("Authorization: Bearer {ALPHA}"))
        .arg(format!("http://{}/v1/models", gw.addr()))
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.ends_with("\n2 200"), "HTTP/2 and 200: {text}");
    assert!(text.contains("chat-model"), "the model list: {text}");
}

#[tokio::test]
async fn httpx_speaks_http2_by_prior_knowledge() {
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let (mock, gw) = h2c_gateway("").await;
    mock.push(Reply::completion());
    mock.push(Reply::stream(3, Duration::ZERO));
    let output = tokio::process::Command::new(&python)
        .arg(format!(
            "{}/tests/python/httpx_http2.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(format!("http://{}", gw.addr()))
        .arg(ALPHA)
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
    assert!(seen["models"]
        .as_array()
        .unwrap()
        .contains(&"chat-model".into()));
    assert_eq!(seen["content"], "hello from mock");
    let events = seen["events"].as_array().unwrap();
    assert_eq!(events.len(), 4, "3 chunks and [DONE]: {events:?}");
    assert_eq!(events[3], "[DONE]");
}

#[test]
fn the_http2_fields_are_checked_and_defaulted() {
    let parse = |top: &str| {
        sluice::config::parse(
            "g.yaml",
            &config_with("http://127.0.0.1:9/v1", top),
            None,
            &test_env,
        )
    };
    let config = parse("").expect("the defaults load");
    assert!(!config.h2c, "h2c is off unless asked for");
    assert!(config.http2);
    assert_eq!(config.max_streams_per_connection.get(), 100);
    let config = parse("h2c: true\nmax_streams_per_connection: 250").expect("loads");
    assert!(config.h2c);
    assert_eq!(config.max_streams_per_connection.get(), 250);
    for (top, expected) in [
        (
            "max_streams_per_connection: 0",
            "g.yaml: max_streams_per_connection: must be from 1 to 10000",
        ),
        (
            "max_streams_per_connection: 10001",
            "g.yaml: max_streams_per_connection: must be from 1 to 10000",
        ),
        ("h2c: true\nhttp2: false", "g.yaml: h2c: needs `http2`"),
    ] {
        let errors: Vec<String> = match parse(top) {
            Ok(_) => panic!("`{top}` is refused"),
            Err(errors) => errors
                .0
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect(),
        };
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "`{expected}` in {errors:?}"
        );
    }
}

#[tokio::test]
async fn a_body_larger_than_the_flow_control_windows_is_read_whole() {
    let (mock, gw) = h2c_gateway("").await;
    mock.push(Reply::completion());
    // Past the stream's window (256 KiB) and the connection's (1 MiB): the client can send
    // it only if the gateway gives the window back as it reads.
    let prompt = "a".repeat(3 << 20);
    let body =
        format!(r#"{{"model":"chat-model","messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let mut client = H2Client::connect(gw.addr()).await;
    let answer = within("the answer to a 3 MiB body", client.chat(ALPHA, &body)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        mock.requests()[0].body.len(),
        body.len(),
        "the upstream got the whole body"
    );
}

#[tokio::test]
async fn the_per_core_event_loops_serve_http2_streams() {
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    let yaml = h2c_config(&mock.url(), "");
    let workers = std::num::NonZeroUsize::new(2).unwrap();
    let gw = TestGateway::start_on(&yaml, sluice::server::EventLoops::PerCore(workers)).await;
    let mut client = H2Client::connect(gw.addr()).await;
    let answers = futures_join(&client, 3).await;
    assert!(answers.iter().all(|a| *a == 200), "{answers:?}");
    assert_eq!(client.get("/v1/models", Some(ALPHA)).await.status, 200);
    gw.running.shutdown(Duration::from_secs(1)).await;
}

/// `count` chat completions at once on `client`'s connection: their statuses.
async fn futures_join(client: &H2Client, count: usize) -> Vec<u16> {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let mut stream = client.handle();
            tokio::spawn(async move { stream.chat(ALPHA, &chat_body("chat-model")).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(within("an answer", task).await.unwrap());
    }
    statuses
}
