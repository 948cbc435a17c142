//! Criterion benches for the request path's own work: key lookup, admission (key lookup +
//! rate + concurrency, and with a token reservation settled) with 10,000 keys on one thread
//! and two, model extraction from bodies of 1 KiB to 1 MiB, reading usage from answers and
//! streams as they pass, rendering `/v1/models` for 500 models, error rendering, and the
//! Messages API's translation (a request, an answer, a 200-chunk stream).
//!
//! Run: `cargo bench --bench hot_path`. Results and the machine: `benches/README.md`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::auth::authenticate;
use sluice::catalog::Catalog;
use sluice::clock::{MonotonicClock, SystemWallClock};
use sluice::endpoint::EndpointType;
use sluice::error::RequestError;
use sluice::limits::{Admission, Limiter};
use sluice::request_body::inspect;
use sluice::respond::error_response;
use sluice::secret::KeyHash;
use sluice::usage::{strip_event, EventUsage, JsonScan};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: usize = 10_000;
const MODELS: usize = 500;

fn key(i: usize) -> String {
    format!("sk-bench-{i:08}-padding-to-a-realistic-length")
}

/// A catalog of 500 models and 10,000 keys, each limited by rate, tokens and concurrency (limits
/// high enough that the bench never hits them: the full check runs, nothing is refused).
fn catalog() -> Catalog {
    let mut yaml =
        String::from("upstreams:\n  - {name: up, url: \"http://127.0.0.1:9/v1\"}\nmodels:\n");
    for m in 0..MODELS {
        yaml.push_str(&format!(
            "  - {{id: model-{m}, upstream: up, capabilities: [streaming]}}\n"
        ));
    }
    yaml.push_str("keys:\n");
    for k in 0..KEYS {
        let hash = KeyHash::of(key(k).as_bytes()).to_hex();
        yaml.push_str(&format!(
            "  - {{name: key-{k}, sha256: {hash}, requests_per_minute: 4000000000, max_concurrent: 64, tokens_per_minute: 100000000, tokens_per_day: 1000000000}}\n"
        ));
    }
    let config = sluice::config::parse("bench.yaml", &yaml, None, &|_| None).expect("bench config");
    Catalog::build(&config, 1)
}

fn headers() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|k| format!("Bearer {}", key(k)).into_bytes())
        .collect()
}

/// One admission as the request path does it: authenticate, then rate and concurrency;
/// the permit is dropped at once (the request ended).
fn admit(catalog: &Catalog, limiter: &Limiter, header: &[u8]) {
    let key = authenticate(catalog, Some(header), &SystemWallClock).expect("known key");
    match limiter.admit(&key) {
        Admission::Allowed { permit, .. } => drop(black_box(permit)),
        Admission::Denied { error, .. } => panic!("bench key refused: {error:?}"),
    }
}

fn admission(c: &mut Criterion) {
    let catalog = Arc::new(catalog());
    let limiter = Arc::new(Limiter::new(Arc::new(MonotonicClock::new())));
    let headers = Arc::new(headers());
    let mut group = c.benchmark_group("admission");
    group.bench_function("key_lookup", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(authenticate(&catalog, Some(&headers[i]), &SystemWallClock).is_ok())
        })
    });
    group.bench_function("one_thread", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % KEYS;
            admit(&catalog, &limiter, &headers[i]);
        })
    });
    // The whole of a request's limits: rate, concurrency, then a token reservation in both
    // windows, settled with a usage below the estimate.
    group.bench_function("one_thread_with_tokens", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % KEYS;
            let key = authenticate(&catalog, Some(&headers[i]), &SystemWallClock).unwrap();
            let Admission::Allowed { permit, .. } = limiter.admit(&key) else {
                panic!("bench key refused")
            };
            let (reservation, _) = limiter.reserve_tokens(&key, 1300).unwrap().unwrap();
            limiter.reconcile(reservation, 250);
            drop(black_box(permit));
        })
    });
    // Two threads admitting at once; the time reported is wall time per admission.
    for (name, same_key) in [
        ("two_threads_distinct_keys", false),
        ("two_threads_one_key", true),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                let workers: Vec<_> = (0..2)
                    .map(|t| {
                        let (catalog, limiter, headers) =
                            (catalog.clone(), limiter.clone(), headers.clone());
                        std::thread::spawn(move || {
                            for n in 0..iters as usize {
                                let i = if same_key { 7 } else { (n * 2 + t) % KEYS };
                                admit(&catalog, &limiter, &headers[i]);
                            }
                        })
                    })
                    .collect();
                for worker in workers {
                    worker.join().unwrap();
                }
                start.elapsed() / 2
            })
        });
    }
    group.finish();
}

fn body_of(size: usize) -> Vec<u8> {
    let filler = "w".repeat(size.saturating_sub(120));
    format!(r#"{{"messages":[{{"role":"user","content":"{filler}"}}],"model":"model-42","stream":true}}"#).into_bytes()
}

fn model_extraction(c: &mut Criterion) {
    let mut group = c.benchmark_group("model_extraction");
    for size in [1 << 10, 64 << 10, 1 << 20] {
        let body = body_of(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &body, |b, body| {
            b.iter(|| black_box(inspect(body, EndpointType::Chat).expect("valid body")))
        });
    }
    group.finish();
}

/// A chat stream as vLLM sends it with usage asked for: `chunks` content chunks, each with
/// `usage: null`, the finish chunk, the usage chunk, `[DONE]`.
fn stream_of(chunks: usize) -> Vec<u8> {
    let mut stream = String::new();
    for i in 0..chunks {
        stream.push_str(&format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}},\"finish_reason\":null}}],\"usage\":null}}\n\n"));
    }
    stream.push_str("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":200,\"total_tokens\":220}}\n\ndata: [DONE]\n\n");
    stream.into_bytes()
}

/// A chat completion answer of a few hundred bytes.
const CHAT_ANSWER: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a reply of a few hundred bytes, as most chat answers are, with \"quotes\" and escapes \n inside it"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}"#;

fn usage_reading(c: &mut Criterion) {
    let mut group = c.benchmark_group("usage");
    let stream = stream_of(200);
    group.throughput(Throughput::Bytes(stream.len() as u64));
    // Read in the chunks the wire gives (one event each here), as the relay does.
    let events: Vec<&[u8]> = stream
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|pair| {
            &stream[pair[0].as_ptr() as usize - stream.as_ptr() as usize..]
                [..pair.iter().map(|l| l.len()).sum()]
        })
        .collect();
    group.bench_function("read_stream_200_chunks", |b| {
        b.iter(|| {
            let mut reading = EventUsage::default();
            for event in &events {
                reading.feed(event);
            }
            black_box(reading.last().expect("usage"))
        })
    });
    group.bench_function("strip_stream_200_chunks", |b| {
        b.iter(|| {
            for event in &events {
                black_box(strip_event(event));
            }
        })
    });
    let answer = CHAT_ANSWER;
    group.throughput(Throughput::Bytes(answer.len() as u64));
    group.bench_function("read_json_answer", |b| {
        b.iter(|| {
            let mut scan = JsonScan::copying();
            scan.feed(black_box(answer));
            black_box(scan.usage().expect("usage"))
        })
    });
    group.finish();
}

/// What translating between the Messages API and chat completions costs beside reading a
/// plain chat stream's usage (which a translated stream pays too).
fn translation(c: &mut Criterion) {
    use sluice::translate::{
        chat_answer_to_messages, messages_to_chat, MessagesEvents, StreamTranslation,
    };
    let mut group = c.benchmark_group("translation");
    let request = br#"{"model":"claude","max_tokens":1024,"system":"You are a helpful assistant.","messages":[{"role":"user","content":"What is the weather like in Paris today, and should I bring an umbrella?"}],"tools":[{"name":"get_weather","description":"The weather in a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],"stream":true}"#;
    group.bench_function("messages_request_to_chat", |b| {
        b.iter(|| black_box(messages_to_chat(black_box(request)).expect("translates")))
    });
    let answer = CHAT_ANSWER;
    group.bench_function("chat_answer_to_messages", |b| {
        b.iter(|| black_box(chat_answer_to_messages(black_box(answer)).expect("translates")))
    });
    let stream = stream_of(200);
    let events: Vec<&[u8]> = stream
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|pair| {
            &stream[pair[0].as_ptr() as usize - stream.as_ptr() as usize..]
                [..pair.iter().map(|l| l.len()).sum()]
        })
        .collect();
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("chat_stream_200_chunks_to_messages", |b| {
        b.iter(|| {
            let mut translation = StreamTranslation::ToMessages(MessagesEvents::new());
            let mut out = 0;
            for event in &events {
                out += translation.event(event).len();
            }
            black_box(out)
        })
    });
    group.finish();
}

fn rendering(c: &mut Criterion) {
    let catalog = catalog();
    let key = authenticate(
        &catalog,
        Some(format!("Bearer {}", key(0)).as_bytes()),
        &SystemWallClock,
    )
    .unwrap();
    c.bench_function("render_models_500", |b| {
        b.iter(|| black_box(catalog.render_list(&key)))
    });
    let error = RequestError::RateLimited {
        retry_after: Duration::from_millis(1500),
    };
    c.bench_function("render_error_429", |b| {
        b.iter(|| black_box(error_response(&error)))
    });
}

criterion_group!(
    benches,
    admission,
    model_extraction,
    usage_reading,
    translation,
    rendering
);
criterion_main!(benches);
