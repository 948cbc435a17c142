//! The `sluice` command: run the gateway, check a configuration, make a key, or run the
//! echo backend on its own. Startup only; the gateway itself lives in the library.

use clap::{Parser, Subcommand};
use rand::RngCore;
use sluice::access_log::AccessLog;
use sluice::catalog::Catalog;
use sluice::clock::{rfc3339, MonotonicClock, SystemWallClock, WallClock};
use sluice::config::{load_files, load_files_with, name_problem, text_problem, Config, HostLookup};
use sluice::gateway::Gateway;
use sluice::reload::{Reloader, Trigger};
use sluice::secret::KeyHash;
use sluice::server::EventLoops;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// mimalloc for the whole process: a request allocates and frees many small buffers across
/// threads, where glibc's malloc spent ~12% of the gateway's CPU (benches/README.md).
#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// mimalloc, called the way the C library means it to be: `mi_malloc` for what any block
/// satisfies, `mi_malloc_aligned` only for the rare stricter alignment. The `mimalloc`
/// crate's allocator calls `mi_malloc_aligned` for everything, whose fast path serves
/// only blocks up to 1 KiB that happen to be aligned and whose generic path costs ~170
/// instructions: ~10 times a request (benches/README.md, eighth session).
struct Mimalloc;

/// Every mimalloc block is aligned to a pointer's size, whatever its size.
const BLOCK_ALIGN: usize = std::mem::size_of::<usize>();

// SAFETY: each method forwards to the mimalloc function with the contract GlobalAlloc
// asks for: blocks of at least the layout's size and alignment (mi_malloc's blocks are
// aligned to BLOCK_ALIGN, stricter alignments go through the _aligned calls), freed or
// resized only by mimalloc, null on failure.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            libmimalloc_sys::mi_malloc(layout.size()).cast()
        } else {
            libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            libmimalloc_sys::mi_zalloc(layout.size()).cast()
        } else {
            libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        libmimalloc_sys::mi_free(ptr.cast());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= BLOCK_ALIGN {
            libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

#[derive(Parser)]
#[command(name = "sluice", version, about = "An LLM API gateway on pingora")]
struct Cli {
    /// The configuration file.
    #[arg(long, short, default_value = "gateway.yaml", global = true)]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration and list every error and warning; exit 1 if there is any
    /// error (or, with --strict, any warning).
    Check {
        /// Do not look up upstream host names (for names that resolve only where the
        /// gateway runs, such as a cluster's Services).
        #[arg(long)]
        no_resolve: bool,
        /// Treat warnings as errors: exit 1 if there is any (for CI).
        #[arg(long)]
        strict: bool,
    },
    /// Print a new random API key and its entry to paste into the configuration.
    Key {
        /// The key's name in the configuration (the rule `check` applies to key names).
        #[arg(long, default_value = "my-key", value_parser = key_name)]
        name: String,
        /// The key stops working this long from now (`30d`, `12h`): sets `expires_at`.
        #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "expires_at")]
        expires_in: Option<Duration>,
        /// The key stops working at this RFC 3339 date and time: sets `expires_at`.
        #[arg(long, value_parser = rfc3339_instant)]
        expires_at: Option<i64>,
        /// Who the key belongs to (free text, shown in logs and the admin view).
        #[arg(long, value_parser = owner_text)]
        owner: Option<String>,
    },
    /// Run only the built-in echo backend (for benchmarks and trials).
    Echo {
        #[arg(long, default_value = "127.0.0.1:9901")]
        listen: std::net::SocketAddr,
        /// Pause between streamed words.
        #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
        word_delay: Duration,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check { no_resolve, strict }) => check(&cli.config, no_resolve, strict),
        Some(Command::Key {
            name,
            expires_in,
            expires_at,
            owner,
        }) => {
            let expires_at = expires_at.or_else(|| {
                // Whole seconds: the line stays readable.
                let now_ms = SystemWallClock.unix_millis();
                expires_in.map(|d| (now_ms + d.as_millis() as i64).div_euclid(1000) * 1000)
            });
            print_key(&name, expires_at, owner.as_deref());
            ExitCode::SUCCESS
        }
        Some(Command::Echo { listen, word_delay }) => echo(listen, word_delay),
        None => run(&cli.config),
    }
}

/// `--name` of `sluice key`, refused here rather than in the line `check` would reject.
fn key_name(name: &str) -> Result<String, String> {
    match name_problem(name) {
        Some(problem) => Err(format!("a key name {problem}")),
        None => Ok(name.to_string()),
    }
}

/// `--expires-at` of `sluice key`, as milliseconds since the Unix epoch.
fn rfc3339_instant(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.timestamp_millis())
        .map_err(|_| {
            format!("'{text}' is not an RFC 3339 date and time (example: 2026-03-01T00:00:00Z)")
        })
}

/// `--owner` of `sluice key`, refused here by the rule `check` applies.
fn owner_text(text: &str) -> Result<String, String> {
    match text_problem(text) {
        Some(problem) => Err(format!("an owner {problem}")),
        None => Ok(text.to_string()),
    }
}

fn check(path: &Path, no_resolve: bool, strict: bool) -> ExitCode {
    let lookup = if no_resolve {
        HostLookup::Skip
    } else {
        HostLookup::Resolve
    };
    match load_files_with(path, lookup) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            let warnings = config.warnings.len();
            if strict && warnings > 0 {
                eprintln!("{warnings} warning(s), refused by --strict");
                return ExitCode::FAILURE;
            }
            println!(
                "{}: OK ({}, {}, {}{})",
                path.display(),
                count(config.models.len(), "model"),
                count(config.upstreams.len(), "upstream"),
                count(config.keys.len(), "key"),
                match warnings {
                    0 => String::new(),
                    n => format!("; {}", count(n, "warning")),
                }
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{} error(s)", errors.0.len());
            ExitCode::FAILURE
        }
    }
}

/// `1 model`, `3 models`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn print_key(name: &str, expires_at_unix_ms: Option<i64>, owner: Option<&str>) {
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let key = format!(
        "sk-sluice-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let hash = KeyHash::of(key.as_bytes()).to_hex();
    println!("key:    {key}");
    // Quoted: a plain name like `null` or `1e3` would be read as something else. In single
    // quotes YAML escapes nothing but the quote itself, doubled.
    let mut entry = format!("name: '{name}', sha256: {hash}");
    if let Some(at) = expires_at_unix_ms {
        entry.push_str(&format!(", expires_at: {}", rfc3339(at)));
    }
    if let Some(owner) = owner {
        entry.push_str(&format!(", owner: '{}'", owner.replace('\'', "''")));
    }
    println!("config: - {{{entry}}}");
    eprintln!(
        "Give the key to its user; only the config line goes into the configuration (under keys:)."
    );
}

fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
}

fn echo(listen: std::net::SocketAddr, word_delay: Duration) -> ExitCode {
    sluice::logger::init(log::LevelFilter::Info);
    let result = runtime(2).and_then(|rt| {
        rt.block_on(async {
            let (_tx, watch) = tokio::sync::watch::channel(false);
            let echo = Arc::new(sluice::echo::Echo::new(word_delay));
            // A test and benchmark backend: streams held for the memory benchmark are idle
            // for an hour, and as many as the process's descriptors allow are wanted.
            let policy = sluice::listener::ClientPolicy {
                idle_timeout: Duration::from_secs(3600),
                max_connections: 1 << 20,
                ..sluice::listener::ClientPolicy::standard()
            };
            let (addr, task) = sluice::listener::listen(listen, echo, policy, watch).await?;
            log::info!(target: "sluice", listen:% = addr; "echo backend listening");
            let _ = task.await;
            Ok(())
        })
    });
    exit_on(result)
}

fn run(path: &Path) -> ExitCode {
    let config = match load_files(path) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    sluice::logger::init(config.log_level);
    sluice::reload::log_warnings(&config);
    let catalog = Catalog::build(&config, 1);
    // The control runtime: signals, reloads, the admin and echo listeners, health checks.
    // Clients are served by `threads` event loops of their own (`listener/workers.rs`).
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = control.and_then(|rt| {
        let served = rt.block_on(serve(path, config, catalog));
        // A reload stuck on a file read (a hung mount, a FIFO) must not keep the process
        // alive: blocking tasks still running are left behind, not waited for.
        rt.shutdown_background();
        served
    });
    exit_on(result)
}

async fn serve(path: &Path, config: Config, catalog: Catalog) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    // Handlers first: "listening" tells the world it may send signals from now on.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let gateway = Gateway::new(
        catalog,
        Arc::new(MonotonicClock::new()),
        AccessLog::stdout(),
    )
    .with_tracing(config.tracing.as_ref())
    .map_err(std::io::Error::other)?;
    let gateway = Arc::new(gateway);
    let loops = EventLoops::PerCore(config.threads);
    let running = sluice::server::start_on(&config, Arc::clone(&gateway), loops).await?;
    // The watcher's first look at the files comes before "listening": a change written
    // once the gateway says it is up is always seen as a change.
    let reloader = Arc::new(Reloader::new(Arc::clone(&gateway), path, config));
    tokio::spawn(Arc::clone(&reloader).watch(running.stopped()));
    log::info!(
        target: "sluice",
        listen:% = running.addr,
        admin_listen:% = running.admin_addr,
        tls = gateway.tls.client.is_some(),
        admin_tls = gateway.tls.admin.is_some(),
        echo_upstream:% = running.echo_addr.map_or("none".to_string(), |a| a.to_string());
        "listening"
    );
    // A reload runs beside the signal loop, never in it: one stuck on a file read must not
    // keep SIGTERM from draining. One SIGHUP reload at a time.
    let mut signal_reload: Option<tokio::task::JoinHandle<bool>> = None;
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = hangup.recv() => {
                if signal_reload.as_ref().is_some_and(|r| !r.is_finished()) {
                    log::warn!(target: "sluice::reload", "SIGHUP ignored: the previous reload is still running");
                    continue;
                }
                let reloader = Arc::clone(&reloader);
                signal_reload = Some(tokio::task::spawn_blocking(move || reloader.reload(Trigger::Signal)));
            }
        }
    }
    let grace = reloader.running().shutdown_grace;
    // Draining first: once the line is out, readiness already says so.
    gateway.start_draining();
    let in_flight = gateway.limiter.gateway_in_flight();
    log::info!(target: "sluice", in_flight, grace_ms = grace.as_millis() as u64; "draining");
    let abandoned = running.shutdown(grace).await;
    gateway.access_log.flush();
    if let Some(telemetry) = &gateway.telemetry {
        telemetry.shutdown();
    }
    log::info!(target: "sluice", abandoned; "stopped");
    Ok(())
}

fn exit_on(result: std::io::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!(target: "sluice", error:% = e; "cannot start");
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}
