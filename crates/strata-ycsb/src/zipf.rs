//! Exact Zipf sampling for any exponent theta > 0 (the M2T sweep uses 0.25..2.0).
//!
//! YCSB's own ZipfianGenerator (Gray et al.'s approximation) is tied to theta = 0.99 in
//! practice and its formula breaks at theta >= 1. This is rejection-inversion sampling
//! (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates from monotone
//! discrete distributions", 1996): O(1) per sample, no table, exact for every n and theta.
//! Rank k in 1..=n has probability k^-theta / sum_{i<=n} i^-theta.

/// A small, fast, seedable generator (SplitMix64); the workloads need reproducibility, not
/// cryptography.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// log1p(x)/x, accurate near 0
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// expm1(x)/x, accurate near 0
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Zipf over ranks 1..=n with exponent theta.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    h_x1: f64,
    h_n: f64,
    s: f64,
}

impl Zipf {
    /// n >= 1, theta > 0 (finite).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 1 && theta > 0.0 && theta.is_finite(), "Zipf needs n >= 1 and theta > 0");
        let mut z = Zipf { n, theta, h_x1: 0.0, h_n: 0.0, s: 0.0 };
        z.h_x1 = z.big_h(1.5) - 1.0;
        z.h_n = z.big_h(n as f64 + 0.5);
        z.s = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// H(x) = integral of x^-theta, (x^(1-theta) - 1) / (1 - theta), log(x) at theta = 1
    fn big_h(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.theta) * lx) * lx
    }

    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * y).exp()
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = ((x + 0.5).floor() as u64).clamp(1, self.n);
            if k as f64 - x <= self.s || u >= self.big_h(k as f64 + 0.5) - self.h(k as f64) {
                return k;
            }
        }
    }

    /// The exact probability of rank k (for tests), by summing the normaliser.
    pub fn probability(&self, k: u64) -> f64 {
        let norm: f64 = (1..=self.n).map(|i| (i as f64).powf(-self.theta)).sum();
        (k as f64).powf(-self.theta) / norm
    }
}

/// A bijection of 0..n (multiply by an odd constant modulo the next power of two, then walk
/// the cycle until the value falls below n): scrambles Zipf ranks over the key space as
/// YCSB's ScrambledZipfian does, but without collisions, so the distribution stays exact.
pub fn scramble(x: u64, n: u64) -> u64 {
    let bits = 64 - (n.max(2) - 1).leading_zeros();
    let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let mut y = x;
    loop {
        y = (y.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1).wrapping_add(0x632B_E59B_D9B4_E019)) & mask;
        y ^= y >> (bits / 2).max(1);
        y &= mask;
        if y < n {
            return y;
        }
    }
}
