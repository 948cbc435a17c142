//! The one place where a failure of the HTTP/1.1 layer (`http1::Error`) becomes what the
//! gateway tells about it: on the client's own connection (its head or body refused, or
//! nobody left to tell), and on an upstream's (the code a failed exchange is reported
//! with). No other module decides the status or code of an HTTP-layer failure.

use super::RequestError;
use crate::http1::Error;

impl RequestError {
    /// What the client gets for a failure on its own connection: the answer for a head or
    /// body it sent that is refused, an internal error for an answer the gateway could not
    /// write as it declared; `None` when nobody is left to answer (the client closed, its
    /// connection failed, a read or write of it timed out).
    pub fn from_client(error: &Error) -> Option<RequestError> {
        match error {
            Error::MalformedHead(_) => Some(RequestError::InvalidRequest {
                detail: "its head could not be parsed",
            }),
            Error::MalformedBody(_) => Some(RequestError::InvalidRequest {
                detail: "the chunked framing of its body is malformed",
            }),
            Error::HeadTooLarge => Some(RequestError::RequestHeaderTooLarge),
            Error::UnsupportedTransferCoding => Some(RequestError::UnsupportedTransferEncoding),
            Error::Overrun
            | Error::PrematureEnd
            | Error::InvalidAnswer(_)
            | Error::BodySource(_) => Some(RequestError::Internal),
            Error::Closed(_)
            | Error::ReadTimeout
            | Error::WriteTimeout
            | Error::Read(_)
            | Error::Write(_) => None,
        }
    }

    /// What a failed exchange with an upstream is reported as: an answer that is not HTTP
    /// is `upstream_protocol_error`, a timeout `upstream_timeout`, anything else (a closed
    /// or failed connection) `upstream_unavailable`.
    pub fn from_upstream(error: &Error) -> RequestError {
        match error {
            Error::MalformedHead(_)
            | Error::MalformedBody(_)
            | Error::HeadTooLarge
            | Error::UnsupportedTransferCoding => RequestError::UpstreamProtocolError,
            Error::ReadTimeout | Error::WriteTimeout => RequestError::UpstreamTimeout,
            Error::Closed(_)
            | Error::Read(_)
            | Error::Write(_)
            | Error::BodySource(_)
            | Error::PrematureEnd
            | Error::Overrun
            | Error::InvalidAnswer(_) => RequestError::UpstreamUnavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_head_is_answered_by_its_kind() {
        let code = |e: Error| RequestError::from_client(&e).map(|r| r.code());
        assert_eq!(code(Error::MalformedHead("x")), Some("invalid_request"));
        assert_eq!(code(Error::MalformedBody("x")), Some("invalid_request"));
        assert_eq!(code(Error::HeadTooLarge), Some("request_header_too_large"));
        assert_eq!(
            code(Error::UnsupportedTransferCoding),
            Some("unsupported_transfer_encoding")
        );
        assert_eq!(code(Error::Overrun), Some("internal_error"));
        assert_eq!(code(Error::Closed("a body")), None);
        assert_eq!(code(Error::ReadTimeout), None);
        assert_eq!(
            code(Error::Write(std::io::ErrorKind::BrokenPipe.into())),
            None
        );
    }

    #[test]
    fn an_upstream_failure_is_reported_by_its_kind() {
        let of = |e: Error| RequestError::from_upstream(&e);
        assert_eq!(
            of(Error::MalformedBody("x")),
            RequestError::UpstreamProtocolError
        );
        assert_eq!(
            of(Error::MalformedHead("x")),
            RequestError::UpstreamProtocolError
        );
        assert_eq!(of(Error::ReadTimeout), RequestError::UpstreamTimeout);
        assert_eq!(
            of(Error::Closed("a body")),
            RequestError::UpstreamUnavailable
        );
        assert_eq!(
            of(Error::Read(std::io::ErrorKind::ConnectionReset.into())),
            RequestError::UpstreamUnavailable
        );
    }
}
