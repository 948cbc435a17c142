//! Sluice: an LLM API gateway on pingora. See `docs/architecture.md` for the request path.
#![forbid(unsafe_code)]

pub mod access_log;
pub mod admin;
pub mod auth;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod echo;
pub mod endpoint;
pub mod error;
pub mod gateway;
pub mod glob;
pub mod http1;
pub mod json_object;
pub mod key_switches;
pub mod limits;
pub mod listener;
pub mod logger;
pub mod metrics;
pub mod multipart;
pub mod peer;
pub mod percent;
pub mod proxy;
pub mod reload;
pub mod request_body;
pub mod request_id;
pub mod respond;
pub mod response_id;
pub mod route;
pub mod secret;
pub mod server;
pub mod spool;
pub mod telemetry;
pub mod translate;
pub mod upstream;
pub mod usage;
