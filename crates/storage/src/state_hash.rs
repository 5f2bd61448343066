//! A deterministic hash of a partition's whole contents, to prove replay determinism.
//!
//! Rows are hashed one by one and the row hashes summed, so the result does not depend on
//! which slot a row sits in (a partition restored from a snapshot places rows differently
//! from the one that produced them) while still counting duplicate rows. The hasher is a
//! fixed FNV-1a, so the value is the same across runs, processes and Rust releases.

use std::hash::{Hash, Hasher};

use lockstep_core::TableKind;

use crate::partition::Partition;

/// FNV-1a, 64 bits: fixed constants, so stable everywhere.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// SplitMix64's finalizer: spreads FNV's output before row hashes are summed.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Partition {
    /// A hash of every table's and view's rows (streams hold none), independent of row
    /// order and slot numbers. Equal partitions hash equal on any machine.
    pub fn state_hash(&self) -> u64 {
        let mut total = Fnv::new();
        for t in self.tables() {
            if matches!(t.def().kind, TableKind::Stream { .. }) {
                continue;
            }
            let mut rows_sum = 0u64;
            for (_, row) in t.scan() {
                let mut h = Fnv::new();
                row.hash(&mut h);
                rows_sum = rows_sum.wrapping_add(mix(h.finish()));
            }
            t.def().id.hash(&mut total);
            t.name().hash(&mut total);
            (t.len() as u64).hash(&mut total);
            rows_sum.hash(&mut total);
        }
        mix(total.finish())
    }
}
