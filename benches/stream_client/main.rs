//! A load client for many SSE streams at once: the concurrent-streams round of
//! `benches/load/run` (direct, nginx and Sluice measured the same way).
//!
//! It opens `--streams` keep-alive connections before any clock starts, warms each with one
//! whole streamed chat completion (all at once, so a proxy opens its upstream connections
//! then), and then runs `--rounds` measured rounds: every stream waits at a barrier and
//! starts when all are ready. Per stream it takes the time from its request's write to its
//! first SSE event and to its `data: [DONE]`, and the longest pause between two events.
//! One event loop on one thread (tokio's current-thread runtime), so the client takes at
//! most one core from the processes it measures. Prints one JSON object; exits 1 when a
//! stream got another status than 200, broke its framing, or did not end within `--timeout`.
//!
//! Built and run by `benches/load/run`; `cargo bench` runs it without a target, and it only
//! prints its usage then.

mod answer;

use answer::{ChunkedBody, Events, Failure};
use bytes::{Buf, BytesMut};
use clap::Parser;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

#[derive(Parser, Debug)]
#[command(
    name = "stream_client",
    about = "Many SSE streams at once: first-event and last-event times per stream"
)]
struct Options {
    /// Where to send the streams (HTTP/1.1, cleartext). Without it: this usage, exit 0.
    #[arg(long)]
    target: Option<SocketAddr>,
    /// Bearer key sent with every request.
    #[arg(long, default_value = "")]
    key: String,
    /// Model asked for (the harness's gateway maps `bench-stream20` to its 20 ms backend).
    #[arg(long, default_value = "bench-stream20")]
    model: String,
    /// Connections, each with one stream per round.
    #[arg(long, default_value_t = 512)]
    streams: usize,
    /// Words in the prompt: the echo backend streams one content event per word.
    #[arg(long, default_value_t = 64)]
    words: usize,
    /// Measured rounds, after the warm-up round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Longest a stream may take from its write to its answer's end.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// A pause between two events longer than this counts the stream as stalled.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    stall: Duration,
    /// A local port whose established connections are counted before each round (the
    /// backend's: how many upstream connections a proxy holds when the round starts).
    #[arg(long)]
    count_port: Option<u16>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One stream's times, from its request's write.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// When its request's write began.
    started: Instant,
    first_event: Duration,
    last_event: Duration,
    longest_gap: Duration,
}

/// A kept-alive connection and the bytes read past the last answer (none, when the server
/// is right).
struct Connection {
    socket: TcpStream,
    buffer: BytesMut,
}

fn main() -> ExitCode {
    let options = Options::parse();
    let Some(target) = options.target else {
        use clap::CommandFactory;
        println!("{}", Options::command().render_help());
        return ExitCode::SUCCESS;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("stream_client: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(target, options))
}

async fn run(target: SocketAddr, options: Options) -> ExitCode {
    let request = Arc::new(request(&options, target));
    let mut connections = Vec::with_capacity(options.streams);
    // One at a time: a burst of SYNs could overflow a listener's accept queue (nginx's is
    // 511), and this is before the clock.
    for _ in 0..options.streams {
        match TcpStream::connect(target).await {
            Ok(socket) => {
                let _ = socket.set_nodelay(true);
                connections.push(Connection {
                    socket,
                    buffer: BytesMut::with_capacity(16 << 10),
                });
            }
            Err(error) => {
                eprintln!("stream_client: cannot connect to {target}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    // Round 0 is the warm-up: reported apart, left out of the overall figures.
    let mut rounds = Vec::new();
    for _ in 0..=options.rounds {
        let backend_connections = options.count_port.and_then(established_to);
        let cpu_before = thread_cpu();
        let (kept, results) = measure(connections, &request, &options).await;
        connections = kept;
        let cpu = thread_cpu()
            .zip(cpu_before)
            .map(|(after, before)| after - before);
        let mut summary = summarize(&results, options.stall);
        summary["backend_connections_at_start"] = json!(backend_connections);
        summary["client_cpu_ms"] = json!(cpu.map(|ns| round3(ns as f64 / 1e6)));
        summary["write_spread_ms"] = json!(write_spread(&results));
        let failed = summary["failed"] != json!(0);
        rounds.push((results, summary));
        if failed {
            break;
        }
    }
    let measured: Vec<_> = rounds
        .iter()
        .skip(1)
        .flat_map(|(results, _)| results.iter().cloned())
        .collect();
    let mut overall = summarize(&measured, options.stall);
    let mut summaries = rounds.iter().map(|(_, summary)| summary.clone());
    overall["warm_up"] = json!(summaries.next());
    overall["rounds"] = json!(summaries.collect::<Vec<_>>());
    overall["streams"] = json!(options.streams);
    // Failures of every round, the warm-up's too.
    let failures = rounds
        .iter()
        .flat_map(|(results, _)| results)
        .filter(|r| r.is_err());
    overall["failed"] = json!(failures.count());
    println!("{overall}");
    let mut failed = false;
    for (round, (results, _)) in rounds.iter().enumerate() {
        for (stream, result) in results.iter().enumerate() {
            if let Err(failure) = result {
                eprintln!("stream_client: round {round}, stream {stream}: {failure}");
                failed = true;
            }
        }
    }
    if failed || rounds.len() <= options.rounds {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The streamed chat completion every stream sends (keep-alive).
fn request(options: &Options, target: SocketAddr) -> Vec<u8> {
    let prompt: Vec<String> = (0..options.words).map(|i| format!("w{i}")).collect();
    let body = json!({
        "model": options.model, "stream": true,
        "messages": [{"role": "user", "content": prompt.join(" ")}],
    })
    .to_string();
    let mut bytes = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        options.key,
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// One round: every connection's stream starts when all are ready.
async fn measure(
    connections: Vec<Connection>,
    request: &Arc<Vec<u8>>,
    options: &Options,
) -> (Vec<Connection>, Vec<Result<Sample, Failure>>) {
    let barrier = Arc::new(Barrier::new(connections.len()));
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|mut connection| {
            let (barrier, request, timeout) = (barrier.clone(), request.clone(), options.timeout);
            tokio::spawn(async move {
                barrier.wait().await;
                let result = tokio::time::timeout(timeout, stream(&mut connection, &request))
                    .await
                    .unwrap_or(Err(Failure::Timeout));
                (connection, result)
            })
        })
        .collect();
    let mut kept = Vec::with_capacity(tasks.len());
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        match task.await {
            Ok((connection, result)) => {
                kept.push(connection);
                results.push(result);
            }
            Err(_) => results.push(Err(Failure::Io(std::io::ErrorKind::Other))),
        }
    }
    (kept, results)
}

/// One stream on one connection: write the request, read the answer to its end.
async fn stream(connection: &mut Connection, request: &[u8]) -> Result<Sample, Failure> {
    let Connection { socket, buffer } = connection;
    let started = Instant::now();
    socket
        .write_all(request)
        .await
        .map_err(|e| Failure::Io(e.kind()))?;
    let mut head_read = false;
    let mut body = ChunkedBody::new();
    let mut events = Events::default();
    let (mut first, mut last, mut done, mut longest_gap) = (None, None, None, Duration::ZERO);
    loop {
        let read = socket
            .read_buf(buffer)
            .await
            .map_err(|e| Failure::Io(e.kind()))?;
        let now = Instant::now();
        if read == 0 {
            return Err(Failure::Closed);
        }
        if !head_read {
            match answer::read_head(buffer)? {
                Some(length) => {
                    buffer.advance(length);
                    head_read = true;
                }
                None => continue,
            }
        }
        let mut on_event = |is_done: bool| {
            if let Some(previous) = last {
                longest_gap = longest_gap.max(now - previous);
            }
            first.get_or_insert(now);
            last = Some(now);
            if is_done && done.is_none() {
                done = Some(now);
            }
        };
        let used = body.read(buffer, &mut events, &mut on_event)?;
        buffer.advance(used);
        if body.is_done() {
            if !buffer.is_empty() {
                return Err(Failure::Framing("bytes after the answer's end"));
            }
            let (Some(first), Some(done)) = (first, done) else {
                return Err(Failure::NoDone);
            };
            return Ok(Sample {
                started,
                first_event: first - started,
                last_event: done - started,
                longest_gap,
            });
        }
    }
}

/// Quantiles (nearest rank) and counts over a round's streams, in milliseconds.
fn summarize(results: &[Result<Sample, Failure>], stall: Duration) -> Value {
    let samples: Vec<Sample> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    let quantiles = |value: fn(&Sample) -> Duration| {
        let mut values: Vec<Duration> = samples.iter().map(value).collect();
        values.sort();
        let at = |q: f64| {
            let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len().max(1));
            values.get(rank - 1).map(|d| round3(d.as_secs_f64() * 1e3))
        };
        json!({"p50": at(0.5), "p99": at(0.99), "max": at(1.0)})
    };
    json!({
        "completed": samples.len(),
        "failed": results.len() - samples.len(),
        "stalled": samples.iter().filter(|s| s.longest_gap > stall).count(),
        "first_event_ms": quantiles(|s| s.first_event),
        "last_event_ms": quantiles(|s| s.last_event),
        "longest_gap_ms": quantiles(|s| s.longest_gap),
    })
}

/// From the round's first request write to its last, in milliseconds: how long the client
/// took to start every stream. Each stream's times begin at its own write, but an answer
/// that comes while the client is still writing waits to be read.
fn write_spread(results: &[Result<Sample, Failure>]) -> Option<f64> {
    let started = || {
        results
            .iter()
            .filter_map(|r| Some(r.as_ref().ok()?.started))
    };
    let spread = started().max()? - started().min()?;
    Some(round3(spread.as_secs_f64() * 1e3))
}

fn round3(value: f64) -> f64 {
    (value * 1e3).round() / 1e3
}

/// CPU time of this thread (the client's one event loop), in nanoseconds.
fn thread_cpu() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Established TCP connections whose local port is `port` (IPv4 and IPv6): the server
/// side of every connection to it on this host.
fn established_to(port: u16) -> Option<usize> {
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1);
            let state = fields.nth(1);
            let local_port = local
                .and_then(|l| l.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && state == Some("01") {
                count += 1;
            }
        }
    }
    Some(count)
}
