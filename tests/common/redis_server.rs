//! A real `redis-server` of the test's own (Debian's package; `tests/run` installs it):
//! persistence off, on a free loopback port, started and killed by the test.

use super::gateway::{config_with, key_hash};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const START_WAIT: Duration = Duration::from_secs(20);

pub const SHARED: &str = "sk-test-shared-0123456789";

/// The standard catalog plus a `limits_store` and a key `shared` with `limits`.
pub fn shared_config(upstream: &str, store: &str, limits: &str) -> String {
    config_with(upstream, &format!("limits_store:\n{store}")).replace(
        "keys:\n",
        &format!(
            "keys:\n  - name: shared\n    sha256: {}\n{limits}\n",
            key_hash(SHARED)
        ),
    )
}

/// The body of a `limits_store` section for `redis`, with `extra` settings after its URL.
pub fn store(redis: &RedisServer, extra: &str) -> String {
    format!("  url: {}\n{extra}", redis.url())
}

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// For a server that speaks only TLS: its certificate's files.
    tls: Option<TlsFiles>,
    /// More `redis-server` arguments (a cluster node's).
    extra: Vec<String>,
}

/// A server certificate for `localhost` and the CA that signed it, written to a directory.
#[derive(Clone)]
pub struct TlsFiles {
    /// The CA's certificate (PEM): what a client must trust.
    pub ca: std::path::PathBuf,
    certificate: std::path::PathBuf,
    key: std::path::PathBuf,
}

impl TlsFiles {
    /// A fresh CA and a certificate for `localhost` signed by it, in `dir`.
    pub fn generate(dir: &std::path::Path) -> TlsFiles {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_certificate = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            certificate: dir.join("redis.pem"),
            key: dir.join("redis.key"),
        };
        std::fs::write(&files.ca, ca_certificate.pem()).unwrap();
        std::fs::write(&files.certificate, certificate.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}

impl RedisServer {
    /// Starts a server on a port the system gave and released; if another process took
    /// it in between, another port is tried.
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// A server that speaks only TLS (`rediss://`), with the certificate of `tls`.
    pub fn start_tls(tls: TlsFiles) -> RedisServer {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<TlsFiles>) -> RedisServer {
        Self::start_with_args(tls, |_| Vec::new())
    }

    /// `extra(port)`: more arguments for a server on `port`.
    fn start_with_args(tls: Option<TlsFiles>, extra: impl Fn(u16) -> Vec<String>) -> RedisServer {
        for _ in 0..5 {
            let port = free_port();
            let extra = extra(port);
            if let Some(child) = spawn(port, tls.as_ref(), &extra) {
                return RedisServer {
                    port,
                    child: Some(child),
                    tls,
                    extra,
                };
            }
        }
        panic!("redis-server did not start on any of five ports");
    }

    pub fn url(&self) -> String {
        match self.tls {
            // The certificate names `localhost`.
            Some(_) => format!("rediss://localhost:{}/0", self.port),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
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
        self.child = Some(
            spawn(self.port, self.tls.as_ref(), &self.extra)
                .expect("redis-server restarts on its port"),
        );
    }

    /// The leases key `name` still holds once its settlements have landed: they land in
    /// the background after the answer, so this waits up to 5 s for none to be left.
    pub async fn leases_after_settling(&self, name: &str) -> i64 {
        let mut client = self.client().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let held: i64 = redis::cmd("ZCARD")
                .arg(format!("test:sluice:{{{name}}}:leases"))
                .query_async(&mut client)
                .await
                .unwrap();
            if held == 0 || std::time::Instant::now() > deadline {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
fn spawn(port: u16, tls: Option<&TlsFiles>, extra: &[String]) -> Option<Child> {
    let port = port.to_string();
    let listen = match tls {
        None => vec!["--port".into(), port],
        Some(tls) => vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port,
            "--tls-cert-file".into(),
            tls.certificate.display().to_string(),
            "--tls-key-file".into(),
            tls.key.display().to_string(),
            "--tls-ca-cert-file".into(),
            tls.ca.display().to_string(),
            "--tls-auth-clients".into(),
            "no".into(),
        ],
    };
    let mut child = Command::new("redis-server")
        .args(listen)
        .args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        .args(extra)
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A Redis Cluster of three primaries on loopback, the 16,384 slots split between them in
/// three ranges, no replicas, each node a `redis-server` of the test's own.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// The slots each node holds, in node order.
pub const CLUSTER_SLOTS: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

impl RedisCluster {
    /// Starts the nodes, gives each its slots, introduces them to each other, and waits
    /// until every node reports the cluster healthy.
    pub async fn start() -> RedisCluster {
        let dir = super::process::temp_dir("redis-cluster");
        let mut nodes = Vec::new();
        let mut buses = Vec::new();
        for _ in 0..3 {
            let bus = free_port();
            let dir = dir.clone();
            nodes.push(RedisServer::start_with_args(None, move |port| {
                vec![
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-port".into(),
                    bus.to_string(),
                    "--cluster-config-file".into(),
                    dir.join(format!("nodes-{port}.conf")).display().to_string(),
                ]
            }));
            buses.push(bus);
        }
        for (node, (first, last)) in nodes.iter().zip(CLUSTER_SLOTS) {
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query_async(&mut node.client().await)
                .await
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = nodes[0].client().await;
        for (node, bus) in nodes.iter().zip(&buses).skip(1) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .arg(*bus)
                .query_async(&mut first)
                .await
                .expect("CLUSTER MEET");
        }
        let deadline = std::time::Instant::now() + START_WAIT;
        for node in &nodes {
            let mut client = node.client().await;
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut client)
                    .await
                    .unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the cluster did not form: {info}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        RedisCluster { nodes }
    }

    /// The node holding `slot`.
    pub fn node_of(&self, slot: u16) -> &RedisServer {
        let i = CLUSTER_SLOTS
            .iter()
            .position(|&(first, last)| (first..=last).contains(&slot))
            .expect("a slot in 0..16384");
        &self.nodes[i]
    }
}
