//! HTTP/1.1 as the gateway reads and writes it, on both sides. It imports nothing of the
//! domain (proxy, upstream choice, limits, catalog).
//!
//! | file     | what it holds                                                          |
//! |----------|------------------------------------------------------------------------|
//! | `sse.rs` | the one reader of server-sent events: line ends, event ends, `data:` values, bounded buffering |

pub mod sse;
