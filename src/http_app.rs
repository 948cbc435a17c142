//! What the gateway's two small HTTP apps (the admin listener and the echo backend) share:
//! writing a whole small response and handing the connection back for the next request.

use bytes::Bytes;
use pingora::apps::{HttpPersistentSettings, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;

/// Ends a served request; the connection, if it may carry another one.
pub async fn finish(session: ServerSession) -> Option<ReusedHttpStream> {
    let settings = HttpPersistentSettings::for_session(&session);
    let reusable = session.finish().await.ok().flatten()?;
    Some(ReusedHttpStream::from_reusable_stream(reusable, settings))
}

/// Writes a whole small response; `None` when the client is gone.
pub async fn write_simple(
    session: &mut ServerSession,
    status: u16,
    content_type: &str,
    body: Bytes,
) -> Option<()> {
    let mut header = ResponseHeader::build(status, Some(2)).ok()?;
    header.insert_header("content-type", content_type).ok()?;
    header
        .insert_header("content-length", body.len().to_string())
        .ok()?;
    session.write_response_header(Box::new(header)).await.ok()?;
    session.write_response_body(body, true).await.ok()
}
