//! A stored row, packed: each value as a tag byte and as few bytes as hold it.
//!
//! A `Value` is 24 bytes whatever it holds, so a row kept as a value array spends 24 bytes
//! on a 0/1 flag and 48 on a 15-digit number's text; TATP's subscriber row (34 columns,
//! most of them one-byte numbers) took 816 bytes that way and takes about 90 packed. Rows
//! are unpacked into values when read: a read copies each value it returns anyway, and a
//! smaller row is fewer cache misses to reach and fewer pages to fill on a restart.
//!
//! Byte arrays and polygons are shared (`Arc`) values: copying them in would make every
//! read allocate and copy them, so they stay values, in a side list, in column order.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use compact_str::CompactString;
use lockstep_core::geo::GeoPoint;
use lockstep_core::prefetch::prefetch_lines;
use lockstep_core::{Dec, Value};
use thin_vec::ThinVec;

const NULL: u8 = 0;
const INT8: u8 = 1;
const INT16: u8 = 2;
const INT32: u8 = 3;
const INT64: u8 = 4;
const FLOAT: u8 = 5;
const DECIMAL: u8 = 6;
/// Text of any length: a u32 length, then the bytes.
const STR: u8 = 7;
const TIMESTAMP: u8 = 8;
const FALSE: u8 = 9;
const TRUE: u8 = 10;
const POINT: u8 = 11;
/// The next value of the side list.
const SHARED: u8 = 12;
/// Text of `tag - SHORT_STR` bytes (most text): the length is in the tag.
const SHORT_STR: u8 = 64;
const SHORT_STR_MAX: usize = (u8::MAX - SHORT_STR) as usize;

/// One stored row: one pointer to one allocation that holds a header, the list of shared
/// values when there are any, and the packed bytes.
///
/// A table's slot is this pointer (8 bytes, `Option<PackedRow>` too, where a boxed slice
/// and a list took 24): for TATP's 9.75 M rows that is 150 MB less. The header is the
/// bytes' length, doubled, plus one when a shared list follows, in LEB128: one byte for a
/// row of under 64 bytes, two under 8 KiB. The list (`ThinVec`, one pointer) is stored
/// unaligned, as bytes, and read back by copy.
pub(crate) struct PackedRow {
    ptr: NonNull<u8>,
}

// A `PackedRow` owns its allocation and the shared list in it, as a `Box<[u8]>` and a
// `ThinVec<Value>` would (both `Send` and `Sync`).
unsafe impl Send for PackedRow {}
unsafe impl Sync for PackedRow {}

const LIST_BYTES: usize = std::mem::size_of::<ThinVec<Value>>();

/// Where a row's parts are in its allocation.
struct Layout {
    /// Bytes of the header.
    header: usize,
    shared: bool,
    /// The packed bytes' length.
    len: usize,
}

impl Layout {
    fn of(len: usize, shared: bool) -> Layout {
        let word = len << 1 | usize::from(shared);
        let header = (usize::BITS - word.leading_zeros()).div_ceil(7).max(1) as usize;
        Layout { header, shared, len }
    }

    fn list_at(&self) -> usize {
        self.header
    }

    fn data_at(&self) -> usize {
        self.header + if self.shared { LIST_BYTES } else { 0 }
    }

    fn alloc(&self) -> std::alloc::Layout {
        match std::alloc::Layout::from_size_align(self.data_at() + self.len, 1) {
            Ok(l) => l,
            Err(e) => panic!("a row of {} bytes: {e}", self.len),
        }
    }
}

impl PackedRow {
    /// A row of the packed bytes `data` and the `shared` values its SHARED tags name.
    fn new(data: &[u8], shared: ThinVec<Value>) -> PackedRow {
        let layout = Layout::of(data.len(), !shared.is_empty());
        let alloc = layout.alloc();
        // SAFETY: `alloc` is at least one byte (the header). The writes below stay within
        // it: the header's `layout.header` bytes, the list's LIST_BYTES when there is one,
        // then `data.len()` bytes at `data_at`, which is where they end.
        unsafe {
            let Some(ptr) = NonNull::new(std::alloc::alloc(alloc)) else { std::alloc::handle_alloc_error(alloc) };
            let mut word = data.len() << 1 | usize::from(layout.shared);
            for i in 0..layout.header {
                let more = if i + 1 < layout.header { 0x80 } else { 0 };
                ptr.add(i).write((word & 0x7f) as u8 | more);
                word >>= 7;
            }
            if layout.shared {
                ptr.add(layout.list_at()).cast::<ThinVec<Value>>().write_unaligned(shared);
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(layout.data_at()).as_ptr(), data.len());
            PackedRow { ptr }
        }
    }

    fn layout(&self) -> Layout {
        let (mut word, mut shift, mut i) = (0usize, 0, 0);
        loop {
            // SAFETY: `new` wrote a complete header at the start of the allocation, and
            // this reads no further than its last byte (the one below 0x80).
            let b = unsafe { self.ptr.add(i).read() };
            word |= usize::from(b & 0x7f) << shift;
            i += 1;
            if b < 0x80 {
                return Layout { header: i, shared: word & 1 == 1, len: word >> 1 };
            }
            shift += 7;
        }
    }

    /// The packed bytes and the shared values' list.
    fn parts(&self) -> (&[u8], &[Value]) {
        let l = self.layout();
        // SAFETY: `new` put `l.len` initialised bytes at `data_at`, and moved a ThinVec to
        // `list_at` when `l.shared`; a bitwise copy of it that is never dropped borrows its
        // elements. Both live, unchanged, as long as `&self` does (`bytes_mut` needs `&mut`).
        unsafe {
            let data = std::slice::from_raw_parts(self.ptr.add(l.data_at()).as_ptr(), l.len);
            if !l.shared {
                return (data, &[]);
            }
            let list = ManuallyDrop::new(self.ptr.add(l.list_at()).cast::<ThinVec<Value>>().read_unaligned());
            (data, std::slice::from_raw_parts(list.as_ptr(), list.len()))
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let l = self.layout();
        // SAFETY: as in `parts`, with the row borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(l.data_at()).as_ptr(), l.len) }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.parts().0
    }

    /// Asks the CPU to start loading the row. Its length is in the row, which must not be
    /// read here (that would wait for the very miss this starts), so it asks for the first
    /// two cache lines, which hold most rows whole.
    pub(crate) fn prefetch(&self) {
        prefetch_lines(self.ptr.as_ptr(), 2 * 64, 2);
    }

    pub(crate) fn shared(&self) -> &[Value] {
        self.parts().1
    }

    pub(crate) fn pack(values: &[Value]) -> PackedRow {
        let mut shared = ThinVec::new();
        // Encoded into a reused buffer, then copied once into the row's allocation.
        SCRATCH.with_borrow_mut(|data| {
            data.clear();
            for v in values {
                if !encode(data, v) {
                    data.push(SHARED);
                    shared.push(v.clone());
                }
            }
            let row = PackedRow::new(data, shared);
            // A rare huge row does not keep its buffer's size for the thread's life.
            data.shrink_to(SCRATCH_KEPT_BYTES);
            row
        })
    }

    /// Every value, in order.
    pub(crate) fn unpack(&self) -> Vec<Value> {
        let mut out = Vec::new();
        self.unpack_into(usize::MAX, &mut out);
        out
    }

    /// Appends the first `n` values (all, if the row has fewer) to `out`.
    pub(crate) fn unpack_into(&self, n: usize, out: &mut Vec<Value>) {
        let mut r = self.reader();
        out.reserve(n.min(r.data.len()));
        while out.len() < n && !r.at_end() {
            out.push(r.next());
        }
    }

    /// The values in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = Value> + '_ {
        let mut r = self.reader();
        std::iter::from_fn(move || (!r.at_end()).then(|| r.next()))
    }

    /// Value number `c` (NULL past the row's end).
    pub(crate) fn value(&self, c: usize) -> Value {
        let mut r = self.reader();
        for _ in 0..c {
            if r.at_end() {
                return Value::Null;
            }
            r.skip();
        }
        if r.at_end() {
            return Value::Null;
        }
        r.next()
    }

    /// Whether value number `c` equals `key` (`Value`'s equality), read in place for the
    /// usual keys (integers, short text) rather than built: index probes compare keys
    /// against rows this way.
    pub(crate) fn value_eq(&self, c: usize, key: &Value) -> bool {
        let mut r = self.reader();
        for _ in 0..c {
            if r.at_end() {
                return key.is_null();
            }
            r.skip();
        }
        if r.at_end() {
            return key.is_null();
        }
        match (r.data[r.pos], key) {
            (INT8..=INT64, Value::Int(k)) => r.int() == *k,
            (t, Value::Str(k)) if t >= SHORT_STR => {
                let start = r.pos + 1;
                r.data.get(start..start + (t - SHORT_STR) as usize) == Some(k.as_bytes())
            }
            _ => r.next() == *key,
        }
    }

    /// Sets value number `c` to `v` where its packed bytes are, when `v` packs to as many
    /// bytes (a counter or a flag changed, a number within its width), returning the old
    /// value; None, with the row unchanged, when it does not fit or either value is shared.
    pub(crate) fn set_in_place(&mut self, c: usize, v: &Value) -> Option<Value> {
        let mut r = self.reader();
        for _ in 0..c {
            if r.at_end() {
                return None;
            }
            r.skip();
        }
        if r.at_end() {
            return None;
        }
        let start = r.pos;
        let old = r.next();
        let end = r.pos;
        if matches!(old, Value::Bytes(_) | Value::Geography(_) | Value::Array(_)) {
            return None;
        }
        // Tags describe themselves, so bytes of the same length keep the row readable.
        let fits = SCRATCH.with_borrow_mut(|new| {
            new.clear();
            let fits = encode(new, v) && new.len() == end - start;
            if fits {
                self.bytes_mut()[start..end].copy_from_slice(new);
            }
            fits
        });
        fits.then_some(old)
    }

    /// Heap bytes of the row: its allocation and its shared values' list (the shared
    /// data itself is counted by whoever counts it: see `Table::heap_bytes`).
    pub(crate) fn heap_bytes(&self) -> usize {
        let l = self.layout();
        let shared = self.shared();
        let list = if shared.is_empty() { 0 } else { 16 + std::mem::size_of_val(shared) };
        l.data_at() + l.len + list
    }

    fn reader(&self) -> Reader<'_> {
        let (data, shared) = self.parts();
        Reader { data, pos: 0, shared: shared.iter() }
    }
}

impl Drop for PackedRow {
    fn drop(&mut self) {
        let l = self.layout();
        // SAFETY: the list, when there is one, was moved in by `new` and is dropped once,
        // here; the allocation was made by `new` with this same layout.
        unsafe {
            if l.shared {
                drop(self.ptr.add(l.list_at()).cast::<ThinVec<Value>>().read_unaligned());
            }
            std::alloc::dealloc(self.ptr.as_ptr(), l.alloc());
        }
    }
}

impl Clone for PackedRow {
    fn clone(&self) -> Self {
        PackedRow::new(self.bytes(), self.shared().iter().cloned().collect())
    }
}

impl PartialEq for PackedRow {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes() && self.shared() == other.shared()
    }
}

impl std::fmt::Debug for PackedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedRow").field("data", &self.bytes()).field("shared", &self.shared()).finish()
    }
}

/// The most a thread's encoding buffer keeps between rows.
const SCRATCH_KEPT_BYTES: usize = 64 * 1024;

thread_local! {
    /// Where a row is encoded before it is copied into its own allocation.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Appends `v`'s tag and bytes to `data`; false, writing nothing, for a value kept shared
/// beside the row (bytes, polygons, arrays).
fn encode(data: &mut Vec<u8>, v: &Value) -> bool {
    match v {
        Value::Null => data.push(NULL),
        Value::Int(i) => push_int(data, *i),
        Value::Float(f) => push(data, FLOAT, &f.to_bits().to_le_bytes()),
        Value::Decimal(d) => push(data, DECIMAL, &d.get().to_le_bytes()),
        Value::Str(s) if s.len() <= SHORT_STR_MAX => push(data, SHORT_STR + s.len() as u8, s.as_bytes()),
        Value::Str(s) => {
            push(data, STR, &(s.len() as u32).to_le_bytes());
            data.extend_from_slice(s.as_bytes());
        }
        Value::Timestamp(t) => push(data, TIMESTAMP, &t.to_le_bytes()),
        Value::Bool(b) => data.push(if *b { TRUE } else { FALSE }),
        Value::Point(p) => {
            push(data, POINT, &p.lng.to_bits().to_le_bytes());
            data.extend_from_slice(&p.lat.to_bits().to_le_bytes());
        }
        Value::Bytes(_) | Value::Geography(_) | Value::Array(_) => return false,
    }
    true
}

fn push(data: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    data.push(tag);
    data.extend_from_slice(bytes);
}

fn push_int(data: &mut Vec<u8>, i: i64) {
    if let Ok(v) = i8::try_from(i) {
        push(data, INT8, &v.to_le_bytes())
    } else if let Ok(v) = i16::try_from(i) {
        push(data, INT16, &v.to_le_bytes())
    } else if let Ok(v) = i32::try_from(i) {
        push(data, INT32, &v.to_le_bytes())
    } else {
        push(data, INT64, &i.to_le_bytes())
    }
}

/// Reads a row's values in order. The bytes were written by `pack` from values, so a
/// malformed row is a bug here, not bad input: it panics.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    shared: std::slice::Iter<'a, Value>,
}

impl Reader<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0; N];
        b.copy_from_slice(&self.data[self.pos..self.pos + N]);
        self.pos += N;
        b
    }

    fn text(&mut self, len: usize) -> CompactString {
        let bytes = &self.data[self.pos..self.pos + len];
        self.pos += len;
        debug_assert!(std::str::from_utf8(bytes).is_ok(), "a packed row holds text that is not UTF-8");
        // SAFETY: a packed row is only ever made by `pack` and changed by `set_in_place`,
        // both writing text with `encode` from a `str` (never from bytes read off disk or
        // the network: a snapshot or a rejoin image is decoded into values, then packed),
        // and the tag read before it gave these bytes' exact extent. Checking them again
        // on every read was about 1% of a Vote's instructions.
        CompactString::from(unsafe { std::str::from_utf8_unchecked(bytes) })
    }

    fn next(&mut self) -> Value {
        let tag = self.data[self.pos];
        self.pos += 1;
        match tag {
            NULL => Value::Null,
            INT8..=INT64 => Value::Int(self.int_after(tag)),
            FLOAT => Value::Float(f64::from_bits(u64::from_le_bytes(self.take()))),
            DECIMAL => Value::Decimal(Dec::new(i128::from_le_bytes(self.take()))),
            STR => {
                let len = u32::from_le_bytes(self.take()) as usize;
                Value::Str(self.text(len))
            }
            TIMESTAMP => Value::Timestamp(i64::from_le_bytes(self.take())),
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            POINT => {
                let lng = f64::from_bits(u64::from_le_bytes(self.take()));
                let lat = f64::from_bits(u64::from_le_bytes(self.take()));
                Value::Point(GeoPoint { lng, lat })
            }
            SHARED => match self.shared.next() {
                Some(v) => v.clone(),
                None => panic!("a packed row names more shared values than it holds"),
            },
            t if t >= SHORT_STR => Value::Str(self.text((t - SHORT_STR) as usize)),
            t => panic!("a packed row holds unknown tag {t}"),
        }
    }

    /// The next value, known to be an integer (its tag is one of `INT8..=INT64`).
    fn int(&mut self) -> i64 {
        let tag = self.data[self.pos];
        self.pos += 1;
        self.int_after(tag)
    }

    /// The integer after its tag `tag` (one of `INT8..=INT64`).
    fn int_after(&mut self, tag: u8) -> i64 {
        match tag {
            INT8 => i8::from_le_bytes(self.take()) as i64,
            INT16 => i16::from_le_bytes(self.take()) as i64,
            INT32 => i32::from_le_bytes(self.take()) as i64,
            _ => i64::from_le_bytes(self.take()),
        }
    }

    /// Steps over the next value without building it.
    fn skip(&mut self) {
        let tag = self.data[self.pos];
        self.pos += 1;
        self.pos += match tag {
            NULL | FALSE | TRUE => 0,
            INT8 => 1,
            INT16 => 2,
            INT32 => 4,
            INT64 | FLOAT | TIMESTAMP => 8,
            DECIMAL | POINT => 16,
            STR => u32::from_le_bytes(self.take()) as usize,
            SHARED => {
                self.shared.next();
                0
            }
            t if t >= SHORT_STR => (t - SHORT_STR) as usize,
            t => panic!("a packed row holds unknown tag {t}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn every_kind() -> Vec<Value> {
        vec![
            Value::Null,
            Value::Int(0),
            Value::Int(-128),
            Value::Int(200),
            Value::Int(-40_000),
            Value::Int(3_000_000_000),
            Value::Int(i64::MIN),
            Value::Float(-0.5),
            Value::Float(f64::NAN),
            Value::Decimal(Dec::new(-123_456_789_012_345_678_901_234_567)),
            Value::Str("".into()),
            Value::Str("015551234567890".into()),
            Value::Str("ü".repeat(200).into()),
            Value::Timestamp(-1),
            Value::Bool(true),
            Value::Bool(false),
            Value::Point(GeoPoint { lng: -122.5, lat: 37.75 }),
            Value::Bytes(Arc::from(&b"\x00\x01\xff"[..])),
            Value::Int(7),
        ]
    }

    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
            _ => a == b && std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }

    #[test]
    fn every_kind_of_value_comes_back_as_it_went_in() {
        let values = every_kind();
        let row = PackedRow::pack(&values);
        let back = row.unpack();
        assert_eq!(back.len(), values.len());
        for (i, (a, b)) in values.iter().zip(&back).enumerate() {
            assert!(same(a, b), "value {i}: {a:?} came back as {b:?}");
            assert!(same(a, &row.value(i)), "value {i} alone");
        }
        assert_eq!(row.value(values.len()), Value::Null, "past the end");
        for (i, v) in values.iter().enumerate() {
            for (j, w) in values.iter().enumerate() {
                assert_eq!(row.value_eq(i, w), v == w, "value {i} against value {j}");
            }
        }
        assert!(row.value_eq(values.len(), &Value::Null));

        let mut first = Vec::new();
        row.unpack_into(3, &mut first);
        assert_eq!(first.len(), 3);
        assert!(first.iter().zip(&values).all(|(a, b)| same(a, b)));

        // In place only when the new value packs to the same size; else nothing changes.
        let mut row = row;
        assert_eq!(row.set_in_place(1, &Value::Int(-5)), Some(Value::Int(0)));
        assert_eq!(row.set_in_place(14, &Value::Bool(false)), Some(Value::Bool(true)));
        assert_eq!(row.set_in_place(11, &Value::Str("015559999999999".into())), Some(values[11].clone()));
        assert_eq!(row.set_in_place(1, &Value::Int(1000)), None);
        assert_eq!(row.set_in_place(0, &Value::Int(1)), None);
        assert_eq!(row.set_in_place(17, &Value::Null), None, "a shared value is not overwritten");
        assert_eq!(row.set_in_place(values.len(), &Value::Null), None);
        let mut expected = values.clone();
        expected[1] = Value::Int(-5);
        expected[14] = Value::Bool(false);
        expected[11] = Value::Str("015559999999999".into());
        assert!(row.unpack().iter().zip(&expected).all(|(a, b)| same(a, b)));
        assert_eq!(row, PackedRow::pack(&expected));
    }

    #[test]
    fn a_slot_is_one_pointer_and_rows_of_every_length_keep_their_bytes() {
        assert_eq!(std::mem::size_of::<Option<PackedRow>>(), 8);
        let list: Arc<[u8]> = Arc::from(vec![9u8; 3]);
        // Text lengths around each header size (1, 2 and 3 bytes), with and without a
        // shared list, and an empty row.
        for len in [0, 1, 50, 58, 59, 60, 61, 8000, 8183, 8184, 8185, 8186, 1 << 20] {
            for shared in [false, true] {
                let mut values = vec![Value::Str("x".repeat(len).into())];
                if shared {
                    values.push(Value::Bytes(list.clone()));
                }
                let row = PackedRow::pack(&values);
                let copy = row.clone();
                assert_eq!(row.unpack(), values, "text of {len} bytes, shared list {shared}");
                assert_eq!(copy, row);
                assert_eq!(row.shared().len(), usize::from(shared));
                let header = row.heap_bytes() - row.bytes().len() - if shared { LIST_BYTES + 16 + 24 } else { 0 };
                let expected = match row.bytes().len() {
                    0..64 => 1,
                    64..8192 => 2,
                    8192..1_048_576 => 3,
                    _ => 4,
                };
                assert_eq!(header, expected, "text of {len} bytes, shared list {shared}");
            }
        }
        assert_eq!(PackedRow::pack(&[]).unpack(), Vec::<Value>::new());
        // Every copy of a shared value is released with the rows that hold it.
        assert_eq!(Arc::strong_count(&list), 1);
        let row = PackedRow::pack(&[Value::Bytes(list.clone()), Value::Int(1), Value::Bytes(list.clone())]);
        let copy = row.clone();
        assert_eq!(Arc::strong_count(&list), 5);
        drop(row);
        assert_eq!(copy.unpack()[2], Value::Bytes(list.clone()));
        drop(copy);
        assert_eq!(Arc::strong_count(&list), 1);
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Int),
            (-1000i64..1000).prop_map(Value::Int),
            any::<u64>().prop_map(|b| Value::Float(f64::from_bits(b))),
            any::<i128>().prop_map(|d| Value::Decimal(Dec::new(d))),
            // Around the longest text whose length fits its tag (191 bytes).
            (0usize..300).prop_map(|n| Value::Str(("é".repeat(n / 2) + &"a".repeat(n % 2)).into())),
            any::<i64>().prop_map(Value::Timestamp),
            any::<bool>().prop_map(Value::Bool),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| Value::Bytes(Arc::from(b))),
        ]
    }

    proptest::proptest! {
        /// Any row comes back whole, value by value, through a clone, and after any value
        /// is overwritten in place (or refused, leaving the row as it was).
        #[test]
        fn any_row_comes_back_as_packed_and_as_overwritten(
            values in proptest::collection::vec(any_value(), 0..40),
            at in 0usize..40,
            new in any_value(),
        ) {
            let row = PackedRow::pack(&values);
            let back = row.unpack();
            proptest::prop_assert_eq!(back.len(), values.len());
            for (i, (a, b)) in values.iter().zip(&back).enumerate() {
                proptest::prop_assert!(same(a, b), "value {} went in as {:?}, came back as {:?}", i, a, b);
                proptest::prop_assert!(same(a, &row.value(i)));
            }
            let copy = row.clone();
            proptest::prop_assert_eq!(&copy, &row);
            drop(row);
            let mut row = copy;
            let before = row.unpack();
            match row.set_in_place(at, &new) {
                Some(old) => {
                    proptest::prop_assert!(same(&old, &before[at]));
                    let mut expected = before.clone();
                    expected[at] = new.clone();
                    let after = row.unpack();
                    proptest::prop_assert!(after.iter().zip(&expected).all(|(a, b)| same(a, b)));
                }
                None => proptest::prop_assert!(row.unpack().iter().zip(&before).all(|(a, b)| same(a, b))),
            }
        }
    }

    #[test]
    fn small_values_take_few_bytes_and_shared_ones_are_not_copied() {
        let flags: Vec<Value> = (0..30).map(|i| Value::Int(i % 2)).collect();
        assert_eq!(PackedRow::pack(&flags).bytes().len(), 60);
        let number = [Value::Str("015551234567890".into())];
        assert_eq!(PackedRow::pack(&number).bytes().len(), 16);
        let bytes: Arc<[u8]> = Arc::from(vec![7u8; 1000]);
        let row = PackedRow::pack(&[Value::Int(1), Value::Bytes(bytes.clone())]);
        assert!(row.bytes().len() < 10);
        match row.value(1) {
            Value::Bytes(b) => assert!(Arc::ptr_eq(&b, &bytes)),
            other => panic!("{other:?}"),
        }
    }
}
