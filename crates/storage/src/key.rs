//! Ordered-index entries and the probes that search them without building a key.
//!
//! An ordered index is a `BTreeSet<Entry>` ordered by (key, RowId). Searching it with a key
//! prefix, or removing a row's entry, goes through the `Probe` trait: `Entry` borrows as
//! `dyn Probe`, so a probe that reads the key straight out of a row (or out of the caller's
//! slice) can be compared against entries without cloning any value.

use std::borrow::Borrow;
use std::cmp::Ordering;

use lockstep_core::Value;
use thin_vec::ThinVec;

use crate::RowId;

/// A probe sorting before every entry whose key starts with the probe's key.
pub(crate) const FLAG_LOW: u8 = 0;
/// A real entry (or an exact probe for one).
pub(crate) const FLAG_ENTRY: u8 = 1;
/// A probe sorting after every entry whose key starts with the probe's key.
pub(crate) const FLAG_HIGH: u8 = 2;

/// Something comparable with index entries: a key (possibly a prefix), a flag and a RowId.
pub(crate) trait Probe {
    /// The key's first value: `key_at(0)` when the key has one, but cheaper to reach.
    fn first(&self) -> Option<&Value>;
    fn key_len(&self) -> usize;
    fn key_at(&self, i: usize) -> &Value;
    fn flag(&self) -> u8;
    fn row(&self) -> RowId;
}

/// The index order. Keys compare value by value (`Value`'s total order, where NULL equals
/// NULL and sorts first). When one key is a proper prefix of the other — which only happens
/// for a prefix probe, as all entries of one index have the same width — the probe's flag
/// puts it before or after every entry that extends it.
fn compare(a: &dyn Probe, b: &dyn Probe) -> Ordering {
    // An entry keeps its first value inline and the rest (with their count) behind a
    // pointer. Most comparisons of a search are decided by the first values, so those are
    // compared before anything else is read: asking an entry its length first would cost a
    // cache miss per entry compared.
    if let (Some(x), Some(y)) = (a.first(), b.first()) {
        match x.cmp(y) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    let common = a.key_len().min(b.key_len());
    for i in 1..common {
        match a.key_at(i).cmp(b.key_at(i)) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    match a.key_len().cmp(&b.key_len()) {
        Ordering::Equal => (a.flag(), a.row()).cmp(&(b.flag(), b.row())),
        Ordering::Less if a.flag() == FLAG_HIGH => Ordering::Greater,
        Ordering::Less => Ordering::Less,
        Ordering::Greater if b.flag() == FLAG_HIGH => Ordering::Less,
        Ordering::Greater => Ordering::Greater,
    }
}

impl PartialEq for dyn Probe + '_ {
    fn eq(&self, other: &Self) -> bool {
        compare(self, other) == Ordering::Equal
    }
}

impl Eq for dyn Probe + '_ {}

impl PartialOrd for dyn Probe + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn Probe + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(self, other)
    }
}

/// One row's entry in an ordered index: its key and its RowId.
///
/// The key's first value is held inline and the rest behind one thin pointer: a B-tree
/// node's entries then sit together in memory, and a search, which compares several entries
/// per node and is mostly decided by the first column, does not chase a pointer (a cache
/// miss) for each of them. The thin pointer (8 bytes, nothing allocated when empty) keeps an
/// entry at 48 bytes. A key may have no column at all: the group index of a view without
/// GROUP BY.
#[derive(Debug)]
pub(crate) struct Entry {
    first: Option<Value>,
    rest: ThinVec<Value>,
    pub(crate) row: RowId,
}

impl Entry {
    /// The entry of row `row` (stored as `values`) over the index columns `columns`.
    pub(crate) fn new(values: &[Value], columns: &[usize], row: RowId) -> Entry {
        let value = |c: &usize| values[*c].clone();
        Entry { first: columns.first().map(value), rest: columns.iter().skip(1).map(value).collect(), row }
    }

    /// The entry of row `row` whose key is the integers `key` (a bulk build's fast path).
    pub(crate) fn from_ints(key: &[i64], row: RowId) -> Entry {
        Entry { first: key.first().map(|&v| Value::Int(v)), rest: key.iter().skip(1).map(|&v| Value::Int(v)).collect(), row }
    }

    /// The key's values in order.
    #[cfg(test)]
    pub(crate) fn key(&self) -> Vec<Value> {
        self.first.iter().chain(self.rest.iter()).cloned().collect()
    }
}

impl Probe for Entry {
    fn first(&self) -> Option<&Value> {
        self.first.as_ref()
    }
    fn key_len(&self) -> usize {
        self.first.is_some() as usize + self.rest.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        match (i, &self.first) {
            (0, Some(v)) => v,
            _ => &self.rest[i - 1],
        }
    }
    fn flag(&self) -> u8 {
        FLAG_ENTRY
    }
    fn row(&self) -> RowId {
        self.row
    }
}

impl<'a> Borrow<dyn Probe + 'a> for Entry {
    fn borrow(&self) -> &(dyn Probe + 'a) {
        self
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// [`compare`] for two entries (same width, same flag), without its dynamic dispatch:
    /// inserts and bulk builds compare entries with each other most of the time.
    fn cmp(&self, other: &Self) -> Ordering {
        let first = match (&self.first, &other.first) {
            (Some(a), Some(b)) => cmp_values(a, b),
            (a, b) => a.cmp(b),
        };
        first
            .then_with(|| {
                let pairs = self.rest.iter().zip(other.rest.iter());
                pairs.map(|(a, b)| cmp_values(a, b)).find(|o| o.is_ne()).unwrap_or_else(|| self.rest.len().cmp(&other.rest.len()))
            })
            .then_with(|| self.row.cmp(&other.row))
    }
}

/// `Value`'s order, with integers (most keys) compared in line: sorting an index's entries
/// in bulk compares them tens of millions of times.
#[inline]
fn cmp_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// The exact entry of row `row` (stored as `values`) in an index over `columns`.
pub(crate) struct RowProbe<'a> {
    pub(crate) values: &'a [Value],
    pub(crate) columns: &'a [usize],
    pub(crate) row: RowId,
}

impl Probe for RowProbe<'_> {
    fn first(&self) -> Option<&Value> {
        self.columns.first().map(|&c| &self.values[c])
    }
    fn key_len(&self) -> usize {
        self.columns.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        &self.values[self.columns[i]]
    }
    fn flag(&self) -> u8 {
        FLAG_ENTRY
    }
    fn row(&self) -> RowId {
        self.row
    }
}

/// A key prefix positioned before (`FLAG_LOW`) or after (`FLAG_HIGH`) every entry it prefixes.
pub(crate) struct PrefixProbe<'a> {
    pub(crate) key: &'a [Value],
    pub(crate) flag: u8,
}

impl Probe for PrefixProbe<'_> {
    fn first(&self) -> Option<&Value> {
        self.key.first()
    }
    fn key_len(&self) -> usize {
        self.key.len()
    }
    fn key_at(&self, i: usize) -> &Value {
        &self.key[i]
    }
    fn flag(&self) -> u8 {
        self.flag
    }
    fn row(&self) -> RowId {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[i64], row: RowId) -> Entry {
        Entry::new(&key.iter().map(|&v| Value::Int(v)).collect::<Vec<_>>(), &[0, 1], row)
    }

    #[test]
    fn prefix_probes_bracket_the_entries_they_prefix() {
        let key = [Value::Int(2)];
        let low = PrefixProbe { key: &key, flag: FLAG_LOW };
        let high = PrefixProbe { key: &key, flag: FLAG_HIGH };
        for e in [entry(&[2, i64::MIN], 0), entry(&[2, 7], 5), entry(&[2, i64::MAX], u32::MAX)] {
            assert_eq!(compare(&low, &e), Ordering::Less);
            assert_eq!(compare(&high, &e), Ordering::Greater);
        }
        assert_eq!(compare(&high, &entry(&[3, i64::MIN], 0)), Ordering::Less);
        assert_eq!(compare(&low, &entry(&[1, i64::MAX], 9)), Ordering::Greater);
    }

    #[test]
    fn entries_with_equal_keys_order_by_row_id() {
        assert_eq!(entry(&[1, 1], 3).cmp(&entry(&[1, 1], 4)), Ordering::Less);
        assert_eq!(entry(&[1, 2], 0).cmp(&entry(&[1, 1], 4)), Ordering::Greater);
    }
}
