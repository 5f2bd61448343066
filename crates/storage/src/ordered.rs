//! The ordered part of an index: its entries in a B-tree, in the smallest entry type its
//! key allows.
//!
//! Most ordered keys are one to three integer columns declared NOT NULL (ids, types,
//! sequence numbers): such an index keeps `IntEntry`s, 16 to 32 bytes, and any other keeps
//! `Entry`s, 40 (module `key`). Should a key that is not all integers reach an integer set
//! anyway (validation makes every value of such a column an integer), the set turns into
//! `Entry`s then, once, rather than fail.

use std::collections::BTreeSet;
use std::ops::Bound;

use lockstep_core::Value;

use crate::key::{int_key, Entry, IntEntry, IntKey, Probe, RowProbe, INLINE_INTS};
use crate::RowId;

#[derive(Debug)]
pub(crate) enum Ordered {
    Any(BTreeSet<Entry>),
    One(BTreeSet<IntEntry<1>>),
    Two(BTreeSet<IntEntry<2>>),
    Three(BTreeSet<IntEntry<3>>),
}

/// `$body` for the set in whichever type it is, bound to `$s`.
macro_rules! each {
    ($set:expr, $s:ident => $body:expr) => {
        match $set {
            Ordered::Any($s) => $body,
            Ordered::One($s) => $body,
            Ordered::Two($s) => $body,
            Ordered::Three($s) => $body,
        }
    };
}

impl Ordered {
    /// An empty set for keys of `columns` columns; `ints` when they hold only integers.
    pub(crate) fn empty(columns: usize, ints: bool) -> Ordered {
        match (ints, columns) {
            (true, 1) => Ordered::One(BTreeSet::new()),
            (true, 2) => Ordered::Two(BTreeSet::new()),
            (true, 3) => Ordered::Three(BTreeSet::new()),
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
            Ordered::One(_) => Ordered::One(sorted.map(|(key, row)| IntEntry::new(&key, row)).collect()),
            Ordered::Two(_) => Ordered::Two(sorted.map(|(key, row)| IntEntry::new(&key, row)).collect()),
            Ordered::Three(_) => Ordered::Three(sorted.map(|(key, row)| IntEntry::new(&key, row)).collect()),
        }
    }

    /// Adds row `id` (stored as `values`) under its key over `columns`; false if it was
    /// there already.
    pub(crate) fn insert(&mut self, values: &[Value], columns: &[usize], id: RowId) -> bool {
        match (self, int_key(values, columns)) {
            (Ordered::Any(s), _) => s.insert(Entry::new(values, columns, id)),
            (Ordered::One(s), Some(key)) => s.insert(IntEntry::new(&key, id)),
            (Ordered::Two(s), Some(key)) => s.insert(IntEntry::new(&key, id)),
            (Ordered::Three(s), Some(key)) => s.insert(IntEntry::new(&key, id)),
            (set, None) => {
                set.widen();
                set.insert(values, columns, id)
            }
        }
    }

    /// Turns an integer set into one of `Entry`s.
    fn widen(&mut self) {
        fn entries<const N: usize>(s: &BTreeSet<IntEntry<N>>) -> BTreeSet<Entry> {
            s.iter().map(|e| Entry::from_ints(&e.ints, e.row)).collect()
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
        each!(self, s => s.remove(&probe as &dyn Probe))
    }

    /// The rows of the entries between two probes, in order or (`reverse`) backwards: boxed
    /// once, the direction chosen before boxing.
    pub(crate) fn range<'a>(&'a self, lo: Bound<&dyn Probe>, hi: Bound<&dyn Probe>, reverse: bool) -> Box<dyn Iterator<Item = RowId> + 'a> {
        fn boxed<'a>(rows: impl DoubleEndedIterator<Item = RowId> + 'a, reverse: bool) -> Box<dyn Iterator<Item = RowId> + 'a> {
            if reverse {
                Box::new(rows.rev())
            } else {
                Box::new(rows)
            }
        }
        each!(self, s => boxed(s.range::<dyn Probe, _>((lo, hi)).map(|e| e.row()), reverse))
    }

    pub(crate) fn len(&self) -> usize {
        each!(self, s => s.len())
    }

    /// Bytes of one entry in the B-tree, and of what it keeps on the heap for a key of
    /// `columns` columns.
    pub(crate) fn entry_bytes(&self, columns: usize) -> (usize, usize) {
        match self {
            // A key of a few integers is in the entry; any other keeps its values after
            // the first behind a thin vector with a 16-byte header.
            Ordered::Any(_) if columns > INLINE_INTS => (size_of::<Entry>(), 16 + (columns - 1) * size_of::<Value>()),
            Ordered::Any(_) => (size_of::<Entry>(), 0),
            Ordered::One(_) => (size_of::<IntEntry<1>>(), 0),
            Ordered::Two(_) => (size_of::<IntEntry<2>>(), 0),
            Ordered::Three(_) => (size_of::<IntEntry<3>>(), 0),
        }
    }

    /// Every entry's key and row, in order.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(Vec<Value>, RowId)> {
        each!(self, s => s.iter().map(|e| (crate::key::key_values(e), e.row())).collect())
    }

    /// Whether the entries are `IntEntry`s (tests check which sets are).
    #[cfg(test)]
    pub(crate) fn holds_ints(&self) -> bool {
        !matches!(self, Ordered::Any(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{PrefixProbe, FLAG_HIGH, FLAG_LOW};

    /// Rows of `width` small integers from a fixed pseudo-random sequence (repeats included).
    fn rows(n: usize, width: usize) -> Vec<Vec<Value>> {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        (0..n)
            .map(|_| {
                (0..width)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        Value::Int((x % 7) as i64 - 3)
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

    #[test]
    fn integer_sets_hold_what_a_general_set_holds_and_widen_for_a_key_that_is_not_integers() {
        assert!(!Ordered::empty(2, false).holds_ints());
        assert!(!Ordered::empty(4, true).holds_ints(), "more integers than an IntEntry has");
        for width in 1..=INLINE_INTS {
            let columns: Vec<usize> = (0..width).collect();
            let rows = rows(300, width);
            let (mut ints, mut any) = (Ordered::empty(width, true), Ordered::empty(width, false));
            assert!(ints.holds_ints());
            for (id, row) in rows.iter().enumerate() {
                assert!(ints.insert(row, &columns, id as RowId));
                assert!(any.insert(row, &columns, id as RowId));
            }
            for (id, row) in rows.iter().enumerate().step_by(3) {
                assert!(ints.remove(row, &columns, id as RowId), "{width} columns, row {id}");
                assert!(any.remove(row, &columns, id as RowId));
                assert!(!ints.remove(row, &columns, id as RowId), "removed twice");
            }
            assert_eq!(ints.len(), any.len());
            assert_eq!(ints.entries(), any.entries(), "{width} columns");
            assert_eq!(ranges(&ints, &rows), ranges(&any, &rows), "{width} columns");
            assert_eq!(ints.entry_bytes(width).0, 8 * width + 8);

            // Built in one pass from sorted keys: the same set.
            let mut sorted: Vec<IntKey> = ints
                .entries()
                .into_iter()
                .map(|(key, row)| {
                    let mut k = [0; INLINE_INTS];
                    k.iter_mut().zip(&key).for_each(|(k, v)| *k = v.as_i64().unwrap());
                    (k, row)
                })
                .collect();
            sorted.sort_unstable();
            assert_eq!(ints.of_sorted_ints(sorted.into_iter(), width).entries(), any.entries());

            // A NULL key: the set becomes a general one, with every entry kept.
            let mut null_key = rows[1].clone();
            null_key[width - 1] = Value::Null;
            assert!(ints.insert(&null_key, &columns, 1000));
            assert!(any.insert(&null_key, &columns, 1000));
            assert!(!ints.holds_ints());
            assert_eq!(ints.entries(), any.entries(), "{width} columns, widened");
            assert_eq!(ranges(&ints, &rows), ranges(&any, &rows));
        }
    }
}
