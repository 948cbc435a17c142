//! HTTP/1.1 as the gateway reads and writes it, on both sides: as a server to clients (and
//! on the admin and echo listeners) and as a client to upstreams. Heads read and checked
//! (one module, a policy per side), bodies read and written by one framing module, answers
//! written, server-sent events read. It imports nothing of the domain (see
//! `docs/architecture.md`, "Layers"; `tests/layers.rs` keeps it so).
//!
//! | file | what it holds |
//! |---|---|
//! | `server.rs` | one client connection's session: requests read in order, answers written, keep-alive |
//! | `blocking_client.rs` | a blocking client over a std stream (the OTLP exporter's), by the same head and body rules |
//! | `client.rs` | one upstream connection: the request written, the answer's head and body read, reuse |
//! | `head.rs` | heads parsed (`httparse`) and checked, a request's and an answer's side by side |
//! | `framing.rs` | a request's and an upstream answer's framing side by side, an answer's writing |
//! | `answer.rs` | the request header slimmed once an answer's head is out |
//! | `reader.rs` | the reading side of a connection, either end: buffered bytes, a body by length, chunks or close |
//! | `chunk_line.rs` | the one chunk-size line parser (RFC 9112 §7.1.1) |
//! | `error.rs` | [`Error`]: what the layer reports, one enum for both sides |
//! | `connection_tokens.rs` | the `Connection` field's tokens, and keep-alive by version |
//! | `sse.rs` | the one reader of server-sent events: line ends, event ends, `data:` values, bounded buffering |

pub mod answer;
pub mod blocking_client;
mod chunk_line;
pub mod client;
pub mod connection_tokens;
pub mod error;
pub mod framing;
mod head;
pub mod reader;
pub mod server;
pub mod sse;

pub use error::Error;
