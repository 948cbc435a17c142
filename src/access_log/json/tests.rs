//! The hand-written access line against serde_json's, byte for byte.

use super::*;
use std::collections::BTreeMap;

fn by_hand(record: &AccessRecord) -> String {
    let mut out = Vec::new();
    write_record(&mut out, record);
    String::from_utf8(out).unwrap()
}

#[test]
fn a_record_with_every_field_is_written_as_serde_json_writes_it() {
    let labels = BTreeMap::from([
        ("team".to_string(), "search \"core\"".to_string()),
        ("tier\n".to_string(), "gold\\1".to_string()),
    ]);
    let record = AccessRecord {
        ts: "2026-11-26T22:00:00.123Z".into(),
        environment: "prod",
        request_id: "abc123",
        trace_id: Some("0af7651916cd43dd8448eb211c80319c"),
        method: "POST",
        path: "/v1/chat/completions",
        host: "gw.example:8080",
        http_version: "2",
        key: Some("alpha"),
        key_owner: Some("Zoë <ops@example.com>"),
        key_labels: Some(&labels),
        model: Some("chat\u{1}model\u{1f}\u{7f}"),
        served_model: Some("fallback"),
        upstream: Some("primary"),
        upstream_url: Some("http://127.0.0.1:9/v1/chat/completions"),
        status: 429,
        stream: true,
        duration_ms: 12.345,
        upstream_ms: Some(0.001),
        ttfb_ms: Some(1e21),
        bytes_out: 1_048_576,
        cut: true,
        error_code: Some("rate_limited"),
        error_message: Some("tab\there, cr\r, bs\u{8}, ff\u{c}, \"quoted\" \\ end".into()),
        retry_after_ms: Some(1500),
        since_previous_ms: Some(250.5),
        upstream_status: Some(503),
        upstream_error_code: Some("overloaded"),
        upstream_request_id: Some("req_9"),
        cut_by_shutdown: true,
        input_tokens: Some(12),
        output_tokens: Some(u64::MAX),
        reserved_tokens: Some(0),
        cost_usd: Some(1_234_567),
        tls_version: Some("TLSv1.3"),
        tls_client_subject: Some("CN=team \"a\"\\,O=acme"),
    };
    assert_eq!(by_hand(&record), serde_json::to_string(&record).unwrap());
}

#[test]
fn strings_are_escaped_as_serde_json_escapes_them_wherever_the_escape_falls() {
    // Every ASCII character and a two-byte one, alone or followed by another special
    // one, at every place of texts up to three words and a tail long.
    let specials = (0..128u8).map(char::from).chain(['é']);
    for special in specials {
        for next in [None, Some('"'), Some('\u{1}')] {
            for length in 0..28 {
                for at in 0..length {
                    let text: String = (0..length)
                        .map(|i| match i {
                            _ if i == at => special,
                            _ if i == at + 1 && next.is_some() => next.unwrap_or('a'),
                            _ => char::from(b'a' + (i % 26) as u8),
                        })
                        .collect();
                    let mut out = Vec::new();
                    quoted(&mut out, &text);
                    assert_eq!(
                        String::from_utf8(out).unwrap(),
                        serde_json::to_string(&text).unwrap(),
                        "{text:?}"
                    );
                }
            }
        }
    }
}

/// What serde_json writes for `value` (the float writer before fixed-point digits).
fn shortest(value: f64) -> String {
    zmij::Buffer::new().format_finite(value).to_owned()
}

#[test]
fn milliseconds_are_written_as_the_shortest_float_form_writes_them() {
    let mut values: Vec<f64> = (0..200_000u64).map(|n| n as f64 / 1000.0).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let micros = state >> (20 + state % 40);
        values.push(micros as f64 / 1000.0);
        values.push(crate::access_log::millis(std::time::Duration::from_nanos(
            state >> 14,
        )));
    }
    values.extend([
        1e21,
        1e12 - 0.001,
        1e12,
        1e13,
        0.0005,
        1.0 / 3.0,
        -0.0,
        -1.5,
        2.5e-7,
    ]);
    for value in values {
        let mut out = Vec::new();
        Object::open(&mut out).millis("m", Some(value));
        let expected = format!("{{\"m\":{}", shortest(value));
        assert_eq!(String::from_utf8(out).unwrap(), expected, "{value:e}");
    }
}

#[test]
fn micro_dollars_are_written_as_the_shortest_float_form_writes_them() {
    let mut micros: Vec<u64> = (0..200_000).collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        micros.push(state >> (state % 64));
    }
    micros.extend([999_999_999_999_999, 1_000_000_000_000_000, u64::MAX]);
    for micros in micros {
        let mut out = Vec::new();
        Object::open(&mut out).usd("c", micros);
        let expected = format!("{{\"c\":{}", shortest(micros as f64 / 1_000_000.0));
        assert_eq!(String::from_utf8(out).unwrap(), expected, "{micros}");
    }
}

#[test]
fn absent_values_are_null_or_left_out_as_serde_json_does() {
    let record = AccessRecord {
        ts: String::new(),
        duration_ms: f64::NAN,
        upstream_ms: Some(f64::INFINITY),
        ..AccessRecord::default()
    };
    let written = by_hand(&record);
    assert_eq!(written, serde_json::to_string(&record).unwrap());
    assert!(written.contains(r#""duration_ms":null"#), "{written}");
    let empty_labels = BTreeMap::new();
    let labelled = AccessRecord {
        key_labels: Some(&empty_labels),
        duration_ms: 0.0,
        ..AccessRecord::default()
    };
    assert_eq!(
        by_hand(&labelled),
        serde_json::to_string(&labelled).unwrap()
    );
}
