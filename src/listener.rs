//! The client side's connections below HTTP: accept loops, the per-core workers, the bound
//! on open connections, the per-connection deadlines, and the buffered stream every
//! connection (client or upstream) is written through. It knows nothing of the gateway's
//! domain: an [`App`] is handed each connection's HTTP/1 session and serves it.
//!
//! | file | what it owns |
//! |---|---|
//! | `accept.rs` | [`listen`], the accept loop, [`ConnectionBound`] (`max_connections`) |
//! | `workers.rs` | event loops, one per core, each with a `SO_REUSEPORT` listener |
//! | `connection.rs` | [`ClientPolicy`] and [`ClientConnection`]: head and idle deadlines, head size |
//! | `transport.rs` | [`BufferedStream`]: the write buffer, deadlines applied to reads |
//! | `tls.rs` | TLS: certificates, SNI, the handshake, [`tls::TlsStream`] |
//! | `app.rs` | [`App`], what a listener serves |

mod accept;
mod app;
pub mod connection;
pub mod tls;
pub mod transport;
pub mod workers;

pub use accept::{listen, listen_bounded, ConnectionBound};
pub use app::App;
pub use connection::{ClientConnection, ClientPolicy};
pub use transport::BufferedStream;
pub use workers::Workers;
