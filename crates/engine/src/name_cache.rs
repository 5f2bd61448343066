//! A few recent lookups keyed by the identity of a shared procedure name. Every call
//! routed to a site carries its procedure's one `Arc<str>`, so comparing pointers finds
//! what a case-insensitive hash of the name would, for a fraction of the work. The cache
//! holds each name it keys, so a freed name's address cannot come back as a false match.

use std::sync::Arc;

/// Entries, direct-mapped by address: enough for every procedure of the benchmark apps.
const SLOTS: usize = 16;

#[derive(Clone, Debug)]
pub struct NameCache<V> {
    slots: [Option<(Arc<str>, V)>; SLOTS],
}

impl<V> Default for NameCache<V> {
    fn default() -> Self {
        NameCache { slots: std::array::from_fn(|_| None) }
    }
}

fn slot_of(name: &Arc<str>) -> usize {
    // Heap addresses are 16-byte aligned: the bits above those pick the slot.
    (Arc::as_ptr(name) as *const u8 as usize >> 4) % SLOTS
}

impl<V> NameCache<V> {
    /// What is cached for this very `Arc` (not merely an equal name); on a miss, what
    /// `find` gives, cached in place of whatever shared the slot. None if `find` finds
    /// nothing (then nothing is cached).
    pub fn get_or_find(&mut self, name: &Arc<str>, find: impl FnOnce() -> Option<V>) -> Option<&V> {
        let slot = &mut self.slots[slot_of(name)];
        if !matches!(slot, Some((cached, _)) if Arc::ptr_eq(cached, name)) {
            *slot = Some((name.clone(), find()?));
        }
        slot.as_ref().map(|(_, v)| v)
    }

    pub fn clear(&mut self) {
        self.slots = std::array::from_fn(|_| None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_only_the_same_shared_name() {
        let mut c = NameCache::default();
        let vote: Arc<str> = "Vote".into();
        let other_vote: Arc<str> = "Vote".into();
        assert_eq!(c.get_or_find(&vote, || None::<i32>), None, "nothing found, nothing cached");
        assert_eq!(c.get_or_find(&vote, || Some(1)), Some(&1));
        assert_eq!(c.get_or_find(&vote, || Some(9)), Some(&1), "a hit does not look again");
        assert_eq!(c.get_or_find(&other_vote, || Some(2)), Some(&2), "an equal name in another allocation is a miss");
        c.clear();
        assert_eq!(c.get_or_find(&vote, || Some(3)), Some(&3));
    }
}
