//! TLS on a listener (`tls:`, `admin_tls:`), with rustls: certificates read from PEM files
//! and chosen by SNI, a handshake bounded by the connection's head deadline and run on the
//! connection's own task (a slow client never holds the accept loop), client certificates
//! when a client CA is configured, and a new certificate set swapped in whole on a reload
//! while open connections keep theirs.
//!
//! | file | what it owns |
//! |---|---|
//! | `certificate.rs` | [`Certificate`]: a chain and its key read and checked, its names and expiry |
//! | `resolver.rs` | [`SniResolver`]: the certificate for a handshake's SNI |
//! | `terminator.rs` | [`TlsSettings`] (one load) and [`Terminator`] (the handshake, its failures) |
//! | `stream.rs` | [`TlsStream`]: the connection as a pingora stream; [`TlsDetails`] |
//! | `subject.rs` | the client certificate's subject as an RFC 4514 string |

mod certificate;
mod resolver;
mod stream;
mod subject;
mod terminator;

pub use certificate::{certificates_in, load_client_roots, Certificate, CertificateError, Culprit};
pub use resolver::SniResolver;
pub use stream::{TlsDetails, TlsStream};
pub use terminator::{MinVersion, Terminator, TlsSettings, ALPN_H2, ALPN_HTTP1, FAILURE_REASONS};

use super::connection::ClientConnection;
use pingora_core::protocols::Stream;

/// The stream a connection is served on: `tcp` itself on a cleartext listener, else the
/// TLS connection once its handshake succeeded (by the connection's head deadline); `None`
/// when it failed (the connection is closed).
pub(super) async fn terminate(
    terminator: Option<&Terminator>,
    tcp: Stream,
    connection: &ClientConnection,
) -> Option<Stream> {
    match terminator {
        None => Some(tcp),
        Some(terminator) => {
            let tls = terminator.accept(tcp, connection.read_deadline()).await?;
            Some(Box::new(tls))
        }
    }
}
