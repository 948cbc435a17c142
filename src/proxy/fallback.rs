//! Which models may take a request: the one it names must serve its route and what it asks
//! for (streaming, tools), or the request is refused; a fallback model that does not is
//! skipped, as is one the key may not use.

use crate::catalog::{Catalog, Key, Model};
use crate::endpoint::EndpointType;
use crate::error::RequestError;
use std::sync::Arc;

/// What a request needs of the model that serves it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Needs {
    pub(super) endpoint: EndpointType,
    pub(super) stream: bool,
    pub(super) tools: bool,
}

/// Steps 5 and 6 for one model: it serves the route, and streaming and tool calling if
/// the request asks for them.
pub(super) fn check_serves(model: &Model, needs: Needs) -> Result<(), RequestError> {
    if !model.endpoints.contains(&needs.endpoint) {
        return Err(RequestError::EndpointNotSupported {
            model: model.id.clone(),
            serves: model.endpoint_type.route(),
        });
    }
    if needs.stream && needs.endpoint.streams() && !model.streaming {
        return Err(RequestError::CapabilityNotSupported {
            param: "stream",
            model: model.id.clone(),
            capability: "streaming",
        });
    }
    if needs.tools && !model.tool_calling {
        return Err(RequestError::CapabilityNotSupported {
            param: "tools",
            model: model.id.clone(),
            capability: "tool calling",
        });
    }
    Ok(())
}

/// The fallbacks of `model` that may take this request, in order: the key may use them and
/// they serve what it needs.
pub(super) fn fallbacks<'a>(
    catalog: &'a Catalog,
    key: &'a Key,
    model: &'a Model,
    needs: Needs,
) -> Vec<&'a Arc<Model>> {
    catalog
        .fallbacks_for(key, model)
        .filter(|fallback| check_serves(fallback, needs).is_ok())
        .collect()
}
