//! Random numbers for workload generation: a small fast generator (xoshiro256**, seeded by
//! splitmix64) and the key distributions the benchmarks specify: TATP's NURand, YCSB's
//! (scrambled) zipfian and "latest".

/// xoshiro256**: fast, good enough statistically for load generation; never for crypto.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng { s: [splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x)] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn float(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi], both ends included.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo <= hi);
        let span = (hi - lo) as u64 + 1;
        lo + ((self.next_u64() as u128 * span as u128) >> 64) as i64
    }

    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        self.float() < p
    }

    /// `len` random upper-case letters.
    pub fn letters(&mut self, len: usize) -> String {
        (0..len).map(|_| (b'A' + self.range(0, 25) as u8) as char).collect()
    }
}

/// TATP's NURand(A, 1, p): ((random(0, A) | random(1, p)) mod p) + 1, A by table size.
pub fn nurand(rng: &mut Rng, p: i64) -> i64 {
    let a = if p <= 1_000_000 {
        65_535
    } else if p <= 10_000_000 {
        1_048_575
    } else {
        2_097_151
    };
    ((rng.range(0, a) | rng.range(1, p)) % p) + 1
}

/// Zipfian over [0, n) with YCSB's constant 0.99 (Gray et al., "Quickly generating
/// billion-record synthetic databases"); item 0 is the most popular.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

/// YCSB's default zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// O(n) to set up (the zeta constant); n must be at least 1.
    pub fn new(n: u64) -> Zipfian {
        let n = n.max(1);
        let theta = ZIPFIAN_CONSTANT;
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2, theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipfian { n, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    /// A rank in [0, n).
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.float();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// FNV-1a of a u64, YCSB's scrambler: spreads the popular ranks over the key space.
pub fn fnv64(v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in v.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// Scrambled zipfian over [0, n): zipfian popularity, hot items scattered.
pub fn scrambled(z: &Zipfian, rng: &mut Rng, n: u64) -> u64 {
    fnv64(z.next(rng)) % n.max(1)
}

/// "Latest": zipfian over recency, so the newest of `count` items is the most popular.
pub fn latest(z: &Zipfian, rng: &mut Rng, count: u64) -> u64 {
    let back = z.next(rng) % count.max(1);
    count.max(1) - 1 - back
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_stays_inside_and_covers_both_ends() {
        let mut r = Rng::new(7);
        let mut seen = [0u32; 4];
        for _ in 0..10_000 {
            let v = r.range(1, 4);
            seen[(v - 1) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 2000), "{seen:?}");
    }

    #[test]
    fn nurand_stays_in_one_to_p() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            let v = nurand(&mut r, 1000);
            assert!((1..=1000).contains(&v), "{v}");
        }
    }

    #[test]
    fn zipfian_favours_low_ranks() {
        let z = Zipfian::new(1000);
        let mut r = Rng::new(3);
        let mut zero = 0;
        let mut high = 0;
        for _ in 0..100_000 {
            let v = z.next(&mut r);
            assert!(v < 1000);
            if v == 0 {
                zero += 1;
            }
            if v >= 500 {
                high += 1;
            }
        }
        // Rank 0 has probability 1/zeta(1000) ≈ 0.134; ranks 500+ together ≈ 0.09.
        assert!((12_000..15_000).contains(&zero), "{zero}");
        assert!(high < zero, "{high} vs {zero}");
    }
}
