//! The admin listener's protected side: `/keys` and the key switches need an admin token
//! (or, with none configured, a loopback admin listener); a key switched off is refused at
//! once, on every replica sharing the limits store; `/keys` shows what the store holds;
//! every switch and every reload leaves a line saying who or what changed.

mod common;
use common::redis_server::{shared_config, store, RedisServer, SHARED};
use common::*;

const ONCALL_TOKEN: &str = "adm-oncall-0123456789abcdef";
const CI_TOKEN: &str = "adm-ci-0123456789abcdef";

/// `admin_tokens` with two named tokens, for the standard catalog's `extra`.
fn tokens() -> String {
    format!(
        "admin_tokens:\n  - {{name: oncall, sha256: {}}}\n  - {{name: ci, sha256: {}}}\n",
        key_hash(ONCALL_TOKEN),
        key_hash(CI_TOKEN)
    )
}

async fn admin(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = vec![("x-request-id", "admin-test-1")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    send(addr, method, path, &headers, b"").await
}

#[tokio::test]
async fn keys_and_switches_need_an_admin_token_and_probes_do_not() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), &tokens())).await;
    for (path, method) in [
        ("/keys", "GET"),
        ("/keys/alpha", "GET"),
        ("/keys/alpha/disable", "POST"),
        ("/keys/alpha/enable", "POST"),
    ] {
        let missing = admin(gw.admin(), method, path, None).await;
        assert_eq!(
            missing.error(),
            (
                401,
                "authentication_error".into(),
                "missing_admin_token".into(),
                serde_json::Value::Null
            ),
            "{method} {path} without a token"
        );
        assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
        assert_eq!(missing.header("x-request-id"), Some("admin-test-1"));
        let wrong = admin(
            gw.admin(),
            method,
            path,
            Some("adm-oncall-0123456789abcdeX"),
        )
        .await;
        assert_eq!(
            wrong.error().2,
            "invalid_admin_token",
            "{method} {path}, wrong token"
        );
        // A client key is no admin token.
        assert_eq!(
            admin(gw.admin(), method, path, Some(ALPHA)).await.status,
            401
        );
    }
    assert!(
        !gw.gateway().key_switches.is_disabled("alpha"),
        "no refused request switched anything"
    );
    let listed = admin(gw.admin(), "GET", "/keys", Some(CI_TOKEN)).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["keys"][0]["name"], "alpha");
    for open in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(
            admin(gw.admin(), "GET", open, None).await.status,
            200,
            "{open} is open to probes and Prometheus"
        );
    }
}

#[tokio::test]
async fn without_tokens_only_a_loopback_admin_listener_serves_keys() {
    let mock = MockUpstream::start().await;
    let exposed = config_with(&mock.url(), "")
        .replace("admin_listen: 127.0.0.1:0", "admin_listen: 0.0.0.0:0");
    let gw = TestGateway::start(&exposed).await;
    let port = gw.admin().port();
    let local: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    for (method, path) in [("GET", "/keys"), ("POST", "/keys/alpha/disable")] {
        let refused = admin(local, method, path, None).await;
        assert_eq!(
            refused.error(),
            (
                403,
                "permission_error".into(),
                "admin_tokens_not_configured".into(),
                serde_json::Value::Null
            ),
            "{method} {path} on an exposed listener without admin_tokens"
        );
    }
    assert_eq!(admin(local, "GET", "/metrics", None).await.status, 200);
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(ALPHA)).await.status,
        200,
        "nothing was switched off"
    );

    // The default, a loopback listener, serves them to the host's processes.
    let local_only = TestGateway::start(&config(&mock.url())).await;
    assert_eq!(
        admin(local_only.admin(), "GET", "/keys", None).await.status,
        200
    );
}

#[tokio::test]
async fn a_key_switched_off_is_refused_at_once_and_back_on_when_enabled() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config_with(&mock.url(), &tokens())).await;
    assert_eq!(get(gw.addr(), "/v1/models", Some(ALPHA)).await.status, 200);

    let switched = admin(
        gw.admin(),
        "POST",
        "/keys/alpha/disable",
        Some(ONCALL_TOKEN),
    )
    .await;
    assert_eq!(switched.status, 200, "{}", switched.text());
    let body = switched.json();
    assert_eq!(body["by"], "oncall");
    assert_eq!(body["shared"], false, "no limits store: this replica only");
    let refused = get(gw.addr(), "/v1/models", Some(ALPHA)).await;
    assert_eq!(
        refused.error(),
        (
            401,
            "authentication_error".into(),
            "invalid_api_key".into(),
            serde_json::Value::Null
        ),
        "the next request is refused"
    );
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(BETA)).await.status,
        200,
        "other keys work"
    );
    let view = admin(gw.admin(), "GET", "/keys/alpha", Some(CI_TOKEN))
        .await
        .json();
    assert_eq!(view["active"], false);
    assert_eq!(view["inactive_reason"], "switched_off");
    assert_eq!(view["switched_off"]["by"], "oncall");

    let enabled = admin(gw.admin(), "POST", "/keys/alpha/enable", Some(CI_TOKEN)).await;
    assert_eq!(enabled.status, 200);
    assert_eq!(get(gw.addr(), "/v1/models", Some(ALPHA)).await.status, 200);
    let view = admin(gw.admin(), "GET", "/keys/alpha", Some(CI_TOKEN))
        .await
        .json();
    assert_eq!(view["switched_off"], serde_json::Value::Null);

    // Enable lifts a switch only: a key disabled in the configuration stays disabled.
    admin(gw.admin(), "POST", "/keys/disabled/enable", Some(CI_TOKEN)).await;
    assert_eq!(
        get(gw.addr(), "/v1/models", Some(DISABLED)).await.status,
        401
    );
    let unknown = admin(gw.admin(), "POST", "/keys/nobody/disable", Some(CI_TOKEN)).await;
    assert_eq!(unknown.error().2, "unknown_key");
    assert_eq!(unknown.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_reaches_every_replica_through_the_store() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let yaml = shared_config(
        &mock.url(),
        &store(&redis, ""),
        "    requests_per_minute: 600",
    )
    .replace(
        "environment: test\n",
        &format!("environment: test\n{}", tokens()),
    );
    let a = TestGateway::start(&yaml).await;
    let b = TestGateway::start(&yaml).await;
    assert_eq!(get(b.addr(), "/v1/models", Some(SHARED)).await.status, 200);

    let switched = admin(
        a.admin(),
        "POST",
        "/keys/shared/disable",
        Some(ONCALL_TOKEN),
    )
    .await;
    assert_eq!(switched.json()["shared"], true);
    assert_eq!(
        get(a.addr(), "/v1/models", Some(SHARED)).await.status,
        401,
        "at once here"
    );
    b.until("replica b reads the switch from the store", |g| {
        g.key_switches.is_disabled("shared")
    })
    .await;
    assert_eq!(
        get(b.addr(), "/v1/models", Some(SHARED)).await.status,
        401,
        "and there"
    );
    let view = admin(b.admin(), "GET", "/keys/shared", Some(CI_TOKEN))
        .await
        .json();
    assert_eq!(
        view["switched_off"]["by"], "oncall",
        "b shows who switched it off"
    );

    // A replica started later learns the switch from the store before it serves.
    let c = TestGateway::start(&yaml).await;
    c.until("replica c reads the switches", |g| {
        g.key_switches.is_disabled("shared")
    })
    .await;

    admin(b.admin(), "POST", "/keys/shared/enable", Some(CI_TOKEN)).await;
    a.until("replica a reads the enable", |g| {
        !g.key_switches.is_disabled("shared")
    })
    .await;
    assert_eq!(get(a.addr(), "/v1/models", Some(SHARED)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_shows_the_windows_the_store_holds_for_every_replica() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    let limits = "    requests_per_minute: 6\n    burst: 3\n    max_concurrent: 5";
    let yaml = shared_config(&mock.url(), &store(&redis, ""), limits).replace(
        "environment: test\n",
        &format!("environment: test\n{}", tokens()),
    );
    let a = TestGateway::start(&yaml).await;
    let b = TestGateway::start(&yaml).await;
    for _ in 0..3 {
        assert_eq!(get(a.addr(), "/v1/models", Some(SHARED)).await.status, 200);
    }
    assert_eq!(get(a.addr(), "/v1/models", Some(SHARED)).await.status, 429);
    // Replica b served nothing of this key: what it shows is the store's.
    let view = admin(b.admin(), "GET", "/keys/shared", Some(CI_TOKEN))
        .await
        .json();
    assert_eq!(view["limits_source"], "store");
    assert_eq!(view["requests"]["burst"], 3);
    assert_eq!(
        view["requests"]["remaining"], 0,
        "the burst is spent: {view}"
    );
    assert_eq!(view["requests"]["used"], 3);
    assert!(
        view["requests"]["reset_ms"].as_u64().unwrap() > 20_000,
        "{view}"
    );
    assert_eq!(view["in_flight"], 0, "no request holds a lease");
    let listed = admin(b.admin(), "GET", "/keys", Some(CI_TOKEN))
        .await
        .json();
    let shared = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "shared")
        .unwrap()
        .clone();
    assert_eq!(shared["requests"]["remaining"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switches_and_reloads_leave_audit_lines() {
    let mock = MockUpstream::start().await;
    let dir = temp_dir("admin-audit");
    let keys = format!(
        "keys:\n  - {{name: alpha, sha256: {}}}\n  - {{name: beta, sha256: {}}}\n",
        key_hash(ALPHA),
        key_hash(BETA)
    );
    std::fs::write(dir.join("keys.yaml"), &keys).unwrap();
    let main = format!(
        "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nwatch_interval: 50ms\nkeys_file: keys.yaml\n{}\
         upstreams:\n  - {{name: mock, url: {}}}\nmodels:\n  - {{id: chat-model, upstream: mock}}\n",
        tokens(),
        mock.url()
    );
    std::fs::write(dir.join("gateway.yaml"), &main).unwrap();
    let gw = GatewayProcess::start(&dir.join("gateway.yaml"), &[]);

    let switched = admin(gw.admin, "POST", "/keys/beta/disable", Some(ONCALL_TOKEN)).await;
    assert_eq!(switched.status, 200);
    let audit = gw.log_record("admin action").await;
    assert_eq!(audit["action"], "disable_key");
    assert_eq!(audit["key"], "beta");
    assert_eq!(audit["by"], "oncall");
    assert!(audit["at"].as_str().unwrap().ends_with('Z'), "{audit}");

    std::fs::write(
        dir.join("keys.yaml"),
        format!(
            "keys:\n  - {{name: alpha, sha256: {}, disabled: true}}\n  - {{name: gamma, sha256: {}}}\n",
            key_hash(ALPHA),
            key_hash(NEW_KEY)
        ),
    )
    .unwrap();
    let reloaded = gw.log_record("configuration reloaded").await;
    assert_eq!(reloaded["keys_added"], "gamma");
    assert_eq!(reloaded["keys_removed"], "beta");
    assert_eq!(reloaded["keys_disabled"], "alpha");
    assert_eq!(reloaded["models_added"], "");
    gw.stop();
    let _ = std::fs::remove_dir_all(dir);
}

const NEW_KEY: &str = "sk-test-gamma-0123456789";

#[tokio::test]
async fn a_switch_of_a_key_since_removed_can_still_be_lifted() {
    let mock = MockUpstream::start().await;
    let yaml = config_with(&mock.url(), &tokens());
    let gw = TestGateway::start(&yaml).await;
    admin(gw.admin(), "POST", "/keys/beta/disable", Some(ONCALL_TOKEN)).await;
    let without_beta = yaml.replace(
        &format!(
            "  - name: beta\n    sha256: {}\n    models: [\"public-*\"]\n",
            key_hash(BETA)
        ),
        "",
    );
    let config = sluice::config::parse("test.yaml", &without_beta, None, &test_env).unwrap();
    gw.gateway()
        .swap_catalog(sluice::catalog::Catalog::build(&config, 2));
    assert_eq!(
        admin(gw.admin(), "POST", "/keys/beta/disable", Some(ONCALL_TOKEN))
            .await
            .status,
        404,
        "a key that is not configured cannot be switched off"
    );
    let lifted = admin(gw.admin(), "POST", "/keys/beta/enable", Some(ONCALL_TOKEN)).await;
    assert_eq!(lifted.status, 200, "{}", lifted.text());
    assert!(!gw.gateway().key_switches.is_disabled("beta"));
    assert_eq!(
        admin(gw.admin(), "POST", "/keys/beta/enable", Some(ONCALL_TOKEN))
            .await
            .status,
        404,
        "once lifted, the name is unknown again"
    );
}
