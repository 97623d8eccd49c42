//! A small seeded generator (SplitMix64) for repeatable synthetic inputs. Not for placement
//! (placement never uses randomness) and not cryptographic.

/// SplitMix64 (Steele, Lea & Flood, 2014).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Normal with mean `mean` and standard deviation `sd` (Box–Muller).
    pub fn normal(&mut self, mean: f64, sd: f64) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        mean + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeatable_and_roughly_uniform() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let values: Vec<u64> = (0..1000).map(|_| a.below(10)).collect();
        assert_eq!(values, (0..1000).map(|_| b.below(10)).collect::<Vec<_>>());
        for bin in 0..10 {
            let count = values.iter().filter(|v| **v == bin).count();
            assert!((60..140).contains(&count), "bin {bin}: {count}");
        }
        let mean = (0..10_000).map(|_| a.normal(5.0, 2.0)).sum::<f64>() / 10_000.0;
        assert!((mean - 5.0).abs() < 0.1, "{mean}");
    }
}
