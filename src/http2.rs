//! HTTP/2 on the client listener, on the `h2` crate (a well-kept, fuzzed codec: we write
//! none of our own). A connection's streams are each served as a request, with the same
//! session methods as an HTTP/1 request (`http1::server::Session`), so the apps serve both
//! alike. It imports nothing of the gateway (see `docs/architecture.md`, "Layers";
//! `tests/layers.rs` keeps it so).
//!
//! | file | what it holds |
//! |---|---|
//! | `connection.rs` | one connection: the settings and protections, the streams accepted and served on tasks, shutdown |
//! | `session.rs` | one stream: its request head and body, its answer under flow control |

mod connection;
mod session;

pub use connection::{
    serve, Activity, Settings, CONNECTION_WINDOW_BYTES, DEFAULT_MAX_CONCURRENT_STREAMS,
    MIN_CLIENT_RESETS, PENDING_RESET_STREAMS, SEND_BUFFER_BYTES, STREAM_WINDOW_BYTES,
};
pub use session::Session;

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4): how a cleartext client
/// says it speaks HTTP/2 without asking first (`h2c` by prior knowledge).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
