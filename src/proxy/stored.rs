//! Requests that name a stored response by its ID (the Responses API): `GET`, `DELETE`,
//! `/cancel` and `/input_items` on `/v1/responses/{id}`, and `previous_response_id` in a new
//! request. Each goes to the target that made the response (see `response_id.rs`).

use super::context::{Failure, RequestContext};
use super::downstream::read_body;
use super::{Destination, Proxy};
use crate::catalog::{Catalog, Key, Model};
use crate::endpoint::EndpointType;
use crate::error::RequestError;
use crate::listener::Session;
use crate::percent::percent_encode;
use crate::response_id::{IdIssuer, StoredResponseId};
use crate::route::StoredAction;
use crate::upstream::{RequestBody, Stored};
use std::sync::Arc;

impl Proxy {
    /// Who may read the stored-response IDs of a request by `key`, and the secrets that
    /// sign them.
    pub(super) fn id_issuer<'a>(&'a self, catalog: &'a Catalog, key: &'a Key) -> IdIssuer<'a> {
        IdIssuer {
            keys: catalog
                .response_ids
                .as_ref()
                .unwrap_or(&self.gateway.ephemeral_ids),
            owner: key.response_owner(),
        }
    }

    /// The stored response a new request continues (`previous_response_id`): an ID made
    /// for this key's owner, on a model the key may use, held by a target of `model`.
    pub(super) fn previous_response(
        &self,
        catalog: &Catalog,
        key: &Key,
        model: &Model,
        id: &str,
    ) -> Result<Stored, RequestError> {
        let named = StoredResponseId::decode(id, self.id_issuer(catalog, key))
            .filter(|named| catalog.model_for(key, &named.model).is_some())
            .ok_or(RequestError::ResponseNotFound)?;
        stored_at(model, named, true)
    }

    /// Steps 4-7 for a stored response named by its ID (the Responses API): it goes to the
    /// upstream that made it, whatever replica made the ID.
    pub(super) async fn stored_response(
        &self,
        session: &mut Session,
        ctx: &mut RequestContext,
        catalog: &Catalog,
        key: &Key,
        id: String,
        action: StoredAction,
    ) -> Result<(), Failure> {
        let issuer = self.id_issuer(catalog, key);
        let named = StoredResponseId::decode(&id, issuer).ok_or(RequestError::ResponseNotFound)?;
        ctx.model = Some(named.model.clone());
        // A model this key may not use, or that serves no responses: no such response.
        let model = catalog
            .model_for(key, &named.model)
            .filter(|m| m.endpoints.contains(&EndpointType::Responses))
            .ok_or(RequestError::ResponseNotFound)?;
        ctx.catalog_model = Some(Arc::clone(model));
        let stored = stored_at(model, named, false)?;
        // A cancel may carry a body; it passes as it is.
        let body = match action {
            StoredAction::Cancel => RequestBody::Raw(
                read_body(session, catalog.max_body_bytes, catalog.client_timeout).await?,
            ),
            _ => RequestBody::Empty,
        };
        let path = format!(
            "/responses/{}{}",
            percent_encode(&stored.upstream_id),
            action.suffix()
        );
        let destination = Destination {
            model,
            body,
            path: &path,
            stored: Some(stored),
            ids: Some(issuer),
            inject_usage: false,
            fallbacks: Vec::new(),
            operation: EndpointType::Responses.operation(),
            kind: EndpointType::Responses,
        };
        self.deliver(session, ctx, catalog, destination).await
    }
}

/// Where a stored response named by a client's ID lives among the model's targets.
pub(super) fn stored_at(
    model: &Model,
    named: StoredResponseId,
    in_body: bool,
) -> Result<Stored, RequestError> {
    let target = model
        .targets
        .iter()
        .position(|t| t.upstream.name == named.upstream)
        .ok_or(RequestError::ResponseNotFound)?;
    Ok(Stored {
        target,
        upstream_id: named.upstream_id,
        in_body,
    })
}
