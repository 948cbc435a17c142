//! Money budgets in the shared store (docs/budgets.md): one call reserves a request's cost
//! in its key's account and its owner's, atomically (`budget.lua`), and one more settles it
//! when the request ends, off the response path. A key's account lives under its owner's
//! hash tag when it has an owner budget (so both accounts are in one Redis Cluster slot),
//! else under its own name. Windows are the calendar of the replica's wall clock.

use super::Store;
use crate::catalog::Key;
use crate::error::RequestError;
use crate::limits::budget::{budgets_of, Period, Windows};
use crate::limits::{BudgetWindow, Scope};
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../budget.lua")));

/// How long an account outlives its month (so a late settlement still finds it).
const KEPT_PAST_MONTH_MS: i64 = 7 * 86_400_000;

/// Money reserved in the store for a request in flight.
pub struct SharedBudgetHold {
    accounts: Vec<String>,
    windows: Windows,
    pub reserved: u64,
}

/// The store's verdict on a reservation.
pub enum SharedBudget {
    /// Reserved; the micro-dollars left in the tightest window.
    Admitted(SharedBudgetHold, u64),
    /// Refused, and what the tightest window has left.
    Refused(RequestError, u64),
}

impl Store {
    /// The Redis keys of the key's budget accounts (its own, then its owner's), in the
    /// order `budgets_of` gives them, all under one hash tag.
    fn accounts(&self, key: &Key) -> Vec<String> {
        let tag = match (&key.owner, &key.owner_budget) {
            (Some(owner), Some(_)) => format!("owner/{owner}"),
            _ => key.name.clone(),
        };
        let ns = &self.config.namespace;
        budgets_of(key)
            .map(|(scope, name, _)| match scope {
                Scope::Key => format!("{ns}:sluice:{{{tag}}}:budget:key:{name}"),
                Scope::Owner => format!("{ns}:sluice:{{{tag}}}:budget:owner"),
            })
            .collect()
    }

    /// Reserves `cost` in the key's budgets on every replica's behalf. `None`: the store
    /// could not be used (the caller decides in this process instead).
    pub async fn reserve_budget(&self, key: &Key, cost: u64, now_ms: i64) -> Option<SharedBudget> {
        let windows = Windows::at(now_ms);
        let accounts = self.accounts(key);
        let limits: Vec<(Scope, String, crate::config::Budget)> = budgets_of(key)
            .map(|(scope, name, budget)| (scope, name.to_owned(), *budget))
            .collect();
        let mut invocation = invocation(&accounts, "reserve", &windows, lifetime(&windows, now_ms));
        invocation.arg(cost);
        for (_, _, budget) in &limits {
            for period in [Period::Day, Period::Month] {
                invocation.arg(period.limit(budget).map_or(-1, |l| l as i64));
            }
        }
        let answer: Vec<i64> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await?;
        let [refused, account, window, limit, spent, left] = answer[..] else {
            self.script_failed();
            return None;
        };
        let left = left.max(0) as u64;
        if refused == 0 {
            let hold = SharedBudgetHold {
                accounts,
                windows,
                reserved: cost,
            };
            return Some(SharedBudget::Admitted(hold, left));
        }
        let (scope, name, _) = limits.get((account.max(1) - 1) as usize)?;
        let period = if window == 2 {
            Period::Month
        } else {
            Period::Day
        };
        let end = windows.of(period).1;
        let error = RequestError::BudgetExhausted {
            budget: format!("{} '{name}'", scope.name()),
            window: period.name(),
            limit_micros: limit.max(0) as u64,
            spent_micros: spent.max(0) as u64,
            cost_micros: cost,
            retry_after: Duration::from_millis(end.saturating_sub(now_ms).max(0) as u64),
        };
        Some(SharedBudget::Refused(error, left))
    }

    /// Replaces a reservation by the request's cost, in the windows it was made in.
    pub async fn settle_budget(&self, hold: SharedBudgetHold, cost: u64) {
        let mut invocation = invocation(&hold.accounts, "settle", &hold.windows, 0);
        invocation.arg(hold.reserved).arg(cost);
        let _: Option<Vec<i64>> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await;
    }

    /// The key's budget windows as the store holds them; `None` if it did not answer.
    pub async fn budget_windows(&self, key: &Key, now_ms: i64) -> Option<Vec<BudgetWindow>> {
        let windows = Windows::at(now_ms);
        let accounts = self.accounts(key);
        let invocation = invocation(&accounts, "read", &windows, 0);
        let spent: Vec<i64> = self
            .call(|mut c| async move { invocation.invoke_async(&mut c).await })
            .await?;
        let mut out = Vec::new();
        for (i, (scope, name, budget)) in budgets_of(key).enumerate() {
            for (w, period) in [Period::Day, Period::Month].into_iter().enumerate() {
                let Some(limit) = period.limit(budget) else {
                    continue;
                };
                out.push(BudgetWindow {
                    scope,
                    name: name.to_owned(),
                    period,
                    limit_micros: limit,
                    spent_micros: spent.get(2 * i + w).copied().unwrap_or(0).max(0) as u64,
                    resets_at_unix_ms: windows.of(period).1,
                });
            }
        }
        Some(out)
    }
}

/// Milliseconds an account is kept after a change: to the end of its month and a week.
/// A call of `budget.lua` on `accounts`: what every operation starts with (the operation,
/// the day's and the month's starts, how long an account it writes is kept; 0 where it
/// writes none or keeps the expiry it has).
fn invocation(
    accounts: &[String],
    operation: &str,
    windows: &Windows,
    lifetime_ms: i64,
) -> redis::ScriptInvocation<'static> {
    let mut invocation = SCRIPT.prepare_invoke();
    for account in accounts {
        invocation.key(account);
    }
    invocation
        .arg(operation)
        .arg(windows.day.0)
        .arg(windows.month.0)
        .arg(lifetime_ms);
    invocation
}

fn lifetime(windows: &Windows, now_ms: i64) -> i64 {
    windows
        .month
        .1
        .saturating_sub(now_ms)
        .saturating_add(KEPT_PAST_MONTH_MS)
        .max(1)
}
