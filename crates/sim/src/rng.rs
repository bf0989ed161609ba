//! The one seeded generator of the simulators, the fault injection and the benchmark's
//! workloads: SplitMix64, tiny and the same on every platform, so a run is a function of its
//! seed and replays exactly.
//!
//! Two ways of bringing a draw into `0..n` were in use before the generators were one, and
//! recorded seeds (a failing simulator schedule, a benchmark's request stream) replay only
//! with the way they were drawn: [`Rng::new`] takes the high bits (multiply-shift, no modulo
//! bias), [`Rng::for_schedule`] is the crash simulator's (salted seed, modulo).

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// How [`Rng::below`] brings a 64-bit draw into `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    /// `(draw * n) >> 64`: the high bits, no modulo bias.
    MultiplyShift,
    /// `draw % n`: the crash simulator's schedules were drawn so.
    Modulo,
}

#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    reduction: Reduction,
}

impl Rng {
    /// The generator seeded with `seed` as it is (fault injection, workloads, disk models).
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed,
            reduction: Reduction::MultiplyShift,
        }
    }

    /// The crash simulator's generator: the seed salted, draws reduced by modulo (its
    /// recorded seeds replay only so).
    pub fn for_schedule(seed: u64) -> Rng {
        Rng {
            state: seed ^ GOLDEN_GAMMA,
            reduction: Reduction::Modulo,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let draw = self.next_u64();
        match self.reduction {
            Reduction::MultiplyShift => ((u128::from(draw) * u128::from(n)) >> 64) as u64,
            Reduction::Modulo => draw % n,
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Heads or tails.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// One of `items` (not empty), uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // SplitMix64 from state 0 (Vigna's reference implementation).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn the_same_seed_replays_the_same_draws() {
        let draws = |mut r: Rng| (0..64).map(|_| r.below(1000)).collect::<Vec<_>>();
        assert_eq!(draws(Rng::new(7)), draws(Rng::new(7)));
        assert_eq!(draws(Rng::for_schedule(7)), draws(Rng::for_schedule(7)));
        assert_ne!(draws(Rng::new(7)), draws(Rng::for_schedule(7)));
    }

    #[test]
    fn each_reduction_draws_as_it_was_recorded() {
        let mut raw = Rng::new(42);
        let mut mul = Rng::new(42);
        let d = raw.next_u64();
        assert_eq!(mul.below(10), ((u128::from(d) * 10) >> 64) as u64);
        let mut raw = Rng::new(42 ^ GOLDEN_GAMMA);
        let mut modulo = Rng::for_schedule(42);
        assert_eq!(modulo.below(10), raw.next_u64() % 10);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = Rng::new(3);
        for n in [1, 2, 3, 1000, u64::MAX] {
            assert!((0..100).all(|_| r.below(n) < n));
        }
        assert!((0..100).map(|_| r.unit()).all(|u| (0.0..1.0).contains(&u)));
    }
}
