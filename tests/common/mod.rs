//! Shared test fixtures: a mock upstream that speaks HTTP/1.1 (JSON and SSE, delays,
//! failures, a record of what it got), a raw HTTP client, and a gateway started in-process
//! on ephemeral ports.
#![allow(dead_code, unused_imports)]

pub mod budget;
pub mod client;
pub mod gateway;
pub mod h2_client;
pub mod mock;
pub mod otlp;
pub mod process;
pub mod promql;
pub mod redis_server;
pub mod tls;
pub mod usage;

pub use client::*;
pub use gateway::*;
pub use mock::*;
pub use otlp::*;
pub use process::*;
pub use tls::*;
pub use usage::*;
