//! TLS on the client and admin listeners (`tls:`, `admin_tls:`), with a CA made at run time:
//! requests through the real proxy path, SNI (also with openssl s_client), `min_version`,
//! ALPN, mTLS with the subject in the access log, the handshake bounded by
//! `client_header_timeout`, kept off the accept loop and counted in `max_connections`, and
//! the expiry gauge. Reloads are in `tls_reload.rs`, curl and the openai SDK in
//! `tls_clients.rs`.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio_rustls::rustls;

fn failures(gw: &TestGateway, reason: &str) -> f64 {
    gw.metric(&format!(
        "sluice_tls_handshake_failures_total{{reason=\"{reason}\"}}"
    ))
}

#[tokio::test]
async fn a_chat_completion_over_tls_goes_through_the_proxy_to_the_upstream() {
    let dir = temp_dir("tls-listener-basic");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;

    let mut conn = ClientSetup::new(&ca, "localhost").open(gw.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    let response = conn.read_response().await.expect("an answer over TLS");
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.json()["choices"][0]["message"]["content"],
        "hello from mock"
    );
    assert!(response.header("x-request-id").is_some());
    assert_eq!(mock.requests().len(), 1, "the request reached the upstream");
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["tls_version"], "TLSv1.3", "{line}");
    assert!(
        line.get("tls_client_subject").is_none(),
        "no client certificate, no subject: {line}"
    );

    // A cleartext request on the TLS port is not served.
    let mut plain = Conn::open(gw.addr()).await;
    plain.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert!(
        plain.read_response().await.is_none(),
        "no HTTP over cleartext"
    );
    gw.until("the refused handshake is counted", |_| {
        failures(&gw, "malformed") == 1.0
    })
    .await;
    assert_eq!(mock.requests().len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn sni_chooses_the_certificate_that_names_the_host_and_the_first_is_the_default() {
    let dir = temp_dir("tls-listener-sni");
    let ca = TestCa::new("test CA");
    let (first_cert, first_key) = ca.server(&["default.test"], None).write(&dir, "first");
    let (second_cert, second_key) = ca
        .server(&["api.test", "*.wild.test"], None)
        .write(&dir, "second");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(
        &mock,
        &[(&first_cert, &first_key), (&second_cert, &second_key)],
        "",
        "",
    )
    .await;

    for (sni, expected) in [
        ("api.test", "api.test"),
        ("team.wild.test", "api.test"),
        ("default.test", "default.test"),
    ] {
        let stream = ClientSetup::new(&ca, sni)
            .connect(gw.addr())
            .await
            .unwrap_or_else(|e| panic!("handshake for {sni}: {e}"));
        assert_eq!(
            served_names(&stream)[0],
            expected,
            "SNI {sni} gets the certificate listing it"
        );
    }
    // A name no certificate lists gets the first one, which the client then refuses.
    let unknown = ClientSetup::new(&ca, "other.test").connect(gw.addr()).await;
    assert!(
        unknown.is_err(),
        "the default certificate does not name other.test"
    );

    // The same with openssl's own client, when it is installed.
    if Command::new("openssl").arg("version").output().is_err() {
        println!("skipped the openssl s_client part: openssl is not installed");
        return;
    }
    let ca_file = ca.write(&dir, "ca");
    for (sni, subject) in [("api.test", "api.test"), ("x.wild.test", "api.test")] {
        // On a thread of its own: the gateway runs on this test's runtime.
        let (addr, ca_file) = (gw.addr().to_string(), ca_file.clone());
        let output = tokio::task::spawn_blocking(move || {
            Command::new("openssl")
                .args(["s_client", "-connect", &addr, "-servername", sni, "-CAfile"])
                .arg(&ca_file)
                .args(["-brief", "-no_ign_eof"])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&output.stderr).to_string()
            + &String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains(&format!("CN = {subject}")) || text.contains(&format!("CN={subject}")),
            "openssl -servername {sni} sees {subject}'s certificate:\n{text}"
        );
        assert!(
            text.contains("Verification: OK"),
            "and verifies it against the CA:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn min_version_1_3_refuses_a_client_that_speaks_only_tls_1_2() {
    let dir = temp_dir("tls-listener-version");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "  min_version: \"1.3\"\n", "").await;

    let old = ClientSetup {
        versions: &[&rustls::version::TLS12],
        ..ClientSetup::new(&ca, "localhost")
    };
    assert!(
        old.connect(gw.addr()).await.is_err(),
        "a TLS 1.2-only client gets no handshake"
    );
    gw.until("the refusal is counted as incompatible", |_| {
        failures(&gw, "incompatible") == 1.0
    })
    .await;
    let modern = ClientSetup {
        versions: &[&rustls::version::TLS13],
        ..ClientSetup::new(&ca, "localhost")
    };
    let mut conn = modern.open(gw.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);

    // The default, 1.2, takes a TLS 1.2 client, and the access log says so.
    let gw12 = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    let mut conn = old.open(gw12.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);
    assert_eq!(gw12.log_lines(1).await[0]["tls_version"], "TLSv1.2");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_client_that_never_sends_a_client_hello_is_closed_at_the_header_timeout() {
    let dir = temp_dir("tls-listener-silent");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "client_header_timeout: 300ms").await;
    let mut silent = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    // While it says nothing, others are accepted and served: the handshake waits on the
    // connection's own task, not in the accept loop.
    let mut conn = ClientSetup::new(&ca, "localhost").open(gw.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);
    // The default header timeout is 10 s: closing within 5 s is the configured 300 ms.
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a connection without a ClientHello is closed at client_header_timeout: {closed:?}"
    );
    gw.until("the timeout is counted", |_| {
        failures(&gw, "timeout") == 1.0
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_expiry_gauge_is_the_certificates_not_after() {
    let dir = temp_dir("tls-listener-expiry");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca
        .server(&["gw.example.test"], Some((2031, 5, 17)))
        .write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "").await;
    assert_eq!(
        gw.metric("sluice_tls_certificate_expiry_timestamp_seconds{name=\"gw.example.test\"}"),
        1_936_742_400.0,
        "2031-05-17T00:00:00Z, the certificate's notAfter"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn client_certificates_from_the_client_ca_are_required_and_their_subject_is_logged() {
    let dir = temp_dir("tls-listener-mtls");
    let ca = TestCa::new("server CA");
    let clients = TestCa::new("client CA");
    let strangers = TestCa::new("another CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let client_ca = clients.write(&dir, "clients");
    let mock = MockUpstream::start().await;
    let more = format!("  client_ca_file: {}\n", client_ca.display());
    let gw = tls_gateway(&mock, &[(&cert, &key)], &more, "").await;

    // No certificate: the handshake fails (TLS 1.3 says so at the client's first read).
    let anonymous = ClientSetup::new(&ca, "localhost").connect(gw.addr()).await;
    if let Ok(stream) = anonymous {
        let mut conn = Conn::over(stream);
        conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
        assert!(
            conn.read_response().await.is_none(),
            "no answer without a certificate"
        );
    }
    gw.until("counted as no_client_certificate", |_| {
        failures(&gw, "no_client_certificate") == 1.0
    })
    .await;

    // A certificate from another CA: refused the same way.
    let stranger = strangers.client("acme", "team-a");
    let refused = ClientSetup {
        identity: Some(&stranger),
        ..ClientSetup::new(&ca, "localhost")
    };
    if let Ok(stream) = refused.connect(gw.addr()).await {
        let mut conn = Conn::over(stream);
        let _ = conn
            .try_write(&chat_request_bytes(ALPHA, "chat-model"))
            .await;
        assert!(
            conn.read_response().await.is_none(),
            "no answer for another CA's client"
        );
    }
    gw.until("counted as bad_client_certificate", |_| {
        failures(&gw, "bad_client_certificate") == 1.0
    })
    .await;
    assert!(mock.requests().is_empty(), "nothing reached the upstream");

    // A certificate from the client CA: served, and its subject logged.
    let team = clients.client("acme", "team-a");
    let accepted = ClientSetup {
        identity: Some(&team),
        ..ClientSetup::new(&ca, "localhost")
    };
    let mut conn = accepted.open(gw.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(conn.read_response().await.unwrap().status, 200);
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["tls_client_subject"], "CN=team-a,O=acme", "{line}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_admin_listener_serves_metrics_over_tls() {
    let dir = temp_dir("tls-listener-admin");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["admin.test"], None).write(&dir, "admin");
    let mock = MockUpstream::start().await;
    let admin_tls = tls_section("admin_tls", &[(&cert, &key)], "");
    let gw = TestGateway::start(&config_with(&mock.url(), &admin_tls)).await;
    let mut conn = ClientSetup::new(&ca, "admin.test").open(gw.admin()).await;
    conn.write(&request_bytes("GET", "/metrics", &[], b""))
        .await;
    let response = conn.read_response().await.unwrap();
    assert_eq!(response.status, 200);
    assert!(response
        .text()
        .contains("sluice_tls_certificate_expiry_timestamp_seconds{name=\"admin.test\"}"));
    // The client listener stays cleartext.
    assert_eq!(get(gw.addr(), "/v1/models", Some(ALPHA)).await.status, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_connection_in_its_handshake_counts_in_max_connections() {
    let dir = temp_dir("tls-listener-bound");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "max_connections: 1").await;
    // Holds the one place without ever saying hello.
    let silent = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let client = ClientSetup::new(&ca, "localhost");
    let next = async {
        let mut conn = client.open(gw.addr()).await;
        conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
        conn.read_response().await.map(|r| r.status)
    };
    let mut waiting = gw.running.connections_waiting();
    let release = async {
        waiting.wait_for(|n| *n == 1).await.unwrap();
        // The next connection waits for a place: free it.
        drop(silent);
    };
    let served = tokio::time::timeout(READ_LIMIT, async { tokio::join!(next, release).0 }).await;
    assert_eq!(
        served.ok().flatten(),
        Some(200),
        "the next connection waits while the silent one holds the place, then is served"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn alpn_chooses_h2_when_offered_and_http_1_1_otherwise() {
    let dir = temp_dir("tls-listener-alpn");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "server");
    let mock = MockUpstream::start().await;
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "http2: true").await;
    let both = ClientSetup {
        alpn: &[b"h2", b"http/1.1"],
        ..ClientSetup::new(&ca, "localhost")
    };
    let stream = both.connect(gw.addr()).await.unwrap();
    assert_eq!(
        stream.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "h2 is chosen when the client offers it"
    );
    // HTTP/2 over that connection.
    let (send, connection) = h2::client::handshake(stream)
        .await
        .expect("HTTP/2 over TLS");
    tokio::spawn(connection);
    let request = http::Request::get("https://localhost/v1/models")
        .header("authorization", format!("Bearer {ALPHA}"))
        .body(())
        .unwrap();
    let (answer, _) = send
        .ready()
        .await
        .unwrap()
        .send_request(request, true)
        .unwrap();
    assert_eq!(answer.await.unwrap().status(), 200);
    let line = &gw.log_lines(1).await[0];
    assert_eq!(line["http_version"], "2", "{line}");
    assert!(
        line["tls_version"].is_string(),
        "the stream's TLS is logged: {line}"
    );
    // A client that offers only http/1.1, or no ALPN at all, gets HTTP/1.1.
    for alpn in [&[&b"http/1.1"[..]][..], &[]] {
        let setup = ClientSetup {
            alpn,
            ..ClientSetup::new(&ca, "localhost")
        };
        let mut conn = setup.open(gw.addr()).await;
        conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
        assert_eq!(conn.read_response().await.unwrap().status, 200);
    }
    // Without http2, only http/1.1 is offered: a client that speaks only h2 gets no
    // handshake.
    let gw = tls_gateway(&mock, &[(&cert, &key)], "", "http2: false").await;
    let only_h2 = ClientSetup {
        alpn: &[b"h2"],
        ..ClientSetup::new(&ca, "localhost")
    };
    assert!(
        only_h2.connect(gw.addr()).await.is_err(),
        "no protocol in common"
    );
    gw.until("counted as incompatible", |_| {
        failures(&gw, "incompatible") == 1.0
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}
