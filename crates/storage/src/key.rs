//! Ordered-index entries and the probes that search them without building a key.
//!
//! An ordered index is a B-tree set of entries ordered by (key, RowId): `IntEntry`s when its
//! key columns are NOT NULL integers (of 32 bits when a key's values fit), else `Entry`s
//! (`ordered.rs`). Searching it with a key prefix, or removing a row's entry, goes through
//! the `Probe` trait: both entries borrow as `dyn Probe`, so a probe that reads the key
//! straight out of a row (or out of the caller's slice) can be compared against entries
//! without cloning any value.

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

/// One value of a key: an integer held by an entry itself, or a value elsewhere.
#[derive(Clone, Copy)]
pub(crate) enum KeyValue<'a> {
    Int(i64),
    Value(&'a Value),
}

impl KeyValue<'_> {
    /// `Value`'s order, as if an integer were a `Value::Int`.
    fn cmp(self, other: KeyValue<'_>) -> Ordering {
        match (self, other) {
            (KeyValue::Int(a), KeyValue::Int(b) | KeyValue::Value(&Value::Int(b))) => a.cmp(&b),
            (KeyValue::Value(&Value::Int(a)), KeyValue::Int(b)) => a.cmp(&b),
            (KeyValue::Int(a), KeyValue::Value(b)) => Value::Int(a).cmp(b),
            (KeyValue::Value(a), KeyValue::Int(b)) => a.cmp(&Value::Int(b)),
            (KeyValue::Value(a), KeyValue::Value(b)) => a.cmp(b),
        }
    }
}

/// Something comparable with index entries: a key (possibly a prefix), a flag and a RowId.
pub(crate) trait Probe {
    /// The key's first value: `key_at(0)` when the key has one, but cheaper to reach.
    fn first(&self) -> Option<KeyValue<'_>>;
    fn key_len(&self) -> usize;
    fn key_at(&self, i: usize) -> KeyValue<'_>;
    fn flag(&self) -> u8;
    fn row(&self) -> RowId;
}

/// The index order. Keys compare value by value (`Value`'s total order, where NULL equals
/// NULL and sorts first). When one key is a proper prefix of the other — which only happens
/// for a prefix probe, as all entries of one index have the same width — the probe's flag
/// puts it before or after every entry that extends it.
fn compare(a: &dyn Probe, b: &dyn Probe) -> Ordering {
    // An entry that is not all integers keeps its first value inline and the rest (with
    // their count) behind a pointer. Most comparisons of a search are decided by the first
    // values, so those are compared before anything else is read: asking an entry its
    // length first would cost a cache miss per entry compared.
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

/// Whether two entries have equal keys (whatever their rows).
pub(crate) fn same_key(a: &dyn Probe, b: &dyn Probe) -> bool {
    a.key_len() == b.key_len() && (0..a.key_len()).all(|i| a.key_at(i).cmp(b.key_at(i)) == Ordering::Equal)
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

/// Most integers a key may have to be held in its entry.
pub(crate) const INLINE_INTS: usize = 3;

/// One row's entry in an ordered index: its key and its RowId.
///
/// A key of at most `INLINE_INTS` integers (most keys: ids, types, times) is held in the
/// entry itself, so an entry allocates nothing and a search compares integers without
/// leaving the B-tree node. Any other key holds its first value inline and the rest behind
/// one thin pointer: a search, mostly decided by the first column, still does not chase a
/// pointer (a cache miss) for each entry it compares. A key may have no column at all: the
/// group index of a view without GROUP BY.
///
/// Each variant holds the RowId so that the enum's tag fits in the value's spare bits: an
/// entry is 40 bytes either way.
#[derive(Debug)]
pub(crate) enum Entry {
    Ints { len: u8, row: RowId, ints: [i64; INLINE_INTS] },
    Values { first: Option<Value>, rest: ThinVec<Value>, row: RowId },
}

/// An integer key of at most `INLINE_INTS` columns (zeros after its own) and its row:
/// ordered as the index orders their entries.
pub(crate) type IntKey = ([i64; INLINE_INTS], RowId);

/// The values of an entry's key, in order.
#[cfg(test)]
pub(crate) fn key_values(entry: &dyn Probe) -> Vec<Value> {
    (0..entry.key_len())
        .map(|i| match entry.key_at(i) {
            KeyValue::Int(v) => Value::Int(v),
            KeyValue::Value(v) => v.clone(),
        })
        .collect()
}

/// The key over `columns` of the row stored as `values` as integers (zeros after its own),
/// if it is at most `INLINE_INTS` integers.
pub(crate) fn int_key(values: &[Value], columns: &[usize]) -> Option<[i64; INLINE_INTS]> {
    if columns.len() > INLINE_INTS {
        return None;
    }
    let mut ints = [0; INLINE_INTS];
    for (&c, k) in columns.iter().zip(&mut ints) {
        match values[c] {
            Value::Int(v) => *k = v,
            _ => return None,
        }
    }
    Some(ints)
}

impl Entry {
    /// The entry of row `row` (stored as `values`) over the index columns `columns`.
    pub(crate) fn new(values: &[Value], columns: &[usize], row: RowId) -> Entry {
        if let Some(ints) = int_key(values, columns) {
            return Entry::Ints { len: columns.len() as u8, row, ints };
        }
        let value = |c: &usize| values[*c].clone();
        Entry::Values { first: columns.first().map(value), rest: columns.iter().skip(1).map(value).collect(), row }
    }

    /// The entry of row `row` whose key is the integers `key`, at most `INLINE_INTS` of
    /// them (a bulk build's fast path).
    pub(crate) fn from_ints(key: &[i64], row: RowId) -> Entry {
        let mut ints = [0; INLINE_INTS];
        ints[..key.len()].copy_from_slice(key);
        Entry::Ints { len: key.len() as u8, row, ints }
    }

    /// Whether the key is held in the entry (tests check which keys are).
    #[cfg(test)]
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self, Entry::Ints { .. })
    }
}

impl Probe for Entry {
    fn first(&self) -> Option<KeyValue<'_>> {
        match self {
            Entry::Ints { len: 0, .. } => None,
            Entry::Ints { ints, .. } => Some(KeyValue::Int(ints[0])),
            Entry::Values { first, .. } => first.as_ref().map(KeyValue::Value),
        }
    }
    fn key_len(&self) -> usize {
        match self {
            Entry::Ints { len, .. } => *len as usize,
            Entry::Values { first, rest, .. } => first.is_some() as usize + rest.len(),
        }
    }
    fn key_at(&self, i: usize) -> KeyValue<'_> {
        match (self, i) {
            (Entry::Ints { ints, .. }, _) => KeyValue::Int(ints[i]),
            (Entry::Values { first: Some(v), .. }, 0) => KeyValue::Value(v),
            (Entry::Values { rest, .. }, _) => KeyValue::Value(&rest[i - 1]),
        }
    }
    fn flag(&self) -> u8 {
        FLAG_ENTRY
    }
    fn row(&self) -> RowId {
        match self {
            Entry::Ints { row, .. } | Entry::Values { row, .. } => *row,
        }
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
    /// [`compare`] for two entries (same width, same flag), with integer keys compared
    /// without its dynamic dispatch: inserts and bulk builds compare entries with each
    /// other most of the time.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Entry::Ints { len: a, row: r, ints: x }, Entry::Ints { len: b, row: s, ints: y }) => {
                x[..*a as usize].cmp(&y[..*b as usize]).then_with(|| r.cmp(s))
            }
            _ => compare(self, other),
        }
    }
}

/// An integer an `IntEntry` keeps a key column in: `i32` when every column of its key fits
/// one, else `i64` (`ordered::IntSet`).
pub(crate) trait KeyInt: Copy + Default + Ord + std::fmt::Debug + Into<i64> + 'static {
    /// `v` as this integer, if it fits.
    fn from_key(v: i64) -> Option<Self>;
}

impl KeyInt for i64 {
    fn from_key(v: i64) -> Option<i64> {
        Some(v)
    }
}

impl KeyInt for i32 {
    fn from_key(v: i64) -> Option<i32> {
        i32::try_from(v).ok()
    }
}

/// One row's entry in an ordered index whose key is `N` integer columns that hold only
/// integers (NOT NULL, so every key is `N` integers): the key and the RowId, with nothing
/// to tell apart. With 64-bit integers 16, 24 or 32 bytes where an `Entry` takes 40, so a
/// B-tree node of 11 entries takes a 192-, 320- or 384-byte allocation instead of a
/// 512-byte one; with 32-bit integers 8, 12 or 16 bytes, and a node half that again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct IntEntry<T, const N: usize> {
    // Field order is the index order: the key, then the row.
    pub(crate) ints: [T; N],
    pub(crate) row: RowId,
}

impl<T: KeyInt, const N: usize> IntEntry<T, N> {
    /// The entry of `row` whose key is the integers `key` (the first `N` are taken), if
    /// each fits a `T`.
    pub(crate) fn new(key: &[i64], row: RowId) -> Option<IntEntry<T, N>> {
        let mut ints = [T::default(); N];
        for (int, &k) in ints.iter_mut().zip(key) {
            *int = T::from_key(k)?;
        }
        Some(IntEntry { ints, row })
    }

    /// The key as 64-bit integers.
    pub(crate) fn wide(&self) -> [i64; N] {
        self.ints.map(Into::into)
    }
}

impl<T: KeyInt, const N: usize> Probe for IntEntry<T, N> {
    fn first(&self) -> Option<KeyValue<'_>> {
        self.ints.first().map(|&v| KeyValue::Int(v.into()))
    }
    fn key_len(&self) -> usize {
        N
    }
    fn key_at(&self, i: usize) -> KeyValue<'_> {
        KeyValue::Int(self.ints[i].into())
    }
    fn flag(&self) -> u8 {
        FLAG_ENTRY
    }
    fn row(&self) -> RowId {
        self.row
    }
}

impl<'a, T: KeyInt, const N: usize> Borrow<dyn Probe + 'a> for IntEntry<T, N> {
    fn borrow(&self) -> &(dyn Probe + 'a) {
        self
    }
}

/// The exact entry of row `row` (stored as `values`) in an index over `columns`.
pub(crate) struct RowProbe<'a> {
    pub(crate) values: &'a [Value],
    pub(crate) columns: &'a [usize],
    pub(crate) row: RowId,
}

impl Probe for RowProbe<'_> {
    fn first(&self) -> Option<KeyValue<'_>> {
        self.columns.first().map(|&c| KeyValue::Value(&self.values[c]))
    }
    fn key_len(&self) -> usize {
        self.columns.len()
    }
    fn key_at(&self, i: usize) -> KeyValue<'_> {
        KeyValue::Value(&self.values[self.columns[i]])
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
    fn first(&self) -> Option<KeyValue<'_>> {
        self.key.first().map(KeyValue::Value)
    }
    fn key_len(&self) -> usize {
        self.key.len()
    }
    fn key_at(&self, i: usize) -> KeyValue<'_> {
        KeyValue::Value(&self.key[i])
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

    #[test]
    fn integer_keys_are_held_in_the_entry_and_order_as_values_do() {
        let v = |values: &[Value]| Entry::new(values, &[0, 1], 0);
        let ints = v(&[Value::Int(2), Value::Int(-1)]);
        assert!(ints.is_inline());
        assert!(!v(&[Value::Int(2), Value::Null]).is_inline());
        assert!(!Entry::new(&vec![Value::Int(1); 4], &[0, 1, 2, 3], 0).is_inline(), "more integers than fit");
        // Inline and value keys in one index sort as their values do.
        let keys = [
            vec![Value::Null, Value::Int(5)],
            vec![Value::Int(1), Value::Null],
            vec![Value::Int(1), Value::Int(7)],
            vec![Value::Int(2), Value::Int(-1)],
            vec![Value::Int(2), Value::Float(0.5)],
            vec![Value::Int(2), Value::Int(3)],
            vec![Value::Int(2), Value::Str("a".into())],
        ];
        let entries: Vec<Entry> = keys.iter().map(|k| v(k)).collect();
        for (i, a) in entries.iter().enumerate() {
            for (j, b) in entries.iter().enumerate() {
                let by_values = keys[i].cmp(&keys[j]);
                assert_eq!(a.cmp(b), by_values, "{:?} against {:?}", keys[i], keys[j]);
                assert_eq!(compare(a, b), by_values);
            }
            assert_eq!(key_values(a), keys[i]);
        }
        assert_eq!(Entry::from_ints(&[2, -1], 0).cmp(&ints), Ordering::Equal);
        assert_eq!(std::mem::size_of::<Entry>(), 40);
    }
}
