//! The one-pass reading held to serde_json's: whatever it accepts, serde_json accepts with
//! the same members; the usual bodies take it.

use super::*;
use crate::json_object::Object;

/// serde_json's members of `text`, in document order, or `None` where it refuses it.
fn by_serde(text: &str) -> Option<Vec<Member<'_>>> {
    let object: Object = serde_json::from_str(text).ok()?;
    let mut members = object.members;
    members.sort_by_key(|m| m.at);
    Some(members)
}

/// Checks the one-pass reading of `text` against serde_json's; true when it took it.
fn agrees(text: &str) -> bool {
    match top_members(text) {
        Some(members) => {
            assert_eq!(Some(members), by_serde(text), "{text:?}");
            true
        }
        None => false,
    }
}

const VALID: &[&str] = &[
    r#"{"model":"bench","messages":[{"role":"user","content":"hello from the load test"}]}"#,
    "{}",
    " \t\r\n{ } \n",
    r#"{"a":1,"b":-0,"c":-12.5e+3,"d":0.25E-7,"e":1e9,"f":true,"g":false,"h":null}"#,
    r#"{"s":"tab\there \"q\" \\ \/ \b\f\n\r \u00e9\uD83D\ude00 é 😀","t":""}"#,
    r#"{"n":{"a\"b":[1,[2,[3,{}]],{"x":[]}],"c\u0041":"v"},"e":[ ],"o":{ }}"#,
    r#"{ "model" : "m" , "stream" : true , "stream_options" : { "include_usage" : true } }"#,
    r#"{"dup":1,"dup":2,"x":{"dup":1,"dup":2}}"#,
    r#"{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
];

#[test]
fn the_usual_bodies_are_read_in_one_pass_as_serde_json_reads_them() {
    for text in VALID {
        assert!(agrees(text), "taken in one pass: {text:?}");
    }
}

#[test]
fn what_serde_json_refuses_is_left_to_it() {
    for text in [
        "",
        " ",
        "[]",
        "1",
        "\u{feff}{}",
        "{",
        "{,}",
        r#"{"a":1,}"#,
        r#"{"a":1 "b":2}"#,
        r#"{"a" 1}"#,
        r#"{"a":}"#,
        r#"{a:1}"#,
        r#"{"a":1}x"#,
        r#"{"a":1}{}"#,
        r#"{"a":[1,]}"#,
        r#"{"a":[1 2]}"#,
        r#"{"a":{"b":1,}}"#,
        r#"{"a":{"b"}}"#,
        r#"{"a":{1:2}}"#,
        r#"{"a":[}"#,
        r#"{"a":{]}"#,
        r#"{"a":01}"#,
        r#"{"a":-}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":1e}"#,
        r#"{"a":1e+}"#,
        r#"{"a":+1}"#,
        r#"{"a":tru}"#,
        r#"{"a":nul}"#,
        r#"{"a":truex}"#,
        r#"{"a":"\x"}"#,
        r#"{"a":"\u12G4"}"#,
        r#"{"a":"\u12"}"#,
        "{\"a\":\"tab\there\"}",
        "{\"a\":\"nl\nhere\"}",
        "{\"a\":\"unclosed}",
        r#"{"a":"x"]"#,
        r#"{"a":'x'}"#,
        r#"{"a":NaN}"#,
        "{\"a\":1}\u{0}",
        "{\"a\":1}\u{a0}",
    ] {
        assert!(!agrees(text), "left to serde_json: {text:?}");
        assert!(by_serde(text).is_none(), "serde_json refuses {text:?}");
    }
    // Valid, but left to serde_json: an escaped name at the top, nesting over 64.
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(65), "]".repeat(65));
    for text in [r#"{"a\u0062":1}"#, deep.as_str()] {
        assert!(!agrees(text) && by_serde(text).is_some(), "{text:?}");
    }
}

#[test]
fn every_cut_and_every_byte_changed_agrees_with_serde_json() {
    // Each valid text cut at every byte, and with every byte replaced by each of the
    // bytes that matter to the grammar: where the one pass accepts, serde_json agrees.
    let bytes: &[u8] = b" \t\n\"\\/{}[],:0123456789-+.eEtrufalsnbx\x01\x1f\x7f";
    for text in VALID {
        for cut in 0..text.len() {
            if let Some(prefix) = text.get(..cut) {
                agrees(prefix);
            }
        }
        for at in 0..text.len() {
            for &byte in bytes {
                let mut changed = text.as_bytes().to_vec();
                changed[at] = byte;
                if let Ok(changed) = std::str::from_utf8(&changed) {
                    agrees(changed);
                }
                let mut inserted = text.as_bytes().to_vec();
                inserted.insert(at, byte);
                if let Ok(inserted) = std::str::from_utf8(&inserted) {
                    agrees(inserted);
                }
            }
        }
    }
}

#[test]
fn the_first_special_byte_is_found_wherever_it_falls() {
    for special in (0u8..0x20).chain([b'"', b'\\']) {
        for length in 0..40 {
            for at in 0..=length {
                let mut text = vec![b'a'; length];
                // Bytes that a wider test could mistake: next to the specials' values.
                for (i, byte) in text.iter_mut().enumerate() {
                    *byte = [b'!', b'#', b'[', b']', b' ', 0x7f, 0xc3, b'a'][i % 8];
                }
                if at < length {
                    text[at] = special;
                }
                assert_eq!(next_special(&text, 0), at.min(length), "{text:?}");
                assert_eq!(next_special(&text, at.min(length)), at.min(length));
            }
        }
    }
}
