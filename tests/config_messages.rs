//! How configuration errors read: a YAML syntax error names the key path it is in with its
//! line and column and says what usually causes it; a bare number for a duration asks for a
//! unit; a duplicate names both items. Through the same `parse` the gateway and `sluice
//! check` use.

use sluice::config::parse;

fn no_env(_: &str) -> Option<String> {
    None
}

fn errors_of(text: &str) -> Vec<String> {
    match parse("g.yaml", text, None, &no_env) {
        Ok(_) => panic!("expected errors in:\n{text}"),
        Err(errors) => errors
            .0
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
    }
}

fn only_error(text: &str) -> String {
    let errors = errors_of(text);
    assert_eq!(errors.len(), 1, "one error: {errors:#?}");
    errors[0].clone()
}

#[test]
fn a_field_indented_too_deep_names_the_item_and_line_and_says_why() {
    let text = "\
listen: 127.0.0.1:0
upstreams:
  - name: a
    url: http://127.0.0.1:1/v1
  - name: hosted
      url: http://127.0.0.1:2/v1
";
    let error = only_error(text);
    assert!(
        error.starts_with("g.yaml: upstreams[1].name, line 6 column 10: not valid YAML: "),
        "the key path the line is in, then line and column: {error}"
    );
    assert!(
        error.contains("indented deeper than the field above it"),
        "our words for the likely cause: {error}"
    );
    assert!(
        error.ends_with("(the parser says: mapping values are not allowed in this context)"),
        "the parser's words last: {error}"
    );
}

#[test]
fn a_field_dedented_out_of_its_list_item_names_that_item() {
    let text = "\
upstreams:
  - {name: a, url: \"http://127.0.0.1:1/v1\"}
models:
  - id: m
    upstream: a
  - id: n
    upstream: a
   owned_by: me
";
    let error = only_error(text);
    assert!(
        error.starts_with("g.yaml: models[1], line 8 column 4: not valid YAML: "),
        "{error}"
    );
    assert!(
        error.contains("indented less than the list item"),
        "{error}"
    );
}

#[test]
fn a_tab_in_the_indentation_is_named_as_such() {
    let error = only_error("upstreams:\n  - name: a\n\turl: x\n");
    assert!(error.contains("line 3 column 1"), "{error}");
    assert!(
        error.contains("a tab character; YAML indents with spaces only"),
        "{error}"
    );
}

#[test]
fn a_bare_number_for_a_duration_asks_for_a_unit() {
    let text = "\
shutdown_grace: 30
upstreams:
  - name: a
    url: http://127.0.0.1:1/v1
    first_byte_timeout: 120
    eject_duration: 1.5
";
    let errors = errors_of(text);
    for expected in [
        "g.yaml: shutdown_grace: `30` is a bare number: add a unit, e.g. 30s",
        "g.yaml: upstreams[0].first_byte_timeout: `120` is a bare number: add a unit, e.g. 30s",
        "g.yaml: upstreams[0].eject_duration: `1.5` is a bare number: add a unit, e.g. 30s",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "missing `{expected}` in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), 3, "nothing else: {errors:#?}");
}

#[test]
fn duplicates_are_reported_at_the_later_item_naming_the_first() {
    let text = "\
upstreams:
  - {name: a, url: \"http://127.0.0.1:1/v1\"}
  - {name: b, url: \"http://127.0.0.1:1/v1\"}
  - {name: a, url: \"http://127.0.0.1:1/v1\"}
models:
  - {id: local-gemma, upstream: a}
  - {id: other, upstream: a}
  - {id: third, upstream: b}
  - {id: local-gemma, upstream: b}
";
    assert_eq!(
        errors_of(text),
        [
            "g.yaml: upstreams[2].name: duplicates upstreams[0] ('a'): each name must be unique",
            "g.yaml: models[3].id: duplicates models[0] ('local-gemma'): each id must be unique",
        ]
    );
}

#[test]
fn a_number_field_holding_text_asks_for_a_whole_number() {
    let error = only_error(&format!(
        "keys:\n  - {{name: k, sha256: {}, requests_per_minute: six}}\n",
        "0".repeat(64)
    ));
    assert_eq!(
        error,
        "g.yaml: keys[0].requests_per_minute: invalid type: string \"six\", expected a whole number"
    );
}

#[test]
fn a_misspelt_field_gets_the_name_it_was_probably_meant_to_be() {
    let error = only_error(
        "upstreams:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    idle_timeuot: 5s\n",
    );
    assert!(
        error.starts_with("g.yaml: upstreams[0].idle_timeuot: unknown field `idle_timeuot`"),
        "{error}"
    );
    assert!(error.ends_with("; did you mean `idle_timeout`?"), "{error}");
    let far = only_error("colour: blue\n");
    assert!(
        !far.contains("did you mean"),
        "no guess when none is close: {far}"
    );
}

#[test]
fn a_port_past_65535_says_so() {
    assert_eq!(
        only_error("listen: 127.0.0.1:80800\n"),
        "g.yaml: listen: '127.0.0.1:80800' is not an address like 127.0.0.1:8080: port 80800 is past 65535"
    );
}
