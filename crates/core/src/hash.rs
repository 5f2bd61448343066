//! Partition hashing, exactly as the VoltDB client computes it (voltdb-wire.md §2.4), so a
//! VoltDB client's routing agrees with ours: MurmurHash3 x64_128 of the key bytes, the high
//! 32 bits of h1 as a signed int, looked up in a token ring that starts at −2^31.

use crate::value::Value;

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The first 64-bit word of MurmurHash3 x64_128 with seed 0.
pub fn murmur3_x64_128_h1(data: &[u8]) -> u64 {
    let (mut h1, mut h2) = (0u64, 0u64);
    let blocks = data.len() / 16;
    for i in 0..blocks {
        let b = &data[i * 16..i * 16 + 16];
        let mut k1 = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let mut k2 = u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1.rotate_left(27).wrapping_add(h2).wrapping_mul(5).wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2.rotate_left(31).wrapping_add(h1).wrapping_mul(5).wrapping_add(0x3849_5ab5);
    }
    let tail = &data[blocks * 16..];
    let (mut k1, mut k2) = (0u64, 0u64);
    for (i, &b) in tail.iter().enumerate() {
        if i < 8 {
            k1 ^= (b as u64) << (8 * i);
        } else {
            k2 ^= (b as u64) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
    }
    if !tail.is_empty() {
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1.wrapping_add(h2)
}

/// The 32-bit hash of some key bytes.
pub fn hash_bytes(data: &[u8]) -> i32 {
    (murmur3_x64_128_h1(data) >> 32) as i32
}

/// The hash of a partition key value, or None for NULL (which always goes to partition 0).
pub fn hash_value(v: &Value) -> Option<i32> {
    match v {
        Value::Null | Value::Array(_) => None,
        Value::Int(i) | Value::Timestamp(i) => Some(hash_bytes(&i.to_le_bytes())),
        Value::Str(s) => Some(hash_bytes(s.as_bytes())),
        Value::Bytes(b) => Some(hash_bytes(b)),
        Value::Bool(b) => Some(hash_bytes(&(*b as i64).to_le_bytes())),
        Value::Float(f) => Some(hash_bytes(&(*f as i64).to_le_bytes())),
        Value::Decimal(d) => Some(hash_bytes(&d.get().to_le_bytes())),
        // Not partitioning types (DDL refuses them); hashed by their text for completeness.
        Value::Point(_) | Value::Geography(_) => Some(hash_bytes(v.to_string().as_bytes())),
    }
}

/// Number of tokens in the ring (VoltDB's ELASTIC_TOTAL_TOKENS).
pub const RING_TOKENS: u32 = 16384;
const TOKEN_SPACING: i64 = 2_147_483_647 / 8192;
/// Partition id VoltDB uses for the multi-partition initiator in topology tables.
pub const MP_PARTITION_ID: i32 = 16383;

/// A token ring of contiguous ranges: token i belongs to partition ⌊i·N/16384⌋.
#[derive(Clone, Debug)]
pub struct HashRing {
    partitions: u32,
}

impl HashRing {
    pub fn new(partitions: u32) -> Self {
        assert!((1..=RING_TOKENS).contains(&partitions), "partition count out of range");
        HashRing { partitions }
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    fn token(i: u32) -> i32 {
        (i32::MIN as i64 + i as i64 * TOKEN_SPACING) as i32
    }

    fn owner(&self, token_index: u32) -> u32 {
        (token_index as u64 * self.partitions as u64 / RING_TOKENS as u64) as u32
    }

    /// The partition that owns a hash: the owner of the greatest token ≤ hash.
    pub fn partition_for_hash(&self, hash: i32) -> u32 {
        let idx = ((hash as i64 - i32::MIN as i64) / TOKEN_SPACING).min(RING_TOKENS as i64 - 1);
        self.owner(idx as u32)
    }

    /// The partition for a key value (NULL goes to partition 0).
    pub fn partition_for(&self, key: &Value) -> u32 {
        match hash_value(key) {
            Some(h) => self.partition_for_hash(h),
            None => 0,
        }
    }

    /// The ring as the client reads it from `@Statistics TOPO` HASHCONFIG: int32 count, then
    /// (int32 token, int32 partition) pairs, big-endian.
    pub fn config_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + RING_TOKENS as usize * 8);
        out.extend_from_slice(&(RING_TOKENS as i32).to_be_bytes());
        for i in 0..RING_TOKENS {
            out.extend_from_slice(&Self::token(i).to_be_bytes());
            out.extend_from_slice(&(self.owner(i) as i32).to_be_bytes());
        }
        out
    }

    /// For each partition, the smallest non-negative integer key that hashes to it
    /// (what `@GetPartitionKeys` returns).
    pub fn partition_keys(&self) -> Vec<(u32, i64)> {
        let mut keys: Vec<Option<i64>> = vec![None; self.partitions as usize];
        let mut missing = self.partitions;
        let mut k = 0i64;
        while missing > 0 && k < 500_000 {
            let p = self.partition_for(&Value::Int(k)) as usize;
            if keys[p].is_none() {
                keys[p] = Some(k);
                missing -= 1;
            }
            k += 1;
        }
        keys.iter().enumerate().filter_map(|(p, k)| k.map(|k| (p as u32, k))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_voltdb_client_test_vectors() {
        let long = |v: i64| hash_value(&Value::Int(v)).unwrap();
        assert_eq!(long(0), 685728695);
        assert_eq!(long(1), 4457399);
        assert_eq!(long(-1), -1595624838);
        assert_eq!(long(42), -1230191719);
        assert_eq!(long(1000000), -1422887996);
        let s = |v: &str| hash_bytes(v.as_bytes());
        assert_eq!(s(""), 0);
        assert_eq!(s("hello"), -874993741);
        assert_eq!(s("VoltDB"), -560481132);
        assert_eq!(s("aaaaaaaaaaaaaaaaa"), 1869747399);
        assert_eq!(s("abcdefghijklmnopqrstuvwxyz0123456789"), -229019810);
    }

    #[test]
    fn ring_lookup_agrees_with_the_serialized_config() {
        let ring = HashRing::new(3);
        let cfg = ring.config_bytes();
        let tokens: Vec<(i32, i32)> = cfg[4..]
            .chunks(8)
            .map(|c| (i32::from_be_bytes(c[..4].try_into().unwrap()), i32::from_be_bytes(c[4..].try_into().unwrap())))
            .collect();
        assert_eq!(tokens[0].0, i32::MIN);
        for h in [i32::MIN, -5, 0, 1, 685728695, i32::MAX, i32::MAX - 3] {
            // What the client does: binary search for the greatest token ≤ hash.
            let i = tokens.partition_point(|(t, _)| *t <= h) - 1;
            assert_eq!(tokens[i].1 as u32, ring.partition_for_hash(h), "hash {h}");
        }
        let keys = ring.partition_keys();
        assert_eq!(keys.len(), 3);
        for (p, k) in keys {
            assert_eq!(ring.partition_for(&Value::Int(k)), p);
        }
    }
}
