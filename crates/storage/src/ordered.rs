//! The ordered part of an index: its entries in B-trees, in the smallest entry type each
//! key allows.
//!
//! Most ordered keys are one to three integer columns declared NOT NULL (ids, types,
//! sequence numbers): such an index keeps `IntEntry`s (an `IntSet`), and any other keeps
//! `Entry`s, 40 bytes (module `key`). An integer set keeps the entries whose key columns
//! all fit 32 bits as 32-bit integers (8 to 16 bytes an entry) and the others as 64-bit
//! ones (16 to 32 bytes) in a second B-tree, and reads the two in step for a range. Most
//! keys fit, even of BIGINT columns (TATP's subscriber ids are BIGINTs under a few
//! million), so the second tree is usually empty; and a key that does not fit goes there,
//! rather than make the set convert its millions of entries in one transaction's time.
//! Should a key that is not all integers reach an integer set anyway (validation makes
//! every value of such a column an integer), the set turns into `Entry`s then, once,
//! rather than fail.

use std::collections::BTreeSet;
use std::iter::Peekable;
use std::ops::Bound;

use lockstep_core::Value;

use crate::key::{int_key, same_key, Entry, IntEntry, IntKey, KeyInt, Probe, RowProbe, INLINE_INTS};
use crate::RowId;

#[derive(Debug)]
pub(crate) enum Ordered {
    Any(BTreeSet<Entry>),
    One(IntSet<1>),
    Two(IntSet<2>),
    Three(IntSet<3>),
}

/// The entries of an index over `N` NOT NULL integer columns: each in `small` if every
/// column of its key fits 32 bits, else in `wide`. Equal keys are in the same tree, so the
/// two trees' keys never tie.
#[derive(Debug, Default)]
pub(crate) struct IntSet<const N: usize> {
    small: BTreeSet<IntEntry<i32, N>>,
    wide: BTreeSet<IntEntry<i64, N>>,
}

/// Whether a key goes into an integer set's `small` tree.
fn fits_small(key: &[i64]) -> bool {
    key.iter().all(|&v| i32::from_key(v).is_some())
}

impl<const N: usize> IntSet<N> {
    /// The set of the keys `sorted`, in order: each tree is built in one pass.
    fn of_sorted(sorted: impl Iterator<Item = IntKey>) -> IntSet<N> {
        let (mut small, mut wide) = (Vec::new(), Vec::new());
        for (key, row) in sorted {
            match IntEntry::new(&key, row) {
                Some(entry) => small.push(entry),
                None => wide.extend(IntEntry::new(&key, row)),
            }
        }
        IntSet { small: small.into_iter().collect(), wide: wide.into_iter().collect() }
    }

    /// Adds `row` under the integers `key`; false if it was there already.
    fn insert(&mut self, key: &[i64], row: RowId) -> bool {
        match IntEntry::new(key, row) {
            Some(entry) => self.small.insert(entry),
            None => IntEntry::new(key, row).is_some_and(|entry| self.wide.insert(entry)),
        }
    }

    /// Removes the entry `probe` names, whose key is `key`.
    fn remove(&mut self, key: &[i64], probe: &dyn Probe) -> bool {
        if fits_small(key) {
            self.small.remove(probe)
        } else {
            self.wide.remove(probe)
        }
    }

    /// The first row other than `except` under the integers `key`: a search that compares
    /// entries as integers, not through `Probe`.
    fn find(&self, key: &[i64], except: Option<RowId>) -> Option<RowId> {
        fn first<T: KeyInt, const N: usize>(set: &BTreeSet<IntEntry<T, N>>, key: &[i64], except: Option<RowId>) -> Option<RowId> {
            let (lo, hi) = (IntEntry::new(key, 0)?, IntEntry::new(key, RowId::MAX)?);
            set.range(lo..=hi).map(|e| e.row).find(|&row| Some(row) != except)
        }
        if fits_small(key) {
            first(&self.small, key, except)
        } else {
            first(&self.wide, key, except)
        }
    }

    /// The later row of the first two entries found with equal keys.
    fn first_duplicate(&self) -> Option<RowId> {
        fn in_tree<T: KeyInt, const N: usize>(set: &BTreeSet<IntEntry<T, N>>) -> Option<RowId> {
            set.iter().zip(set.iter().skip(1)).find(|(a, b)| a.ints == b.ints).map(|(_, b)| b.row)
        }
        in_tree(&self.small).or_else(|| in_tree(&self.wide))
    }

    fn range<'a>(&'a self, lo: Bound<&dyn Probe>, hi: Bound<&dyn Probe>, reverse: bool) -> Box<dyn Iterator<Item = RowId> + 'a> {
        let small = self.small.range::<dyn Probe, _>((lo, hi));
        let wide = self.wide.range::<dyn Probe, _>((lo, hi));
        match (self.small.is_empty(), self.wide.is_empty()) {
            (_, true) => boxed(small.map(|e| e.row), reverse),
            (true, false) => boxed(wide.map(|e| e.row), reverse),
            (false, false) if reverse => Box::new(InStep { small: small.rev().peekable(), wide: wide.rev().peekable(), reverse }),
            (false, false) => Box::new(InStep { small: small.peekable(), wide: wide.peekable(), reverse }),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.small.len() + self.wide.len()
    }

    /// Every entry as 64-bit integers and its row, in no particular order.
    fn iter(&self) -> impl Iterator<Item = ([i64; N], RowId)> + '_ {
        self.small.iter().map(|e| (e.wide(), e.row)).chain(self.wide.iter().map(|e| (e.ints, e.row)))
    }

    fn entry_bytes(&self) -> usize {
        self.small.len() * size_of::<IntEntry<i32, N>>() + self.wide.len() * size_of::<IntEntry<i64, N>>()
    }
}

/// The ranges of an integer set's two trees read in step, as one range in index order (or
/// backwards).
struct InStep<A: Iterator, B: Iterator> {
    small: Peekable<A>,
    wide: Peekable<B>,
    reverse: bool,
}

impl<'a, A, B, const N: usize> Iterator for InStep<A, B>
where
    A: Iterator<Item = &'a IntEntry<i32, N>>,
    B: Iterator<Item = &'a IntEntry<i64, N>>,
{
    type Item = RowId;

    fn next(&mut self) -> Option<RowId> {
        let small_next = match (self.small.peek(), self.wide.peek()) {
            // Keys never tie across the trees (`IntSet`).
            (Some(s), Some(w)) => (s.wide() < w.ints) != self.reverse,
            (s, _) => s.is_some(),
        };
        if small_next {
            self.small.next().map(|e| e.row)
        } else {
            self.wide.next().map(|e| e.row)
        }
    }
}

/// `rows` in order or (`reverse`) backwards, boxed once, the direction chosen before boxing.
fn boxed<'a>(rows: impl DoubleEndedIterator<Item = RowId> + 'a, reverse: bool) -> Box<dyn Iterator<Item = RowId> + 'a> {
    if reverse {
        Box::new(rows.rev())
    } else {
        Box::new(rows)
    }
}

impl Ordered {
    /// An empty set for keys of `columns` columns; `ints` when they hold only integers.
    pub(crate) fn empty(columns: usize, ints: bool) -> Ordered {
        match (ints, columns) {
            (true, 1) => Ordered::One(IntSet::default()),
            (true, 2) => Ordered::Two(IntSet::default()),
            (true, 3) => Ordered::Three(IntSet::default()),
            _ => Ordered::Any(BTreeSet::new()),
        }
    }

    /// The set of `entries`, in any order.
    pub(crate) fn of_entries(mut entries: Vec<Entry>) -> Ordered {
        entries.sort_unstable();
        Ordered::Any(entries.into_iter().collect())
    }

    /// A set of this one's type holding the integer keys `sorted` (in order), each of
    /// `columns` integers; built in one pass.
    pub(crate) fn of_sorted_ints(&self, sorted: impl Iterator<Item = IntKey>, columns: usize) -> Ordered {
        match self {
            Ordered::Any(_) => Ordered::Any(sorted.map(|(key, row)| Entry::from_ints(&key[..columns], row)).collect()),
            Ordered::One(_) => Ordered::One(IntSet::of_sorted(sorted)),
            Ordered::Two(_) => Ordered::Two(IntSet::of_sorted(sorted)),
            Ordered::Three(_) => Ordered::Three(IntSet::of_sorted(sorted)),
        }
    }

    /// Adds row `id` (stored as `values`) under its key over `columns`; false if it was
    /// there already.
    pub(crate) fn insert(&mut self, values: &[Value], columns: &[usize], id: RowId) -> bool {
        match (self, int_key(values, columns)) {
            (Ordered::Any(s), _) => s.insert(Entry::new(values, columns, id)),
            (Ordered::One(s), Some(key)) => s.insert(&key, id),
            (Ordered::Two(s), Some(key)) => s.insert(&key, id),
            (Ordered::Three(s), Some(key)) => s.insert(&key, id),
            (set, None) => {
                set.widen();
                set.insert(values, columns, id)
            }
        }
    }

    /// Turns an integer set into one of `Entry`s.
    fn widen(&mut self) {
        fn entries<const N: usize>(s: &IntSet<N>) -> BTreeSet<Entry> {
            s.iter().map(|(key, row)| Entry::from_ints(&key, row)).collect()
        }
        *self = Ordered::Any(match self {
            Ordered::Any(_) => return,
            Ordered::One(s) => entries(s),
            Ordered::Two(s) => entries(s),
            Ordered::Three(s) => entries(s),
        });
    }

    /// Removes row `id` (stored as `values`); false if it was not there.
    pub(crate) fn remove(&mut self, values: &[Value], columns: &[usize], id: RowId) -> bool {
        let probe = RowProbe { values, columns, row: id };
        match (self, int_key(values, columns)) {
            (Ordered::Any(s), _) => s.remove(&probe as &dyn Probe),
            (Ordered::One(s), Some(key)) => s.remove(&key, &probe),
            (Ordered::Two(s), Some(key)) => s.remove(&key, &probe),
            (Ordered::Three(s), Some(key)) => s.remove(&key, &probe),
            // An integer set holds no key that is not integers.
            (_, None) => false,
        }
    }

    /// For an integer set and a key of integers (`int_key`), the first row other than
    /// `except` under that key; None for a set of `Entry`s.
    pub(crate) fn find_int(&self, key: &[i64; INLINE_INTS], except: Option<RowId>) -> Option<Option<RowId>> {
        match self {
            Ordered::Any(_) => None,
            Ordered::One(s) => Some(s.find(&key[..1], except)),
            Ordered::Two(s) => Some(s.find(&key[..2], except)),
            Ordered::Three(s) => Some(s.find(&key[..3], except)),
        }
    }

    /// The later row of the first two entries found with equal keys (a bulk build's
    /// uniqueness check).
    pub(crate) fn first_duplicate(&self) -> Option<RowId> {
        match self {
            Ordered::Any(s) => s.iter().zip(s.iter().skip(1)).find(|(a, b)| same_key(*a, *b)).map(|(_, b)| b.row()),
            Ordered::One(s) => s.first_duplicate(),
            Ordered::Two(s) => s.first_duplicate(),
            Ordered::Three(s) => s.first_duplicate(),
        }
    }

    /// The rows of the entries between two probes, in order or (`reverse`) backwards.
    pub(crate) fn range<'a>(&'a self, lo: Bound<&dyn Probe>, hi: Bound<&dyn Probe>, reverse: bool) -> Box<dyn Iterator<Item = RowId> + 'a> {
        match self {
            Ordered::Any(s) => boxed(s.range::<dyn Probe, _>((lo, hi)).map(|e| e.row()), reverse),
            Ordered::One(s) => s.range(lo, hi, reverse),
            Ordered::Two(s) => s.range(lo, hi, reverse),
            Ordered::Three(s) => s.range(lo, hi, reverse),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self {
            Ordered::Any(s) => s.len(),
            Ordered::One(s) => s.len(),
            Ordered::Two(s) => s.len(),
            Ordered::Three(s) => s.len(),
        }
    }

    /// Estimated bytes for a key of `columns` columns: the entries at the ~55% node fill
    /// that ascending keys leave (measured: 1M rows, 5 columns, one PK ≈ 330 MB RSS), and
    /// what they keep on the heap.
    pub(crate) fn memory_bytes(&self, columns: usize) -> usize {
        let (entries, heap) = match self {
            // A key of a few integers is in the entry; any other keeps its values after
            // the first behind a thin vector with a 16-byte header.
            Ordered::Any(s) if columns > INLINE_INTS => (s.len() * size_of::<Entry>(), s.len() * (16 + (columns - 1) * size_of::<Value>())),
            Ordered::Any(s) => (s.len() * size_of::<Entry>(), 0),
            Ordered::One(s) => (s.entry_bytes(), 0),
            Ordered::Two(s) => (s.entry_bytes(), 0),
            Ordered::Three(s) => (s.entry_bytes(), 0),
        };
        entries * 9 / 5 + heap
    }

    /// Every entry's key and row, in order.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(Vec<Value>, RowId)> {
        let mut all: Vec<(Vec<Value>, RowId)> = match self {
            Ordered::Any(s) => return s.iter().map(|e| (crate::key::key_values(e), e.row())).collect(),
            Ordered::One(s) => s.iter().map(|(k, r)| (k.map(Value::Int).to_vec(), r)).collect(),
            Ordered::Two(s) => s.iter().map(|(k, r)| (k.map(Value::Int).to_vec(), r)).collect(),
            Ordered::Three(s) => s.iter().map(|(k, r)| (k.map(Value::Int).to_vec(), r)).collect(),
        };
        all.sort();
        all
    }

    /// Whether the entries are `IntEntry`s (tests check which sets are).
    #[cfg(test)]
    pub(crate) fn holds_ints(&self) -> bool {
        !matches!(self, Ordered::Any(_))
    }

    /// How many entries an integer set keeps as 64-bit integers.
    #[cfg(test)]
    pub(crate) fn wide_len(&self) -> usize {
        match self {
            Ordered::Any(_) => 0,
            Ordered::One(s) => s.wide.len(),
            Ordered::Two(s) => s.wide.len(),
            Ordered::Three(s) => s.wide.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{PrefixProbe, FLAG_HIGH, FLAG_LOW};

    /// Rows of `width` integers, each a multiple of `scale` from -3 to 3, from a fixed
    /// pseudo-random sequence (repeats included).
    fn rows(n: usize, width: usize, scale: i64) -> Vec<Vec<Value>> {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        (0..n)
            .map(|_| {
                (0..width)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        Value::Int(((x % 7) as i64 - 3) * scale)
                    })
                    .collect()
            })
            .collect()
    }

    /// Rows by prefix range: every prefix length, both bounds, both directions.
    fn ranges(set: &Ordered, keys: &[Vec<Value>]) -> Vec<Vec<RowId>> {
        let mut out = Vec::new();
        for key in keys.iter().take(20) {
            for len in 0..=key.len() {
                let lo = PrefixProbe { key: &key[..len], flag: FLAG_LOW };
                let hi = PrefixProbe { key: &key[..len], flag: FLAG_HIGH };
                out.push(set.range(Bound::Included(&lo), Bound::Included(&hi), false).collect());
                out.push(set.range(Bound::Excluded(&hi), Bound::Unbounded, true).collect());
            }
        }
        out
    }

    /// The set's entries as the integer keys a bulk build starts from, in order.
    fn int_keys(set: &Ordered) -> impl Iterator<Item = IntKey> {
        let key = |values: Vec<Value>| std::array::from_fn(|i| values.get(i).and_then(Value::as_i64).unwrap_or(0));
        set.entries().into_iter().map(move |(values, row)| (key(values), row))
    }

    #[test]
    fn integer_sets_hold_what_a_general_set_holds_and_widen_for_a_key_that_is_not_integers() {
        assert!(!Ordered::empty(2, false).holds_ints());
        assert!(!Ordered::empty(4, true).holds_ints(), "more integers than an IntEntry has");
        // Values within 32 bits, then values of which some fit 32 bits and some do not.
        for (scale, all_small) in [(700_000_000, true), (1_500_000_000, false)] {
            for width in 1..=INLINE_INTS {
                let what = format!("{width} columns, values to {}", 3 * scale);
                let columns: Vec<usize> = (0..width).collect();
                let rows = rows(300, width, scale);
                let (mut ints, mut any) = (Ordered::empty(width, true), Ordered::empty(width, false));
                assert!(ints.holds_ints());
                for (id, row) in rows.iter().enumerate() {
                    assert!(ints.insert(row, &columns, id as RowId));
                    assert!(any.insert(row, &columns, id as RowId));
                }
                for (id, row) in rows.iter().enumerate().step_by(3) {
                    assert!(ints.remove(row, &columns, id as RowId), "{what}, row {id}");
                    assert!(any.remove(row, &columns, id as RowId));
                    assert!(!ints.remove(row, &columns, id as RowId), "removed twice");
                }
                assert_eq!(ints.wide_len() == 0, all_small, "{what}: 64-bit entries only for keys past 32 bits");
                assert_eq!(ints.len(), any.len());
                assert_eq!(ints.entries(), any.entries(), "{what}");
                assert_eq!(ranges(&ints, &rows), ranges(&any, &rows), "{what}");
                let entry_bytes = (ints.len() - ints.wide_len()) * (4 * width + 4) + ints.wide_len() * (8 * width + 8);
                assert_eq!(ints.memory_bytes(width), entry_bytes * 9 / 5, "{what}");

                // Built in one pass from sorted keys: the same set.
                let built = ints.of_sorted_ints(int_keys(&ints), width);
                assert_eq!(built.wide_len(), ints.wide_len());
                assert_eq!(built.entries(), any.entries(), "{what}");
                assert_eq!(ranges(&built, &rows), ranges(&any, &rows), "{what}");

                // A NULL key: the set becomes a general one, with every entry kept.
                let mut null_key = rows[1].clone();
                null_key[width - 1] = Value::Null;
                assert!(ints.insert(&null_key, &columns, 1000));
                assert!(any.insert(&null_key, &columns, 1000));
                assert!(!ints.holds_ints());
                assert_eq!(ints.entries(), any.entries(), "{what}, widened");
                assert_eq!(ranges(&ints, &rows), ranges(&any, &rows));
            }
        }
    }
}
