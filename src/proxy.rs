//! The request path, top to bottom. [`Proxy`] is the client listener's HTTP application
//! (our `listener::App`): each request on a connection runs these steps.
//!
//! | step        | what it does                                                          |
//! |-------------|-----------------------------------------------------------------------|
//! | `read_head` | the request head; 400, 431 or 501 for one refused, 404 for CONNECT    |
//! | `start`     | the head deadline ends; the catalog snapshot; client timeouts         |
//! | `request`   | [`Proxy::handle`]: host, route, key, limits, body, model,             |
//! |             | capabilities, then answer locally or deliver upstream through         |
//! |             | [`upstream::dispatch`], to the model's fallbacks in turn if it cannot |
//! |             | serve; an error for a response cut short or a client that left       |
//! | `fail`      | after such an error: JSON 500 if nothing was sent yet                 |
//! | `cut`       | at the end of `shutdown_grace`, instead of the rest: 503 if nothing   |
//! |             | was sent yet, else the answer stays cut; logged as cut by shutdown    |
//! | `logging`   | access log line and metrics (`outcome.rs`)                            |
//!
//! Then the connection is handed back for its next request, unless the request failed.
//! pingora's proxy framework (`HttpProxy`) is not used: its request future, sized for the
//! forwarding we never let it do, was the largest allocation an open stream held.
//!
//! Beside this file: `phases.rs` (the steps of the table around `Proxy::handle`: the head,
//! the start, the end, `fail`, `cut`, `logging`), `context.rs` (what a request holds),
//! `downstream.rs` (talking to the client), `fallback.rs` (which models may take a request), `deliver.rs` (step 7: the
//! request sent upstream, to the fallbacks in turn) and `outcome.rs` (the end of a
//! request). Requests are forwarded by hand because
//! the model is in the body and pingora's own replay of a pre-read body stops at 64 KiB.
//! Resources a request holds (limit permits, the in-flight gauge) live in the context and
//! are released when it drops, which happens after `logging` (a request still running at
//! the end of `shutdown_grace` is cut and logged first). The upstream slot and upstream in-flight count live in
//! `dispatch`'s future, which the request's task owns: dropped the same way.

mod admission;
mod context;
mod deliver;
mod downstream;
mod fallback;
mod outcome;
mod phases;
mod spend;
mod stored;
mod translation;

pub use context::RequestContext;

use crate::auth::authenticate_either;
use crate::catalog::{Catalog, Key};
use crate::endpoint::{BodyKind, Endpoint, EndpointType, UpstreamApi, COUNT_TOKENS_PATH};
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::listener::Session;
use crate::multipart;
use crate::request_body::{check_declared_length, check_media_type, inspect};
use crate::respond::{ErrorShape, LocalResponse};
use crate::route::{route, Route};
use crate::telemetry::RequestStart;
use crate::upstream;
use context::{Failure, LimitMode};
use deliver::Destination;
use downstream::{read_body, read_form, request_host, Read};
use fallback::{check_serves, fallbacks, Needs};
use std::sync::Arc;

/// Where Anthropic's SDKs send the API key.
const X_API_KEY: http::HeaderName = http::HeaderName::from_static("x-api-key");

/// The answer's `x-sluice-model`: the catalog model that served it.
const SERVED_MODEL: http::HeaderName = http::HeaderName::from_static("x-sluice-model");

/// The pingora application: one per gateway, sharing [`Gateway`].
pub struct Proxy {
    gateway: Arc<Gateway>,
    /// Keep-alive connections to the upstreams, this proxy's own: each event loop serves
    /// its own `Proxy`, so a connection is polled only by the thread that made it.
    pool: upstream::Pool,
}

impl Proxy {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Proxy {
            gateway,
            pool: upstream::Pool::default(),
        }
    }
}

impl Proxy {
    /// The decisions of DESIGN §1 in their order, then the answer.
    async fn handle(&self, session: &mut Session, ctx: &mut RequestContext) -> Result<(), Failure> {
        // Loaded once in `start`: the whole request sees one snapshot.
        let catalog = Arc::clone(ctx.catalog.get_or_insert_with(|| self.gateway.catalog()));
        let request = session.req_header();
        ctx.request_id = crate::request_id::accept_or_generate(
            request
                .headers
                .get(crate::request_id::HEADER)
                .map(|v| v.as_bytes()),
        );
        log::trace!(target: "sluice::request", request_id = ctx.request_id.as_str(), method = request.method.as_str(); "request received");
        if let Some(telemetry) = &self.gateway.telemetry {
            ctx.trace = Some(Box::new(telemetry.request(RequestStart {
                headers: &request.headers,
                method: request.method.as_str(),
                path: request.uri.path(),
                request_id: &ctx.request_id,
                started: ctx.started,
            })));
        }

        // 1. Host, then route.
        if !catalog.host_allowed(request_host(session)) {
            return Err(RequestError::UnknownRoute {
                repeated_prefix: false,
            }
            .into());
        }
        let route = route(&request.method, request.uri.path())?;
        if let Route::Create(Endpoint {
            kind: EndpointType::Messages,
            ..
        }) = route
        {
            ctx.error_shape = ErrorShape::Messages;
        }
        if let Some(trace) = &mut ctx.trace {
            trace.set_route(request.method.as_str(), || route.template());
        }
        // 2. The key: `Authorization: Bearer`, or `x-api-key`.
        let header = |name| request.headers.get(name).map(|v| v.as_bytes());
        let authorization = header(http::header::AUTHORIZATION);
        let x_api_key = header(X_API_KEY);
        let clock = self.gateway.wall_clock.as_ref();
        let key = match authenticate_either(&catalog, authorization, x_api_key, clock) {
            Ok(key) => key,
            Err(refused) => {
                // A known key that may not be used now is named in the log and the count.
                ctx.key = refused.key;
                return Err(refused.error.into());
            }
        };
        ctx.key = Some(Arc::clone(&key));
        if self.gateway.key_switches.is_disabled(&key.name) {
            // Switched off through the admin API: refused as a disabled key is.
            return Err(RequestError::InactiveApiKey {
                why: crate::error::Inactive::Disabled,
            }
            .into());
        }
        // 3. Limits: gateway-wide shedding, then the key's rate and concurrency.
        self.admit(ctx, &catalog, &key)?;
        if matches!(ctx.limits, LimitMode::Shared) && !matches!(route, Route::Create(_)) {
            // Nothing to estimate: the shared store decides the key's limits now.
            self.admit_tokens(ctx, &key, 0).await?;
        }

        match route {
            Route::ListModels => {
                let list = catalog.render_list(&key);
                self.answer_settled(session, ctx, LocalResponse::json(200, list))
                    .await
                    .map_err(Failure::Abort)
            }
            Route::GetModel(id) => {
                ctx.model = Some(id.clone());
                let model = catalog
                    .model_for(&key, &id)
                    .ok_or(RequestError::ModelNotFound { model: id })?;
                ctx.catalog_model = Some(Arc::clone(model));
                let entry = model.entry_json.clone();
                self.answer_settled(session, ctx, LocalResponse::json(200, entry))
                    .await
                    .map_err(Failure::Abort)
            }
            Route::Create(endpoint) => self.create(session, ctx, &catalog, &key, endpoint).await,
            Route::StoredResponse { id, action } => {
                self.stored_response(session, ctx, &catalog, &key, id, action)
                    .await
            }
        }
    }

    /// Steps 4-7 for a request to a model named in its body (chat, completions,
    /// embeddings, responses, rerank, audio, moderations).
    async fn create(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        catalog: &Catalog,
        key: &Key,
        endpoint: Endpoint,
    ) -> Result<(), Failure> {
        // 4. Body: size, media type, then its shape: JSON, or a form read as it streams.
        let headers = &session.req_header().headers;
        check_declared_length(
            headers
                .get(http::header::CONTENT_LENGTH)
                .map(|v| v.as_bytes()),
            catalog.max_body_bytes,
        )?;
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes());
        let (limit, deadline) = (catalog.max_body_bytes, catalog.client_timeout);
        let mut read = match endpoint.body {
            BodyKind::Json => {
                check_media_type(content_type)?;
                let bytes = read_body(session, limit, deadline).await?;
                let request = inspect(&bytes, endpoint.kind)?;
                Read::Json(bytes, request)
            }
            BodyKind::Multipart => {
                let boundary = multipart::boundary(content_type)?;
                let (spool, form) =
                    read_form(session, &boundary, limit, deadline, &ctx.request_id).await?;
                Read::Form(Arc::new(spool), form)
            }
        };
        let (model_name, stream, uses_tools) = read.fields();
        let model_name = model_name.to_owned();
        ctx.model = Some(model_name.clone());
        ctx.stream = stream;
        // 5. The model, in this key's view, and serving this route.
        let model = catalog
            .model_for(key, &model_name)
            .ok_or(RequestError::ModelNotFound { model: model_name })?;
        ctx.catalog_model = Some(Arc::clone(model));
        // 6. Capabilities, where the route has them.
        let needs = Needs {
            endpoint: endpoint.kind,
            stream,
            tools: uses_tools,
        };
        check_serves(model, needs)?;
        // A stored response named in the body lives on one of the model's targets.
        let stored = match read.previous_response() {
            Some(id) => Some(self.previous_response(catalog, key, model, id)?),
            None => None,
        };
        // A stored response lives on one target: such a request never falls back.
        let fallbacks = match stored {
            Some(_) => Vec::new(),
            None => fallbacks(catalog, key, model, needs),
        };
        if model.enforce_output_limit {
            read.enforce_output_limit(endpoint.kind, model.default_max_tokens);
        }
        if endpoint.path == COUNT_TOKENS_PATH {
            // Counting generates nothing: no tokens reserved, no usage expected, no cost.
            self.admit_tokens(ctx, key, 0).await?;
            if model.upstream_api == UpstreamApi::OpenAi {
                let counted = translation::counted_locally(read.body_bytes());
                return self
                    .answer_settled(session, ctx, LocalResponse::json(200, counted))
                    .await
                    .map_err(Failure::Abort);
            }
        } else {
            // The key's token windows, last: the estimate needs the body and the model.
            ctx.usage_expected = endpoint.kind.reports_usage();
            let enforced = model
                .enforce_output_limit
                .then_some(model.default_max_tokens);
            ctx.output_limit = read.output_limit(endpoint.kind, enforced);
            let parts = read.token_estimate(endpoint.kind, model.default_max_tokens);
            // With them, the key's and its owner's money budgets.
            self.admit_priced(ctx, key, model, parts).await?;
        }
        // 7. Upstream.
        let destination = Destination {
            model,
            body: read.body(),
            path: endpoint.path,
            stored,
            ids: (endpoint.kind == EndpointType::Responses).then(|| self.id_issuer(catalog, key)),
            inject_usage: read.usage_unasked(endpoint.kind),
            fallbacks,
            operation: endpoint.kind.operation(),
            kind: endpoint.kind,
        };
        self.deliver(session, ctx, catalog, destination).await
    }
}
