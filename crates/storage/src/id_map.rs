//! A map keyed by table id, held as a vector indexed by the id. Every statement looks its
//! tables up (a SELECT its sources, a write its table and that table's views), and a
//! `BTreeMap` search cost about 90 instructions each, a vector index a few. The catalog
//! hands ids out in order and never reuses one, so the vector is as long as the highest id
//! ever given: its slots are boxed, 8 bytes each, so even a million tables created and
//! dropped cost a partition 8 MB, not a million empty tables.

use lockstep_core::TableId;

#[derive(Debug)]
pub struct IdMap<V> {
    slots: Vec<Option<Box<V>>>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap { slots: Vec::new() }
    }
}

impl<V> IdMap<V> {
    pub fn get(&self, id: &TableId) -> Option<&V> {
        self.slots.get(*id as usize)?.as_deref()
    }

    pub fn get_mut(&mut self, id: &TableId) -> Option<&mut V> {
        self.slots.get_mut(*id as usize)?.as_deref_mut()
    }

    pub fn contains_key(&self, id: &TableId) -> bool {
        self.get(id).is_some()
    }

    /// Puts `v` at `id`, returning what was there.
    pub fn insert(&mut self, id: TableId, v: V) -> Option<V> {
        let i = id as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].replace(Box::new(v)).map(|old| *old)
    }

    pub fn remove(&mut self, id: &TableId) -> Option<V> {
        self.slots.get_mut(*id as usize)?.take().map(|old| *old)
    }

    /// Ids in ascending order.
    pub fn keys(&self) -> impl Iterator<Item = TableId> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Values in ascending id order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten().map(|v| &**v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots.iter_mut().flatten().map(|v| &mut **v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (TableId, &V)> {
        self.slots.iter().enumerate().filter_map(|(i, v)| Some((i as TableId, v.as_deref()?)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (TableId, &mut V)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, v)| Some((i as TableId, v.as_deref_mut()?)))
    }
}

impl<V> FromIterator<(TableId, V)> for IdMap<V> {
    fn from_iter<I: IntoIterator<Item = (TableId, V)>>(items: I) -> Self {
        let mut m = IdMap::default();
        for (id, v) in items {
            m.insert(id, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::IdMap;

    #[test]
    fn behaves_as_an_ordered_map_of_ids() {
        let mut m: IdMap<&str> = [(5, "five"), (1, "one")].into_iter().collect();
        assert_eq!(m.get(&5), Some(&"five"));
        assert_eq!(m.get(&3), None);
        assert_eq!(m.get(&1000), None);
        assert_eq!(m.insert(3, "three"), None);
        assert_eq!(m.insert(3, "THREE"), Some("three"));
        assert_eq!(m.keys().collect::<Vec<_>>(), vec![1, 3, 5]);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec!["one", "THREE", "five"]);
        assert_eq!(m.remove(&1), Some("one"));
        assert_eq!(m.remove(&1), None);
        assert!(!m.contains_key(&1) && m.contains_key(&5));
        *m.get_mut(&5).unwrap() = "V";
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(3, &"THREE"), (5, &"V")]);
    }
}
