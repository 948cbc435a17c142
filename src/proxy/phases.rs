//! The steps around a request on a client connection, in the order the listener runs
//! them (`listener::App::serve`): `read_head`, `start`, `request` (which runs
//! [`Proxy::handle`], in `proxy.rs`), then `fail` or `cut` when it did not end well, and
//! `logging` last. What each does is in `proxy.rs`'s table.

use super::context::{Broken, Failure};
use super::downstream::answer;
use super::outcome::{finish_trace, log_request, record_error, refuse_head, settle_tokens};
use super::{Proxy, RequestContext};
use crate::error::RequestError;
use crate::listener::{App, Session};
use crate::respond::{error_response_in, LocalResponse};
use crate::upstream::AfterCut;
use pingora_core::server::ShutdownWatch;

impl App for Proxy {
    /// One request on a client connection: its head, the request, the record; whether the
    /// connection may carry another.
    async fn serve(&self, session: &mut Session, shutdown: &ShutdownWatch) -> bool {
        if self.read_head(session).await.is_none() {
            return false;
        }
        if *shutdown.borrow() {
            // Draining: this is the connection's last request.
            session.disable_keepalive();
        }
        let mut ctx = RequestContext::new();
        self.start(session, &mut ctx);
        let ended = tokio::select! {
            biased;
            ended = self.request(session, &mut ctx) => Some(ended),
            () = self.gateway.requests_cut() => None,
        };
        match ended {
            Some(Ok(())) => {
                self.logging(session, None, &mut ctx);
                true
            }
            Some(Err(e)) => {
                self.fail(session, &e, &mut ctx).await;
                self.logging(session, Some(&e), &mut ctx);
                false
            }
            None => {
                self.cut(session, &mut ctx).await;
                false
            }
        }
    }
}

impl Proxy {
    /// Reads a request head; `None` when there is none to serve (the client left, or sent a
    /// head that cannot be parsed, answered 400, one too large, 431, one whose transfer
    /// coding is not `chunked` alone, 501, or a `CONNECT`, answered 405).
    async fn read_head(&self, session: &mut Session) -> Option<()> {
        match session.read_request().await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                // `None`: the client left, or a read failed: nobody to answer.
                if let Some(error) = RequestError::from_client(&e) {
                    refuse_head(&self.gateway, session, error).await;
                }
                session.shutdown().await;
                return None;
            }
        }
        if session.req_header().method == http::Method::CONNECT {
            let error = RequestError::UnknownRoute {
                repeated_prefix: false,
            };
            refuse_head(&self.gateway, session, error).await;
            session.shutdown().await;
            return None;
        }
        Some(())
    }

    /// As soon as the head is read: the head deadline ends, and the one catalog snapshot
    /// this request will use sets the client connection's timeouts.
    fn start(&self, session: &mut Session, ctx: &mut RequestContext) {
        session.request_started();
        let catalog = self.gateway.catalog();
        let timeout = catalog.client_timeout;
        ctx.catalog = Some(catalog);
        session.set_read_timeout(Some(timeout));
        // A stalled reader must not hold its concurrency slot forever.
        session.set_write_timeout(Some(timeout));
    }

    /// The whole request: every decision, then the answer, local or proxied. The one place
    /// a [`Failure`] becomes an error for the connection.
    async fn request(&self, session: &mut Session, ctx: &mut RequestContext) -> Result<(), Broken> {
        match self.handle(session, ctx).await {
            Ok(()) => Ok(()),
            Err(Failure::Answer(error)) => {
                // Settled as the error leaves it (a timed-out upstream may have used tokens).
                ctx.error = Some(error.clone());
                self.settle(None, ctx);
                answer(session, ctx, error_response_in(ctx.error_shape, &error))
                    .await
                    .map_err(Broken::Answer)?;
                record_error(&self.gateway, ctx, error);
                Ok(())
            }
            Err(Failure::Ended { error, then }) => {
                // The answer was a 200 that the upstream broke: logged with its code and
                // counted in sluice_upstream_errors_total, not as a rejection.
                ctx.error = Some(error);
                match then {
                    AfterCut::KeepAlive => Ok(()),
                    AfterCut::Close => Err(Broken::Cut),
                }
            }
            // Only the client's side aborts (it left, or reading or writing it failed):
            // `fail` answers nothing and counts no internal error.
            Err(Failure::Abort(e)) => Err(Broken::ClientGone(e)),
        }
    }

    /// After an error: a JSON 500 if nothing was sent yet and the failure was the
    /// gateway's own (not a client that left). The connection is not reused.
    async fn fail(&self, session: &mut Session, e: &Broken, ctx: &mut RequestContext) {
        let ours = match e {
            Broken::Answer(e) => RequestError::from_client(e).is_some(),
            Broken::ClientGone(e) => {
                log::debug!(target: "sluice::proxy", request_id = ctx.request_id.as_str(), error:% = e; "the client's connection ended the request");
                false
            }
            Broken::Cut => false,
        };
        if !session.response_started() && ours {
            log::error!(target: "sluice::proxy", request_id = ctx.request_id.as_str(), error:? = e; "request failed");
            let error = RequestError::Internal;
            let _ = answer(session, ctx, error_response_in(ctx.error_shape, &error)).await;
            record_error(&self.gateway, ctx, error);
        }
    }

    /// At the end of `shutdown_grace`, for a request still running (its work dropped): a
    /// 503 `overloaded` if nothing was sent yet, else the answer stays cut where it is
    /// (logged `cut`); logged either way, marked `cut_by_shutdown`. The connection closes.
    async fn cut(&self, session: &mut Session, ctx: &mut RequestContext) {
        ctx.cut_by_shutdown = true;
        if session.response_started() {
            // What the client saw: the upstream's status as it was relayed, then a break.
            self.note_status(ctx);
            ctx.exchange.cut = true;
        } else {
            let error = RequestError::Overloaded {
                retry_after: std::time::Duration::from_secs(1),
            };
            session.disable_keepalive();
            // Bounded: the workers stop soon after, whatever the client does.
            let _ = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                answer(session, ctx, error_response_in(ctx.error_shape, &error)),
            )
            .await;
            record_error(&self.gateway, ctx, error);
        }
        self.logging(session, None, ctx);
    }

    /// The request's limits settled: its tokens and money by the usage its answer
    /// reported, its concurrency slots given back (in this process and, in the key's next
    /// store call, in the shared store). Done before an answer's end goes out, so that a
    /// client that sends its next request the moment one ends finds them free; `logging`
    /// settles a request that ended any other way. Once per request.
    pub(super) fn settle(&self, e: Option<&Broken>, ctx: &mut RequestContext) {
        if std::mem::replace(&mut ctx.settled, true) {
            return;
        }
        settle_tokens(&self.gateway, e, ctx);
        ctx.key_slot = None;
        ctx.shared_count = None;
    }

    /// A local answer, the request settled first (`settle`).
    pub(super) async fn answer_settled(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        response: LocalResponse,
    ) -> Result<(), crate::http1::Error> {
        self.settle(None, ctx);
        answer(session, ctx, response).await
    }

    /// Last, for every request that ran: the access-log line and the request metrics.
    fn logging(&self, session: &mut Session, e: Option<&Broken>, ctx: &mut RequestContext) {
        self.settle(e, ctx);
        log_request(&self.gateway, session, e, ctx);
        finish_trace(e, ctx);
    }
}
