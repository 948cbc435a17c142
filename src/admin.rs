//! The admin listener (never the client port): `/metrics`, `/healthz`, `/readyz` for
//! probes and Prometheus, open to whoever reaches the listener; and, behind an admin token
//! (`admin/auth.rs`), the view of keys (`GET /keys`, `GET /keys/{name}`, `admin/keys.rs`)
//! and the key switches (`POST /keys/{name}/disable` and `/enable`, `admin/switches.rs`).

mod auth;
mod keys;
mod switches;

pub use auth::{AdminError, Caller};

use crate::config::OnStoreError;
use crate::gateway::Gateway;
use crate::listener::App;
use crate::listener::Session as ServerSession;
use bytes::Bytes;
use pingora_core::server::ShutdownWatch;
use pingora_http::ResponseHeader;
use std::sync::Arc;

pub struct Admin {
    gateway: Arc<Gateway>,
    /// `admin_listen` is a loopback address: without admin tokens, the protected endpoints
    /// are served (to the host's own processes).
    loopback_listener: bool,
}

/// An admin answer: status, content type and body.
type Answer = (u16, &'static str, Bytes);

impl Admin {
    pub fn new(gateway: Arc<Gateway>, loopback_listener: bool) -> Self {
        Admin {
            gateway,
            loopback_listener,
        }
    }

    /// Whether the gateway takes requests: not draining, and not refusing every request
    /// for a limits store that is down under `on_error: closed`.
    fn ready(&self) -> bool {
        let refusing =
            self.gateway.limits_store.as_ref().is_some_and(|store| {
                store.config.on_error == OnStoreError::Closed && !store.is_up()
            });
        !self.gateway.is_draining() && !refusing
    }

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
        } else if !self.ready() {
            "limits_unavailable"
        } else {
            "ready"
        };
        // The shared limits store's state. A store that is down makes the gateway unready
        // only under `on_error: closed`, where every request would be refused.
        let limits_store = self.gateway.limits_store.as_ref().map(|store| {
            serde_json::json!({
                "state": if store.is_up() { "up" } else { "down" },
                "on_error": match store.config.on_error {
                    OnStoreError::Local => "local",
                    OnStoreError::Open => "open",
                    OnStoreError::Closed => "closed",
                },
            })
        });
        let body = serde_json::json!({"status": status, "generation": self.gateway.catalog().generation, "upstreams": upstreams, "limits_store": limits_store});
        Bytes::from(body.to_string())
    }

    /// The answer to an open endpoint, or `None` when the path is not one.
    fn open_answer(&self, method: &str, path: &str) -> Option<Answer> {
        Some(match (method, path) {
            ("GET", "/metrics") => (
                200,
                "text/plain; version=0.0.4",
                Bytes::from(self.gateway.render_metrics()),
            ),
            ("GET", "/healthz") => (200, "text/plain", Bytes::from_static(b"ok\n")),
            ("GET", "/readyz") => {
                let status = if self.ready() { 200 } else { 503 };
                (status, "application/json", self.readiness())
            }
            _ => return None,
        })
    }

    /// The answer to a protected endpoint, for an authorized caller.
    async fn protected_answer(
        &self,
        method: &str,
        path: &str,
        caller: &Caller,
    ) -> Result<Answer, AdminError> {
        let json =
            |value: serde_json::Value| (200, "application/json", Bytes::from(value.to_string()));
        if path == "/keys" {
            return match method {
                "GET" => Ok(json(keys::list(&self.gateway).await)),
                _ => Err(AdminError::MethodNotAllowed),
            };
        }
        let rest = path.strip_prefix("/keys/").ok_or(AdminError::UnknownPath)?;
        let (name, action) = match rest.split_once('/') {
            Some((name, action)) => (name, Some(action)),
            None => (rest, None),
        };
        match (method, action) {
            ("GET", None) => keys::one(&self.gateway, name)
                .await
                .map(json)
                .ok_or(AdminError::UnknownKey),
            ("POST", Some("disable")) => switches::switch(&self.gateway, name, true, caller)
                .await
                .map(json),
            ("POST", Some("enable")) => switches::switch(&self.gateway, name, false, caller)
                .await
                .map(json),
            (_, None | Some("disable") | Some("enable")) => Err(AdminError::MethodNotAllowed),
            _ => Err(AdminError::UnknownPath),
        }
    }

    /// Status, content type and body for an admin request.
    async fn answer(&self, method: &str, path: &str, authorization: Option<&[u8]>) -> Answer {
        if let Some(answer) = self.open_answer(method, path) {
            return answer;
        }
        let protected = path == "/keys" || path.starts_with("/keys/");
        let outcome = if protected {
            match auth::authorize(
                &self.gateway.catalog(),
                self.loopback_listener,
                authorization,
            ) {
                Ok(caller) => self.protected_answer(method, path, &caller).await,
                Err(refused) => Err(refused),
            }
        } else {
            Err(AdminError::UnknownPath)
        };
        outcome.unwrap_or_else(|error| {
            (
                error.status(),
                "application/json",
                Bytes::from(error.envelope().to_string()),
            )
        })
    }
}

impl App for Admin {
    async fn serve(&self, session: &mut ServerSession, _shutdown: &ShutdownWatch) -> bool {
        if session.read_request().await.ok() != Some(true) {
            return false;
        }
        let (method, path, authorization, request_id) = {
            let request = session.req_header();
            let header = |name: &str| request.headers.get(name).map(|v| v.as_bytes().to_vec());
            (
                request.method.as_str().to_owned(),
                request.uri.path().to_owned(),
                header("authorization"),
                crate::request_id::accept_or_generate(header("x-request-id").as_deref()),
            )
        };
        // No admin route reads a body: a request that sent one ends its connection.
        if !session.is_body_done() {
            session.disable_keepalive();
        }
        let (status, content_type, body) =
            self.answer(&method, &path, authorization.as_deref()).await;
        write(session, status, content_type, &request_id, body)
            .await
            .is_some()
    }
}

/// Writes a whole admin answer, with its `x-request-id` (and `WWW-Authenticate` on a 401);
/// `None` when the client is gone.
async fn write(
    session: &mut ServerSession,
    status: u16,
    content_type: &str,
    request_id: &str,
    body: Bytes,
) -> Option<()> {
    let mut header = ResponseHeader::build_no_case(status, Some(4)).ok()?;
    header.insert_header("content-type", content_type).ok()?;
    header
        .insert_header("content-length", body.len().to_string())
        .ok()?;
    header.insert_header("x-request-id", request_id).ok()?;
    if status == 401 {
        header.insert_header("www-authenticate", "Bearer").ok()?;
    }
    session.write_response_header(header).await.ok()?;
    session.write_response_body(body, true).await.ok()
}
