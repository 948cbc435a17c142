//! https upstreams: rustls, SNI set to the URL's host name, certificates verified (against
//! the system roots, or the upstream's own `ca_file`).

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// What the TLS upstream saw: the SNI of each handshake and each request's head.
#[derive(Default)]
struct Seen {
    server_names: Vec<Option<String>>,
    heads: Vec<String>,
}

/// A TLS upstream for `localhost` with a self-signed certificate; returns its port, the
/// certificate as PEM, and what it saw.
async fn tls_upstream() -> (u16, String, Arc<Mutex<Seen>>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = certified.cert.pem();
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, record) = (acceptor.clone(), Arc::clone(&record));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let name = tls.get_ref().1.server_name().map(str::to_string);
                record.lock().unwrap().server_names.push(name);
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Some(end) = find(&buffer, b"\r\n\r\n") else {
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buffer.len() < end + 4 + length {
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buffer.drain(..end + 4 + length);
                    record.lock().unwrap().heads.push(head);
                    let body = r#"{"object":"chat.completion","choices":[]}"#;
                    let answer = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                    if tls.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, cert_pem, seen)
}

fn tls_config(port: u16, ca_file: Option<&std::path::Path>) -> String {
    let base = config(&format!("https://localhost:{port}/v1"));
    match ca_file {
        Some(path) => base.replace(
            "    api_key_env: TEST_UPSTREAM_KEY\n",
            &format!(
                "    api_key_env: TEST_UPSTREAM_KEY\n    ca_file: {}\n",
                path.display()
            ),
        ),
        None => base,
    }
}

#[tokio::test]
async fn an_https_upstream_is_verified_and_gets_the_host_name_as_sni() {
    let (port, cert_pem, seen) = tls_upstream().await;
    let dir = temp_dir("tls");
    let ca_file = dir.join("upstream-ca.pem");
    std::fs::write(&ca_file, cert_pem).unwrap();
    let gw = TestGateway::start(&tls_config(port, Some(&ca_file))).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.server_names,
        [Some("localhost".to_string())],
        "SNI is the URL's host name"
    );
    let head = seen.heads[0].to_ascii_lowercase();
    assert!(
        head.starts_with("post /v1/chat/completions http/1.1"),
        "{head}"
    );
    assert!(head.contains(&format!(
        "authorization: bearer {}",
        UPSTREAM_SECRET.to_ascii_lowercase()
    )));
    assert!(head.contains(&format!("host: localhost:{port}")));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let (port, _, seen) = tls_upstream().await;
    // No ca_file: the self-signed certificate is not in the system roots.
    let gw = TestGateway::start(&tls_config(port, None)).await;
    let response = chat(gw.addr(), ALPHA, &chat_body("chat-model")).await;
    assert_eq!(
        response.error().2,
        "upstream_unavailable",
        "verification is on"
    );
    assert!(
        seen.lock().unwrap().heads.is_empty(),
        "no request is sent over an unverified connection"
    );
}

#[test]
fn a_bad_ca_file_is_a_configuration_error() {
    let dir = temp_dir("tls-bad-ca");
    let bad = dir.join("bad.pem");
    std::fs::write(
        &bad,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let env = |_: &str| Some("x".to_string());
    for (ca, expected) in [
        (bad.clone(), "does not parse"),
        (dir.join("missing.pem"), "cannot read"),
    ] {
        let text = tls_config(1, Some(&ca));
        let errors = sluice::config::parse("t.yaml", &text, None, &env)
            .unwrap_err()
            .to_string();
        assert!(
            errors.contains("upstreams[0].ca_file") && errors.contains(expected),
            "{errors}"
        );
    }
    let plain = config("http://127.0.0.1:1/v1").replace(
        "    api_key_env: TEST_UPSTREAM_KEY\n",
        &format!("    ca_file: {}\n", bad.display()),
    );
    let errors = sluice::config::parse("t.yaml", &plain, None, &env)
        .unwrap_err()
        .to_string();
    assert!(
        errors.contains("only applies to an https:// url"),
        "{errors}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
