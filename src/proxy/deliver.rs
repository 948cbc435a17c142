//! Step 7 of the request path: the request sent upstream through [`upstream::dispatch`],
//! to the model's fallbacks in turn when it cannot serve, and what came of it noted in the
//! request's context.

use super::context::{Failure, RequestContext};
use super::downstream::gateway_headers;
use super::translation;
use super::{Proxy, SERVED_MODEL};
use crate::catalog::{Catalog, Key, Model};
use crate::endpoint::EndpointType;
use crate::listener::Session;
use crate::response_id::IdIssuer;
use crate::upstream::{self, Delivery, Dispatch, RequestBody, Stored};
use std::sync::Arc;

impl Proxy {
    /// Step 7: sends the request upstream, and notes what came of it. A model that cannot
    /// serve it (no target free, or every try failed in a way `retry_on` names) hands it
    /// to the next of its fallbacks, the body renamed for that model; the answer names the
    /// model that served in `x-sluice-model`.
    pub(super) async fn deliver(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        catalog: &Catalog,
        destination: Destination<'_>,
    ) -> Result<(), Failure> {
        let Destination {
            model: requested,
            body,
            path,
            mut stored,
            ids,
            inject_usage,
            fallbacks,
            operation,
            kind,
        } = destination;
        let models: Vec<&Model> = std::iter::once(requested)
            .chain(fallbacks.iter().map(|m| m.as_ref()))
            .collect();
        let gateway = &self.gateway;
        for (tried, model) in models.iter().enumerate() {
            let mut response_headers = gateway_headers(ctx);
            response_headers.push((SERVED_MODEL, model.id.clone()));
            // A model whose upstream speaks the other API gets the request translated.
            let translated = translation::translated(kind, path, &body, model)?;
            let (body, path, translation, inject_usage) = match &translated {
                Some(t) => (t.body(), t.path, Some(t.answer), false),
                None => (body.clone(), path, None, inject_usage),
            };
            let dispatch = Dispatch {
                model,
                pool: &self.pool,
                body,
                path,
                stored: stored.take(),
                ids,
                inject_usage,
                renames_model: tried > 0,
                request_id: &ctx.request_id,
                // The tenant is the owner of its stored responses: the key's team, or it.
                tenant: ctx.key.as_deref().map_or("", Key::response_owner),
                request_started: ctx.started,
                response_headers,
                retry_attempts: catalog.retry_attempts,
                retry_backoff: catalog.retry_backoff,
                fallback_follows: tried + 1 < models.len(),
                trace: ctx.trace.as_deref(),
                operation,
                translation,
                error_shape: ctx.error_shape,
            };
            // Every model's time on its upstreams counts as upstream time.
            let waited = std::mem::take(&mut ctx.exchange).upstream_wait;
            ctx.called = Default::default();
            ctx.served_model = Some(model.id.clone());
            let delivery = upstream::dispatch(
                session,
                &gateway.upstreams,
                &gateway.metrics,
                &dispatch,
                &mut ctx.exchange,
                &mut ctx.called,
            )
            .await;
            ctx.exchange.upstream_wait += waited;
            let error = match delivery {
                Delivery::Unserved(error) if tried + 1 < models.len() => error,
                Delivery::Delivered => break,
                Delivery::Refused(error) | Delivery::Unserved(error) => {
                    return Err(Failure::Answer(error))
                }
                Delivery::Cut { error, then } => {
                    self.note_status(ctx);
                    return Err(Failure::Ended { error, then });
                }
                Delivery::ClientGone(e) => {
                    self.note_status(ctx);
                    return Err(Failure::Abort(e));
                }
            };
            log::warn!(target: "sluice::proxy", request_id = ctx.request_id.as_str(), model = model.id.as_str(), code = error.code(); "model could not serve the request; its fallback takes it");
        }
        self.note_status(ctx);
        // Settled before the client can see the answer end; then its last bytes and end.
        self.settle(None, ctx);
        let last = std::mem::take(&mut ctx.exchange.unsent);
        session
            .write_response_body(last, true)
            .await
            .map_err(Failure::Abort)
    }

    /// The status the upstream's answer gave the client, if one started.
    pub(super) fn note_status(&self, ctx: &mut RequestContext) {
        if let Some(status) = ctx.exchange.status {
            ctx.status = status;
        }
    }
}

/// Where a request goes: the model, the body, the path under the upstream's URL, and for
/// the Responses API the stored response it names and whether IDs are rewritten.
pub(super) struct Destination<'a> {
    pub(super) model: &'a Model,
    pub(super) body: RequestBody<'a>,
    pub(super) path: &'a str,
    pub(super) stored: Option<Stored>,
    /// Stored-response IDs in the answer are rewritten to ones made for this owner (the
    /// Responses API).
    pub(super) ids: Option<IdIssuer<'a>>,
    /// A stream whose client did not ask for usage (see [`Dispatch::inject_usage`]).
    pub(super) inject_usage: bool,
    /// The models that take the request, in order, if `model` cannot serve it.
    pub(super) fallbacks: Vec<&'a Arc<Model>>,
    /// `gen_ai.operation.name` of its upstream attempts.
    pub(super) operation: &'static str,
    /// The route's endpoint type (a model whose upstream speaks the other API than the
    /// route gets the request translated).
    pub(super) kind: EndpointType,
}
