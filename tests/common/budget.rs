//! Money budgets: a catalog with a priced model, a budgeted key and an owner's budget,
//! request bodies of a known reservation, and the admin view's budget windows.

use super::client::{get, Response};
use super::gateway::{config_with, key_hash, TestGateway};
use super::mock::Reply;
use super::redis_server::{store, RedisServer};
use super::usage::json_with_usage;
use std::time::Duration;

pub const TEAM_A: &str = "sk-test-team-a-0123456789";
pub const TEAM_B: &str = "sk-test-team-b-0123456789";
pub const PRICE: &str =
    "    price: {input_per_mtok: 2.5, cached_input_per_mtok: 1.25, output_per_mtok: 10}\n";

/// The standard catalog with `chat-model` priced, `alpha` given `alpha_budget`, and two
/// keys of the owner `search`, whose budget is `owner_budget`.
pub fn budget_config(upstream: &str, alpha_budget: &str, owner_budget: &str) -> String {
    config_with(
        upstream,
        &format!("owners:\n  - name: search\n    budget: {owner_budget}\n"),
    )
    .replace(
        "  - id: chat-model\n    upstream: mock\n",
        &format!("  - id: chat-model\n    upstream: mock\n{PRICE}"),
    )
    .replace(
        "keys:\n  - name: alpha\n",
        &format!(
            "keys:\n  - name: team-a\n    owner: search\n    sha256: {}\n  - name: team-b\n    \
             owner: search\n    sha256: {}\n  - name: alpha\n    budget: {alpha_budget}\n",
            key_hash(TEAM_A),
            key_hash(TEAM_B)
        ),
    )
}

/// A chat body asking for `max_tokens` of output; its input estimate is its bytes / 4.
pub fn body(max_tokens: u64) -> String {
    format!(
        r#"{{"model":"chat-model","max_tokens":{max_tokens},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

/// The micro-dollars `body(max_tokens)` reserves at PRICE: input estimate and output limit.
pub fn reserved(max_tokens: u64) -> u64 {
    let input = body(max_tokens).len() as u64 / 4;
    (input * 2_500_000 + max_tokens * 10_000_000).div_ceil(1_000_000)
}

pub fn usage(prompt: u64, cached: u64, completion: u64) -> Reply {
    json_with_usage(&format!(
        r#"{{"prompt_tokens":{prompt},"completion_tokens":{completion},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}"#
    ))
}

/// The key's budget windows as the admin view shows them.
pub async fn budget_view(gw: &TestGateway, key: &str) -> Vec<serde_json::Value> {
    let response = get(gw.admin(), &format!("/keys/{key}"), None).await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["budget"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub async fn spent(gw: &TestGateway, key: &str, scope: &str, window: &str) -> String {
    let view = budget_view(gw, key).await;
    let entry = view
        .iter()
        .find(|w| w["scope"] == scope && w["window"] == window)
        .unwrap_or_else(|| panic!("a {scope} {window} window in {view:?}"));
    entry["spent_usd"].as_str().unwrap().to_owned()
}

/// Milliseconds since the Unix epoch of a UTC time written as RFC 3339.
pub fn at(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

/// The budget catalog with the limits store of `redis`.
pub fn shared(upstream: &str, redis: &RedisServer, alpha: &str, owner: &str) -> String {
    budget_config(upstream, alpha, owner).replace(
        "environment: test\n",
        &format!(
            "environment: test\nlimits_store:\n{}",
            store(redis, "  timeout: 2s\n")
        ),
    )
}

/// Waits (bounded) until `gw`'s admin view shows `expected` spent: settlements in the
/// store are sent off the response path.
pub async fn until_spent(gw: &TestGateway, key: &str, scope: &str, window: &str, expected: &str) {
    let wait = async {
        loop {
            if spent(gw, key, scope, window).await == expected {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    let last = tokio::time::timeout(Duration::from_secs(10), wait).await;
    assert!(
        last.is_ok(),
        "{key} {scope} {window}: {} spent, not {expected}",
        spent(gw, key, scope, window).await
    );
}
