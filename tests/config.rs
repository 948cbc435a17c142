//! Loading `gateway.yaml`: every error at once with its file and key path, the keys file,
//! host names resolved at load, and every shipped example configuration.

mod common;
use common::*;
use sluice::config::{load_files, parse, parse_with, HostLookup};

fn no_env(_: &str) -> Option<String> {
    None
}

fn errors_of(text: &str) -> Vec<String> {
    match parse("g.yaml", text, None, &no_env) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors
            .0
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
    }
}

#[test]
fn unknown_top_level_keys_are_rejected_with_their_path() {
    let errors = errors_of("listen: 127.0.0.1:1\nlisten_port: 8080\n");
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("g.yaml: listen_port: unknown field"),
        "{errors:?}"
    );
}

#[test]
fn all_item_errors_come_at_once_resolution_included() {
    let text = r#"
max_body_bytes: 8 lots
upstreams:
  - {name: a, url: "http://no-such-host.invalid/v1"}
  - {name: "bad name", url: "http://127.0.0.1:1/v1", idle_timeout: "-1s"}
models:
  - {id: m, targets: [{upstream: a, weight: 0}]}
  - {id: m, upstream: a}
keys:
  - {name: k, sha256: "abc", burst: 5}
"#;
    let errors = errors_of(text);
    for expected in [
        "g.yaml: max_body_bytes: '8 lots' is not a size",
        "g.yaml: upstreams[0].url: cannot resolve no-such-host.invalid",
        "g.yaml: upstreams[1].name: must be 1-64 characters",
        "g.yaml: upstreams[1].idle_timeout",
        "g.yaml: models[0].targets[0].weight: must be at least 1",
        "g.yaml: models[1].id: duplicates models[0] ('m')",
        "g.yaml: keys[0].sha256",
        "g.yaml: keys[0].burst: needs requests_per_minute",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "missing `{expected}` in {errors:#?}"
        );
    }
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.contains("max_body_bytes"))
            .count(),
        1,
        "one error per problem"
    );
}

#[test]
fn a_top_level_type_error_names_its_key_once_and_hides_nothing() {
    let text = r#"
listen: [1]
max_concurrent: x
keys_file: 5
upstreams:
  - {name: u, url: "ftp://nowhere"}
"#;
    assert_eq!(
        errors_of(text),
        [
            "g.yaml: listen: invalid type: sequence, expected a string",
            "g.yaml: max_concurrent: invalid type: string \"x\", expected a whole number",
            "g.yaml: keys_file: invalid type: integer `5`, expected a string",
            "g.yaml: upstreams[0].url: must be an absolute http:// or https:// URL",
        ],
        "each error once, the key not repeated, no position where the path says it all"
    );
    // A default that was never written is not compared with anything.
    let clash = "listen: [1]\nadmin_listen: 0.0.0.0:8080\n";
    assert_eq!(errors_of(clash).len(), 1, "{:?}", errors_of(clash));
    assert_eq!(
        errors_of("- listen\n"),
        ["g.yaml: must be a mapping (`field: value` lines), not a list"],
        "no internal type name"
    );
}

#[test]
fn a_typo_inside_an_upstream_hides_neither_its_name_nor_its_other_errors() {
    let text = r#"
upstreams:
  - name: typo
    url: "http://127.0.0.1:9/v1"
    colour: blue
    connect_timeout: soon
  - name: unreadable-url
    url: [1]
  - url: "http://127.0.0.1:9/v1"
models:
  - {id: a, upstream: typo}
  - {id: b, targets: [{upstream: unreadable-url}]}
  - {id: c, upstream: typo, capabilities: telepathy}
  - {id: d, upstream: missing}
"#;
    let errors = errors_of(text);
    assert_eq!(
        errors,
        [
            "g.yaml: upstreams[0].colour: unknown field `colour`, expected one of `name`, `url`, `ca_file`, `api_key_env`, `auth_header`, `auth_scheme`, `headers`, `query`, `connect_timeout`, `first_byte_timeout`, `idle_timeout`, `total_timeout`, `max_concurrent`, `max_queue`, `queue_timeout`, `rate_limit_cooldown`, `retry_on`, `eject_after_failures`, `eject_duration`, `eject_duration_max`, `health_check_interval`, `stream_usage`",
            "g.yaml: upstreams[1].url: invalid type: sequence, expected a string",
            "g.yaml: upstreams[0].connect_timeout: 'soon' is not a duration (examples: 150ms, 2s, 5m)",
            "g.yaml: upstreams[2].name: is required",
            "g.yaml: models[2].capabilities: invalid type: string \"telepathy\", expected a sequence",
            "g.yaml: models[3].upstream: no upstream is named 'missing'",
        ],
        "every real error once; no 'no upstream is named' for upstreams that exist"
    );
}

#[test]
fn a_bad_limit_is_one_error_not_also_a_missing_one() {
    let text = r#"
upstreams:
  - {name: u, url: "http://127.0.0.1:9/v1", max_concurrent: 0, max_queue: 3}
  - {name: v, url: "http://127.0.0.1:9/v1", max_concurrent: lots, max_queue: 3}
  - {name: w, url: "http://127.0.0.1:9/v1", max_queue: 3}
keys:
  - {name: k, sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", requests_per_minute: 0, burst: 5}
"#;
    assert_eq!(
        errors_of(text),
        [
            "g.yaml: upstreams[1].max_concurrent: invalid type: string \"lots\", expected a whole number",
            "g.yaml: upstreams[0].max_concurrent: must be at least 1 (leave it out for no limit)",
            "g.yaml: upstreams[2].max_queue: needs max_concurrent",
            "g.yaml: keys[0].requests_per_minute: must be at least 1 (leave it out for no limit)",
        ]
    );
}

#[test]
fn duplicate_keys_are_blamed_on_the_file_and_entry_that_repeats_them() {
    let inline = format!("keys:\n  - {{name: a, sha256: {}}}\n", key_hash(ALPHA));
    let file = format!(
        "keys:\n  - {{name: b, sha256: {beta}}}\n  - {{name: b, sha256: {other}}}\n  - {{name: a, sha256: {beta}}}\n",
        beta = key_hash(BETA),
        other = key_hash("sk-test-other-0123456789"),
    );
    let text = format!("keys_file: keys.yaml\n{inline}");
    let errors = parse("g.yaml", &text, Some(("keys.yaml", &file)), &no_env)
        .unwrap_err()
        .0
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect::<Vec<_>>();
    assert_eq!(
        errors,
        [
            "keys.yaml: keys[1].name: the name 'b' is already used by keys[0]",
            "keys.yaml: keys[2].name: the name 'a' is already used by keys[0] of g.yaml",
            "keys.yaml: keys[2].sha256: the same hash as keys[0]",
        ]
    );
}

#[test]
fn the_keys_file_is_read_beside_the_config_and_its_errors_name_it() {
    let dir = temp_dir("keys-file");
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    let main = dir.join("gateway.yaml");
    let upstream = "upstreams:\n  - {name: u, url: \"http://127.0.0.1:9/v1\"}\nmodels:\n  - {id: m, upstream: u}\n";
    std::fs::write(
        &main,
        format!(
            "keys_file: secrets/keys.yaml\n{upstream}keys:\n  - {{name: inline, sha256: {}}}\n",
            key_hash(ALPHA)
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("secrets/keys.yaml"),
        format!(
            "keys:\n  - {{name: from-file, sha256: {}}}\n",
            key_hash(BETA)
        ),
    )
    .unwrap();
    let config = load_files(&main).expect("valid with a keys file");
    let names: Vec<&str> = config.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["inline", "from-file"]);

    std::fs::write(
        dir.join("secrets/keys.yaml"),
        "keys:\n  - {name: broken, sha256: nope}\n",
    )
    .unwrap();
    let errors = load_files(&main).unwrap_err().to_string();
    let keys_path = dir.join("secrets/keys.yaml").display().to_string();
    assert!(
        errors.contains(&format!("{keys_path}: keys[0].sha256")),
        "the keys file and its own index: {errors}"
    );
    assert!(
        !errors.contains("gateway.yaml: "),
        "not blamed on the main file: {errors}"
    );

    std::fs::remove_file(dir.join("secrets/keys.yaml")).unwrap();
    let missing = load_files(&main).unwrap_err().to_string();
    assert!(missing.contains("keys.yaml: cannot read"), "{missing}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_upstream_port_out_of_range_is_an_error_not_port_80() {
    let text = "upstreams:\n  - {name: u, url: \"http://127.0.0.1:99999/v1\"}\n  - {name: v, url: \"http://127.0.0.1:0/v1\"}\n";
    let errors = errors_of(text);
    assert_eq!(
        errors,
        [
            "g.yaml: upstreams[0].url: port '99999' is not a port number from 1 to 65535",
            "g.yaml: upstreams[1].url: port '0' is not a port number from 1 to 65535",
        ],
        "each bad port is named at its url"
    );
}

#[test]
fn durations_out_of_their_range_are_errors_naming_the_range() {
    let text = r#"
shutdown_grace: 0s
watch_interval: 1ms
retry_backoff: 2h
client_timeout: 300000000000y
upstreams:
  - name: u
    url: "http://127.0.0.1:9/v1"
    connect_timeout: 500us
    first_byte_timeout: 300000000000y
    idle_timeout: 25h
    total_timeout: 2days
    queue_timeout: 2h
    health_check_interval: 0ms
"#;
    assert_eq!(
        errors_of(text),
        [
            "g.yaml: shutdown_grace: '0s' is out of range: must be from 1ms to 1day",
            "g.yaml: client_timeout: '300000000000y' is out of range: must be from 1ms to 1day",
            "g.yaml: retry_backoff: '2h' is out of range: must be from 1ms to 1m",
            "g.yaml: watch_interval: '1ms' is out of range: must be from 10ms to 1day",
            "g.yaml: upstreams[0].connect_timeout: '500us' is out of range: must be from 1ms to 10m",
            "g.yaml: upstreams[0].first_byte_timeout: '300000000000y' is out of range: must be from 1ms to 1day",
            "g.yaml: upstreams[0].idle_timeout: '25h' is out of range: must be from 1ms to 1day",
            "g.yaml: upstreams[0].total_timeout: '2days' is out of range: must be from 1ms to 1day",
            "g.yaml: upstreams[0].health_check_interval: '0ms' is out of range: must be from 1ms to 1day",
            "g.yaml: upstreams[0].queue_timeout: '2h' is out of range: must be from 1ms to 1h",
        ]
    );
    let longest = "shutdown_grace: 24h\nclient_timeout: 24h\nretry_backoff: 1m\nwatch_interval: 10ms\nupstreams:\n  - {name: u, url: \"http://127.0.0.1:9/v1\", connect_timeout: 10m, first_byte_timeout: 1day, eject_duration: 24h, eject_duration_max: 24h, queue_timeout: 1h, rate_limit_cooldown: 1h, idle_timeout: 24h, total_timeout: 24h, health_check_interval: 24h}\n";
    assert!(
        parse("g.yaml", longest, None, &no_env).is_ok(),
        "each bound itself is allowed"
    );
}

#[test]
fn an_invalid_eject_duration_is_one_error_not_two() {
    let text = "upstreams:\n  - {name: u, url: \"http://127.0.0.1:9/v1\", eject_duration: soon, eject_duration_max: 3s}\n";
    assert_eq!(
        errors_of(text),
        ["g.yaml: upstreams[0].eject_duration: 'soon' is not a duration (examples: 150ms, 2s, 5m)"],
        "no comparison with a default that was never written"
    );
}

#[test]
fn a_missing_credential_variable_is_an_error_not_an_empty_credential() {
    let text = "upstreams:\n  - {name: u, url: \"http://127.0.0.1:9/v1\", api_key_env: SLUICE_UNSET_FOR_TEST}\n";
    let errors = errors_of(text);
    assert!(errors[0].contains(
        "upstreams[0].api_key_env: environment variable SLUICE_UNSET_FOR_TEST is not set"
    ));
    let empty = |_: &str| Some(String::new());
    assert!(
        parse("g.yaml", text, None, &empty).is_err(),
        "an empty variable is refused too"
    );
}

#[test]
fn a_credential_is_trimmed_and_one_with_control_characters_is_refused() {
    let text = "upstreams:\n  - {name: u, url: \"http://127.0.0.1:9/v1\", api_key_env: SLUICE_TEST_CREDENTIAL}\n";
    // What `echo "$KEY" | kubectl create secret ...` leaves in the variable.
    let newline = |_: &str| Some(" sk-upstream-value\r\n".to_string());
    let config = parse("g.yaml", text, None, &newline).expect("surrounding whitespace is trimmed");
    let credential = config.upstreams[0].credential.as_ref().unwrap();
    assert_eq!(credential.expose(), "sk-upstream-value");

    for (value, problem) in [
        ("sk-upstream\nhidden", "holds a control character"),
        ("sk-upstream\u{7f}hidden", "holds a control character"),
        (" \n\t", "holds only whitespace"),
    ] {
        let env = |_: &str| Some(value.to_string());
        let errors = parse("g.yaml", text, None, &env).unwrap_err().to_string();
        assert!(
            errors.starts_with(&format!(
                "g.yaml: upstreams[0].api_key_env: environment variable SLUICE_TEST_CREDENTIAL {problem}"
            )),
            "{value:?}: {errors}"
        );
        assert!(
            !errors.contains("sk-upstream") && !errors.contains("hidden"),
            "the value is never shown: {errors}"
        );
    }
}

#[test]
fn key_patterns_that_match_no_model_are_warnings_with_their_path() {
    let text = format!(
        r#"
keys_file: keys.yaml
upstreams:
  - {{name: u, url: "http://127.0.0.1:9/v1"}}
models:
  - {{id: llama-3, upstream: u}}
keys:
  - {{name: fine, sha256: {alpha}, models: ["llama-*"]}}
  - {{name: typo, sha256: {beta}, models: ["llama-*", "lama-*"]}}
"#,
        alpha = key_hash(ALPHA),
        beta = key_hash(BETA)
    );
    let file = format!(
        "keys:\n  - {{name: nothing, sha256: {}, models: []}}\n",
        key_hash(DISABLED)
    );
    let config = parse("g.yaml", &text, Some(("keys.yaml", &file)), &no_env)
        .expect("warnings do not refuse a configuration");
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "g.yaml: keys[1].models[1]: 'lama-*' matches no model: the key may not use any model through it",
            "keys.yaml: keys[0].models: lists no pattern: the key may use no model",
        ]
    );
}

#[test]
fn every_shipped_configuration_loads() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut checked = 0;
    let mut pending = vec![std::path::PathBuf::from(root).join("deploy")];
    let mut files = vec![std::path::PathBuf::from(root).join("gateway.yaml")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == "gateway.yaml") {
                files.push(path);
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Example credentials are named, not present: give each named variable a value.
        let env = |_: &str| Some("example-credential".to_string());
        // Cluster Service names do not resolve here: check them as `sluice check --no-resolve`.
        let name = file.display().to_string();
        if let Err(errors) = parse_with(&name, &text, None, &env, HostLookup::Skip) {
            panic!("{} does not load:\n{errors}", file.display());
        }
        checked += 1;
    }
    assert!(
        checked >= 4,
        "the demo, container, base and sidecar configurations"
    );
}

#[test]
fn a_limits_store_ca_file_is_for_rediss_only_and_must_hold_certificates() {
    let dir = temp_dir("store-ca");
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let text = format!(
        "limits_store:\n  url: redis://127.0.0.1:6379/0\n  ca_file: {}\n",
        not_pem.display()
    );
    assert_eq!(
        errors_of(&text),
        [
            "g.yaml: limits_store.ca_file: only applies to a rediss:// url".to_string(),
            format!(
                "g.yaml: limits_store.ca_file: {} holds no PEM certificate",
                not_pem.display()
            ),
        ]
    );
    let missing = dir.join("missing.pem");
    let text = format!(
        "limits_store:\n  url: rediss://127.0.0.1:6379/0\n  ca_file: {}\n",
        missing.display()
    );
    let errors = errors_of(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!(
            "g.yaml: limits_store.ca_file: cannot read {}",
            missing.display()
        )),
        "{errors:?}"
    );
}

#[test]
fn a_limits_store_cluster_has_only_database_0() {
    assert_eq!(
        errors_of("limits_store:\n  url: redis://127.0.0.1:6379/2\n  cluster: true\n"),
        ["g.yaml: limits_store.url: names a database other than 0, which a Redis Cluster does not have"]
    );
    for text in [
        "limits_store:\n  url: redis://127.0.0.1:6379/0\n  cluster: true\n",
        "limits_store:\n  url: redis://127.0.0.1:6379/2\n",
    ] {
        let config = parse("g.yaml", text, None, &no_env).expect(text);
        let store = config.limits_store.expect("a limits_store");
        assert_eq!(store.cluster, text.contains("cluster"), "{text}");
    }
}
