//! The `sluice` binary as a child process, its output captured in full.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How long the process gets for anything it announces: a log record, its exit.
const PROCESS_WAIT: Duration = Duration::from_secs(30);

/// A fresh folder under the system temp dir for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct GatewayProcess {
    /// Taken by [`GatewayProcess::stop`], which waits for the exit on a thread of its own.
    child: Option<Child>,
    pid: u32,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// The built-in echo backend's address, when the configuration runs it.
    pub echo: Option<SocketAddr>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Wakes waiters at every line written to stderr (the diagnostic log).
    logged: Arc<Notify>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl GatewayProcess {
    /// Starts `sluice --config FILE` and waits for its `listening` log line.
    pub fn start(config: &Path, env: &[(&str, &str)]) -> GatewayProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start the sluice binary");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel::<String>();
        let mut out_pipe = child.stdout.take().unwrap();
        let out_buf = Arc::clone(&stdout);
        let out_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = out_pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                out_buf.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        let err_pipe = child.stderr.take().unwrap();
        let err_buf = Arc::clone(&stderr);
        let logged = Arc::new(Notify::new());
        let err_logged = Arc::clone(&logged);
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
                if line.contains("\"message\":\"listening\"") {
                    let _ = ready_tx.send(line.clone());
                }
                let mut buf = err_buf.lock().unwrap();
                buf.extend_from_slice(line.as_bytes());
                buf.push(b'\n');
                drop(buf);
                err_logged.notify_waiters();
            }
        });
        let line = match ready_rx.recv_timeout(PROCESS_WAIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "sluice did not report listening; stderr: {}",
                    String::from_utf8_lossy(&stderr.lock().unwrap())
                );
            }
        };
        let record: serde_json::Value = serde_json::from_str(&line).unwrap();
        let addr = record["listen"].as_str().unwrap().parse().unwrap();
        let admin = record["admin_listen"].as_str().unwrap().parse().unwrap();
        let echo = record["echo_upstream"]
            .as_str()
            .filter(|a| *a != "none")
            .map(|a| a.parse().expect("the echo backend's address"));
        let pid = child.id();
        GatewayProcess {
            child: Some(child),
            pid,
            addr,
            admin,
            echo,
            stdout,
            stderr,
            logged,
            readers: vec![out_reader, err_reader],
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// The diagnostic log (stderr) so far, as JSON records; lines that are not JSON are
    /// left out.
    pub fn log_records(&self) -> Vec<serde_json::Value> {
        self.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits for the first diagnostic log record whose `message` is `message` (the process
    /// announces its state changes this way: `configuration reloaded`, `draining`) and
    /// returns it. Panics if none is written within 30 s.
    pub async fn log_record(&self, message: &str) -> serde_json::Value {
        let waited = tokio::time::timeout(PROCESS_WAIT, async {
            loop {
                let logged = self.logged.notified();
                tokio::pin!(logged);
                logged.as_mut().enable();
                if let Some(record) = self
                    .log_records()
                    .into_iter()
                    .find(|r| r["message"] == message)
                {
                    return record;
                }
                logged.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "sluice logs `{message}` within {PROCESS_WAIT:?}; stderr:\n{}",
                self.stderr()
            )
        })
    }

    /// SIGTERM, then wait (bounded) for the exit; returns the exit code and all output.
    pub fn stop(mut self) -> (Option<i32>, String, String) {
        self.signal("TERM");
        // `wait` on a thread of its own: the exit is the event, bounded by `recv_timeout`.
        let mut child = self.child.take().expect("the process is running");
        let (exited_tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = exited_tx.send(child.wait());
        });
        let status = match exited.recv_timeout(PROCESS_WAIT) {
            Ok(status) => status.expect("wait for sluice"),
            Err(_) => {
                // Best effort (the waiting thread reaps it); the panic says what went wrong.
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(self.pid.to_string())
                    .status();
                panic!(
                    "sluice exits within {PROCESS_WAIT:?} of SIGTERM; stderr:\n{}",
                    self.stderr()
                );
            }
        };
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let stdout = String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned();
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        (status.code(), stdout, stderr)
    }

    /// Everything written to stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
