//! The `sluice` binary as a child process, its output captured in full.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
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
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
                if line.contains("\"message\":\"listening\"") {
                    let _ = ready_tx.send(line.clone());
                }
                let mut buf = err_buf.lock().unwrap();
                buf.extend_from_slice(line.as_bytes());
                buf.push(b'\n');
            }
        });
        let line = match ready_rx.recv_timeout(Duration::from_secs(30)) {
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
        GatewayProcess {
            child,
            addr,
            admin,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// SIGTERM, then wait (bounded) for the exit; returns the exit code and all output.
    pub fn stop(mut self) -> (Option<i32>, String, String) {
        self.signal("TERM");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "sluice did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
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
        let _ = self.child.kill();
    }
}
