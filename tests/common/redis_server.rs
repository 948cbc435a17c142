//! A real `redis-server` of the test's own (Debian's package; `tests/run` installs it):
//! persistence off, on a free loopback port, started and killed by the test.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const START_WAIT: Duration = Duration::from_secs(20);

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a port the system gave and released; if another process took
    /// it in between, another port is tried.
    pub fn start() -> RedisServer {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if let Some(child) = spawn(port) {
                return RedisServer {
                    port,
                    child: Some(child),
                };
            }
        }
        panic!("redis-server did not start on any of five ports");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server at once (no save, no clean shutdown), like a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn(self.port).expect("redis-server restarts on its port"));
    }

    /// A plain client connection, to look at or disturb the server.
    pub async fn client(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `redis-server` on `port` and waits for its "Ready to accept connections" line;
/// `None` if it exits first (the port was taken).
fn spawn(port: u16) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server is installed (tests/run installs it)");
    let stdout = child.stdout.take().unwrap();
    let (ready, wait) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("Ready to accept connections") {
                let _ = ready.send(true);
            }
        }
        let _ = ready.send(false);
    });
    match wait.recv_timeout(START_WAIT) {
        Ok(true) => Some(child),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}
