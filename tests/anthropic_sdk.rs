//! The official `anthropic` Python SDK as a real client of `/v1/messages` (create, stream
//! with its helpers, tools with parsed input, count_tokens, errors): passed through to the
//! echo backend's own Messages route and to a mock Anthropic upstream, and translated to
//! the echo backend's chat route and to a mock OpenAI-compatible upstream that answers with
//! tool calls and `reasoning_content`; the `openai` SDK through the reverse translation.
//!
//! The interpreter comes from `SLUICE_PYTHON` (a virtual environment with
//! `tests/python/requirements.txt`), else `python3`. A missing SDK fails the test.

mod common;
use common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

async fn echo_backend() -> (String, tokio::sync::watch::Sender<bool>) {
    let (running, watch) = tokio::sync::watch::channel(false);
    let echo = Arc::new(sluice::echo::Echo::new(Duration::from_millis(2)));
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
        .args(["-c", "import anthropic, openai"])
        .output()
        .expect("a Python interpreter");
    assert!(
        sdk.status.success(),
        "the anthropic and openai SDKs are installed (tests/python/requirements.txt): {}",
        String::from_utf8_lossy(&sdk.stderr)
    );
}

/// Runs the named checks of `tests/python/anthropic_client.py`.
async fn run_python(gw: &TestGateway, checks: &'static [&'static str]) {
    let base_url = format!("http://{}/v1", gw.addr());
    let run = move || {
        Command::new(python())
            .arg(format!(
                "{}/tests/python/anthropic_client.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(checks)
            .env("SLUICE_BASE_URL", base_url)
            .env("SLUICE_KEY", ALPHA)
            .output()
            .expect("run the Python client")
    };
    let output = tokio::task::spawn_blocking(run).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK checks pass:\n{stdout}\n{stderr}"
    );
    for check in checks {
        assert!(
            stdout.contains(&format!("ok {check}\n")),
            "{check} ran:\n{stdout}"
        );
    }
}

/// The gateway, its two mock upstreams, and what keeps the echo backend running.
struct Setup {
    gw: TestGateway,
    openai: MockUpstream,
    anthropic: MockUpstream,
    _echo: tokio::sync::watch::Sender<bool>,
}

async fn setup() -> Setup {
    require_sdk();
    let (echo, running) = echo_backend().await;
    let openai = MockUpstream::start().await;
    let anthropic = MockUpstream::start().await;
    let yaml = format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstreams:
  - {{name: echo, url: "{echo}"}}
  - {{name: mock-openai, url: "{openai}", api_key_env: TEST_UPSTREAM_KEY}}
  - {{name: mock-anthropic, url: "{anthropic}", api_key_env: TEST_UPSTREAM_KEY, auth_header: x-api-key, auth_scheme: ''}}
models:
  - {{id: echo-messages, upstream: echo, upstream_api: anthropic, endpoint_type: messages, endpoints: [messages, chat], capabilities: [streaming, tool_calling]}}
  - {{id: echo-claude, upstream: echo, endpoint_type: messages, capabilities: [streaming, tool_calling]}}
  - {{id: mock-openai, upstream: mock-openai, upstream_model: org/served, endpoint_type: messages, capabilities: [streaming, tool_calling]}}
  - {{id: mock-anthropic, upstream: mock-anthropic, upstream_model: claude-real, upstream_api: anthropic, endpoint_type: messages, endpoints: [messages, chat], capabilities: [streaming, tool_calling]}}
keys:
  - {{name: sdk, sha256: {hash}, tokens_per_minute: 1000000}}
"#,
        openai = openai.url(),
        anthropic = anthropic.url(),
        hash = key_hash(ALPHA)
    );
    let gw = TestGateway::start(&yaml).await;
    Setup {
        gw,
        openai,
        anthropic,
        _echo: running,
    }
}

fn body(recorded: &Recorded) -> Value {
    serde_json::from_slice(&recorded.body).expect("a JSON request body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdk_creates_streams_counts_and_reads_errors_through_the_echo_backend() {
    let setup = setup().await;
    let gw = &setup.gw;
    let checks = &[
        "check_create",
        "check_stream",
        "check_count_tokens",
        "check_errors",
    ];
    run_python(gw, checks).await;
    // Usage read from both shapes feeds the key's token accounting.
    let lines = gw.log_lines(8).await;
    let tokens: Vec<(String, Value, Value)> = lines
        .iter()
        .filter(|l| l["status"] == 200 && l["path"] == "/v1/messages")
        .map(|l| {
            let model = l["model"].as_str().unwrap_or("").to_owned();
            (model, l["input_tokens"].clone(), l["output_tokens"].clone())
        })
        .collect();
    assert_eq!(
        tokens,
        [
            ("echo-messages".into(), json!(3), json!(3)),
            ("echo-claude".into(), json!(3), json!(3)),
            ("echo-messages".into(), json!(3), json!(3)),
            ("echo-claude".into(), json!(3), json!(3)),
        ],
        "every answer's usage was read, streamed or not, passed through or translated"
    );
}

/// A chat completion answer with reasoning, text and a tool call.
const TOOL_ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"org/served","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"The user wants the weather.","content":"Let me check.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}"#;

fn tool_stream() -> Reply {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "org/served",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let events = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"reasoning_content": "Check "}), Value::Null),
        chunk(json!({"reasoning_content": "again."}), Value::Null),
        chunk(json!({"content": "Looking it up."}), Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}), Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": " \"Lyon\"}"}}]}), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        json!({"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "org/served", "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}})
        .to_string(),
        "[DONE]".into(),
    ];
    Reply::Sse {
        events: events.into_iter().map(|e| (Duration::ZERO, e)).collect(),
        end: StreamEnd::Done,
        close: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_reasoning_from_an_openai_upstream_reach_the_anthropic_sdk_as_blocks() {
    let setup = setup().await;
    let (gw, openai) = (&setup.gw, &setup.openai);
    openai.push(Reply::json(200, TOOL_ANSWER));
    openai.push(tool_stream());
    run_python(gw, &["check_tools_translated"]).await;
    let sent = openai.requests();
    assert_eq!(sent.len(), 2, "one upstream request per SDK call");
    for request in &sent {
        assert_eq!(
            request.path, "/v1/chat/completions",
            "translated to chat completions"
        );
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {UPSTREAM_SECRET}").as_str()),
            "the upstream's own credential, in its style"
        );
        assert_eq!(
            request.header("x-api-key"),
            None,
            "the client's key stays here"
        );
    }
    let first = body(&sent[0]);
    assert_eq!(first["model"], "org/served", "renamed for the target");
    assert_eq!(first["tool_choice"], "required");
    assert_eq!(first["max_tokens"], 256);
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["required"],
        json!(["city"]),
        "the input schema is the function's parameters"
    );
    let second = body(&sent[1]);
    assert_eq!(second["stream"], true);
    assert_eq!(second["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        second["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}),
        "a tool_result block is a tool message"
    );
    let lines = gw.log_lines(2).await;
    let usage: Vec<(Value, Value)> = lines
        .iter()
        .map(|l| (l["input_tokens"].clone(), l["output_tokens"].clone()))
        .collect();
    assert_eq!(usage, [(json!(20), json!(9)), (json!(30), json!(12))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_upstream_gets_the_sdks_bytes_and_the_openai_sdk_gets_translations() {
    let setup = setup().await;
    let (gw, anthropic) = (&setup.gw, &setup.anthropic);
    anthropic.push(Reply::json(
        200,
        r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-real","content":[{"type":"text","text":"cached hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":2}}"#,
    ).with_header("request-id", "req_upstream"));
    anthropic.push(Reply::json(
        200,
        r#"{"id":"msg_2","type":"message","role":"assistant","model":"claude-real","content":[{"type":"tool_use","id":"toolu_9","name":"get_weather","input":{"city":"Oslo"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"output_tokens":7}}"#,
    ));
    run_python(gw, &["check_passthrough", "check_openai_reverse"]).await;
    let sent = anthropic.requests();
    assert_eq!(sent.len(), 2);
    let passed = &sent[0];
    assert_eq!(passed.path, "/v1/messages");
    assert_eq!(
        passed.header("x-api-key"),
        Some(UPSTREAM_SECRET),
        "Anthropic's credential style"
    );
    assert_eq!(passed.header("authorization"), None);
    assert_eq!(
        passed.header("anthropic-beta"),
        Some("prompt-caching-2024-07-31"),
        "anthropic-beta passes"
    );
    assert!(
        passed.header("anthropic-version").is_some(),
        "anthropic-version passes"
    );
    let text = String::from_utf8_lossy(&passed.body);
    assert!(
        text.contains(r#""cache_control":{"type":"ephemeral"}"#)
            || text.contains(r#""cache_control": {"type": "ephemeral"}"#),
        "cache_control arrives as sent: {text}"
    );
    assert_eq!(body(passed)["model"], "claude-real");
    let reverse = &sent[1];
    assert_eq!(
        reverse.path, "/v1/messages",
        "a chat request to an anthropic model is a Messages request"
    );
    assert_eq!(reverse.header("anthropic-version"), Some("2023-06-01"));
    let translated = body(reverse);
    assert_eq!(
        translated["max_tokens"], 1024,
        "the model's default output limit"
    );
    assert_eq!(translated["tools"][0]["name"], "get_weather");
    assert_eq!(
        translated["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]}])
    );
    let lines = gw.log_lines(4).await;
    let usage: Vec<(Value, Value)> = lines
        .iter()
        .filter(|l| l["model"] == "mock-anthropic")
        .map(|l| (l["input_tokens"].clone(), l["output_tokens"].clone()))
        .collect();
    assert_eq!(
        usage,
        [(json!(105), json!(2)), (json!(15), json!(7))],
        "cache reads and writes count as input"
    );
}
