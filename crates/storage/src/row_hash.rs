//! The hash part of a unique index: RowIds found by the hash of their key.
//!
//! A hash table that grows rehashes every entry at once, and a transaction that happens to
//! insert then waits for all of it: hundreds of milliseconds for a table of millions of
//! rows, when the rehash must read every row to hash it again. So the entries are spread
//! over `SHARDS` tables by the top bits of their hash, each growing on its own (a growth
//! moves 1/SHARDS of the entries), and each entry keeps a 32-bit hash beside its RowId, so
//! growing reads no rows (8 bytes an entry).

use hashbrown::HashTable;

use crate::RowId;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;

/// An entry: the key's 32-bit hash and the row.
#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u32,
    row: RowId,
}

#[derive(Debug)]
pub(crate) struct RowHash {
    shards: Box<[HashTable<Slot>]>,
}

/// The index's 32-bit hash of a key from its 64-bit hash.
fn fold(full: u64) -> u32 {
    (full >> 32) as u32 ^ full as u32
}

/// What a shard's table is given: the 32-bit hash spread over 64 bits, so that both the
/// bucket bits (low) and the tag bits (top) vary. An odd multiplier keeps the low bits a
/// function of the low bits alone, and those are independent of the shard's (top) bits.
fn spread(hash: u32) -> u64 {
    (hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn shard(hash: u32) -> usize {
    (hash >> (32 - SHARD_BITS)) as usize
}

impl Default for RowHash {
    fn default() -> Self {
        RowHash { shards: (0..SHARDS).map(|_| HashTable::new()).collect() }
    }
}

impl RowHash {
    /// The row with key hash `full` for which `same` holds.
    pub(crate) fn find(&self, full: u64, mut same: impl FnMut(RowId) -> bool) -> Option<RowId> {
        let h = fold(full);
        self.shards[shard(h)].find(spread(h), |s| s.hash == h && same(s.row)).map(|s| s.row)
    }

    /// Adds `row` (the caller checked that no equal key is there).
    pub(crate) fn insert(&mut self, full: u64, row: RowId) {
        let hash = fold(full);
        self.shards[shard(hash)].insert_unique(spread(hash), Slot { hash, row }, |s| spread(s.hash));
    }

    /// Adds the rows of a bulk build, `rows` (key hash, row), to an empty table. The rows
    /// are first put in shard order (in place: a restart's millions of rows are not copied)
    /// and each shard filled in turn: a shard's table (1/64 of the index) stays in cache
    /// while it fills, where rows in their own order would each miss it. Err: a row whose
    /// key an earlier row holds, as `same(row, other)` says for rows whose 32-bit hashes
    /// are equal.
    pub(crate) fn fill(&mut self, rows: &mut [(u64, RowId)], mut same: impl FnMut(RowId, RowId) -> bool) -> Result<(), RowId> {
        let shard_of = |&(full, _): &(u64, RowId)| shard(fold(full));
        let mut ends = [0usize; SHARDS];
        for r in rows.iter() {
            ends[shard_of(r)] += 1;
        }
        for s in 1..SHARDS {
            ends[s] += ends[s - 1];
        }
        // Each shard's part of `rows` is filled from its start: a row taken out of a place
        // goes to the next free place of its own shard, displacing the row there, until a
        // row of the shard being filled comes back.
        let mut next: [usize; SHARDS] = std::array::from_fn(|s| if s == 0 { 0 } else { ends[s - 1] });
        let starts = next;
        for s in 0..SHARDS {
            while next[s] < ends[s] {
                let mut row = rows[next[s]];
                let mut t = shard_of(&row);
                while t != s {
                    std::mem::swap(&mut row, &mut rows[next[t]]);
                    next[t] += 1;
                    t = shard_of(&row);
                }
                rows[next[s]] = row;
                next[s] += 1;
            }
        }
        let mut duplicate: Option<RowId> = None;
        for (s, table) in self.shards.iter_mut().enumerate() {
            let group = &rows[starts[s]..ends[s]];
            table.reserve(group.len(), |e| spread(e.hash));
            for &(full, row) in group {
                let hash = fold(full);
                match table.entry(spread(hash), |e| e.hash == hash && same(row, e.row), |e| spread(e.hash)) {
                    hashbrown::hash_table::Entry::Vacant(v) => {
                        v.insert(Slot { hash, row });
                    }
                    // The later of the two rows; the lowest such over the shards, so that
                    // the answer does not depend on the shards' order.
                    hashbrown::hash_table::Entry::Occupied(o) => {
                        let later = row.max(o.get().row);
                        duplicate = Some(duplicate.map_or(later, |d| d.min(later)));
                        break;
                    }
                }
            }
        }
        duplicate.map_or(Ok(()), Err)
    }

    /// Removes `row`, filed under key hash `full`.
    pub(crate) fn remove(&mut self, full: u64, row: RowId) {
        let hash = fold(full);
        if let Ok(entry) = self.shards[shard(hash)].find_entry(spread(hash), |s| s.row == row) {
            entry.remove();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(HashTable::len).sum()
    }

    pub(crate) fn allocation_size(&self) -> usize {
        self.shards.iter().map(HashTable::allocation_size).sum::<usize>() + SHARDS * std::mem::size_of::<HashTable<Slot>>()
    }

    /// Entries in the largest shard (tests check that entries spread).
    #[cfg(test)]
    fn largest_shard(&self) -> usize {
        self.shards.iter().map(HashTable::len).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(7).hash_one(i)
    }

    #[test]
    fn finds_inserts_and_removes_rows_by_hash_across_growth() {
        let mut t = RowHash::default();
        for i in 0..100_000u32 {
            t.insert(h(i as u64), i);
        }
        assert_eq!(t.len(), 100_000);
        for i in (0..100_000u32).step_by(7) {
            assert_eq!(t.find(h(i as u64), |r| r == i), Some(i));
        }
        // `same` decides between rows whose hashes collide.
        assert_eq!(t.find(h(5), |_| false), None);
        t.insert(h(100_000), 100_000);
        for i in 0..50_000u32 {
            t.remove(h(i as u64), i);
        }
        assert_eq!(t.len(), 50_001);
        assert_eq!(t.find(h(10), |r| r == 10), None);
        assert_eq!(t.find(h(60_000), |r| r == 60_000), Some(60_000));
        // No shard holds much more than its share: growth stays a fraction of the table.
        assert!(t.largest_shard() < 2 * 50_001 / SHARDS, "largest shard {}", t.largest_shard());
    }

    #[test]
    fn a_bulk_fill_finds_what_inserts_find_and_names_the_first_duplicate() {
        let rows: Vec<(u64, RowId)> = (0..50_000u32).map(|i| (h(i as u64), i)).collect();
        let mut t = RowHash::default();
        assert_eq!(t.fill(&mut rows.clone(), |_, _| false), Ok(()));
        assert_eq!(t.len(), 50_000);
        for i in (0..50_000u32).step_by(3) {
            assert_eq!(t.find(h(i as u64), |r| r == i), Some(i));
        }
        assert_eq!(t.find(h(50_000), |_| true), None);
        // Rows 20,000 and 30,000 repeat the keys of rows 7 and 3: one of the later rows is
        // named.
        let mut dup = rows.clone();
        dup[20_000].0 = h(7);
        dup[30_000].0 = h(3);
        let key = |r: RowId| dup[r as usize].0;
        let mut t = RowHash::default();
        let named = t.fill(&mut dup.clone(), |a, b| key(a) == key(b));
        assert!(matches!(named, Err(20_000 | 30_000)), "{named:?}");
        // Equal 32-bit hashes of different keys are not duplicates.
        let mut t = RowHash::default();
        assert_eq!(t.fill(&mut dup.clone(), |_, _| false), Ok(()));
        assert_eq!(t.len(), 50_000);
    }

    #[test]
    fn equal_32_bit_hashes_are_told_apart_by_the_row() {
        let mut t = RowHash::default();
        // Two full hashes that fold to the same 32 bits.
        let (a, b) = (0x0000_0001_0000_0000u64, 0x0000_0000_0000_0001u64);
        assert_eq!(fold(a), fold(b));
        t.insert(a, 1);
        t.insert(b, 2);
        assert_eq!(t.find(a, |r| r == 1), Some(1));
        assert_eq!(t.find(b, |r| r == 2), Some(2));
        t.remove(a, 1);
        assert_eq!(t.find(a, |r| r == 1), None);
        assert_eq!(t.find(b, |r| r == 2), Some(2));
    }
}
