//! The packed arguments and answer of `batch.lua`: a call's settlements, kept leases and
//! admissions travel as a few binary strings of fixed-width records, and the answer comes
//! back as one, instead of one Redis argument (and one reply value) per number. Redis then
//! neither parses nor allocates per number, the script reads them without text-to-number
//! conversions, and this side neither formats nor parses them (the redis crate's reply
//! parser cost about 1,000 instructions per integer: benches/README.md).
//!
//! A number is 8 bytes, little-endian, signed (Lua's `struct` format `<i8`); a lease id is
//! `{replica:016x}-{lease:016x}`, 33 bytes. The answer's numbers are doubles (`<d`).
//!
//! The script does as little per request as it can, since its Lua is most of what Redis
//! spends (benches/README.md): a call's settlements travel summed, and each admission's
//! answer is where the windows stand after it; the numbers its headers show (remaining,
//! resets, the tightest budget, the budget window a refusal names) are worked out here,
//! by the arithmetic the script used to do, in the same doubles.

use super::budget::MAX_MICROS;
use super::calls::{Limits, Settlement, Waiting, ANSWER};
use crate::limits::MAX_DEBT;

/// Bytes of a lease id in the store (`lease_bytes` in `batch.lua`).
const LEASE_BYTES: usize = 33;

/// The five packed arguments of one call, in `batch.lua`'s order.
pub(super) struct Packed {
    pub(super) settled: Vec<u8>,
    pub(super) settled_leases: Vec<u8>,
    pub(super) kept_leases: Vec<u8>,
    pub(super) admitting: Vec<u8>,
    pub(super) admitted_leases: Vec<u8>,
}

impl Packed {
    /// Packs what one call carries for a key of `replica`; `budgeted`: the key has budget
    /// accounts, so money travels too.
    pub(super) fn new(
        replica: u64,
        budgeted: bool,
        settlements: &[Settlement],
        kept: &[u64],
        admissions: &[Waiting],
    ) -> Packed {
        let mut settled = Vec::new();
        let mut settled_leases = Vec::new();
        // Tokens given back and taken beyond the reservations, per window (minute, day).
        let mut tokens = [0i64; 4];
        // Money per day and month it was reserved in: reserved, cost, day, month.
        let mut money: Vec<[i64; 4]> = Vec::new();
        for settlement in settlements {
            if settlement.used >= 0 {
                for (window, &reserved) in settlement.reserved.iter().enumerate() {
                    if reserved < 0 {
                        continue;
                    }
                    let (slot, n) = if settlement.used < reserved {
                        (2 * window, reserved - settlement.used)
                    } else {
                        (2 * window + 1, settlement.used - reserved)
                    };
                    tokens[slot] = tokens[slot].saturating_add(n);
                }
            }
            if let (true, Some((reserved, cost))) = (budgeted, &settlement.money) {
                let (day, month) = (reserved.windows.day.0, reserved.windows.month.0);
                let sum = |a: i64, b: u64| (a as u64).saturating_add(b).min(MAX_MICROS) as i64;
                match money.iter_mut().find(|m| m[2] == day && m[3] == month) {
                    Some(m) => (m[0], m[1]) = (sum(m[0], reserved.reserved), sum(m[1], *cost)),
                    None => money.push([sum(0, reserved.reserved), sum(0, *cost), day, month]),
                }
            }
            if let Some(lease) = settlement.lease {
                lease_id(&mut settled_leases, replica, lease);
            }
        }
        if tokens.iter().any(|&n| n > 0) || !money.is_empty() {
            for n in tokens.into_iter().chain(money.into_iter().flatten()) {
                number(&mut settled, n);
            }
        }
        let mut kept_leases = Vec::with_capacity(kept.len() * LEASE_BYTES);
        for &lease in kept {
            lease_id(&mut kept_leases, replica, lease);
        }
        let mut admitting = Vec::with_capacity(admissions.len() * if budgeted { 24 } else { 16 });
        let mut admitted_leases = Vec::with_capacity(admissions.len() * LEASE_BYTES);
        for waiting in admissions {
            number(&mut admitting, waiting.estimate.min(i64::MAX as u64) as i64);
            number(&mut admitting, i64::from(waiting.lease.is_some()));
            if budgeted {
                number(
                    &mut admitting,
                    waiting.cost.map_or(-1, |c| c.min(MAX_MICROS) as i64),
                );
            }
            if let Some(lease) = waiting.lease {
                lease_id(&mut admitted_leases, replica, lease);
            }
        }
        Packed {
            settled,
            settled_leases,
            kept_leases,
            admitting,
            admitted_leases,
        }
    }
}

/// The answer to each of `admissions`, read from the script's packed answer (five doubles
/// each, and two per budget account, `accounts` giving each account's day and month limits
/// in micro-dollars, -1: none), as the fifteen numbers the store's caller reads: verdict,
/// wait, rate remaining and reset, the token window shown (0 none, 1 minute, 2 day), its
/// limit, remaining and reset, the tokens reserved per minute and per day (-1: no such
/// window), the micro-dollars the tightest budget window has left (-1: no budget), and the
/// budget window a refusal names (account 1-based, window 1 day or 2 month, its limit and
/// what it had spent). `limits`: those the call was decided under. `None` if the answer
/// is not that long.
pub(super) fn answers(
    packed: &[u8],
    admissions: &[Waiting],
    limits: &Limits,
    accounts: &[[i64; 2]],
) -> Option<Vec<[i64; ANSWER]>> {
    let each = 5 + 2 * accounts.len();
    // A key has at most two accounts: its own and its owner's.
    if accounts.len() > 2 || packed.len() != admissions.len() * each * 8 {
        return None;
    }
    let answers = packed
        .chunks_exact(each * 8)
        .zip(admissions)
        .map(|(record, waiting)| {
            let mut values = [0f64; 9];
            for (value, bytes) in values.iter_mut().zip(record.chunks_exact(8)) {
                let mut le = [0; 8];
                le.copy_from_slice(bytes);
                *value = f64::from_le_bytes(le);
            }
            position(values, waiting, limits, accounts)
        });
    Some(answers.collect())
}

/// One admission's fifteen numbers (see [`answers`]) from the script's: `values` are its
/// verdict, wait, the rate's, the minute's and the day's backlog (their arrival times
/// after the admission, or without it if refused, minus Redis's clock), then each
/// account's day and month spent after it.
fn position(
    values: [f64; 9],
    waiting: &Waiting,
    limits: &Limits,
    accounts: &[[i64; 2]],
) -> [i64; ANSWER] {
    const MINUTE: f64 = 60_000_000.0;
    const DAY: f64 = 86_400_000_000.0;
    let max_debt = MAX_DEBT.as_micros() as f64;
    let (verdict, wait) = (values[0] as i64, values[1] as i64);
    let (mut rate_remaining, mut rate_reset) = (-1, 0);
    if limits.per_minute > 0 {
        let interval = MINUTE / f64::from(limits.per_minute);
        let window = interval * f64::from(limits.burst);
        let backlog = values[2].max(0.0).min(window);
        rate_remaining = ((window - backlog) / interval).floor().max(0.0) as i64;
        rate_reset = backlog.ceil() as i64;
    }
    // The window with the fewest tokens left, as the headers show it.
    let estimate = waiting.estimate.min(i64::MAX as u64) as i64;
    let (mut shown, mut token_limit, mut token_remaining, mut token_reset) = (0, 0, 0.0, 0.0);
    let (mut reserved_minute, mut reserved_day) = (-1, -1);
    for (window, limit, period, backlog) in [
        (1, limits.tokens_per_minute, MINUTE, values[3]),
        (2, limits.tokens_per_day, DAY, values[4]),
    ] {
        if limit == 0 {
            continue;
        }
        let limit = limit.min(i64::MAX as u64) as i64;
        let reserved = estimate.min(limit);
        if window == 1 {
            reserved_minute = reserved;
        } else {
            reserved_day = reserved;
        }
        let backlog = backlog.max(0.0);
        let remaining = ((period - backlog).max(0.0) * limit as f64 / period).floor();
        if shown == 0 || remaining < token_remaining {
            (shown, token_limit, token_remaining, token_reset) =
                (window, limit, remaining, backlog);
        }
    }
    let token_reset = token_reset.min(DAY + max_debt).ceil() as i64;
    // The tightest budget window: what it has left after this request if admitted, without
    // it if refused; and for a budget's refusal, every window the cost would take over its
    // limit, the one that stays shut longest named (the month over the day, the owner's
    // over the key's on a tie).
    let mut budget_left = -1;
    let mut over = [0i64; 4];
    let cost = waiting.cost.map_or(-1, |c| c.min(MAX_MICROS) as i64);
    for (a, [day_limit, month_limit]) in accounts.iter().copied().enumerate() {
        let spent = [values[5 + 2 * a] as i64, values[6 + 2 * a] as i64];
        for (window, limit, spent) in [(1, day_limit, spent[0]), (2, month_limit, spent[1])] {
            if limit < 0 {
                continue;
            }
            let left = (limit - spent).max(0);
            if budget_left < 0 || left < budget_left {
                budget_left = left;
            }
            if verdict == 4 && cost >= 0 && spent + cost > limit && window >= over[1] {
                over = [a as i64 + 1, window, limit, spent];
            }
        }
    }
    [
        verdict,
        wait,
        rate_remaining,
        rate_reset,
        shown,
        token_limit,
        token_remaining as i64,
        token_reset,
        reserved_minute,
        reserved_day,
        budget_left,
        over[0],
        over[1],
        over[2],
        over[3],
    ]
}

fn number(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(&n.to_le_bytes());
}

/// A lease's id in the store: the replica's number and the lease's, in fixed-width hex.
fn lease_id(out: &mut Vec<u8>, replica: u64, lease: u64) {
    hex(out, replica);
    out.push(b'-');
    hex(out, lease);
}

fn hex(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 16];
    crate::hex::write_lower(&mut digits, &n.to_be_bytes());
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_id_has_the_fixed_width_the_script_reads() {
        let mut out = Vec::new();
        lease_id(&mut out, 0xd8a0_c451_fc3a_8b4d, 30_410);
        assert_eq!(out, b"d8a0c451fc3a8b4d-00000000000076ca");
        assert_eq!(out.len(), LEASE_BYTES);
    }

    fn waiting(estimate: u64, cost: Option<u64>) -> Waiting {
        Waiting {
            estimate,
            lease: None,
            cost,
            now_ms: 0,
            answer: tokio::sync::oneshot::channel().0,
        }
    }

    fn doubles(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn an_answer_of_the_wrong_length_is_refused() {
        let packed = doubles(&[0.0, 0.0, 0.0, 0.0, 0.0]);
        let one = [waiting(1, None)];
        let two = [waiting(1, None), waiting(1, None)];
        let limits = Limits::default();
        let read = answers(&packed, &one, &limits, &[]).expect("five numbers answer one");
        assert_eq!(read[0][2], -1, "no rate: nothing remaining");
        assert_eq!(read[0][10], -1, "no budget: nothing remaining");
        assert!(
            answers(&packed, &two, &limits, &[]).is_none(),
            "too short for two"
        );
        assert!(
            answers(&packed, &one, &limits, &[[-1, 5]]).is_none(),
            "too short for a budgeted key"
        );
        assert!(
            answers(&packed[..39], &one, &limits, &[]).is_none(),
            "a partial number"
        );
    }

    #[test]
    fn the_headers_numbers_are_worked_out_of_the_windows_positions() {
        let limits = Limits {
            per_minute: 60,
            burst: 10,
            tokens_per_minute: 1_000,
            tokens_per_day: 100_000,
            max_concurrent: 0,
        };
        // Refused for a budget: 3.5 s of rate backlog, half a minute of tokens, none of
        // the day; the key's month has spent 960 of 1,000, its owner's day 450 of 500.
        let packed = doubles(&[4.0, 0.0, 3_500_000.0, 30e6, -5.0, 0.0, 960.0, 450.0, 0.0]);
        let read = answers(
            &packed,
            &[waiting(2_000, Some(60))],
            &limits,
            &[[-1, 1_000], [500, -1]],
        )
        .expect("one budgeted answer");
        assert_eq!(read[0][..4], [4, 0, 6, 3_500_000], "verdict, wait, rate");
        assert_eq!(
            read[0][4..10],
            [1, 1_000, 500, 30_000_000, 1_000, 2_000],
            "the minute shown (fewer left than the day); reservations capped per window"
        );
        assert_eq!(read[0][10], 40, "the key's month has the least left");
        assert_eq!(
            read[0][11..],
            [1, 2, 1_000, 960],
            "the month named over a day that would also be over"
        );
    }

    #[test]
    fn a_calls_settlements_travel_summed() {
        let windows = crate::limits::budget::Windows::at(86_400_000);
        let money = |reserved, cost| Some((super::super::calls::Money { reserved, windows }, cost));
        let settlements = [
            Settlement {
                reserved: [100, 100],
                used: 40,
                lease: Some(1),
                money: money(50, 20),
            },
            Settlement {
                reserved: [100, -1],
                used: 130,
                lease: None,
                money: money(50, 70),
            },
            Settlement {
                reserved: [100, 100],
                used: -1,
                lease: Some(2),
                money: None,
            },
        ];
        let packed = Packed::new(7, true, &settlements, &[], &[]);
        let read: Vec<i64> = packed
            .settled
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(
            read,
            [60, 30, 60, 0, 100, 90, windows.day.0, windows.month.0],
            "tokens given back and taken beyond, per window; money per day and month"
        );
        assert_eq!(
            packed.settled_leases.len(),
            2 * LEASE_BYTES,
            "both leases given back"
        );
        let unpriced = Packed::new(7, false, &settlements[2..], &[], &[]);
        assert!(unpriced.settled.is_empty(), "nothing to settle but a lease");
    }
}
