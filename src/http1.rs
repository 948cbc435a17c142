//! HTTP/1.1 as the gateway reads and writes it, on the client's side (and the admin and
//! echo listeners'): request heads read and checked, bodies read by their framing, answers
//! written, and server-sent events read. It imports nothing of the domain (proxy, upstream
//! choice, limits, catalog). The upstream side (`upstream/http1.rs`) reads its answers'
//! bodies with `reader.rs` and its streams with `sse.rs` too.
//!
//! | file | what it holds |
//! |---|---|
//! | `server.rs` | one client connection's session: requests read in order, answers written, keep-alive |
//! | `head.rs` | a request head parsed (`httparse`) and checked: size, fields, authority, framing |
//! | `framing.rs` | a request body's framing (`Transfer-Encoding`, `Content-Length`), an answer's writing |
//! | `reader.rs` | the reading side of a connection, either end: buffered bytes, a body by length, chunks or close |
//! | `chunk_line.rs` | the one chunk-size line parser (RFC 9112 §7.1.1) |
//! | `connection_tokens.rs` | the `Connection` field's tokens, and keep-alive by version |
//! | `sse.rs` | the one reader of server-sent events: line ends, event ends, `data:` values, bounded buffering |

mod chunk_line;
pub mod connection_tokens;
mod framing;
mod head;
pub mod reader;
pub mod server;
pub mod sse;
