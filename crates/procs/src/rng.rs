//! `ctx.random`: a deterministic generator (splitmix64) seeded from the transaction id, so
//! replaying the command log or running on a replica draws the same numbers.

/// Advances the splitmix64 state and returns the next 64 random bits.
pub(crate) fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A float in [0, 1) with 53 random bits.
pub(crate) fn next_f64(state: &mut u64) -> f64 {
    (next_u64(state) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An integer in [lo, hi] (requires lo <= hi), by multiply-shift so every value of a small
/// range is (near enough) equally likely without a division.
pub(crate) fn next_in_range(state: &mut u64, lo: i64, hi: i64) -> i64 {
    debug_assert!(lo <= hi);
    let span = (hi as i128 - lo as i128) as u128 + 1; // at most 2^64
    let offset = ((next_u64(state) as u128 * span) >> 64) as i128;
    (lo as i128 + offset) as i64
}

/// The seed for a transaction: the txn id itself (splitmix64 scrambles it on the first draw).
pub(crate) fn seed(txn_id: i64) -> u64 {
    txn_id as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Reference values of splitmix64 seeded with 0.
        let mut s = 0u64;
        assert_eq!(next_u64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(next_u64(&mut s), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn ranges_stay_inside_their_bounds_including_the_extremes() {
        let mut s = seed(7);
        for _ in 0..1000 {
            let v = next_in_range(&mut s, -3, 3);
            assert!((-3..=3).contains(&v));
            let f = next_f64(&mut s);
            assert!((0.0..1.0).contains(&f));
        }
        let mut s = seed(1);
        let v = next_in_range(&mut s, i64::MIN, i64::MAX);
        let mut t = seed(1);
        assert_eq!(v, next_u64(&mut t) as i64 ^ i64::MIN);
        assert_eq!(next_in_range(&mut s, 5, 5), 5);
    }
}
