use super::*;

fn scan_in_pieces(json: &[u8], piece: usize) -> JsonScan {
    let mut scan = JsonScan::copying();
    for chunk in json.chunks(piece) {
        scan.feed(chunk);
    }
    scan
}

#[test]
fn each_usage_shape_is_read() {
    let chat = br#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":20}}"#;
    assert_eq!(
        Usage::parse(chat),
        Some(Usage {
            input: 12,
            output: 30,
            cached: Some(8),
            reasoning: Some(20)
        })
    );
    let responses = br#"{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":3}}"#;
    assert_eq!(
        Usage::parse(responses).map(|u| (u.input, u.output, u.reasoning)),
        Some((5, 7, Some(3)))
    );
    let embeddings = br#"{"prompt_tokens":9,"total_tokens":9}"#;
    assert_eq!(Usage::parse(embeddings).map(|u| u.total()), Some(9));
    let rerank = br#"{"total_tokens":11}"#;
    assert_eq!(Usage::parse(rerank).map(|u| u.input), Some(11));
    let duration = br#"{"type":"duration","seconds":3}"#;
    assert_eq!(Usage::parse(duration).map(|u| u.total()), Some(0));
    // Anthropic's Messages API: cache writes and reads are input beside `input_tokens`.
    let messages = br#"{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":40,"output_tokens":7}"#;
    assert_eq!(
        Usage::parse(messages).map(|u| (u.input, u.output, u.cached)),
        Some((145, 7, Some(40)))
    );
}

#[test]
fn malformed_usage_is_missing_never_negative() {
    for raw in [
        &b"null"[..],
        br#"{"prompt_tokens":-3,"completion_tokens":4}"#,
        br#"{"prompt_tokens":"3"}"#,
        br#"{"prompt_tokens":1.5}"#,
        br#"{"prompt_tokens":99999999999999999999}"#,
        br#"{}"#,
        br#"[1,2]"#,
        br#"{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}"#,
    ] {
        assert_eq!(Usage::parse(raw), None, "{}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn the_top_level_usage_is_found_whatever_the_pieces() {
    let json = br#"{"id":"x","choices":[{"delta":{"content":"say \"usage\": {}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"z":[1,{"usage":9}]}"#;
    for piece in [1, 2, 3, 7, json.len()] {
        let scan = scan_in_pieces(json, piece);
        assert_eq!(
            scan.usage().map(|u| (u.input, u.output)),
            Some((3, 4)),
            "pieces of {piece}"
        );
        let member = scan.member().expect("member");
        assert_eq!(
            &json[member.span.clone()],
            br#""usage":{"prompt_tokens":3,"completion_tokens":4}"#
        );
        assert_eq!(member.comma_after, Some(member.span.end));
    }
}

#[test]
fn every_split_reads_what_the_whole_document_reads() {
    let documents: [&[u8]; 4] = [
        br#"{"id":"x", "choices":[{"delta":{"content":"a \"usage\": {[}"}}] ,"usage" : {"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":1,"x":["]}\"",{"a":[[]]}]}} ,"z":[1,{"usage":9}]}"#,
        br#"{"type":"response.completed","response":{"id":"r","output":[{"t":"}]"}],"usage":{"input_tokens":2,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":1}}},"n":1}"#,
        br#"{ "usage" : null , "choices" : [ ] }"#,
        br#"{"a":[true,false,null,-1.5e3,"s"],"usage":{"total_tokens":11}}"#,
    ];
    for json in documents {
        let whole = scan_in_pieces(json, json.len());
        let expected = (whole.usage(), whole.member().cloned(), whole.found);
        assert!(whole.found, "{}", String::from_utf8_lossy(json));
        for piece in 1..json.len() {
            let scan = scan_in_pieces(json, piece);
            assert_eq!(
                (scan.usage(), scan.member().cloned(), scan.found),
                expected,
                "pieces of {piece}"
            );
        }
        for at in 1..json.len() {
            let mut scan = JsonScan::copying();
            scan.feed(&json[..at]);
            scan.feed(&json[at..]);
            assert_eq!(
                (scan.usage(), scan.member().cloned(), scan.found),
                expected,
                "split at {at}"
            );
        }
    }
    let first = scan_in_pieces(documents[0], 5);
    assert_eq!(
        first.usage(),
        Some(Usage {
            input: 3,
            output: 4,
            cached: Some(1),
            reasoning: None
        })
    );
    assert_eq!(
        scan_in_pieces(documents[1], 3).usage().map(|u| u.reasoning),
        Some(Some(1))
    );
    assert_eq!(
        scan_in_pieces(documents[3], 2).usage().map(|u| u.total()),
        Some(11)
    );
}

#[test]
fn nested_usage_counts_only_inside_response() {
    let completed = br#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":2,"output_tokens":5}}}"#;
    assert_eq!(
        scan_in_pieces(completed, 4).usage().map(|u| u.output),
        Some(5)
    );
    let elsewhere = br#"{"type":"x","item":{"usage":{"input_tokens":2,"output_tokens":5}}}"#;
    assert_eq!(scan_in_pieces(elsewhere, 4).usage(), None);
    let null = br#"{"usage":null,"choices":[]}"#;
    let scan = scan_in_pieces(null, 3);
    assert_eq!(scan.usage(), None);
    assert_eq!(scan.member().map(|m| m.value.clone()), Some(9..13));
}

#[test]
fn an_event_stream_gives_its_last_usage_in_any_framing() {
    let shapes: [&[u8]; 4] = [
        // A usage-only chunk after the one with finish_reason.
        b"data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n",
        // Usage on the chunk with finish_reason, CRLF lines.
        b"data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\ndata: [DONE]\r\n\r\n",
        // Named events, data split over two lines.
        b"event: response.completed\ndata: {\"type\":\"response.completed\",\ndata: \"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}}\n\n",
        // A comment, no space after the colon.
        b": keep-alive\n\ndata:{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
    ];
    for stream in shapes {
        for piece in [1, 5, stream.len()] {
            let mut events = EventUsage::default();
            for chunk in stream.chunks(piece) {
                events.feed(chunk);
            }
            assert_eq!(
                events.last().map(|u| (u.input, u.output)),
                Some((3, 4)),
                "{} in pieces of {piece}",
                String::from_utf8_lossy(stream)
            );
        }
    }
}

#[test]
fn stripping_gives_the_chunk_the_client_would_have_seen() {
    assert_eq!(
        strip_event(b"data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n"),
        Stripped::Edited(b"data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}]}\n\n".to_vec())
    );
    assert_eq!(
        strip_event(b"data: {\"usage\":null,\"id\":\"a\"}\n\n"),
        Stripped::Edited(b"data: {\"id\":\"a\"}\n\n".to_vec())
    );
    assert_eq!(
        strip_event(b"data: {\"id\":\"a\",\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n"),
        Stripped::Dropped
    );
    assert_eq!(
        strip_event(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1}}\n\n"),
        Stripped::Edited(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n".to_vec())
    );
    assert_eq!(strip_event(b"data: [DONE]\n\n"), Stripped::Unchanged);
    assert_eq!(
        strip_event(b"data: {\"id\":\"a\"}\n\n"),
        Stripped::Unchanged
    );
}

#[test]
fn usage_is_believed_only_when_plausible() {
    let usage = |input, output| Usage {
        input,
        output,
        ..Usage::default()
    };
    assert!(usage(100, 1000).plausible(Some(1000)));
    // The slack: an eighth of the limit, at least 64 tokens.
    assert!(usage(100, 1125).plausible(Some(1000)));
    assert!(!usage(100, 1126).plausible(Some(1000)));
    assert!(usage(0, 74).plausible(Some(10)));
    assert!(!usage(0, 75).plausible(Some(10)));
    // Without a limit on the request, only the size of each count is checked.
    assert!(usage(5, 100_000).plausible(None));
    assert!(!usage(1 << 24, 0).plausible(None));
    assert!(!usage(0, 1 << 40).plausible(None));
    let reasoning = Usage {
        reasoning: Some(1 << 30),
        ..usage(1, 1)
    };
    assert!(!reasoning.plausible(None), "every count, details included");
    assert_eq!(usage(u64::MAX, 5).total(), u64::MAX, "saturates");
}

#[test]
fn the_string_end_search_finds_the_first_quote_or_backslash() {
    use super::json_scan::skim::quote_or_backslash;
    let naive = |bytes: &[u8]| bytes.iter().position(|&b| b == b'"' || b == b'\\');
    // Neighbours of both bytes, zero, and bytes with the high bit (UTF-8) as filler: a
    // carry from one byte of a word into the next must not make or hide a match.
    let fillers = [
        b'!', b'#', b'[', b']', 0x00, 0x01, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
    ];
    for len in 0..80 {
        for filler in fillers {
            let mut bytes = vec![filler; len];
            assert_eq!(quote_or_backslash(&bytes), None, "{len} of {filler:#x}");
            for at in 0..len {
                for found in [b'"', b'\\'] {
                    bytes[at] = found;
                    if at + 1 < len {
                        // A second match later must not be taken for the first.
                        bytes[len - 1] = b'"';
                    }
                    assert_eq!(quote_or_backslash(&bytes), naive(&bytes), "{len} {at}");
                    bytes.fill(filler);
                }
            }
        }
    }
    // A long string value with escapes, in every split, reads as the whole document does.
    let long = format!(
        r#"{{"id":"{}\"\\\u00e9{}","usage":{{"prompt_tokens":7,"completion_tokens":1}}}}"#,
        "é".repeat(40),
        "x".repeat(70)
    );
    let json = long.as_bytes();
    for piece in [1, 7, 8, 9, 31, 32, 33, json.len()] {
        let scan = scan_in_pieces(json, piece);
        assert_eq!(
            scan.usage().map(|u| u.total()),
            Some(8),
            "pieces of {piece}"
        );
    }
}
