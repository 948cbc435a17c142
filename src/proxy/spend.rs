//! A request's money: the cost reserved in its key's and owner's budgets at admission, and
//! its real cost when it ends (`sluice_spend_usd_total`, the access log's `cost_usd`).

use super::context::{LimitMode, RequestContext};
use super::Proxy;
use crate::catalog::{Key, Model};
use crate::config::MICROS_PER_USD;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::limits::{cost_micros, BudgetHold, Budgets, SharedBudget, SharedBudgetHold};
use crate::metrics::UNKNOWN;
use crate::usage::Usage;

impl Proxy {
    /// Reserves the request's likely cost (its input estimate and output limit at the
    /// model's price) in the key's budgets and its owner's; refused with 429
    /// `insufficient_quota` when any window would go over. A model without a price costs
    /// nothing.
    pub(super) async fn reserve_budget(
        &self,
        ctx: &mut RequestContext,
        key: &Key,
        model: &Model,
        (input, output): (u64, u64),
    ) -> Result<(), RequestError> {
        let Some(price) = model.price else {
            return Ok(());
        };
        ctx.price = Some(price);
        if !Budgets::applies(key) {
            return Ok(());
        }
        let cost = cost_micros(&price, input, 0, output);
        // With the limits store, on every replica's behalf; in this process when there is
        // none, or when it does not answer.
        if let (LimitMode::Shared, Some(store)) = (&ctx.limits, &self.gateway.limits_store) {
            let now = self.gateway.wall_clock.unix_millis();
            match store.reserve_budget(key, cost, now).await {
                Some(SharedBudget::Admitted(hold, remaining)) => {
                    ctx.budget_remaining = Some(remaining);
                    ctx.budget_hold = Some(Hold::Shared(hold));
                    return Ok(());
                }
                Some(SharedBudget::Refused(error, remaining)) => {
                    ctx.budget_remaining = Some(remaining);
                    return Err(error);
                }
                None => {}
            }
        }
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

    /// The micro-dollars left in the key's tightest budget window, for the answer's
    /// `x-sluice-budget-remaining-usd` (before anything is reserved).
    pub(super) fn budget_position(&self, ctx: &mut RequestContext, key: &Key) {
        // With a limits store, only the store's answer at reservation is shown.
        if Budgets::applies(key) && self.gateway.limits_store.is_none() {
            ctx.budget_remaining = self.gateway.budgets.remaining(key);
        }
    }
}

/// Money reserved for a request: in this process, or in the limits store.
pub(super) enum Hold {
    Local(BudgetHold),
    Shared(SharedBudgetHold),
}

impl Hold {
    fn reserved(&self) -> u64 {
        match self {
            Hold::Local(hold) => hold.reserved,
            Hold::Shared(hold) => hold.reserved,
        }
    }
}

/// Settles the request's money: its cost from the usage (cached input at its own price),
/// the reservation when the usage is missing or not believed (`used` is `None`), nothing
/// when the request generated nothing. `usage` is only believed usage.
pub(super) fn settle_budget(
    gateway: &Gateway,
    ctx: &mut RequestContext,
    usage: Option<Usage>,
    used: Option<u64>,
) {
    let Some(price) = ctx.price else {
        return;
    };
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
    match (hold, &gateway.limits_store) {
        (Some(Hold::Local(hold)), _) => gateway.budgets.settle(hold, cost.unwrap_or(0)),
        (Some(Hold::Shared(hold)), Some(store)) => {
            // Off the response path, as token settlements are.
            let store = std::sync::Arc::clone(store);
            let cost = cost.unwrap_or(0);
            tokio::spawn(async move { store.settle_budget(hold, cost).await });
        }
        _ => {}
    }
    ctx.cost_micros = cost;
    if let (Some(cost), Some(key)) = (cost.filter(|c| *c > 0), &ctx.key) {
        let model = ctx.model_label.as_deref().unwrap_or(UNKNOWN);
        gateway
            .metrics
            .spend
            .with_label_values(&[&key.name, model])
            .inc_by(cost as f64 / MICROS_PER_USD as f64);
    }
}
