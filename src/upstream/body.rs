//! A request's body as each target receives it: JSON with the target's model name (and a
//! stored response's upstream ID) spliced in, or an upload read back from its spool with
//! the `model` field renamed, or nothing.

use crate::http1::client::WriteBody;
use crate::http1::Error;
use crate::request_body::{for_target, Edits, ModelRequest};
use crate::spool::Spool;
use bytes::Bytes;
use pingora_core::protocols::Stream;
use std::ops::Range;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Bytes read from a spool per write.
const SPOOL_CHUNK_BYTES: usize = 256 << 10;

/// The body a request came with.
#[derive(Clone)]
pub enum RequestBody<'a> {
    /// None (a stored response's GET or DELETE).
    Empty,
    /// Sent as it is.
    Raw(Bytes),
    /// A JSON body and what the gateway read of it.
    Json {
        bytes: Bytes,
        request: &'a ModelRequest,
    },
    /// A multipart upload waiting in its spool; `model_span` is its `model` value.
    Form {
        spool: Arc<Spool>,
        model_span: Range<u64>,
    },
}

/// The body one target receives.
pub enum Body {
    Bytes(Bytes),
    Spooled {
        spool: Arc<Spool>,
        /// A range of the spool sent as other bytes (the renamed model).
        splice: Option<(Range<u64>, Bytes)>,
    },
}

impl RequestBody<'_> {
    /// The body for a target, with `edits` made (a form can only have its model renamed).
    pub fn for_target(&self, edits: Edits) -> Body {
        match self {
            RequestBody::Empty => Body::Bytes(Bytes::new()),
            RequestBody::Raw(bytes) => Body::Bytes(bytes.clone()),
            RequestBody::Json { bytes, request } => Body::Bytes(for_target(bytes, request, edits)),
            RequestBody::Form { spool, model_span } => Body::Spooled {
                spool: Arc::clone(spool),
                splice: edits
                    .model
                    .map(|name| (model_span.clone(), Bytes::copy_from_slice(name.as_bytes()))),
            },
        }
    }
}

impl Body {
    /// Its length in bytes, as sent.
    pub fn len(&self) -> usize {
        match self {
            Body::Bytes(bytes) => bytes.len(),
            Body::Spooled { spool, splice } => {
                let renamed = splice.as_ref().map_or(0, |(span, with)| {
                    with.len() as i64 - (span.end - span.start) as i64
                });
                (spool.len() as i64 + renamed) as usize
            }
        }
    }
}

impl WriteBody for Body {
    /// Writes it to the upstream.
    async fn write_body(&self, stream: &mut Stream) -> Result<(), Error> {
        match self {
            Body::Bytes(bytes) => write(stream, bytes).await,
            Body::Spooled { spool, splice } => {
                let (before, with, after) = match splice {
                    Some((span, with)) => (0..span.start, with.clone(), span.end..spool.len()),
                    None => (0..spool.len(), Bytes::new(), spool.len()..spool.len()),
                };
                write_range(stream, spool, before).await?;
                write(stream, &with).await?;
                write_range(stream, spool, after).await
            }
        }
    }
}

async fn write(stream: &mut Stream, bytes: &[u8]) -> Result<(), Error> {
    stream.write_all(bytes).await.map_err(Error::Write)
}

/// Writes `range` of the spool, a chunk at a time. The spool was just written, so its
/// pages are in memory: a read is a copy, not a wait on a disk.
async fn write_range(stream: &mut Stream, spool: &Spool, range: Range<u64>) -> Result<(), Error> {
    let mut chunk = vec![0u8; SPOOL_CHUNK_BYTES.min((range.end - range.start) as usize)];
    let mut at = range.start;
    while at < range.end {
        let want = chunk.len().min((range.end - at) as usize);
        let read = spool
            .read_at(at, &mut chunk[..want])
            .map_err(Error::BodySource)?;
        if read == 0 {
            break;
        }
        write(stream, &chunk[..read]).await?;
        at += read as u64;
    }
    Ok(())
}
