//! Hash joins: a level the planner marked (`Level::hash`) has its rows put in a hash table
//! on the join columns the first time a run of the join reaches it; each joined row so
//! far then looks up its few matches instead of reading every row of the level again.
//! NULL never equals anything, so rows with a NULL key are left out and a NULL probe finds
//! nothing; the level's filters are still checked on every match.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use lockstep_core::{Result, Value};

use crate::access::KeyValues;
use crate::exec::{probe, RowSource};
use crate::expr::Env;
use crate::join_order::HashKey;
use crate::limits::row_bytes;
use crate::plan::SelectPlan;

/// Most bytes the hash table of one join level may hold (keys, row ids and the map's own
/// cost per entry). A level past it is joined by nested loop instead, which needs no
/// memory: slower, never wrong.
pub const HASH_JOIN_BUILD_BYTES_MAX: usize = 256 << 20;
/// The map's own bytes per row held, besides the key's values.
const HASH_ENTRY_OVERHEAD_BYTES: usize = 48;

/// The row ids of one level by join key.
pub struct HashTable {
    ids: IdMap,
}

type IdMap = HashMap<KeyValues, Vec<u32>, foldhash::fast::FixedState>;

impl HashTable {
    /// The ids of the rows whose key columns equal the joined row's: none when one of its
    /// key values is NULL.
    pub fn matching(&self, keys: &[HashKey], joined: &[Value]) -> &[u32] {
        let mut key = KeyValues::new();
        for k in keys {
            match joined.get(k.outer) {
                Some(v) if !v.is_null() => key.push(v.clone()),
                _ => return &[],
            }
        }
        self.ids.get(&key).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// The hash tables of one run of a join, one slot per level, built when first needed.
pub struct HashTables {
    /// None: not built yet. Some(None): the level is joined by nested loop (no hash keys,
    /// or its table would pass the byte cap).
    slots: RefCell<Vec<Option<Option<Rc<HashTable>>>>>,
    build_bytes_max: usize,
}

impl HashTables {
    pub fn new(levels: usize) -> HashTables {
        HashTables { slots: RefCell::new(vec![None; levels]), build_bytes_max: build_bytes_max() }
    }

    /// Level `j`'s hash table, built on first use; None when it is joined by nested loop.
    pub fn table(&self, plan: &SelectPlan, src: &dyn RowSource, env: &Env, j: usize, joined: &[Value]) -> Result<Option<Rc<HashTable>>> {
        let Some(l) = plan.levels.get(j) else { return Ok(None) };
        if l.hash.is_empty() {
            return Ok(None);
        }
        if let Some(Some(built)) = self.slots.borrow().get(j) {
            return Ok(built.clone());
        }
        let built = self.build(plan, src, env, j, joined)?.map(Rc::new);
        if let Some(slot) = self.slots.borrow_mut().get_mut(j) {
            *slot = Some(built.clone());
        }
        Ok(built)
    }

    /// Reads level `j`'s rows through its access path (whose keys read no other level, so
    /// `joined` does not change what it finds) into a table; None past the byte cap.
    fn build(&self, plan: &SelectPlan, src: &dyn RowSource, env: &Env, j: usize, joined: &[Value]) -> Result<Option<HashTable>> {
        let l = &plan.levels[j];
        let p = probe(l, &l.access, joined, env)?;
        let mut ids = IdMap::default();
        let mut bytes = 0usize;
        let mut too_big = false;
        src.each(j, &p, &mut |id, row| {
            env.watch.tick()?;
            let mut key = KeyValues::new();
            for k in &l.hash {
                match row.get(k.inner) {
                    Some(v) if !v.is_null() => key.push(v.clone()),
                    _ => return Ok(true),
                }
            }
            bytes = bytes.saturating_add(row_bytes(&key) + HASH_ENTRY_OVERHEAD_BYTES);
            if bytes > self.build_bytes_max {
                too_big = true;
                return Ok(false);
            }
            ids.entry(key).or_default().push(id);
            Ok(true)
        })?;
        Ok(if too_big { None } else { Some(HashTable { ids }) })
    }
}

#[cfg(not(test))]
fn build_bytes_max() -> usize {
    HASH_JOIN_BUILD_BYTES_MAX
}

#[cfg(test)]
thread_local! {
    /// A test's lower cap, to see the nested-loop fallback without 256 MiB of rows.
    pub static TEST_BUILD_BYTES_MAX: std::cell::Cell<usize> = const { std::cell::Cell::new(HASH_JOIN_BUILD_BYTES_MAX) };
}

#[cfg(test)]
fn build_bytes_max() -> usize {
    TEST_BUILD_BYTES_MAX.with(std::cell::Cell::get)
}
