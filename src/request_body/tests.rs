use super::*;

fn param_of(body: &str) -> Option<String> {
    inspect(body.as_bytes(), EndpointType::Chat)
        .err()
        .and_then(|e| e.param().map(str::to_owned))
}

#[test]
fn a_minimal_body_passes() {
    let request = inspect(
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        EndpointType::Chat,
    )
    .unwrap();
    assert_eq!(request.model, "m");
    assert!(!request.stream && !request.uses_tools);
}

#[test]
fn shape_errors_name_the_parameter() {
    assert_eq!(param_of(r#"{"messages":[]}"#).as_deref(), Some("model"));
    assert_eq!(param_of(r#"{"model":"m"}"#).as_deref(), Some("messages"));
    assert_eq!(
        param_of(r#"{"model":1,"messages":[]}"#).as_deref(),
        Some("model")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[]}"#).as_deref(),
        Some("messages")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":{}}"#).as_deref(),
        Some("messages")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[1]}"#).as_deref(),
        Some("messages[0]")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[{"content":"x"}]}"#).as_deref(),
        Some("messages[0].role")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[{"role":5,"content":"x"}]}"#).as_deref(),
        Some("messages[0].role")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[{"role":"user"}]}"#).as_deref(),
        Some("messages[0].content")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[{"role":"user","content":"a"}],"stream":"yes"}"#)
            .as_deref(),
        Some("stream")
    );
    assert_eq!(
        param_of(r#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":{}}"#)
            .as_deref(),
        Some("tools")
    );
}

#[test]
fn assistant_tool_call_messages_may_omit_content() {
    let body = r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[]},{"role":"assistant","content":null}]}"#;
    assert!(inspect(body.as_bytes(), EndpointType::Chat).is_ok());
    // The role decoded, blanks anywhere.
    let body = "{ \"model\" : \"m\" , \"messages\" : [ { \"role\" : \"assist\\u0061nt\" } ,\n\t{\"role\":\"assistant\",\"content\":null} ] }";
    assert!(
        inspect(body.as_bytes(), EndpointType::Chat).is_ok(),
        "{body}"
    );
    let body = r#"{"model":"m","messages":[{"role":"user"}]}"#;
    assert_eq!(param_of(body).as_deref(), Some("messages[0].content"));
    // A role written twice is refused: the upstream would read the other copy.
    let body = r#"{"model":"m","messages":[{"role":"assistant","role":"user"}]}"#;
    assert_eq!(param_of(body).as_deref(), Some("messages[0].role"));
}

#[test]
fn not_json_and_not_an_object_are_invalid_json() {
    for body in ["{", "not json", "[1,2]", "\"text\""] {
        assert_eq!(
            inspect(body.as_bytes(), EndpointType::Chat)
                .unwrap_err()
                .code(),
            "invalid_json",
            "{body}"
        );
    }
}

#[test]
fn stream_and_tools_are_detected() {
    let request = inspect(br#"{"model":"m","messages":[{"role":"user","content":"a"}],"stream":true,"tools":[{"type":"function"}]}"#, EndpointType::Chat).unwrap();
    assert!(request.stream && request.uses_tools);
    let request = inspect(
        br#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[],"functions":null}"#,
        EndpointType::Chat,
    )
    .unwrap();
    assert!(!request.uses_tools, "empty tools need no capability");
}

#[test]
fn rename_changes_only_the_model_value() {
    let body = Bytes::from_static(
        br#"{ "messages" : [{"role":"user","content":"model"}],  "model"  :  "short" , "x":1}"#,
    );
    let request = inspect(&body, EndpointType::Chat).unwrap();
    let edits = Edits {
        model: Some("org/a \"long\" name"),
        ..Edits::default()
    };
    let renamed = for_target(&body, &request, edits);
    assert_eq!(
        &renamed[..],
        &br#"{ "messages" : [{"role":"user","content":"model"}],  "model"  :  "org/a \"long\" name" , "x":1}"#[..]
    );
}

#[test]
fn usage_is_asked_for_keeping_the_clients_other_stream_options() {
    let edits = Edits {
        include_usage: true,
        ..Edits::default()
    };
    let body = Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":"a"}],"stream":true}"#,
    );
    let request = inspect(&body, EndpointType::Chat).unwrap();
    assert!(!request.include_usage);
    let sent = for_target(&body, &request, edits);
    let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(
        sent["stream_options"],
        serde_json::json!({"include_usage": true})
    );

    let body = Bytes::from_static(
        br#"{"model":"m","stream_options":{"continuous_usage_stats":false,"include_usage":false},"messages":[{"role":"user","content":"a"}],"stream":true}"#,
    );
    let request = inspect(&body, EndpointType::Chat).unwrap();
    let sent = for_target(&body, &request, edits);
    let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(
        sent["stream_options"],
        serde_json::json!({"include_usage": true, "continuous_usage_stats": false})
    );

    let asked = Bytes::from_static(
        br#"{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a"}],"stream":true}"#,
    );
    let request = inspect(&asked, EndpointType::Chat).unwrap();
    assert!(request.include_usage);
    assert_eq!(
        for_target(&asked, &request, edits),
        asked,
        "already asked: unchanged"
    );
}

#[test]
fn output_limits_and_stream_options_are_checked() {
    let with = |extra: &str| {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":"a"}}]{extra}}}"#)
    };
    for (extra, param) in [
        (r#","max_tokens":-1"#, "max_tokens"),
        (r#","max_tokens":"100""#, "max_tokens"),
        (r#","max_tokens":1.5"#, "max_tokens"),
        (r#","max_completion_tokens":1e300"#, "max_completion_tokens"),
        (r#","max_tokens":99999999999999"#, "max_tokens"),
        (r#","stream_options":true"#, "stream_options"),
        (r#","stream_options":[]"#, "stream_options"),
        (
            r#","stream_options":{"include_usage":"yes"}"#,
            "stream_options.include_usage",
        ),
    ] {
        let error = inspect(with(extra).as_bytes(), EndpointType::Chat).unwrap_err();
        assert_eq!(
            (error.code(), error.param()),
            ("invalid_parameter", Some(param)),
            "{extra}"
        );
    }
    let error = inspect(
        with(r#","max_tokens":50,"max_completion_tokens":70"#).as_bytes(),
        EndpointType::Chat,
    )
    .unwrap_err();
    assert_eq!(
        (error.code(), error.param()),
        ("invalid_parameter", Some("max_tokens")),
        "two limits that differ"
    );
    let request = inspect(
        with(r#","max_tokens":70,"max_completion_tokens":70,"stream_options":null"#).as_bytes(),
        EndpointType::Chat,
    )
    .unwrap();
    assert_eq!(
        request.max_output_tokens,
        Some(70),
        "the same twice is one limit"
    );
}

#[test]
fn each_route_reads_its_own_output_limit() {
    let body = br#"{"model":"m","prompt":"a","input":"a","max_output_tokens":9,"messages":[{"role":"user","content":"a"}]}"#;
    for (kind, expected) in [
        (EndpointType::Chat, None),
        (EndpointType::Completions, None),
        (EndpointType::Responses, Some(9)),
        (EndpointType::Embeddings, None),
    ] {
        assert_eq!(
            inspect(body, kind).unwrap().max_output_tokens,
            expected,
            "{kind:?}"
        );
    }
    let body = br#"{"model":"m","prompt":"a","input":"a","max_tokens":7,"messages":[{"role":"user","content":"a"}]}"#;
    for (kind, expected) in [
        (EndpointType::Chat, Some(7)),
        (EndpointType::Completions, Some(7)),
        (EndpointType::Responses, None),
    ] {
        assert_eq!(
            inspect(body, kind).unwrap().max_output_tokens,
            expected,
            "{kind:?}"
        );
    }
}

#[test]
fn null_stream_options_are_replaced_not_repeated() {
    let edits = Edits {
        include_usage: true,
        ..Edits::default()
    };
    let body = Bytes::from_static(
        br#"{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"a"}]}"#,
    );
    let request = inspect(&body, EndpointType::Chat).unwrap();
    let sent = for_target(&body, &request, edits);
    assert_eq!(
        &sent[..],
        &br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a"}]}"#[..]
    );
}

#[test]
fn an_enforced_limit_is_written_only_where_none_is_set() {
    let body = Bytes::from_static(br#"{"model":"m","prompt":"a"}"#);
    let mut request = inspect(&body, EndpointType::Completions).unwrap();
    request.enforce_output_limit(EndpointType::Completions, 64);
    assert_eq!(
        &for_target(&body, &request, Edits::default())[..],
        &br#"{"max_tokens":64,"model":"m","prompt":"a"}"#[..]
    );
    let body = Bytes::from_static(br#"{"model":"m","input":"a","max_output_tokens":5}"#);
    let mut request = inspect(&body, EndpointType::Responses).unwrap();
    request.enforce_output_limit(EndpointType::Responses, 64);
    assert_eq!(for_target(&body, &request, Edits::default()), body);
}

#[test]
fn a_repeated_top_level_key_is_invalid_json_naming_it() {
    for (body, key) in [
        (
            r#"{"model":"secret","messages":[{"role":"user","content":"a"}],"model":"m"}"#,
            "model",
        ),
        (
            r#"{"model":"m","stream":false,"messages":[{"role":"user","content":"a"}],"stream":true}"#,
            "stream",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[],"tools":[{"type":"function"}]}"#,
            "tools",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"a"}],"top_p":1,"top_p":1}"#,
            "top_p",
        ),
        // The same key written once with an escape: parsers decode it, so it repeats.
        (
            r#"{"model":"secret","messages":[{"role":"user","content":"a"}],"mod\u0065l":"m"}"#,
            "model",
        ),
    ] {
        let error = inspect(body.as_bytes(), EndpointType::Chat).unwrap_err();
        assert_eq!(error.code(), "invalid_json", "{body}");
        assert_eq!(error.param(), Some(key), "{body}");
    }
}

#[test]
fn objects_the_gateway_does_not_read_may_repeat_keys() {
    let body =
        r#"{"model":"m","messages":[{"role":"user","content":"a"}],"metadata":{"a":1,"a":2}}"#;
    assert!(inspect(body.as_bytes(), EndpointType::Chat).is_ok());
    let read =
        r#"{"model":"m","messages":[{"role":"user","content":"a","name":"x","content":"b"}]}"#;
    let error = inspect(read.as_bytes(), EndpointType::Chat).unwrap_err();
    assert_eq!(
        (error.code(), error.param()),
        ("invalid_json", Some("messages[0].content"))
    );
}

#[test]
fn member_names_with_escapes_are_read() {
    let request = inspect(
        br#"{"mod\u0065l":"m","messages":[{"r\u006fle":"user","content":"a"}]}"#,
        EndpointType::Chat,
    )
    .unwrap();
    assert_eq!(request.model, "m");
}

#[test]
fn escaped_model_ids_are_decoded() {
    let request = inspect(
        br#"{"model":"a\u002fb","messages":[{"role":"user","content":"a"}]}"#,
        EndpointType::Chat,
    )
    .unwrap();
    assert_eq!(request.model, "a/b");
}
