//! `GET /v1/models` and `GET /v1/models/{id}`: each key sees its own view, never a price.

mod common;
use common::*;

#[tokio::test]
async fn the_listing_is_an_openai_list_of_the_keys_view() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let all = get(gw.addr(), "/v1/models", Some(ALPHA)).await;
    assert_eq!(all.status, 200);
    assert_eq!(all.header("content-type"), Some("application/json"));
    let body = all.json();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["chat-model", "plain-model", "renamed", "public-one"]);
    let first = &body["data"][0];
    assert_eq!(first["object"], "model");
    assert_eq!(first["endpoint_type"], "chat");
    assert_eq!(
        first["capabilities"],
        serde_json::json!({"streaming": true, "tool_calling": true})
    );
    assert!(first["created"].is_u64() && first["owned_by"].is_string());
    assert!(
        !all.text().contains("price"),
        "the catalog carries no price"
    );

    let limited = get(gw.addr(), "/v1/models", Some(BETA)).await.json();
    let ids: Vec<&str> = limited["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["public-one"], "beta sees only public-*");
    assert!(
        mock.requests().is_empty(),
        "the listing is answered by the gateway"
    );
}

#[tokio::test]
async fn one_model_is_found_or_404_and_hidden_models_look_missing() {
    let mock = MockUpstream::start().await;
    let gw = TestGateway::start(&config(&mock.url())).await;
    let found = get(gw.addr(), "/v1/models/renamed", Some(ALPHA)).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.json()["id"], "renamed");
    assert_eq!(found.json()["capabilities"]["tool_calling"], false);

    let hidden = get(gw.addr(), "/v1/models/chat-model", Some(BETA)).await;
    let missing = get(gw.addr(), "/v1/models/never-existed", Some(BETA)).await;
    assert_eq!(hidden.error().2, "model_not_found");
    assert_eq!(hidden.status, 404);
    let message = |r: &Response| {
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .replace("chat-model", "X")
            .replace("never-existed", "X")
    };
    assert_eq!(
        message(&hidden),
        message(&missing),
        "a hidden model and a missing one answer alike"
    );

    let hidden_chat = chat(gw.addr(), BETA, &chat_body("chat-model")).await;
    assert_eq!(
        hidden_chat.error().2,
        "model_not_found",
        "completions obey the key's view too"
    );
    assert!(mock.requests().is_empty());
}
