use super::*;

#[test]
fn host_port_is_ignored_when_filtering_hosts() {
    assert_eq!(strip_port("api.example.com:8080"), "api.example.com");
    assert_eq!(strip_port("api.example.com"), "api.example.com");
    assert_eq!(strip_port("[::1]:8080"), "[::1]");
    assert_eq!(strip_port("[x"), "[x", "an unclosed bracket does not panic");
    assert_eq!(strip_port("["), "[");
}
