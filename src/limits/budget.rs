//! Money budgets per key and per owner (DESIGN 5.5), in this process.
//!
//! Each budget is an account with two calendar windows in UTC, read from the injected wall
//! clock: the day (from 00:00) and the month (from the 1st, 00:00). Admission reserves the
//! request's most likely cost (its input estimate and output limit at the model's price) in
//! the key's account and its owner's, or refuses if any configured window would go over.
//! The end of the request settles the reservation with the real cost: what was over-reserved
//! goes back, overage is debited (so a budget can overshoot by at most what the requests in
//! flight spend beyond their reservations). Amounts are integer micro-dollars, saturating.
//!
//! Accounts are kept by name, with the limits read from the key at each call: a reload that
//! changes a budget applies at once, and the spend is kept.

use crate::catalog::Key;
use crate::clock::WallClock;
pub use crate::config::format_usd;
use crate::config::{Budget, Price};
use crate::error::RequestError;
use dashmap::DashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DAY_MS: i64 = 86_400_000;

/// Whose budget: the key's own, or its owner's (shared by the owner's keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Key,
    Owner,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Owner => "owner",
        }
    }
}

/// A budget window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    pub(super) fn limit(self, budget: &Budget) -> Option<u64> {
        match self {
            Period::Day => budget.per_day,
            Period::Month => budget.per_month,
        }
    }
}

/// The calendar windows containing one instant: (start, end) in Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Windows {
    pub(super) day: (i64, i64),
    pub(super) month: (i64, i64),
}

impl Windows {
    /// No calendar: where no budget is decided (a key without one).
    pub(super) const NONE: Windows = Windows {
        day: (0, 0),
        month: (0, 0),
    };

    pub(super) fn at(unix_ms: i64) -> Windows {
        let day_start = unix_ms - unix_ms.rem_euclid(DAY_MS);
        Windows {
            day: (day_start, day_start.saturating_add(DAY_MS)),
            month: month_of(unix_ms),
        }
    }

    pub(super) fn of(&self, period: Period) -> (i64, i64) {
        match period {
            Period::Day => self.day,
            Period::Month => self.month,
        }
    }
}

/// The calendar month (UTC) containing `unix_ms`: its first millisecond and the next
/// month's.
fn month_of(unix_ms: i64) -> (i64, i64) {
    use chrono::{Datelike, NaiveDate};
    let Some(time) = chrono::DateTime::from_timestamp_millis(unix_ms) else {
        return (i64::MIN, i64::MAX);
    };
    let (year, month) = (time.year(), time.month());
    let start = NaiveDate::from_ymd_opt(year, month, 1);
    let next = match month {
        12 => NaiveDate::from_ymd_opt(year.saturating_add(1), 1, 1),
        _ => NaiveDate::from_ymd_opt(year, month + 1, 1),
    };
    let millis = |date: Option<NaiveDate>, fallback| {
        date.and_then(|d| d.and_hms_opt(0, 0, 0))
            .map_or(fallback, |t| t.and_utc().timestamp_millis())
    };
    (millis(start, i64::MIN), millis(next, i64::MAX))
}

/// Micro-dollars spent in one window, and the window's start it counts in.
#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    start: i64,
    micros: u64,
}

impl Spent {
    /// The spend in the window starting at `start` (nothing if this is an older one).
    fn in_window(self, start: i64) -> u64 {
        if self.start == start {
            self.micros
        } else {
            0
        }
    }
}

#[derive(Debug, Default)]
struct Account {
    day: Spent,
    month: Spent,
}

impl Account {
    fn spent(&mut self, period: Period) -> &mut Spent {
        match period {
            Period::Day => &mut self.day,
            Period::Month => &mut self.month,
        }
    }

    /// Starts the windows anew where the calendar has moved past them.
    fn roll(&mut self, windows: &Windows) {
        for period in [Period::Day, Period::Month] {
            let start = windows.of(period).0;
            let spent = self.spent(period);
            if spent.start != start {
                *spent = Spent { start, micros: 0 };
            }
        }
    }
}

/// One budget window of a key or its owner, for the admin view and messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetWindow {
    pub scope: Scope,
    /// The key's name or the owner's.
    pub name: String,
    pub period: Period,
    pub limit_micros: u64,
    pub spent_micros: u64,
    /// When the window starts anew (Unix milliseconds).
    pub resets_at_unix_ms: i64,
}

impl BudgetWindow {
    pub fn remaining_micros(&self) -> u64 {
        self.limit_micros.saturating_sub(self.spent_micros)
    }
}

/// Money reserved for a request in flight, until its cost is known.
pub struct BudgetHold {
    accounts: Vec<Arc<Mutex<Account>>>,
    windows: Windows,
    /// The micro-dollars reserved.
    pub reserved: u64,
}

/// Every money account of the gateway.
pub struct Budgets {
    wall: Arc<dyn WallClock>,
    accounts: DashMap<(Scope, String), Arc<Mutex<Account>>>,
}

/// The micro-dollars `input` tokens (of which `cached` came from the prompt cache) and
/// `output` tokens cost at `price`, rounded up to the next micro-dollar.
pub fn cost_micros(price: &Price, input: u64, cached: u64, output: u64) -> u64 {
    let cached = cached.min(input);
    let per_mtok = (input - cached) as u128 * price.input as u128
        + cached as u128 * price.cached_input as u128
        + output as u128 * price.output as u128;
    per_mtok.div_ceil(1_000_000).min(u64::MAX as u128) as u64
}

/// The budgets that apply to `key`: its own, then its owner's.
pub(super) fn budgets_of(key: &Key) -> impl Iterator<Item = (Scope, &str, &Budget)> {
    let own = key
        .budget
        .as_ref()
        .map(|b| (Scope::Key, key.name.as_str(), b));
    let owner = key
        .owner
        .as_deref()
        .zip(key.owner_budget.as_ref())
        .map(|(name, b)| (Scope::Owner, name, b));
    own.into_iter().chain(owner)
}

/// Micro-dollars left in the tightest window of the locked accounts.
fn remaining_locked(
    scoped: &[(Scope, &str, &Budget, Arc<Mutex<Account>>)],
    guards: &mut [std::sync::MutexGuard<'_, Account>],
    windows: &Windows,
) -> u64 {
    let mut remaining = u64::MAX;
    for ((_, _, budget, _), account) in scoped.iter().zip(guards.iter_mut()) {
        account.roll(windows);
        for period in [Period::Day, Period::Month] {
            if let Some(limit) = period.limit(budget) {
                remaining = remaining.min(limit.saturating_sub(account.spent(period).micros));
            }
        }
    }
    remaining
}

impl Budgets {
    pub fn new(wall: Arc<dyn WallClock>) -> Self {
        Budgets {
            wall,
            accounts: DashMap::new(),
        }
    }

    /// Whether any budget applies to the key.
    pub fn applies(key: &Key) -> bool {
        key.budget.is_some() || (key.owner.is_some() && key.owner_budget.is_some())
    }

    fn account(&self, scope: Scope, name: &str) -> Arc<Mutex<Account>> {
        if let Some(account) = self.accounts.get(&(scope, name.to_owned())) {
            return Arc::clone(&account);
        }
        Arc::clone(&self.accounts.entry((scope, name.to_owned())).or_default())
    }

    /// Reserves `cost` micro-dollars in each budget of the key, or refuses (nothing
    /// reserved) naming the first window it would go over. `None` for a key without
    /// budgets. Admitted: the hold and the micro-dollars left in the tightest window.
    pub fn reserve(
        &self,
        key: &Key,
        cost: u64,
    ) -> Option<Result<(BudgetHold, u64), (RequestError, u64)>> {
        if !Self::applies(key) {
            return None;
        }
        let now = self.wall.unix_millis();
        let windows = Windows::at(now);
        let scoped: Vec<(Scope, &str, &Budget, Arc<Mutex<Account>>)> = budgets_of(key)
            .map(|(scope, name, budget)| (scope, name, budget, self.account(scope, name)))
            .collect();
        // Locked in a fixed order (the key's, then the owner's): no two requests wait on
        // each other.
        let mut guards: Vec<_> = scoped
            .iter()
            .map(|(.., account)| account.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let mut remaining = u64::MAX;
        let mut refused: Option<(RequestError, Duration)> = None;
        for ((scope, name, budget, _), account) in scoped.iter().zip(guards.iter_mut()) {
            account.roll(&windows);
            for period in [Period::Day, Period::Month] {
                let Some(limit) = period.limit(budget) else {
                    continue;
                };
                let spent = account.spent(period).micros;
                if spent.saturating_add(cost) > limit {
                    let (_, end) = windows.of(period);
                    let wait = Duration::from_millis(end.saturating_sub(now).max(0) as u64);
                    // The window that stays shut longest is named (the month on a tie).
                    if refused.as_ref().is_none_or(|(_, longest)| wait >= *longest) {
                        let error = RequestError::BudgetExhausted {
                            budget: format!("{} '{name}'", scope.name()),
                            window: period.name(),
                            limit_micros: limit,
                            spent_micros: spent,
                            cost_micros: cost,
                            retry_after: wait,
                        };
                        refused = Some((error, wait));
                    }
                    continue;
                }
                remaining = remaining.min(limit - spent - cost);
            }
        }
        if let Some((error, _)) = refused {
            let left = remaining_locked(&scoped, &mut guards, &windows);
            return Some(Err((error, left)));
        }
        for account in guards.iter_mut() {
            for period in [Period::Day, Period::Month] {
                let spent = account.spent(period);
                spent.micros = spent.micros.saturating_add(cost);
            }
        }
        drop(guards);
        let accounts = scoped.into_iter().map(|(.., account)| account).collect();
        let hold = BudgetHold {
            accounts,
            windows,
            reserved: cost,
        };
        Some(Ok((hold, remaining)))
    }

    /// Settles a hold with what the request cost: the reservation is replaced by `cost`
    /// in each window it was made in (a window that has ended since keeps its spend).
    pub fn settle(&self, hold: BudgetHold, cost: u64) {
        for account in &hold.accounts {
            let mut account = account.lock().unwrap_or_else(|p| p.into_inner());
            for period in [Period::Day, Period::Month] {
                let start = hold.windows.of(period).0;
                let spent = account.spent(period);
                if spent.start == start {
                    spent.micros = spent
                        .micros
                        .saturating_sub(hold.reserved)
                        .saturating_add(cost);
                }
            }
        }
    }

    /// Every budget window of the key and its owner now, without changing anything.
    pub fn windows(&self, key: &Key) -> Vec<BudgetWindow> {
        let now = self.wall.unix_millis();
        let windows = Windows::at(now);
        let mut out = Vec::new();
        for (scope, name, budget) in budgets_of(key) {
            let account = self.accounts.get(&(scope, name.to_owned())).map(|a| {
                let a = a.lock().unwrap_or_else(|p| p.into_inner());
                (a.day, a.month)
            });
            for period in [Period::Day, Period::Month] {
                let Some(limit) = period.limit(budget) else {
                    continue;
                };
                let (start, end) = windows.of(period);
                let spent = account.map_or(0, |(day, month)| match period {
                    Period::Day => day.in_window(start),
                    Period::Month => month.in_window(start),
                });
                out.push(BudgetWindow {
                    scope,
                    name: name.to_owned(),
                    period,
                    limit_micros: limit,
                    spent_micros: spent,
                    resets_at_unix_ms: end,
                });
            }
        }
        out
    }

    /// The micro-dollars left in the key's tightest window; `None` without budgets.
    pub fn remaining(&self, key: &Key) -> Option<u64> {
        self.windows(key)
            .iter()
            .map(BudgetWindow::remaining_micros)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_calendar_aligned_in_utc() {
        // 2026-02-14T13:00:00Z
        let at = 1_771_074_000_000;
        let w = Windows::at(at);
        assert_eq!(w.day, (1_771_027_200_000, 1_771_113_600_000));
        // February 2026 (28 days) starts 2026-02-01 and ends 2026-03-01.
        assert_eq!(w.month, (1_769_904_000_000, 1_772_323_200_000));
        let december = Windows::at(1_798_675_200_000); // 2026-12-31T00:00:00Z
        assert_eq!(december.month.1, 1_798_761_600_000); // 2027-01-01
    }

    #[test]
    fn costs_round_up_to_the_micro_dollar_and_price_cached_input_apart() {
        let price = Price {
            input: 2_500_000,
            cached_input: 1_250_000,
            output: 10_000_000,
        };
        // 1000 input of which 400 cached, 200 output: 600*2.5 + 400*1.25 + 200*10 per M.
        assert_eq!(cost_micros(&price, 1000, 400, 200), 1500 + 500 + 2000);
        assert_eq!(cost_micros(&price, 1, 0, 0), 3);
        assert_eq!(cost_micros(&price, u64::MAX, 0, u64::MAX), u64::MAX);
        assert_eq!(format_usd(12_500_000), "12.5");
        assert_eq!(format_usd(125), "0.000125");
        assert_eq!(format_usd(3_000_000), "3");
        // Digit by digit, as `format!` wrote it.
        for micros in [0, 1, 10, 100_000, 999_999, 1_000_001, 12_340_000, u64::MAX] {
            let (whole, fraction) = (micros / 1_000_000, micros % 1_000_000);
            let expected = match fraction {
                0 => whole.to_string(),
                _ => format!("{whole}.{}", format!("{fraction:06}").trim_end_matches('0')),
            };
            assert_eq!(format_usd(micros), expected, "{micros} micro-dollars");
        }
    }
}
