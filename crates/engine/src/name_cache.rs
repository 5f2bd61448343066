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
    /// What was put under this very `Arc` (not merely an equal name), if still cached.
    pub fn get(&self, name: &Arc<str>) -> Option<&V> {
        match &self.slots[slot_of(name)] {
            Some((cached, v)) if Arc::ptr_eq(cached, name) => Some(v),
            _ => None,
        }
    }

    /// Caches `v` for `name`, replacing whatever shared its slot.
    pub fn put(&mut self, name: &Arc<str>, v: V) {
        self.slots[slot_of(name)] = Some((name.clone(), v));
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
        c.put(&vote, 1);
        assert_eq!(c.get(&vote), Some(&1));
        assert_eq!(c.get(&other_vote), None, "an equal name in another allocation is a miss");
        c.put(&other_vote, 2);
        assert_eq!(c.get(&other_vote), Some(&2));
        c.clear();
        assert_eq!(c.get(&vote), None);
        assert_eq!(c.get(&other_vote), None);
    }
}
