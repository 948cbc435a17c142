//! The admin listener (never the client port): `/metrics`, `/healthz`, `/readyz`, and the
//! view of keys, `/keys` and `/keys/{name}` (`admin/keys.rs`).

mod keys;

use crate::gateway::Gateway;
use crate::http1::server::Session as ServerSession;
use crate::http_app::{write_simple, App};
use bytes::Bytes;
use pingora::server::ShutdownWatch;
use std::sync::Arc;

pub struct Admin {
    gateway: Arc<Gateway>,
}

impl Admin {
    /// `/readyz`'s body: whether the gateway takes requests, and each upstream's state (for
    /// people; the status code alone decides readiness).
    fn readiness(&self) -> Bytes {
        let upstreams: Vec<serde_json::Value> = self
            .gateway
            .catalog()
            .upstreams
            .iter()
            .map(|u| {
                serde_json::json!({
                    "name": u.name,
                    "state": self.gateway.upstreams.availability(&u.name).name(),
                    "in_flight": self.gateway.upstreams.in_flight(&u.name),
                })
            })
            .collect();
        let status = if self.gateway.is_draining() {
            "draining"
        } else {
            "ready"
        };
        // The shared limits store's state, for people: a store that is down does not make
        // the gateway unready (on_error decides what admission does meanwhile).
        let limits_store = self.gateway.limits_store.as_ref().map(|store| {
            serde_json::json!({
                "state": if store.is_up() { "up" } else { "down" },
                "on_error": match store.config.on_error {
                    crate::config::OnStoreError::Local => "local",
                    crate::config::OnStoreError::Open => "open",
                    crate::config::OnStoreError::Closed => "closed",
                },
            })
        });
        let body = serde_json::json!({"status": status, "generation": self.gateway.catalog().generation, "upstreams": upstreams, "limits_store": limits_store});
        Bytes::from(body.to_string())
    }

    pub fn new(gateway: Arc<Gateway>) -> Self {
        Admin { gateway }
    }

    /// Status, content type and body for an admin request.
    fn answer(&self, method: &str, path: &str) -> (u16, &'static str, Bytes) {
        match (method, path) {
            ("GET", "/metrics") => (
                200,
                "text/plain; version=0.0.4",
                Bytes::from(self.gateway.render_metrics()),
            ),
            ("GET", "/healthz") => (200, "text/plain", Bytes::from_static(b"ok\n")),
            ("GET", "/readyz") => {
                let status = if self.gateway.is_draining() { 503 } else { 200 };
                (status, "application/json", self.readiness())
            }
            ("GET", "/keys") => (200, "application/json", json(&keys::list(&self.gateway))),
            ("GET", path) if path.starts_with("/keys/") => {
                match keys::one(&self.gateway, &path["/keys/".len()..]) {
                    Some(view) => (200, "application/json", json(&view)),
                    None => (
                        404,
                        "application/json",
                        Bytes::from_static(
                            b"{\"error\":\"unknown_key\",\"message\":\"No key has this name; GET /keys lists them.\"}",
                        ),
                    ),
                }
            }
            _ => (
                404,
                "text/plain",
                Bytes::from_static(b"not found: try /metrics, /healthz, /readyz or /keys\n"),
            ),
        }
    }
}

fn json(value: &serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}

impl App for Admin {
    async fn serve(&self, session: &mut ServerSession, _shutdown: &ShutdownWatch) -> bool {
        if session.read_request().await.ok() != Some(true) {
            return false;
        }
        let (status, content_type, body) = {
            let request = session.req_header();
            self.answer(request.method.as_str(), request.uri.path())
        };
        write_simple(session, status, content_type, body)
            .await
            .is_some()
    }
}
