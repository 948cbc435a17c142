//! A request's money: the cost reserved in its key's and owner's budgets at admission (in
//! the limits store's call with its tokens, or in this replica's ledger), and its real cost
//! when it ends (`sluice_spend_usd_total`, the access log's `cost_usd`).

use super::context::{LimitMode, RequestContext};
use super::Proxy;
use crate::catalog::{Key, Model};
use crate::config::MICROS_PER_USD;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::limits::{cost_micros, BudgetHold, Budgets};
use crate::metrics::UNKNOWN;
use crate::usage::Usage;

impl Proxy {
    /// Step 6 for a request that generates: the key's token windows and its money budgets
    /// and its owner's. The request's likely cost (its input estimate and output limit at
    /// the model's price) is reserved in the same store call as its tokens with a limits
    /// store, after them in this process; refused with 429 `insufficient_quota` when any
    /// window would go over. A model without a price costs nothing.
    pub(super) async fn admit_priced(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        model: &Model,
        (input, output): (u64, u64),
    ) -> Result<(), RequestError> {
        ctx.price = model.price;
        let cost = model
            .price
            .filter(|_| Budgets::applies(key))
            .map(|price| cost_micros(&price, input, 0, output));
        self.admit_estimate(ctx, key, input.saturating_add(output), cost)
            .await?;
        match (cost, &ctx.limits) {
            // Decided by the store, with the tokens.
            (_, LimitMode::Shared) | (None, _) => Ok(()),
            // In this process: when there is no store, or when it does not answer.
            (Some(cost), _) => self.reserve_budget(ctx, key, cost),
        }
    }

    /// Reserves `cost` in the key's budgets and its owner's in this replica's ledger.
    fn reserve_budget(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        cost: u64,
    ) -> Result<(), RequestError> {
        match self.gateway.budgets.reserve(key, cost) {
            None => Ok(()),
            Some(Ok((hold, remaining))) => {
                ctx.budget_remaining = Some(remaining);
                ctx.budget_hold = Some(Hold::Local(hold));
                Ok(())
            }
            Some(Err((error, remaining))) => {
                ctx.budget_remaining = Some(remaining);
                Err(error)
            }
        }
    }

    /// The micro-dollars left in the key's tightest budget window in this replica's
    /// ledger, for the answer's `x-sluice-budget-remaining-usd` (before anything is
    /// reserved): with no limits store, or while it cannot be used.
    pub(super) fn budget_position(&self, ctx: &mut RequestContext, key: &Key) {
        if Budgets::applies(key) {
            ctx.budget_remaining = self.gateway.budgets.remaining(key);
        }
    }
}

/// Money reserved for a request: in this process (the hold), or in the limits store (the
/// amount; the request's [`crate::limits::Grant`] settles it).
pub(super) enum Hold {
    Local(BudgetHold),
    Shared(u64),
}

impl Hold {
    fn reserved(&self) -> u64 {
        match self {
            Hold::Local(hold) => hold.reserved,
            Hold::Shared(reserved) => *reserved,
        }
    }
}

/// Settles the request's money in this process and counts it; the cost: from the usage
/// (cached input at its own price), the reservation when the usage is missing or not
/// believed (`used` is `None`), nothing when the request generated nothing. `usage` is
/// only believed usage. Money reserved in the limits store is settled with the request's
/// tokens, in the key's next store call (`outcome.rs` hands this cost to its grant).
pub(super) fn settle_budget(
    gateway: &Gateway,
    ctx: &mut RequestContext,
    usage: Option<Usage>,
    used: Option<u64>,
) -> Option<u64> {
    let price = ctx.price?;
    let hold = ctx.budget_hold.take();
    let cost = match (usage, used) {
        (Some(usage), _) => Some(cost_micros(
            &price,
            usage.input,
            usage.cached.unwrap_or(0),
            usage.output,
        )),
        (None, Some(_)) => Some(0),
        // Unknown: a reservation stands; without one, nothing is known to charge.
        (None, None) => hold.as_ref().map(Hold::reserved),
    };
    if let Some(Hold::Local(hold)) = hold {
        gateway.budgets.settle(hold, cost.unwrap_or(0));
    }
    ctx.cost_micros = cost;
    if let (Some(cost), Some(key)) = (cost.filter(|c| *c > 0), &ctx.key) {
        let model = ctx
            .catalog_model
            .as_ref()
            .map_or(UNKNOWN, |m| m.id.as_str());
        gateway
            .metrics
            .spend
            .with_label_values(&[&key.name, model])
            .inc_by(cost as f64 / MICROS_PER_USD as f64);
    }
    cost
}
