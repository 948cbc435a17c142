//! What the HTTP/1.1 layer reports when a message cannot be read or written: one enum for
//! both sides, so its callers match variants, never the text or kind of another crate's
//! error. What a client or an upstream failure becomes for the gateway (a status and a
//! code) is decided once, outside this folder (`src/error/http1.rs`).
//!
//! Small on purpose, as it travels the hot path: the common variants carry a static
//! description or nothing; an I/O failure carries its `std::io::Error` (one word).

use std::fmt;
use std::io;

/// A result of the HTTP/1.1 layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the layer could not read or write a message.
#[derive(Debug)]
pub enum Error {
    /// The peer closed the connection where more of a message was due (what was being
    /// read: a head, a body).
    Closed(&'static str),
    /// A read (a request body) did not finish within its timeout.
    ReadTimeout,
    /// A write did not finish within its timeout.
    WriteTimeout,
    /// A request head over `max_header_bytes`, or with too many fields (431).
    HeadTooLarge,
    /// A request's `Transfer-Encoding` other than one `chunked` coding (501).
    UnsupportedTransferCoding,
    /// A head that cannot be parsed, or whose framing or authority is malformed or
    /// ambiguous (what is wrong with it).
    MalformedHead(&'static str),
    /// A body whose chunked framing is broken (what is wrong with it).
    MalformedBody(&'static str),
    /// An answer's body ended before the length its head declared.
    PrematureEnd,
    /// A writer handed more bytes of a body than its head declared: the caller's bug. The
    /// bytes are not cut to fit; the connection is not kept.
    Overrun,
    /// An answer head the layer was asked to write cannot be made (a status out of range).
    InvalidAnswer(&'static str),
    /// Reading the connection failed.
    Read(io::Error),
    /// Writing the connection failed.
    Write(io::Error),
    /// The body to write could not be read from where the caller keeps it (a spool file).
    BodySource(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed(inside) => write!(f, "the peer closed the connection inside {inside}"),
            Error::ReadTimeout => f.write_str("a read timed out"),
            Error::WriteTimeout => f.write_str("a write timed out"),
            Error::HeadTooLarge => f.write_str("a request head over its size or field limit"),
            Error::UnsupportedTransferCoding => {
                f.write_str("a Transfer-Encoding other than one chunked coding")
            }
            Error::MalformedHead(what) => write!(f, "a malformed head: {what}"),
            Error::MalformedBody(what) => write!(f, "a malformed body: {what}"),
            Error::PrematureEnd => f.write_str("the answer ended before its Content-Length"),
            Error::Overrun => f.write_str("an answer body longer than its Content-Length"),
            Error::InvalidAnswer(what) => write!(f, "an answer head that cannot be made: {what}"),
            Error::Read(e) => write!(f, "reading the connection: {e}"),
            Error::Write(e) => write!(f, "writing the connection: {e}"),
            Error::BodySource(e) => write!(f, "reading the body to send: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read(e) | Error::Write(e) | Error::BodySource(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn stays_small() {
        // Returned on every read and write: three words at most.
        assert!(std::mem::size_of::<Error>() <= 24);
    }

    #[test]
    fn io_failures_name_their_source() {
        let e = Error::Read(std::io::ErrorKind::ConnectionReset.into());
        assert!(std::error::Error::source(&e).is_some());
        assert!(e.to_string().starts_with("reading the connection"));
    }
}
