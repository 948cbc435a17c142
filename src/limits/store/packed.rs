//! The packed arguments and answer of `batch.lua`: a call's settlements, kept leases and
//! admissions travel as a few binary strings of fixed-width records, and the answer comes
//! back as one, instead of one Redis argument (and one reply value) per number. Redis then
//! neither parses nor allocates per number, the script reads them without text-to-number
//! conversions, and this side neither formats nor parses them (the redis crate's reply
//! parser cost about 1,000 instructions per integer: benches/README.md).
//!
//! A number is 8 bytes, little-endian, signed (Lua's `struct` format `<i8`); a lease id is
//! `{replica:016x}-{lease:016x}`, 33 bytes.

use super::budget::MAX_MICROS;
use super::calls::{Settlement, Waiting, ANSWER, UNBUDGETED_ANSWER};

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
        let mut settled = Vec::with_capacity(settlements.len() * if budgeted { 64 } else { 32 });
        let mut settled_leases = Vec::new();
        for settlement in settlements {
            for n in [
                settlement.reserved[0],
                settlement.reserved[1],
                settlement.used,
                i64::from(settlement.lease.is_some()),
            ] {
                number(&mut settled, n);
            }
            if budgeted {
                let (money, cost, day, month) = match &settlement.money {
                    Some((money, cost)) => (
                        money.reserved.min(MAX_MICROS) as i64,
                        (*cost).min(MAX_MICROS) as i64,
                        money.windows.day.0,
                        money.windows.month.0,
                    ),
                    None => (-1, 0, 0, 0),
                };
                for n in [money, cost, day, month] {
                    number(&mut settled, n);
                }
            }
            if let Some(lease) = settlement.lease {
                lease_id(&mut settled_leases, replica, lease);
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

/// The answer to each of `admissions` admissions, read from the script's packed answer
/// (`budgeted`: fifteen numbers each, else ten, the budget's then read as none); `None` if
/// it is not that long.
pub(super) fn answers(
    packed: &[u8],
    admissions: usize,
    budgeted: bool,
) -> Option<Vec<[i64; ANSWER]>> {
    let each = if budgeted { ANSWER } else { UNBUDGETED_ANSWER };
    if packed.len() != admissions * each * 8 {
        return None;
    }
    let answers = packed.chunks_exact(each * 8).map(|record| {
        // Without budgets: no budget remaining (-1) and no budget refusal named.
        let mut full = [0; ANSWER];
        full[UNBUDGETED_ANSWER] = -1;
        for (value, bytes) in full.iter_mut().zip(record.chunks_exact(8)) {
            let mut le = [0; 8];
            le.copy_from_slice(bytes);
            *value = i64::from_le_bytes(le);
        }
        full
    });
    Some(answers.collect())
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

    #[test]
    fn an_answer_of_the_wrong_length_is_refused() {
        let mut packed = Vec::new();
        for n in [0, 5, -1, 7, 1, 100, 99, 12, 1, -1] {
            number(&mut packed, n);
        }
        let read = answers(&packed, 1, false).expect("ten numbers answer one admission");
        assert_eq!(read[0][..10], [0, 5, -1, 7, 1, 100, 99, 12, 1, -1]);
        assert_eq!(read[0][10], -1, "no budget: nothing remaining");
        assert!(answers(&packed, 2, false).is_none(), "too short for two");
        assert!(
            answers(&packed, 1, true).is_none(),
            "too short for a budgeted key"
        );
        assert!(
            answers(&packed[..79], 1, false).is_none(),
            "a partial number"
        );
    }
}
