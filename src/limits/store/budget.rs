//! Money budgets in the shared store (docs/budgets.md): where a key's accounts live, what a
//! call of `batch.lua` is told about them, the refusal it makes of a budget's answer, and
//! the admin view's read. A request's cost is reserved and settled in the key's own call
//! with its rate, tokens and lease; windows are the calendar of the replica's wall clock.

use super::Store;
use crate::catalog::Key;
use crate::error::RequestError;
use crate::limits::budget::{budgets_of, Period, Windows};
use crate::limits::{BudgetWindow, Scope};
use std::time::Duration;

/// How long an account outlives its month (so a late settlement still finds it).
const KEPT_PAST_MONTH_MS: i64 = 7 * 86_400_000;

/// The most micro-dollars one call hands the store for a cost or a reservation (about a
/// billion USD): sums of such amounts stay exact in the script's doubles.
pub(super) const MAX_MICROS: u64 = 1 << 50;

/// Whose hash tag a key's state has in the store: `Some(owner)` when its owner has a
/// budget, the tag `owner/OWNER` (that account is shared by the owner's keys, and a Redis
/// Cluster runs one script call on one slot); `None`, the key's own name. Key names have
/// no `/`, so the two never meet.
pub(super) fn owner_tag(key: &Key) -> Option<&str> {
    key.owner_budget.as_ref().and(key.owner.as_deref())
}

/// The Redis keys of the key's budget accounts (its own, then its owner's), in the order
/// `budgets_of` gives them, under the key's tag.
pub(super) fn accounts(namespace: &str, key: &Key) -> Vec<String> {
    let tag = match owner_tag(key) {
        Some(owner) => format!("owner/{owner}"),
        None => key.name.clone(),
    };
    budgets_of(key)
        .map(|(scope, name, _)| match scope {
            Scope::Key => format!("{namespace}:sluice:{{{tag}}}:budget:key:{name}"),
            Scope::Owner => format!("{namespace}:sluice:{{{tag}}}:budget:owner"),
        })
        .collect()
}

/// The day and month limits of each of the key's budget accounts, in micro-dollars (-1:
/// none), in the order of `accounts`.
pub(super) fn account_limits(key: &Key) -> impl Iterator<Item = [i64; 2]> + '_ {
    budgets_of(key).map(|(_, _, budget)| {
        [Period::Day, Period::Month]
            .map(|p| p.limit(budget).map_or(-1, |l| l.min(MAX_MICROS) as i64))
    })
}

/// Milliseconds an account is kept after a reservation: to the end of its month and a week.
pub(super) fn account_lifetime(windows: &Windows, now_ms: i64) -> i64 {
    windows
        .month
        .1
        .saturating_sub(now_ms)
        .saturating_add(KEPT_PAST_MONTH_MS)
        .max(1)
}

/// The 429 for a budget the store refused: `account` (1-based, in the order of
/// `accounts`) and `window` (1 day, 2 month) as `batch.lua` named them.
pub(super) fn refusal(
    key: &Key,
    [account, window, limit, spent]: [i64; 4],
    cost: u64,
    windows: &Windows,
    now_ms: i64,
) -> RequestError {
    let (scope, name) = budgets_of(key)
        .nth((account.max(1) - 1) as usize)
        .map_or((Scope::Key, key.name.as_str()), |(scope, name, _)| {
            (scope, name)
        });
    let period = if window == 2 {
        Period::Month
    } else {
        Period::Day
    };
    let end = windows.of(period).1;
    RequestError::BudgetExhausted {
        budget: format!("{} '{name}'", scope.name()),
        window: period.name(),
        limit_micros: limit.max(0) as u64,
        spent_micros: spent.max(0) as u64,
        cost_micros: cost,
        retry_after: Duration::from_millis(end.saturating_sub(now_ms).max(0) as u64),
    }
}

impl Store {
    /// The key's budget windows as the store holds them; `None` if it did not answer.
    pub async fn budget_windows(&self, key: &Key, now_ms: i64) -> Option<Vec<BudgetWindow>> {
        let windows = Windows::at(now_ms);
        let accounts = accounts(&self.config.namespace, key);
        // One pipeline: the accounts share a hash tag, so one Cluster node answers it.
        let mut pipeline = redis::pipe();
        for account in &accounts {
            pipeline
                .cmd("HMGET")
                .arg(account)
                .arg(&["ds", "dm", "ms", "mm"][..]);
        }
        let stored: Vec<Vec<Option<i64>>> = self
            .call(|mut c| async move { pipeline.query_async(&mut c).await })
            .await?;
        let mut out = Vec::new();
        for (i, (scope, name, budget)) in budgets_of(key).enumerate() {
            let field = |f: usize| stored.get(i).and_then(|v| v.get(f).copied().flatten());
            let (ds, dm, ms, mm) = (field(0), field(1), field(2), field(3));
            let spent_in = |start: Option<i64>, spent: Option<i64>, period: Period| {
                if start == Some(windows.of(period).0) {
                    spent.unwrap_or(0).max(0) as u64
                } else {
                    0
                }
            };
            for (period, spent) in [
                (Period::Day, spent_in(ds, dm, Period::Day)),
                (Period::Month, spent_in(ms, mm, Period::Month)),
            ] {
                let Some(limit) = period.limit(budget) else {
                    continue;
                };
                out.push(BudgetWindow {
                    scope,
                    name: name.to_owned(),
                    period,
                    limit_micros: limit,
                    spent_micros: spent,
                    resets_at_unix_ms: windows.of(period).1,
                });
            }
        }
        Some(out)
    }
}
