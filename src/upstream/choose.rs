//! Choosing a model's target: among the targets that are neither ejected nor cooling down
//! and not yet tried for this request, two are drawn by weight and the one with fewer
//! requests in flight per unit of weight wins (weighted power of two choices).

use super::{Availability, Upstreams};
use crate::catalog::Model;
use rand::Rng;
use std::time::Duration;

/// The outcome of a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Index into the model's targets.
    Target(usize),
    /// Every target not yet tried is ejected or cooling down; the soonest is back after this.
    Unavailable { retry_after: Duration },
    /// Every target was tried.
    Exhausted,
}

/// Picks a target of `model` outside `tried`.
pub fn choose(model: &Model, upstreams: &Upstreams, tried: &[usize], rng: &mut impl Rng) -> Choice {
    let mut candidates: Vec<usize> = Vec::with_capacity(model.targets.len());
    let mut soonest: Option<Duration> = None;
    for (index, target) in model.targets.iter().enumerate() {
        if tried.contains(&index) {
            continue;
        }
        match upstreams.availability(&target.upstream.name) {
            Availability::Available => candidates.push(index),
            Availability::CoolingDown { until } | Availability::Ejected { until } => {
                soonest = Some(soonest.map_or(until, |s| s.min(until)));
            }
        }
    }
    match candidates.len() {
        0 => match soonest {
            Some(until) => Choice::Unavailable {
                retry_after: until.saturating_sub(upstreams.now()),
            },
            None => Choice::Exhausted,
        },
        1 => Choice::Target(candidates[0]),
        _ => {
            let weight = |i: usize| u64::from(model.targets[i].weight.get());
            let first = draw(&candidates, weight, rng);
            let rest: Vec<usize> = candidates.iter().copied().filter(|&i| i != first).collect();
            let second = draw(&rest, weight, rng);
            let load = |i: usize| u64::from(upstreams.in_flight(&model.targets[i].upstream.name));
            // Fewer in flight per unit of weight wins: load(a)/w(a) < load(b)/w(b).
            if load(second) * weight(first) < load(first) * weight(second) {
                Choice::Target(second)
            } else {
                Choice::Target(first)
            }
        }
    }
}

/// The target for the next attempt: one not tried yet if one is free, else any free one (a
/// single-target model retries its target); `Err` with the soonest recovery when none is.
pub fn pick(
    model: &Model,
    upstreams: &Upstreams,
    tried: &[usize],
    rng: &mut impl Rng,
) -> Result<usize, Duration> {
    let first = choose(model, upstreams, tried, rng);
    let choice = match first {
        Choice::Target(_) => first,
        _ if tried.is_empty() => first,
        _ => choose(model, upstreams, &[], rng),
    };
    match choice {
        Choice::Target(index) => Ok(index),
        Choice::Unavailable { retry_after } => Err(retry_after.max(Duration::from_millis(1))),
        Choice::Exhausted => Err(Duration::from_secs(1)),
    }
}

/// Whether `model` has a target, other than those in `tried`, that takes requests now.
pub fn another_available(model: &Model, upstreams: &Upstreams, tried: &[usize]) -> bool {
    model.targets.iter().enumerate().any(|(i, t)| {
        !tried.contains(&i) && upstreams.availability(&t.upstream.name) == Availability::Available
    })
}

/// One of `among`, with probability proportional to its weight.
fn draw(among: &[usize], weight: impl Fn(usize) -> u64, rng: &mut impl Rng) -> usize {
    let total: u64 = among.iter().map(|&i| weight(i)).sum();
    let mut point = rng.gen_range(0..total);
    for &i in among {
        if point < weight(i) {
            return i;
        }
        point -= weight(i);
    }
    among[among.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_follow_the_weights() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let weights = [3u64, 1];
        let mut counts = [0u32; 2];
        for _ in 0..40_000 {
            counts[draw(&[0, 1], |i| weights[i], &mut rng)] += 1;
        }
        let ratio = f64::from(counts[0]) / f64::from(counts[1]);
        assert!(
            (2.8..3.2).contains(&ratio),
            "3:1 weights give about 3:1 draws, got {ratio}"
        );
    }
}
