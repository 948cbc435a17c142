//! The client side's connections below HTTP: accept loops, the per-core workers, the bound
//! on open connections, the per-connection deadlines, and the buffered stream every
//! connection (client or upstream) is written through. It knows nothing of the gateway's
//! domain: an [`App`] is handed each request's [`Session`] (HTTP/1.1, or a stream of an
//! HTTP/2 connection) and serves it.
//!
//! | file | what it owns |
//! |---|---|
//! | `accept.rs` | [`listen`], the accept loop, [`ConnectionBound`] (`max_connections`), HTTP/1.1 or HTTP/2 chosen |
//! | `workers.rs` | event loops, one per core, each with a `SO_REUSEPORT` listener |
//! | `connection.rs` | [`ClientPolicy`] and [`ClientConnection`]: head and idle deadlines, head size |
//! | `transport.rs` | [`BufferedStream`]: the write buffer, deadlines applied to reads |
//! | `plain.rs` | [`PlainStream`]: a plain TCP connection (client or upstream) as a pingora stream |
//! | `tls.rs` | TLS: certificates, SNI, the handshake, [`tls::TlsStream`] |
//! | `app.rs` | [`App`], what a listener serves |
//! | `session.rs` | [`Session`]: an HTTP/1 session or an HTTP/2 stream, behind one set of methods |

mod accept;
mod app;
pub mod connection;
pub mod plain;
mod session;
pub mod tls;
pub mod transport;
pub mod workers;

pub use accept::{listen, listen_bounded, ConnectionBound};
pub use app::App;
pub use connection::{ClientConnection, ClientPolicy};
pub use plain::PlainStream;
pub use session::{write_simple, Session};
pub use transport::BufferedStream;
pub use workers::Workers;
