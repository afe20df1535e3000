//! Random impairments decided per packet: loss, bit corruption, reordering.
//! Seeded, so a run can be repeated.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Per-packet probabilities and the random source.
#[derive(Debug, Clone)]
pub struct Impair {
    loss: f64,
    reorder: f64,
    corrupt: f64,
    rng: SmallRng,
}

impl Impair {
    /// Probabilities in 0..=1.
    pub fn new(loss: f64, reorder: f64, corrupt: f64, seed: u64) -> Impair {
        Impair { loss, reorder, corrupt, rng: SmallRng::seed_from_u64(seed) }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    /// Should this packet be lost?
    pub fn lose(&mut self) -> bool {
        self.chance(self.loss)
    }

    /// Should this packet swap places with the one after it?
    pub fn reorder(&mut self) -> bool {
        self.chance(self.reorder)
    }

    /// Maybe flips one random bit of `packet`; true if it did.
    pub fn corrupt(&mut self, packet: &mut [u8]) -> bool {
        if packet.is_empty() || !self.chance(self.corrupt) {
            return false;
        }
        let bit = self.rng.random_range(0..packet.len() * 8);
        packet[bit / 8] ^= 1 << (bit % 8);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_probability_never_fires() {
        let mut im = Impair::new(0.0, 0.0, 0.0, 1);
        let mut p = [0u8; 100];
        for _ in 0..10_000 {
            assert!(!im.lose() && !im.reorder() && !im.corrupt(&mut p));
        }
        assert!(p.iter().all(|&b| b == 0));
    }

    #[test]
    fn loss_rate_is_close_to_setting() {
        let mut im = Impair::new(0.01, 0.0, 0.0, 7);
        let n = 1_000_000;
        let lost = (0..n).filter(|_| im.lose()).count() as f64;
        // mean 10_000, sigma ~99.5: allow 5 sigma
        assert!((lost - 10_000.0).abs() < 500.0, "{lost}");
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let mut im = Impair::new(0.0, 0.0, 1.0, 3);
        for _ in 0..1000 {
            let mut p = [0u8; 64];
            assert!(im.corrupt(&mut p));
            let ones: u32 = p.iter().map(|b| b.count_ones()).sum();
            assert_eq!(ones, 1);
        }
    }

    #[test]
    fn same_seed_same_decisions() {
        let mut a = Impair::new(0.3, 0.3, 0.0, 42);
        let mut b = Impair::new(0.3, 0.3, 0.0, 42);
        for _ in 0..1000 {
            assert_eq!(a.lose(), b.lose());
            assert_eq!(a.reorder(), b.reorder());
        }
    }
}
