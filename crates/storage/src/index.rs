//! One index of one table: an ordered set for ranges and prefixes, plus, for most unique
//! indexes, a hash table of RowIds for O(1) point lookups and uniqueness checks.
//!
//! The hash part (`RowHash`) stores RowIds with a 32-bit hash; equality is checked against
//! the (packed) row itself, which the caller passes in as the table's slots.
//!
//! A single-column unique index answers point lookups and uniqueness checks from its hash
//! alone, so its ordered set is built only when a range (or a NULL key) first needs it, from
//! the table's rows, and kept up to date from then on: keys that are only ever probed whole
//! (most single-column primary keys, view groups) never pay a B-tree insert per row nor the
//! memory of a second copy of the key. Multi-column indexes are searched by key prefix in
//! the usual plans (a subscriber's rows, a user's sessions), so theirs is kept from the
//! start: building it on first use would stall that transaction for the whole table.
//!
//! A unique index over two or three NOT NULL integer columns has no hash: its ordered set
//! holds each whole key as integers (`ordered.rs`), so a search comparing them as integers
//! answers a point lookup or a uniqueness check without reading a row, where a hash probe
//! reads the row it finds to confirm the key: it is faster, and saves an entry per row.
//! Those are most composite primary keys (a subscriber's facilities, an order's lines).
//!
//! A partial index (`member` set) holds only the rows whose flag at that stored position
//! is true (`computed.rs`): every insert, removal, build and uniqueness check skips the
//! others, so they neither appear in its lookups nor conflict with its keys.

use std::cell::OnceCell;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Bound;

use foldhash::fast::FixedState;
use lockstep_core::{IndexDef, Value};
use smallvec::SmallVec;

use crate::computed::is_member;
use crate::key::{int_key, Entry, IntKey, PrefixProbe, Probe, FLAG_HIGH, FLAG_LOW, INLINE_INTS};
use crate::ordered::Ordered;
use crate::packed::PackedRow;
use crate::row_hash::RowHash;
use crate::slots::Slots;
use crate::RowId;

/// A fixed seed: hashes (and so any order derived from them) are the same on every run.
const HASH_STATE: FixedState = FixedState::with_seed(0x6c6f_636b_7374_6570);

fn hash_values<'a>(values: impl Iterator<Item = &'a Value>) -> u64 {
    let mut h = HASH_STATE.build_hasher();
    for v in values {
        v.hash(&mut h);
    }
    h.finish()
}

fn row_values<'a>(row: &'a [Value], columns: &'a [usize]) -> impl Iterator<Item = &'a Value> + 'a {
    columns.iter().map(move |&c| &row[c])
}

/// Whether a row's key over `columns` is in a unique index's hash: keys with a NULL are
/// not when NULLs are distinct (see `Index::nulls_distinct`).
fn key_is_hashed(nulls_distinct: bool, columns: &[usize], row: &[Value]) -> bool {
    !nulls_distinct || !columns.iter().any(|&c| row[c].is_null())
}

/// The ordered set of every row of `slots` that belongs in the index (`member`), keyed over
/// `columns` (`ints` when they hold only integers).
fn ordered_entries(slots: &Slots, columns: &[usize], member: Option<usize>, ints: bool) -> Ordered {
    let mut load = IndexLoad::default();
    for (id, row) in slots.iter().enumerate() {
        let Some(row) = row else { continue };
        let row = row.unpack();
        if is_member(member, &row) {
            load.add_entry(&row, columns, id as RowId);
        }
    }
    load.into_set(columns.len(), ints)
}

/// What building an index in bulk needs from each row, gathered while the row is at hand
/// (a snapshot's rows as they are read): afterwards the rows, hundreds of megabytes of
/// them, would each be a cache miss per index to read again.
#[derive(Debug, Default)]
pub(crate) struct IndexLoad {
    /// The hash of each key a unique index's hash holds, with its row, in row order.
    hashed: Vec<(u64, RowId)>,
    /// The ordered set's keys while all of them are integers (most keys are).
    ints: Vec<IntKey>,
    /// The ordered set's entries once a key is not (`ints` then moved here).
    entries: Vec<Entry>,
    /// Whether a key was not all integers: `entries` then holds every entry.
    general: bool,
}

impl IndexLoad {
    /// Adds row `id`'s entry over `columns`.
    fn add_entry(&mut self, row: &[Value], columns: &[usize], id: RowId) {
        if !self.general {
            if let Some(key) = int_key(row, columns) {
                self.ints.push((key, id));
                return;
            }
        }
        if !self.general {
            self.general = true;
            self.entries = self.ints.drain(..).map(|(key, row)| Entry::from_ints(&key[..columns.len()], row)).collect();
        }
        self.entries.push(Entry::new(row, columns, id));
    }

    /// The ordered set of the entries added, over `columns` columns (`ints` when they hold
    /// only integers).
    fn into_set(self, columns: usize, ints: bool) -> Ordered {
        if self.general {
            return Ordered::of_entries(self.entries);
        }
        Ordered::empty(columns, ints).of_sorted_ints(sorted_int_keys(self.ints, columns), columns)
    }
}

/// `ints` (keys of `columns` integers) in order. When the key columns' values span few
/// enough bits that a key and its row fit one u64 together (TATP's keys take under 30
/// bits), each is sorted as that u64: 8 bytes and one comparison instead of 32 bytes and
/// up to four, for the millions of entries a restart sorts.
fn sorted_int_keys(mut ints: Vec<IntKey>, columns: usize) -> impl Iterator<Item = IntKey> {
    let packing = OneWord::for_keys(&ints, columns);
    let mut words = Vec::new();
    match &packing {
        Some(p) => {
            words = ints.iter().map(|k| p.pack(k)).collect();
            ints = Vec::new();
            words.sort_unstable();
        }
        None => ints.sort_unstable(),
    }
    // One of the two is empty; words exist only with a packing.
    ints.into_iter().chain(words.into_iter().filter_map(move |w| Some(packing?.unpack(w))))
}

/// How integer keys and their rows pack into one u64 that orders as they do: each key
/// column as its distance from the column's least value, in as many bits as the largest
/// distance needs, first column highest, then the row.
#[derive(Clone, Copy)]
struct OneWord {
    columns: usize,
    least: [i64; INLINE_INTS],
    widths: [u32; INLINE_INTS],
    row_bits: u32,
}

impl OneWord {
    /// The packing of `ints`, if their keys and rows fit 64 bits.
    fn for_keys(ints: &[IntKey], columns: usize) -> Option<OneWord> {
        let &(first, _) = ints.first()?;
        let (mut least, mut most, mut rows_max) = (first, first, 0);
        for (key, row) in ints {
            for c in 0..columns {
                least[c] = least[c].min(key[c]);
                most[c] = most[c].max(key[c]);
            }
            rows_max = rows_max.max(*row);
        }
        let bits = |span: u64| u64::BITS - span.leading_zeros();
        let widths = std::array::from_fn(|c| if c < columns { bits(most[c].wrapping_sub(least[c]) as u64) } else { 0 });
        let row_bits = bits(u64::from(rows_max));
        (widths.iter().sum::<u32>() + row_bits <= u64::BITS).then_some(OneWord { columns, least, widths, row_bits })
    }

    fn pack(&self, (key, row): &IntKey) -> u64 {
        let word = (0..self.columns).fold(0, |w, c| shl(w, self.widths[c]) | key[c].wrapping_sub(self.least[c]) as u64);
        shl(word, self.row_bits) | u64::from(*row)
    }

    fn unpack(&self, mut word: u64) -> IntKey {
        let row = low_bits(word, self.row_bits) as RowId;
        word = shr(word, self.row_bits);
        let mut key = [0; INLINE_INTS];
        for c in (0..self.columns).rev() {
            key[c] = self.least[c].wrapping_add(low_bits(word, self.widths[c]) as i64);
            word = shr(word, self.widths[c]);
        }
        (key, row)
    }
}

// Shifts by 64 happen only to a zero word (every other width is then 0), and give 0.
fn shl(word: u64, bits: u32) -> u64 {
    word.checked_shl(bits).unwrap_or(0)
}

fn shr(word: u64, bits: u32) -> u64 {
    word.checked_shr(bits).unwrap_or(0)
}

fn low_bits(word: u64, bits: u32) -> u64 {
    word & shl(1, bits).wrapping_sub(1)
}

/// The row in slot `id`; every id an index holds must have a row (an internal invariant).
fn slot(slots: &Slots, id: RowId) -> &PackedRow {
    match slots.get(id as usize) {
        Some(Some(row)) => row,
        _ => panic!("index refers to empty row slot {id}"),
    }
}

/// Whether the stored row `id` has the key `key` over `columns`.
fn has_key<'a>(slots: &Slots, id: RowId, columns: &[usize], mut key: impl Iterator<Item = &'a Value>) -> bool {
    let row = slot(slots, id);
    columns.iter().all(|&c| key.next().is_some_and(|k| row.value_eq(c, k)))
}

/// The rows an index lookup found: at most one from a unique hash probe, else a range.
pub enum Lookup<'a> {
    One(Option<RowId>),
    Many(Box<dyn Iterator<Item = RowId> + 'a>),
}

impl Iterator for Lookup<'_> {
    type Item = RowId;

    fn next(&mut self) -> Option<RowId> {
        match self {
            Lookup::One(id) => id.take(),
            Lookup::Many(iter) => iter.next(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Index {
    pub(crate) columns: Box<[usize]>,
    /// SQL semantics for user tables: a key with a NULL never conflicts, so it is kept out
    /// of the hash. Views group NULLs together, so their group index turns this off.
    nulls_distinct: bool,
    /// For a partial index, the stored position of the flag that says a row belongs in it.
    member: Option<usize>,
    /// Built on first use for a single-column unique index, else always there (module doc).
    ordered: OnceCell<Ordered>,
    /// Whether every key column holds only integers (`Ordered::empty`).
    int_keys: bool,
    /// Whether the index refuses duplicate keys.
    unique: bool,
    /// For a unique index, unless its ordered set answers point lookups (module doc).
    hash: Option<RowHash>,
}

impl Index {
    /// The index `def`; `member` is its flag's stored position when it is partial
    /// (`TableDef::predicate_flag`); `int_keys` when every key column holds only integers.
    pub(crate) fn new(def: &IndexDef, member: Option<usize>, int_keys: bool) -> Index {
        let mut index =
            Self::with_columns(def.columns.clone().into_boxed_slice(), def.unique || def.assume_unique || def.primary, true, int_keys);
        index.member = member;
        index
    }

    pub(crate) fn with_columns(columns: Box<[usize]>, unique: bool, nulls_distinct: bool, int_keys: bool) -> Index {
        let order_on_first_use = unique && columns.len() == 1;
        let searched_as_ints = int_keys && (2..=INLINE_INTS).contains(&columns.len());
        let empty = || Ordered::empty(columns.len(), int_keys);
        Index {
            ordered: if order_on_first_use { OnceCell::new() } else { OnceCell::from(empty()) },
            columns,
            nulls_distinct,
            member: None,
            int_keys,
            unique,
            hash: (unique && !searched_as_ints).then(RowHash::default),
        }
    }

    /// Whether the index refuses duplicate keys.
    pub(crate) fn is_unique(&self) -> bool {
        self.unique
    }

    /// Whether the index holds only the rows that pass a predicate.
    pub(crate) fn is_partial(&self) -> bool {
        self.member.is_some()
    }

    /// Whether two versions of a row have different keys in this index, or only one of
    /// them belongs in it.
    pub(crate) fn key_differs(&self, a: &[Value], b: &[Value]) -> bool {
        self.columns.iter().chain(&self.member).any(|&c| a[c] != b[c])
    }

    /// The ordered set, built from the table's rows if it is not there yet.
    fn ordered(&self, slots: &Slots) -> &Ordered {
        self.ordered.get_or_init(|| ordered_entries(slots, &self.columns, self.member, self.int_keys))
    }

    /// Whether the ordered set exists (tests check that point lookups never build it).
    #[cfg(test)]
    pub(crate) fn has_ordered(&self) -> bool {
        self.ordered.get().is_some()
    }

    /// Whether `row`'s key goes into the hash (if there is one) and is checked for
    /// uniqueness.
    fn hashed(&self, row: &[Value]) -> bool {
        key_is_hashed(self.nulls_distinct, &self.columns, row)
    }

    /// Whether `row` belongs in the index (always, unless the index is partial).
    fn holds(&self, row: &[Value]) -> bool {
        is_member(self.member, row)
    }

    /// The row other than `except` whose key equals `row`'s, for a unique index.
    pub(crate) fn conflict(&self, slots: &Slots, row: &[Value], except: Option<RowId>) -> Option<RowId> {
        if !self.unique || !self.hashed(row) || !self.holds(row) {
            return None;
        }
        let cols = &self.columns;
        match &self.hash {
            Some(hash) => {
                let h = hash_values(row_values(row, cols));
                hash.find(h, |id| Some(id) != except && has_key(slots, id, cols, row_values(row, cols)))
            }
            None => self.find_ordered(slots, row, cols, except),
        }
    }

    /// The first row other than `except` whose whole key is the values at `columns` of
    /// `values`, from the ordered set (a unique index without a hash).
    fn find_ordered(&self, slots: &Slots, values: &[Value], columns: &[usize], except: Option<RowId>) -> Option<RowId> {
        let ordered = self.ordered(slots);
        if let Some(found) = int_key(values, columns).and_then(|ints| ordered.find_int(&ints, except)) {
            return found;
        }
        // A set that had to take keys other than integers (`ordered.rs`).
        let key: SmallVec<[Value; INLINE_INTS]> = row_values(values, columns).cloned().collect();
        self.range(slots, Bound::Included(&key), Bound::Included(&key), false).find(|&id| Some(id) != except)
    }

    /// Adds row `id`, whose values are `row`.
    pub(crate) fn insert(&mut self, row: &[Value], id: RowId) {
        if !self.holds(row) {
            return;
        }
        if let Some(ordered) = self.ordered.get_mut() {
            let fresh = ordered.insert(row, &self.columns, id);
            debug_assert!(fresh, "row {id} was already indexed");
        }
        if self.hashed(row) {
            let cols = &self.columns;
            if let Some(hash) = &mut self.hash {
                hash.insert(hash_values(row_values(row, cols)), id);
            }
        }
    }

    /// Adds what row `id` (stored as `row`) brings to a bulk build to `load`; rows must
    /// come in id order.
    pub(crate) fn gather(&self, load: &mut IndexLoad, row: &[Value], id: RowId) {
        if !self.holds(row) {
            return;
        }
        if self.hash.is_some() && self.hashed(row) {
            load.hashed.push((hash_values(row_values(row, &self.columns)), id));
        }
        if self.ordered.get().is_some() {
            load.add_entry(row, &self.columns, id);
        }
    }

    /// Indexes the rows of `slots` (a table built in bulk) from what `gather` took from each
    /// of them: the hash is sized once and the ordered set, if kept, is built from sorted
    /// entries. Err names a row whose key a unique index already holds for an earlier row.
    pub(crate) fn build_gathered(&mut self, mut load: IndexLoad, slots: &Slots) -> Result<(), RowId> {
        if let Some(hash) = &mut self.hash {
            let cols = &self.columns;
            // Rows are read only when two keys share a 32-bit hash.
            let same = |id: RowId, other: RowId| {
                let key: Vec<Value> = cols.iter().map(|&c| slot(slots, id).value(c)).collect();
                has_key(slots, other, cols, key.iter())
            };
            hash.fill(&mut load.hashed, same)?;
        }
        if let Some(ordered) = self.ordered.get_mut() {
            *ordered = load.into_set(self.columns.len(), self.int_keys);
            if self.unique && self.hash.is_none() {
                ordered.first_duplicate().map_or(Ok(()), Err)?;
            }
        }
        Ok(())
    }

    /// Removes row `id`, whose values are `row` (still in its slot or just taken out).
    pub(crate) fn remove(&mut self, row: &[Value], id: RowId) {
        if !self.holds(row) {
            return;
        }
        if let Some(ordered) = self.ordered.get_mut() {
            let removed = ordered.remove(row, &self.columns, id);
            debug_assert!(removed, "row {id} was not indexed");
        }
        if self.hashed(row) {
            let h = hash_values(row_values(row, &self.columns));
            if let Some(hash) = &mut self.hash {
                hash.remove(h, id);
            }
        }
    }

    /// Rows whose key starts with `key`, in index order. A full key of a unique index is
    /// one hash probe (or one search of its ordered set) and allocates nothing.
    pub(crate) fn lookup<'a>(&'a self, slots: &Slots, key: &[Value]) -> Lookup<'a> {
        if self.unique && key.len() == self.columns.len() && (!self.nulls_distinct || !key.iter().any(Value::is_null)) {
            let found = match &self.hash {
                Some(hash) => hash.find(hash_values(key.iter()), |id| has_key(slots, id, &self.columns, key.iter())),
                None => {
                    // The key's own positions: a key without a hash has at most three.
                    let positions: [usize; INLINE_INTS] = std::array::from_fn(|i| i);
                    positions.get(..key.len()).and_then(|columns| self.find_ordered(slots, key, columns, None))
                }
            };
            return Lookup::One(found);
        }
        Lookup::Many(self.range(slots, Bound::Included(key), Bound::Included(key), false))
    }

    /// Rows between two key prefixes, ascending or descending.
    pub(crate) fn range<'a>(
        &'a self,
        slots: &Slots,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        reverse: bool,
    ) -> Box<dyn Iterator<Item = RowId> + 'a> {
        // A probe never equals an entry, so every bound becomes an Included probe placed
        // just before or just after the entries its prefix covers.
        let lo_probe = match lo {
            Bound::Included(k) => Some(PrefixProbe { key: k, flag: FLAG_LOW }),
            Bound::Excluded(k) => Some(PrefixProbe { key: k, flag: FLAG_HIGH }),
            Bound::Unbounded => None,
        };
        let hi_probe = match hi {
            Bound::Included(k) => Some(PrefixProbe { key: k, flag: FLAG_HIGH }),
            Bound::Excluded(k) => Some(PrefixProbe { key: k, flag: FLAG_LOW }),
            Bound::Unbounded => None,
        };
        if let (Some(l), Some(h)) = (&lo_probe, &hi_probe) {
            // BTreeSet::range panics on an inverted range; an empty result is the answer.
            if (l as &dyn Probe) > (h as &dyn Probe) {
                return Box::new(std::iter::empty());
            }
        }
        let lo_bound: Bound<&dyn Probe> = match &lo_probe {
            Some(p) => Bound::Included(p),
            None => Bound::Unbounded,
        };
        let hi_bound: Bound<&dyn Probe> = match &hi_probe {
            Some(p) => Bound::Included(p),
            None => Bound::Unbounded,
        };
        self.ordered(slots).range(lo_bound, hi_bound, reverse)
    }

    /// All entries in index order, if the ordered set exists (tests and consistency checks).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Option<Vec<(Vec<Value>, RowId)>> {
        Some(self.ordered.get()?.entries())
    }

    /// Whether the ordered set holds `IntEntry`s; None while it is not built.
    #[cfg(test)]
    pub(crate) fn holds_int_entries(&self) -> Option<bool> {
        self.ordered.get().map(Ordered::holds_ints)
    }

    /// Number of rows in the hash part, if the index has one.
    #[cfg(test)]
    pub(crate) fn hashed_len(&self) -> Option<usize> {
        self.hash.as_ref().map(RowHash::len)
    }

    /// Estimated bytes: the ordered set (`Ordered::memory_bytes`) and the hash table.
    pub(crate) fn memory_bytes(&self) -> usize {
        let ordered = self.ordered.get().map_or(0, |o| o.memory_bytes(self.columns.len()));
        ordered + self.hash.as_ref().map_or(0, RowHash::allocation_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of `columns` integers made by `key` from a fixed pseudo-random sequence.
    fn keys(n: u32, columns: usize, key: impl Fn(u64, usize) -> i64) -> Vec<IntKey> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|row| {
                let mut k = [0; INLINE_INTS];
                for (c, v) in k.iter_mut().enumerate().take(columns) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *v = key(x, c);
                }
                (k, row)
            })
            .collect()
    }

    #[test]
    fn integer_keys_sort_as_tuples_whether_packed_into_one_word_or_not() {
        let cases: Vec<(&str, usize, Vec<IntKey>)> = vec![
            ("small spans, negative values", 3, keys(5000, 3, |x, c| (x % [2000, 5, 17][c]) as i64 - 1000)),
            (
                "exactly 64 bits: 41 + 13 + 10 for the rows",
                2,
                keys(1000, 2, |x, c| [(x % (1 << 41)) as i64 - (1 << 40), (x % (1 << 13)) as i64][c]),
            ),
            ("65 bits: sorted as tuples", 2, keys(1000, 2, |x, c| [(x % (1 << 42)) as i64 - (1 << 40), (x % (1 << 13)) as i64][c])),
            ("the whole range of i64", 1, keys(3000, 1, |x, _| x as i64)),
            ("extremes and equal keys", 2, keys(500, 2, |x, c| [[i64::MIN, i64::MAX][(x % 2) as usize], 7][c])),
            ("one entry", 3, keys(1, 3, |x, _| x as i64)),
            ("none", 1, Vec::new()),
        ];
        for (what, columns, ints) in cases {
            let mut expected = ints.clone();
            expected.sort_unstable();
            assert_eq!(sorted_int_keys(ints, columns).collect::<Vec<_>>(), expected, "{what}");
        }
    }
}
