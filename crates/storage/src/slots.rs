//! A table's row slots, in chunks of fixed size.
//!
//! A `Vec` of slots doubles as a table grows, and the insert that triggers the doubling
//! waits while every slot is copied to fresh memory: at 10 million rows that is 160 MB
//! copied and 320 MB faulted in, hundreds of milliseconds for one transaction. Chunks are
//! added one at a time instead, so an insert allocates at most one chunk (64 KiB) and
//! nothing already stored moves. Only the small array of chunk pointers still doubles, and
//! the first chunk, which grows like a `Vec` up to its full size, so that a small table
//! (there may be hundreds, on every site) does not take a whole chunk.

use std::ops::{Index, IndexMut};

use crate::packed::PackedRow;

/// What a slot holds: a row, or None when the slot is free.
pub(crate) type Slot = Option<PackedRow>;

const CHUNK_BITS: u32 = 12;
/// Slots per chunk.
const CHUNK_LEN: usize = 1 << CHUNK_BITS;

#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// Every chunk but the last holds exactly `CHUNK_LEN` slots.
    chunks: Vec<Vec<Slot>>,
    len: usize,
}

impl Slots {
    /// Slots in use (free ones included): valid ids are `0..len`.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated, for memory accounting.
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum()
    }

    pub(crate) fn get(&self, id: usize) -> Option<&Slot> {
        self.chunks.get(id >> CHUNK_BITS)?.get(id & (CHUNK_LEN - 1))
    }

    pub(crate) fn get_mut(&mut self, id: usize) -> Option<&mut Slot> {
        self.chunks.get_mut(id >> CHUNK_BITS)?.get_mut(id & (CHUNK_LEN - 1))
    }

    /// Adds slot number `len`.
    pub(crate) fn push(&mut self, slot: Slot) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK_LEN => last.push(slot),
            _ => {
                // Only the first chunk starts small; later ones are allocated whole, once.
                let mut chunk = if self.chunks.is_empty() { Vec::new() } else { Vec::with_capacity(CHUNK_LEN) };
                chunk.push(slot);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// Every slot in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.chunks.iter().flatten()
    }
}

impl From<Vec<Slot>> for Slots {
    fn from(rows: Vec<Slot>) -> Slots {
        let mut slots = Slots::default();
        for r in rows {
            slots.push(r);
        }
        slots
    }
}

impl Index<usize> for Slots {
    type Output = Slot;

    fn index(&self, id: usize) -> &Slot {
        match self.get(id) {
            Some(s) => s,
            None => panic!("row slot {id} is past the table's {} slots", self.len),
        }
    }
}

impl IndexMut<usize> for Slots {
    fn index_mut(&mut self, id: usize) -> &mut Slot {
        let len = self.len;
        match self.get_mut(id) {
            Some(s) => s,
            None => panic!("row slot {id} is past the table's {len} slots"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::Value;

    fn row(i: i64) -> Slot {
        Some(PackedRow::pack(&[Value::Int(i)]))
    }

    #[test]
    fn slots_across_chunk_boundaries_keep_their_rows() {
        let n = CHUNK_LEN * 2 + 3;
        let mut s = Slots::default();
        for i in 0..n {
            s.push(if i % 5 == 0 { None } else { row(i as i64) });
        }
        assert_eq!(s.len(), n);
        assert_eq!(s.capacity(), CHUNK_LEN * 3);
        let mut small = Slots::default();
        for i in 0..10 {
            small.push(row(i));
        }
        assert!(small.capacity() < 64, "a small table takes {} slots", small.capacity());
        for id in [0, 1, CHUNK_LEN - 1, CHUNK_LEN, CHUNK_LEN + 1, n - 1] {
            let expected = if id % 5 == 0 { None } else { row(id as i64) };
            assert_eq!(s.get(id), Some(&expected), "slot {id}");
        }
        assert_eq!(s.get(n), None, "past the end, though the chunk has room");
        assert_eq!(s.iter().count(), n);
        assert_eq!(s.iter().flatten().count(), n - n.div_ceil(5));

        // A row stored before more chunks were added stays where it was.
        let before = s[CHUNK_LEN + 1].as_ref().map(|r| r.bytes().as_ptr());
        for i in 0..CHUNK_LEN {
            s.push(row(i as i64));
        }
        assert_eq!(s[CHUNK_LEN + 1].as_ref().map(|r| r.bytes().as_ptr()), before);

        s[7] = None;
        assert_eq!(s.get(7), Some(&None));
        let rebuilt = Slots::from(s.iter().cloned().collect::<Vec<_>>());
        assert!(rebuilt.iter().eq(s.iter()));
    }
}
