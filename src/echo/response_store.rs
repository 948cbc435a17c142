//! The echo backend's stored responses, in memory and bounded (the oldest is forgotten
//! first), and the routes that use them by ID: `GET` and `DELETE /v1/responses/{id}`,
//! `POST /v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`.

use super::reply::Reply;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// How many responses the demo backend keeps.
pub const STORED_RESPONSES: usize = 1000;

/// A created response and the input items it was made from.
#[derive(Debug, Clone)]
pub struct Stored {
    pub response: Value,
    pub input_items: Vec<Value>,
}

#[derive(Debug)]
pub struct ResponseStore {
    capacity: usize,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_id: HashMap<String, Stored>,
    /// IDs in the order they were stored; a deleted one keeps its place until it ages out,
    /// so this never holds more than `capacity` IDs.
    order: VecDeque<String>,
}

impl ResponseStore {
    pub fn new(capacity: usize) -> Self {
        ResponseStore {
            capacity,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map is consistent between statements, so a panic elsewhere cannot leave it
        // half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn insert(&self, id: &str, stored: Stored) {
        let mut entries = self.entries();
        entries.order.push_back(id.to_owned());
        entries.by_id.insert(id.to_owned(), stored);
        while entries.order.len() > self.capacity {
            if let Some(oldest) = entries.order.pop_front() {
                entries.by_id.remove(&oldest);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Stored> {
        self.entries().by_id.get(id).cloned()
    }

    fn remove(&self, id: &str) -> Option<Stored> {
        self.entries().by_id.remove(id)
    }
}

/// `GET /v1/responses/{id}`
pub fn retrieve(store: &ResponseStore, id: &str) -> Reply {
    match store.get(id) {
        Some(stored) => Reply::json(&stored.response),
        None => not_found(),
    }
}

/// `DELETE /v1/responses/{id}`
pub fn delete(store: &ResponseStore, id: &str) -> Reply {
    match store.remove(id) {
        Some(_) => Reply::json(&json!({"id": id, "object": "response", "deleted": true})),
        None => not_found(),
    }
}

/// `POST /v1/responses/{id}/cancel`. As with OpenAI, only a `background` response can be
/// cancelled; the echo backend finishes every response at once, so a cancel finds it
/// complete and returns it as it is.
pub fn cancel(store: &ResponseStore, id: &str) -> Reply {
    match store.get(id) {
        Some(stored) if stored.response["background"] == true => Reply::json(&stored.response),
        Some(_) => Reply::error(
            400,
            "Only responses created with background: true can be cancelled.",
            None,
            None,
        ),
        None => not_found(),
    }
}

/// `GET /v1/responses/{id}/input_items`, with `limit` (1-100, default 20), `order` (`asc`
/// or `desc`, the default) and `after` (an item ID) from the query string.
pub fn input_items(store: &ResponseStore, id: &str, query: Option<&str>) -> Reply {
    let Some(stored) = store.get(id) else {
        return not_found();
    };
    let mut limit = 20;
    let mut descending = true;
    let mut after = None;
    for (name, value) in query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
    {
        match name {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => return Reply::invalid("limit", "'limit' must be an integer from 1 to 100."),
            },
            "order" if value == "asc" || value == "desc" => descending = value == "desc",
            "order" => return Reply::invalid("order", "'order' must be 'asc' or 'desc'."),
            "after" => after = Some(value.to_owned()),
            _ => {}
        }
    }
    let mut items = stored.input_items;
    if descending {
        items.reverse();
    }
    if let Some(after) = after {
        let start = items.iter().position(|i| i["id"] == after.as_str());
        items = items.split_off(start.map_or(items.len(), |p| p + 1));
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    let first_id = items.first().map_or(Value::Null, |i| i["id"].clone());
    let last_id = items.last().map_or(Value::Null, |i| i["id"].clone());
    Reply::json(&json!({
        "object": "list", "data": items, "first_id": first_id, "last_id": last_id,
        "has_more": has_more,
    }))
}

fn not_found() -> Reply {
    Reply::error(
        404,
        "The echo backend has no response with this ID.",
        None,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::body_json;

    fn stored(id: &str, items: usize) -> Stored {
        Stored {
            response: json!({"id": id, "object": "response", "background": false}),
            input_items: (0..items)
                .map(|i| json!({"id": format!("msg_{i}")}))
                .collect(),
        }
    }

    #[test]
    fn the_oldest_response_is_forgotten_first_and_deletes_do_not_grow_the_store() {
        let store = ResponseStore::new(2);
        for id in ["a", "b", "c"] {
            store.insert(id, stored(id, 0));
        }
        assert!(store.get("a").is_none(), "the oldest went");
        assert!(store.get("b").is_some() && store.get("c").is_some());
        for i in 0..10 {
            let id = format!("x{i}");
            store.insert(&id, stored(&id, 0));
            assert_eq!(body_json(delete(&store, &id)).0, 200);
        }
        assert!(store.entries().order.len() <= 2);
        assert_eq!(body_json(delete(&store, "x0")).0, 404, "deleted once");
    }

    #[test]
    fn by_id_routes_answer_or_404() {
        let store = ResponseStore::new(4);
        store.insert("r", stored("r", 3));
        assert_eq!(body_json(retrieve(&store, "r")).1["id"], "r");
        assert_eq!(body_json(retrieve(&store, "nope")).0, 404);
        assert_eq!(
            body_json(cancel(&store, "r")).0,
            400,
            "not a background response"
        );
        let (_, list) = body_json(input_items(&store, "r", Some("limit=2")));
        assert_eq!(list["data"][0]["id"], "msg_2", "newest first by default");
        assert_eq!(list["has_more"], true);
        let (_, list) = body_json(input_items(&store, "r", Some("order=asc&after=msg_0")));
        assert_eq!(list["first_id"], "msg_1");
        assert_eq!(list["last_id"], "msg_2");
        assert_eq!(list["has_more"], false);
        assert_eq!(body_json(input_items(&store, "r", Some("limit=0"))).0, 400);
        let (status, deleted) = body_json(delete(&store, "r"));
        assert_eq!((status, &deleted["deleted"]), (200, &json!(true)));
        assert_eq!(body_json(retrieve(&store, "r")).0, 404);
    }
}
