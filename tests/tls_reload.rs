//! TLS certificates over time: new certificate files are picked up without a restart and
//! without dropping open connections, a bad replacement is refused (the old certificate
//! kept, a failed reload counted, readiness unchanged), and every way a `tls:` section can
//! be wrong is a configuration error with its key path.

mod common;
use common::*;
use std::path::Path;

/// Points `dir/certs` at `dir/<target>` in one step (a rename over the old link), as a
/// Kubernetes Secret volume swaps its files: the watcher never sees half a change.
fn swap_certs(dir: &Path, target: &str) {
    let link = dir.join("certs.next");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(dir.join(target), &link).unwrap();
    std::fs::rename(&link, dir.join("certs")).unwrap();
}

#[tokio::test]
async fn new_certificate_files_serve_new_handshakes_while_open_connections_keep_going() {
    let dir = temp_dir("tls-reload");
    let ca = TestCa::new("test CA");
    for (version, year) in [("v1", 2030), ("v2", 2032)] {
        std::fs::create_dir(dir.join(version)).unwrap();
        ca.server(&["localhost"], Some((year, 1, 1)))
            .write(&dir.join(version), "server");
    }
    // v3: v2's key beside a new certificate, the mistake of a rotation done by hand.
    std::fs::create_dir(dir.join("v3")).unwrap();
    ca.server(&["localhost"], Some((2033, 1, 1)))
        .write(&dir.join("v3"), "server");
    std::fs::copy(dir.join("v2/server.key"), dir.join("v3/server.key")).unwrap();
    swap_certs(&dir, "v1");
    let mock = MockUpstream::start().await;
    let config = dir.join("gateway.yaml");
    let tls = "watch_interval: 20ms\ntls:\n  certificates:\n    - {cert_file: certs/server.pem, key_file: certs/server.key}\n";
    // From a file, as the binary reads it: no test environment for the credential.
    let text = config_with(&mock.url(), tls).replace("    api_key_env: TEST_UPSTREAM_KEY\n", "");
    std::fs::write(&config, text).unwrap();
    let gw = TestGateway::start_file(&config).await;
    let expiry = "sluice_tls_certificate_expiry_timestamp_seconds{name=\"localhost\"}";
    let successes = "sluice_config_reloads_total{result=\"success\"}";
    let failures = "sluice_config_reloads_total{result=\"failure\"}";
    let client = ClientSetup::new(&ca, "localhost");

    let first = client.connect(gw.addr()).await.unwrap();
    let first_served = served_certificate(&first);
    let mut open = Conn::over(first);
    open.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(open.read_response().await.unwrap().status, 200);
    assert_eq!(gw.metric(expiry), 1_893_456_000.0, "v1 expires 2030-01-01");

    swap_certs(&dir, "v2");
    gw.until("the new files are loaded", |_| gw.metric(successes) == 1.0)
        .await;
    let second = client.connect(gw.addr()).await.unwrap();
    assert_ne!(
        served_certificate(&second),
        first_served,
        "a new handshake gets the new certificate"
    );
    assert_eq!(gw.metric(expiry), 1_956_528_000.0, "v2 expires 2032-01-01");
    open.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(
        open.read_response().await.unwrap().status,
        200,
        "the connection opened before the reload keeps being served"
    );
    let v2_served = served_certificate(&second);

    swap_certs(&dir, "v3");
    gw.until("the bad files are refused", |_| gw.metric(failures) == 1.0)
        .await;
    let third = client.connect(gw.addr()).await.unwrap();
    assert_eq!(
        served_certificate(&third),
        v2_served,
        "a certificate whose key does not match is refused: the previous one serves"
    );
    assert_eq!(
        gw.metric(expiry),
        1_956_528_000.0,
        "the gauge still describes v2"
    );
    assert_eq!(
        get(gw.admin(), "/readyz", None).await.status,
        200,
        "still ready"
    );
    let mut after = Conn::over(third);
    after.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(after.read_response().await.unwrap().status, 200);
    open.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(open.read_response().await.unwrap().status, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_binary_reloads_its_certificates_on_sighup() {
    let dir = temp_dir("tls-sighup");
    let ca = TestCa::new("test CA");
    let mut served = Vec::new();
    for version in ["v1", "v2"] {
        std::fs::create_dir(dir.join(version)).unwrap();
        let leaf = ca.server(&["localhost"], None);
        leaf.write(&dir.join(version), "server");
        served.push(leaf.der);
    }
    swap_certs(&dir, "v1");
    let mock = MockUpstream::start().await;
    let config = dir.join("gateway.yaml");
    // No watcher in the way: only the signal reloads.
    let tls = "watch_interval: 24h\nthreads: 2\ntls:\n  certificates:\n    - {cert_file: certs/server.pem, key_file: certs/server.key}\n";
    std::fs::write(&config, config_with(&mock.url(), tls)).unwrap();
    let process = GatewayProcess::start(&config, &[("TEST_UPSTREAM_KEY", UPSTREAM_SECRET)]);
    let listening = process.log_record("listening").await;
    assert_eq!(listening["tls"], true, "{listening}");
    assert_eq!(listening["admin_tls"], false, "{listening}");
    let client = ClientSetup::new(&ca, "localhost");
    let first = client.connect(process.addr).await.unwrap();
    assert_eq!(served_certificate(&first), served[0]);
    let mut open = Conn::over(first);
    open.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(open.read_response().await.unwrap().status, 200);

    swap_certs(&dir, "v2");
    process.signal("HUP");
    let reloaded = process.log_record("configuration reloaded").await;
    assert_eq!(reloaded["trigger"], "Signal", "{reloaded}");
    let second = client.connect(process.addr).await.unwrap();
    assert_eq!(
        served_certificate(&second),
        served[1],
        "after SIGHUP a new handshake gets the new certificate"
    );
    open.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(
        open.read_response().await.unwrap().status,
        200,
        "the open connection goes on"
    );
    let (code, _, _) = process.stop();
    assert_eq!(code, Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_reload_that_removes_tls_leaves_the_listener_as_it_started() {
    let dir = temp_dir("tls-removed");
    let ca = TestCa::new("test CA");
    ca.server(&["localhost"], Some((2030, 1, 1)))
        .write(&dir, "server");
    let mock = MockUpstream::start().await;
    let config = dir.join("gateway.yaml");
    let plain = config_with(&mock.url(), "watch_interval: 20ms\n")
        .replace("    api_key_env: TEST_UPSTREAM_KEY\n", "");
    let tls = "tls:\n  certificates:\n    - {cert_file: server.pem, key_file: server.key}\n";
    std::fs::write(&config, format!("{plain}{tls}")).unwrap();
    let gw = TestGateway::start_file(&config).await;
    std::fs::write(&config, &plain).unwrap();
    gw.until("the configuration without tls loads", |_| {
        gw.metric("sluice_config_reloads_total{result=\"success\"}") == 1.0
    })
    .await;
    let mut conn = ClientSetup::new(&ca, "localhost").open(gw.addr()).await;
    conn.write(&chat_request_bytes(ALPHA, "chat-model")).await;
    assert_eq!(
        conn.read_response().await.unwrap().status,
        200,
        "still TLS until a restart"
    );
    assert_eq!(
        gw.metric("sluice_tls_certificate_expiry_timestamp_seconds{name=\"localhost\"}"),
        1_893_456_000.0,
        "the gauge describes the certificate still served"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The errors of parsing `tls` (written at the top of the standard configuration).
fn tls_errors(tls: &str) -> String {
    let text = config_with("http://127.0.0.1:1/v1", tls);
    sluice::config::parse("t.yaml", &text, None, &test_env)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn every_way_a_tls_section_can_be_wrong_is_an_error_with_its_key_path() {
    let dir = temp_dir("tls-config");
    let ca = TestCa::new("test CA");
    let (cert, key) = ca.server(&["localhost"], None).write(&dir, "good");
    let (_, other_key) = ca.server(&["localhost"], None).write(&dir, "other");
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "this is not PEM\n").unwrap();
    let missing = dir.join("missing.pem");
    let ca_file = ca.write(&dir, "ca");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            tls_section("tls", &[(&missing, &key)], ""),
            "tls.certificates[0].cert_file",
            "cannot read",
        ),
        (
            tls_section("tls", &[(&garbage, &key)], ""),
            "tls.certificates[0].cert_file",
            "holds no PEM certificate",
        ),
        (
            tls_section("tls", &[(&cert, &garbage)], ""),
            "tls.certificates[0].key_file",
            "holds no PEM private key",
        ),
        (
            tls_section("tls", &[(&cert, &other_key)], ""),
            "tls.certificates[0].key_file",
            "is not the private key of",
        ),
        (
            "tls:\n  certificates: []\n".into(),
            "tls.certificates",
            "at least one certificate is required",
        ),
        (
            "tls:\n  min_version: \"1.3\"\n".into(),
            "tls.certificates",
            "at least one certificate is required",
        ),
        (
            tls_section("tls", &[(&cert, &key)], "  min_version: \"1.1\"\n"),
            "tls.min_version",
            "must be \"1.2\" or \"1.3\"",
        ),
        (
            tls_section(
                "tls",
                &[(&cert, &key)],
                &format!("  client_ca_file: {}\n", missing.display()),
            ),
            "tls.client_ca_file",
            "cannot read",
        ),
        (
            tls_section("admin_tls", &[(&cert, &other_key)], ""),
            "admin_tls.certificates[0].key_file",
            "is not the private key of",
        ),
        (
            "tls:\n  certificates:\n    - {cert_file: a.pem}\n".into(),
            "tls.certificates[0].key_file",
            "is required",
        ),
        (
            "tls:\n  certificate: []\n".into(),
            "tls.certificate",
            "unknown field",
        ),
    ];
    for (tls, path, message) in cases {
        let errors = tls_errors(&tls);
        assert!(
            errors.contains(&format!("t.yaml: {path}: ")) && errors.contains(message),
            "{path} says {message:?} for\n{tls}\ngot:\n{errors}"
        );
    }
    // Valid: both versions, quoted or not, a client CA, the admin listener too.
    for more in ["  min_version: 1.3\n", "  min_version: \"1.2\"\n"] {
        let client_ca = format!("{more}  client_ca_file: {}\n", ca_file.display());
        let tls = tls_section("tls", &[(&cert, &key)], &client_ca)
            + &tls_section("admin_tls", &[(&cert, &key)], "");
        assert_eq!(tls_errors(&tls), "", "valid:\n{tls}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
