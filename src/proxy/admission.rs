//! A request's limits: the gateway-wide cap, then the key's own, decided in this process or
//! by the shared limits store (`limits_store`, DESIGN 4.4).
//!
//! In this process, the key's rate and concurrency are checked before the body is read
//! (step 3) and its token windows once the estimate is known (step 6). With a store, every
//! bucket of the key is decided in one call once the estimate is known; step 3 only asks
//! the local gate (a key the store refused, until its wait is over) so a refused client
//! costs no call, and refuses a key whose `max_concurrent` is reached by its requests on
//! this replica alone, before its body is read. A store that does not answer is handled by
//! `on_error`: the key's limits divided by `expected_replicas` in this process, no limits,
//! or 503 `limits_unavailable`; a request admitted so holds a lease that is written to the
//! store when it answers again.

use super::context::{InFlight, LimitMode, RequestContext};
use super::spend::Hold;
use super::Proxy;
use crate::catalog::{Catalog, Key};
use crate::config::OnStoreError;
use crate::error::RequestError;
use crate::limits::{Admission, Budgets, Position, Shared};
use std::sync::Arc;
use std::time::Duration;

impl Proxy {
    /// Step 3: the gateway-wide cap (or draining), then the key's rate and concurrency, or
    /// the shared store's local gate. Permits go into the context, released when it drops.
    pub(super) fn admit(
        &self,
        ctx: &mut RequestContext,
        catalog: &Catalog,
        key: &Arc<Key>,
    ) -> Result<(), RequestError> {
        let limiter = &self.gateway.limiter;
        // Token windows are shown on every answer; reserved once the body is read (step 6).
        ctx.tokens = limiter.token_position(key);
        if self.gateway.limits_store.is_none() {
            self.budget_position(ctx, key);
        }
        let shed = if self.gateway.is_draining() {
            Err(RequestError::Overloaded {
                retry_after: Duration::from_secs(1),
            })
        } else {
            limiter.admit_gateway(catalog.max_concurrent)
        };
        match shed {
            Ok(permit) => ctx.gateway_slot = Some(permit),
            Err(error) => {
                // Shed before the key's own limits: its rate headers still go out, unchanged.
                ctx.rate = limiter.rate_position(key);
                return Err(error);
            }
        }
        ctx.limits = match &self.gateway.limits_store {
            None => LimitMode::Local(Arc::clone(key)),
            Some(store) if store.is_up() => {
                ctx.tokens = None;
                if Budgets::applies(key) {
                    // Until the store answers for this request: as it last did for the key.
                    ctx.budget_remaining = store.last_position(&key.name).budget;
                }
                if let Some(refused) = store.gated(&key.name) {
                    // The headers a store's answer would carry, as the store last gave them.
                    show(ctx, refused.position);
                    // Refused here or by the store, it is the key's use (`last_used`).
                    ctx.since_previous = limiter.note_arrival(key);
                    return Err(refused.error);
                }
                let (permit, since_previous) = limiter.count_in_flight(key);
                ctx.since_previous = since_previous;
                match permit {
                    Ok(permit) => ctx.shared_count = Some(permit),
                    Err(error) => {
                        // The key's headers as the store last gave them to this replica
                        // (or, if it never answered for the key, as this process sees it).
                        let known = store.last_position(&key.name);
                        ctx.rate = known.rate.or_else(|| limiter.rate_position(key));
                        ctx.tokens = known.tokens.or_else(|| limiter.token_position(key));
                        return Err(error);
                    }
                }
                LimitMode::Shared
            }
            Some(store) => {
                store.probe();
                // The replica's own ledger decides the budgets while the store is down.
                self.budget_position(ctx, key);
                self.when_store_fails(store.config.on_error, store.config.expected_replicas, key)?
            }
        };
        if let LimitMode::Local(local) = &ctx.limits {
            let local = Arc::clone(local);
            self.admit_locally(ctx, &local)?;
        }
        self.hold_local_lease(ctx);
        let gauge = key.series.in_flight.get(|| {
            self.gateway
                .metrics
                .in_flight
                .with_label_values(&[&key.name])
        });
        ctx.in_flight = Some(InFlight::new(gauge.clone()));
        Ok(())
    }

    /// A request admitted without the store while it cannot be used holds a lease of this
    /// replica, written to the store when it answers again.
    fn hold_local_lease(&self, ctx: &mut RequestContext) {
        if let (LimitMode::Local(_) | LimitMode::Open, Some(store), Some(key)) =
            (&ctx.limits, &self.gateway.limits_store, &ctx.key)
        {
            ctx.grant = store.local_lease(key);
        }
    }

    /// What `on_error` makes of a key while the store cannot be used.
    fn when_store_fails(
        &self,
        on_error: OnStoreError,
        replicas: std::num::NonZeroU32,
        key: &Key,
    ) -> Result<LimitMode, RequestError> {
        match on_error {
            OnStoreError::Local => Ok(LimitMode::Local(Arc::new(key.divided(replicas)))),
            OnStoreError::Open => Ok(LimitMode::Open),
            OnStoreError::Closed => Err(RequestError::LimitsUnavailable),
        }
    }

    /// The key's rate and concurrency in this process.
    fn admit_locally(&self, ctx: &mut RequestContext, key: &Key) -> Result<(), RequestError> {
        ctx.tokens = self.gateway.limiter.token_position(key);
        match self.gateway.limiter.admit(key) {
            Admission::Allowed {
                permit,
                rate,
                since_previous,
            } => {
                ctx.key_slot = Some(permit);
                (ctx.rate, ctx.since_previous) = (rate, since_previous);
                Ok(())
            }
            Admission::Denied {
                error,
                rate,
                since_previous,
            } => {
                (ctx.rate, ctx.since_previous) = (rate, since_previous);
                Err(error)
            }
        }
    }

    /// The key's limits that need the request's token estimate: its token windows in this
    /// process, or every bucket at once in the shared store. A store that fails now is
    /// handled by `on_error` like one found down at step 3.
    pub(super) async fn admit_tokens(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        estimate: u64,
    ) -> Result<(), RequestError> {
        self.admit_estimate(ctx, key, estimate, None).await
    }

    /// [`Self::admit_tokens`], and in the shared store the request's `cost` in the key's
    /// budgets with it, in the same call (`None`: no money to reserve). In this process
    /// the caller reserves the money after (`spend.rs`).
    pub(super) async fn admit_estimate(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        estimate: u64,
        cost: Option<u64>,
    ) -> Result<(), RequestError> {
        let (store, shared_key) = match (&ctx.limits, &self.gateway.limits_store, &ctx.key) {
            (LimitMode::Shared, Some(store), Some(shared_key)) => {
                (Arc::clone(store), Arc::clone(shared_key))
            }
            (LimitMode::Local(key), _, _) => {
                let key = Arc::clone(key);
                return self.reserve_tokens(ctx, &key, estimate);
            }
            _ => return Ok(()),
        };
        let now_ms = self.gateway.wall_clock.unix_millis();
        match store.admit(&shared_key, estimate, cost, now_ms).await {
            Shared::Admitted { grant, position } => {
                show(ctx, position);
                ctx.reserved_tokens = grant.reserved();
                ctx.budget_hold = grant.money_reserved().map(Hold::Shared);
                ctx.grant = Some(grant);
                Ok(())
            }
            Shared::Refused(refused) => {
                show(ctx, refused.position);
                // Refused, it is not in flight: the replica's own count lets it go now,
                // not after its 429 is written (the client's next request may come first).
                ctx.shared_count = None;
                Err(refused.error)
            }
            Shared::Unavailable => {
                let config = &store.config;
                ctx.limits =
                    self.when_store_fails(config.on_error, config.expected_replicas, key)?;
                // The replica's own ledger decides the budgets now, and shows them.
                self.budget_position(ctx, key);
                let local = match &ctx.limits {
                    LimitMode::Local(local) => {
                        // Counted once, by the local limiter that now decides.
                        ctx.shared_count = None;
                        Arc::clone(local)
                    }
                    _ => {
                        self.hold_local_lease(ctx);
                        return Ok(());
                    }
                };
                self.admit_locally(ctx, &local)?;
                self.hold_local_lease(ctx);
                self.reserve_tokens(ctx, &local, estimate)
            }
        }
    }

    /// Reserves the request's estimated tokens in the key's token windows (if it has any);
    /// the reservation is settled with the answer's usage when the request ends.
    fn reserve_tokens(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        estimate: u64,
    ) -> Result<(), RequestError> {
        match self.gateway.limiter.reserve_tokens(key, estimate) {
            None => Ok(()),
            Some(Ok((reservation, status))) => {
                ctx.tokens = Some(status);
                ctx.reserved_tokens = Some(reservation.reserved());
                ctx.reservation = Some(reservation);
                Ok(())
            }
            Some(Err((error, status))) => {
                ctx.tokens = Some(status);
                Err(error)
            }
        }
    }
}

/// Where the store said the key stands, on the answer's headers; the budget only for a key
/// that has one.
fn show(ctx: &mut RequestContext, position: Position) {
    (ctx.rate, ctx.tokens) = (position.rate, position.tokens);
    if position.budget.is_some() {
        ctx.budget_remaining = position.budget;
    }
}
