//! Test helpers: `LocalSites` runs multi-partition work on in-memory partitions, one after
//! another, for tests of `execute_mp` (here and in other crates).

use lockstep_core::{Catalog, Error, HashRing, Result, ResultTable};
use lockstep_storage::Partition;

use crate::{SiteAccess, SiteFn, Target};

/// Partitions held in memory; `run` calls the work on each in partition order.
pub struct LocalSites {
    pub partitions: Vec<Partition>,
    ring: HashRing,
}

impl LocalSites {
    /// `count` empty partitions shaped by `catalog`.
    pub fn new(count: u32, catalog: &Catalog) -> Result<LocalSites> {
        let ring = HashRing::new(count);
        let mut partitions = Vec::with_capacity(count as usize);
        for id in 0..count {
            let mut p = Partition::new(id);
            p.apply_schema(catalog, &ring)?;
            partitions.push(p);
        }
        Ok(LocalSites { partitions, ring })
    }

    /// Re-applies a changed schema to every partition.
    pub fn apply_schema(&mut self, catalog: &Catalog) -> Result<()> {
        for p in &mut self.partitions {
            p.apply_schema(catalog, &self.ring)?;
        }
        Ok(())
    }
}

impl SiteAccess for LocalSites {
    fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    fn ring(&self) -> &HashRing {
        &self.ring
    }

    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        match target {
            Target::All => self.partitions.iter_mut().map(|p| f(p)).collect(),
            Target::One(i) => {
                let p = self.partitions.get_mut(i as usize).ok_or_else(|| Error::unexpected(format!("no partition {i}")))?;
                Ok(vec![f(p)?])
            }
        }
    }
}
