use super::*;
use crate::usage::JsonScan;

/// What the scan reads of `json` fed in one piece.
fn scanned(json: &[u8]) -> Option<Usage> {
    let mut scan = JsonScan::copying();
    scan.feed(json);
    scan.usage()
}

/// A chat completion around a `usage` value, as the mocks of `tests/` answer.
fn chat_with(usage: &str) -> String {
    format!(
        r#"{{"id":"c","object":"chat.completion","model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"x"}},"finish_reason":"stop"}}],"usage":{usage}}}"#
    )
}

/// The `usage` values of the unit and integration tests, malformed ones included.
const USAGE_VALUES: [&str; 26] = [
    r#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":20}}"#,
    r#"{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":3}}"#,
    r#"{"prompt_tokens":9,"total_tokens":9}"#,
    r#"{"total_tokens":11}"#,
    r#"{"type":"duration","seconds":3}"#,
    r#"{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":40,"output_tokens":7}"#,
    r#"{"prompt_tokens":5,"completion_tokens":1099511627776}"#,
    r#"{"prompt_tokens":10,"completion_tokens":50000}"#,
    r#"{"prompt_tokens":16000000,"completion_tokens":1}"#,
    r#"{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}"#,
    r#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8}}"#,
    r#"{"prompt_tokens":4,"completion_tokens":6}"#,
    r#"{"input_tokens":10,"cache_creation_input_tokens":5,"output_tokens":7}"#,
    r#"{ "prompt_tokens" : 3 , "completion_tokens" : 4 , "x" : [ "]}\"" , { "a" : [ [ ] ] } ] }"#,
    r#"{"pr\u006fmpt_tokens":3,"completion_tokens":4}"#,
    r#"{"prompt_tokens":3,"prompt_tokens":4}"#,
    "null",
    r#"{"prompt_tokens":-3,"completion_tokens":4}"#,
    r#"{"prompt_tokens":"3"}"#,
    r#"{"prompt_tokens":1.5}"#,
    r#"{"prompt_tokens":3e1}"#,
    r#"{"prompt_tokens":99999999999999999999}"#,
    "{}",
    "[1,2]",
    r#"{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}"#,
    r#""usage""#,
];

/// Whole documents of every kind the gateway reads a JSON answer of.
fn documents() -> Vec<String> {
    let mut documents: Vec<String> = USAGE_VALUES.iter().map(|u| chat_with(u)).collect();
    documents.extend(
        [
            // src/usage/tests.rs
            r#"{"id":"x","choices":[{"delta":{"content":"say \"usage\": {}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4},"z":[1,{"usage":9}]}"#,
            r#"{"id":"x", "choices":[{"delta":{"content":"a \"usage\": {[}"}}] ,"usage" : {"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":1,"x":["]}\"",{"a":[[]]}]}} ,"z":[1,{"usage":9}]}"#,
            r#"{"type":"response.completed","response":{"id":"r","output":[{"t":"}]"}],"usage":{"input_tokens":2,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":1}}},"n":1}"#,
            r#"{ "usage" : null , "choices" : [ ] }"#,
            r#"{"a":[true,false,null,-1.5e3,"s"],"usage":{"total_tokens":11}}"#,
            r#"{"type":"x","item":{"usage":{"input_tokens":2,"output_tokens":5}}}"#,
            // Messages, Responses, embeddings, transcription answers (tests/, src/echo/).
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-real","content":[{"type":"text","text":"cached hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":2}}"#,
            r#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":5,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":2}}}"#,
            r#"{"type":"response.completed","response":{"id":"resp_s1","status":"completed","usage":{"input_tokens":3,"output_tokens":2}}}"#,
            r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}"#,
            r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"org/embedder","usage":{"prompt_tokens":2,"total_tokens":2}}"#,
            r#"{"text":"hello","usage":{"type":"tokens","input_tokens":2,"output_tokens":1,"total_tokens":3}}"#,
            r#"{"text":"hello","usage":{"type":"duration","seconds":2}}"#,
            // No usage, or not where it counts.
            r#"{"id":"c","choices":[]}"#,
            r#"{"response":{"item":{"usage":{"input_tokens":2}}}}"#,
            r#"{"response":[{"usage":{"input_tokens":2,"output_tokens":1}}]}"#,
            r#"{"response":"usage","usage":{"total_tokens":4}}"#,
            r#"{"response":1e400,"usage":{"total_tokens":4}}"#,
            r#"{"response":{"response":{"usage":{"total_tokens":4}}}}"#,
            r#"{"usage":{"total_tokens":4},"response":{"usage":{"total_tokens":5}}}"#,
            r#"{"response":{"usage":{"total_tokens":5}},"usage":{"total_tokens":4}}"#,
            r#"[{"usage":{"total_tokens":4}}]"#,
            r#""usage""#,
            "null",
            "",
            // A `usage` given twice: the last counts.
            r#"{"usage":{"total_tokens":4},"usage":{"total_tokens":5}}"#,
            r#"{"usage":{"total_tokens":4},"usage":null}"#,
            r#"{"usage":{"prompt_tokens":"4"},"usage":{"total_tokens":5}}"#,
            r#"{"usage":{"total_tokens":4},"usage":[]}"#,
            r#"{"response":{"usage":{"total_tokens":4},"usage":{"total_tokens":6}}}"#,
            // Names written with escapes are other names, to the scan and here.
            r#"{"us\u0061ge":{"total_tokens":4}}"#,
            r#"{"usage":{"total_tokens":4},"us\u0061ge":{"total_tokens":5}}"#,
            r#"{"resp\u006fnse":{"usage":{"total_tokens":4}}}"#,
            // Strings with escapes and non-ASCII text before the usage.
            r#"{"id":"\u00e9\"\\\/\b\f\n\r\t","c":"ééé","usage":{"total_tokens":7}}"#,
            " \n\t{\"usage\" :\r\n{\"total_tokens\" : 8 } } \n",
        ]
        .map(String::from),
    );
    documents
}

/// What a whole body must read: what the scan reads, when serde_json accepts the body.
fn expected(json: &[u8]) -> Option<Usage> {
    let is_json = serde_json::from_slice::<IgnoredAny>(json).is_ok();
    is_json.then(|| scanned(json)).flatten()
}

#[test]
fn a_whole_document_reads_as_the_scan_reads_it() {
    for json in documents() {
        let json = json.as_bytes();
        let text = String::from_utf8_lossy(json);
        assert_eq!(whole_usage(json), expected(json), "{text}");
        // The typed pass leaves a malformed usage and a long body to this one.
        assert_eq!(value_by_value(json), expected(json), "{text}");
    }
}

#[test]
fn the_documents_read_what_their_usage_says() {
    let documents = documents();
    let read: Vec<_> = documents
        .iter()
        .map(|json| whole_usage(json.as_bytes()))
        .collect();
    // The comparison above is not with nothing: most documents have a usage.
    assert_eq!(read.iter().filter(|usage| usage.is_some()).count(), 35);
    let usage = |json: &str| whole_usage(json.as_bytes());
    assert_eq!(
        usage(&chat_with(USAGE_VALUES[0])),
        Some(Usage {
            input: 12,
            output: 30,
            cached: Some(8),
            reasoning: Some(20)
        })
    );
    assert_eq!(
        usage(&chat_with(USAGE_VALUES[5])).map(|u| (u.input, u.output, u.cached)),
        Some((145, 7, Some(40)))
    );
    assert_eq!(
        usage(r#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":2,"output_tokens":5}}}"#)
            .map(|u| u.output),
        Some(5)
    );
}

#[test]
fn the_last_usage_counts_when_one_is_given_twice() {
    let total = |json: &str| whole_usage(json.as_bytes()).map(|u| u.total());
    assert_eq!(
        total(r#"{"usage":{"total_tokens":4},"usage":{"total_tokens":5}}"#),
        Some(5)
    );
    // A malformed or null last one: no usage, the reservation stands.
    assert_eq!(total(r#"{"usage":{"total_tokens":4},"usage":null}"#), None);
    assert_eq!(
        total(r#"{"usage":{"total_tokens":4},"usage":{"total_tokens":-5}}"#),
        None
    );
    assert_eq!(
        total(r#"{"usage":{"total_tokens":"4"},"usage":{"total_tokens":5}}"#),
        Some(5)
    );
    // Inside `response` and at the top level alike, in the document's order.
    assert_eq!(
        total(r#"{"usage":{"total_tokens":4},"response":{"usage":{"total_tokens":6}}}"#),
        Some(6)
    );
    assert_eq!(
        total(r#"{"response":{"usage":{"total_tokens":6}},"usage":{"total_tokens":4}}"#),
        Some(4)
    );
}

#[test]
fn a_body_that_is_not_json_has_no_usage() {
    // The scan follows structure without checking it; here such a body is not believed.
    for json in [
        &br#"{"usage":{"total_tokens":4}}{"usage":{"total_tokens":5}}"#[..],
        br#"{"usage":{"total_tokens":4}} trailing"#,
        br#"{"usage":{"total_tokens":4},}"#,
        br#"{"usage":{"total_tokens":4},"id":"\x"}"#,
        b"{\"usage\":{\"total_tokens\":4},\"id\":\"\x01\"}",
        br#"{"usage":{"total_tokens":4},"id":tru}"#,
    ] {
        assert!(scanned(json).is_some(), "{}", String::from_utf8_lossy(json));
        assert_eq!(whole_usage(json), None, "{}", String::from_utf8_lossy(json));
    }
}

#[test]
fn every_cut_of_a_document_reads_as_serde_json_and_the_scan_agree() {
    for json in documents() {
        let json = json.as_bytes();
        for at in 0..json.len() {
            let cut = &json[..at];
            let text = String::from_utf8_lossy(cut);
            assert_eq!(whole_usage(cut), expected(cut), "{text}");
            assert_eq!(value_by_value(cut), expected(cut), "{text}");
        }
    }
}

#[test]
fn a_usage_past_the_bound_is_malformed_as_in_the_scan() {
    // The value's bytes from its first to its last, spaces inside included.
    let at_bound = |extra: usize| {
        let value = format!(r#"{{"total_tokens":4{}}}"#, " ".repeat(extra));
        let json = format!(r#"{{"usage": {value} ,"n":1}}"#);
        (value.len(), json)
    };
    let fill = MAX_USAGE_BYTES - at_bound(0).0;
    let (len, json) = at_bound(fill);
    assert_eq!(len, MAX_USAGE_BYTES);
    assert_eq!(whole_usage(json.as_bytes()).map(|u| u.total()), Some(4));
    assert_eq!(scanned(json.as_bytes()).map(|u| u.total()), Some(4));
    let (_, json) = at_bound(fill + 1);
    assert_eq!(whole_usage(json.as_bytes()), None);
    assert_eq!(scanned(json.as_bytes()), None);
}

#[test]
fn a_long_answer_reads_as_a_short_one() {
    // Past the bound, every body is read value by value.
    let content = "word \\\"quoted\\\" é ".repeat(400);
    for usage in USAGE_VALUES {
        let json =
            chat_with(usage).replace(r#""content":"x""#, &format!(r#""content":"{content}""#));
        assert!(json.len() > MAX_USAGE_BYTES);
        assert_eq!(
            whole_usage(json.as_bytes()),
            expected(json.as_bytes()),
            "{usage}"
        );
    }
    assert_eq!(
        whole_usage(
            chat_with(USAGE_VALUES[9])
                .replace("\"x\"", &format!("\"{content}\""))
                .as_bytes()
        )
        .map(|u| u.total()),
        Some(4)
    );
}
