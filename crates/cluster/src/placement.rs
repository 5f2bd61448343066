//! Where partitions live: for N nodes of S sites each and a k-factor, P = N × S ÷ (k + 1)
//! partitions, each with k + 1 replicas on k + 1 different nodes, every node holding exactly
//! S of them, and leaders spread as evenly as the replicas allow.
//!
//! Placement is a pure function of (N, S, k): every node computes the same one, and the
//! cluster state only records what has changed since (a leader moved, a node left).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A node's place in the cluster's host list (0-based).
pub type NodeId = u32;
/// A partition of the whole cluster (0-based).
pub type PartitionId = u32;

/// Most nodes a cluster may have.
pub const NODES_MAX: u32 = 128;
/// Most sites one node may run.
pub const SITES_PER_NODE_MAX: u32 = 1024;
/// Most extra copies of each partition.
pub const KFACTOR_MAX: u32 = 8;

/// Why a layout cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("a cluster needs 1 to {NODES_MAX} nodes, not {0}")]
    Nodes(u32),
    #[error("a node needs 1 to {SITES_PER_NODE_MAX} sites, not {0}")]
    Sites(u32),
    #[error("the k-factor must be below the number of nodes ({nodes}) and at most {KFACTOR_MAX}, not {k}: each partition needs k + 1 replicas on different nodes")]
    KFactor { k: u32, nodes: u32 },
    #[error(
        "{nodes} nodes × {sites} sites = {} sites cannot hold whole partitions of {} replicas each (k = {k}): choose sites so that nodes × sites divides by k + 1",
        nodes * sites,
        k + 1
    )]
    Indivisible { nodes: u32, sites: u32, k: u32 },
}

/// One partition's replicas, leader first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    pub nodes: Vec<NodeId>,
}

impl Replicas {
    /// The node that orders the partition's transactions when every replica is alive.
    pub fn leader(&self) -> NodeId {
        self.nodes[0]
    }
}

/// The partitions of a cluster and where their replicas live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub nodes: u32,
    pub sites_per_node: u32,
    pub kfactor: u32,
    /// By partition id.
    pub partitions: Vec<Replicas>,
}

impl Placement {
    /// Places P = nodes × sites ÷ (k + 1) partitions.
    pub fn new(nodes: u32, sites_per_node: u32, kfactor: u32) -> Result<Placement, PlacementError> {
        if nodes == 0 || nodes > NODES_MAX {
            return Err(PlacementError::Nodes(nodes));
        }
        if sites_per_node == 0 || sites_per_node > SITES_PER_NODE_MAX {
            return Err(PlacementError::Sites(sites_per_node));
        }
        if kfactor >= nodes || kfactor > KFACTOR_MAX {
            return Err(PlacementError::KFactor { k: kfactor, nodes });
        }
        let copies = kfactor + 1;
        let slots = nodes * sites_per_node;
        if !slots.is_multiple_of(copies) {
            return Err(PlacementError::Indivisible { nodes, sites: sites_per_node, k: kfactor });
        }
        // Slots are dealt to nodes in turn (slot i is on node i mod N), and each partition
        // takes k + 1 consecutive slots: consecutive slots are on different nodes as long as
        // k + 1 <= N, and every node gets exactly S slots.
        let mut leaders = vec![0u32; nodes as usize];
        let partitions = (0..slots / copies)
            .map(|p| {
                let mut replicas: Vec<NodeId> = (0..copies).map(|r| (p * copies + r) % nodes).collect();
                // The replica with the fewest leaderships so far leads (the first such).
                let lead = (0..replicas.len()).min_by_key(|&i| leaders[replicas[i] as usize]).unwrap_or(0);
                replicas.swap(0, lead);
                leaders[replicas[0] as usize] += 1;
                Replicas { nodes: replicas }
            })
            .collect();
        let placement = Placement { nodes, sites_per_node, kfactor, partitions };
        placement.check();
        Ok(placement)
    }

    /// The number of partitions.
    pub fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// The partitions `node` holds a replica of, in partition order.
    pub fn partitions_of(&self, node: NodeId) -> Vec<PartitionId> {
        (0..self.partition_count()).filter(|p| self.partitions[*p as usize].nodes.contains(&node)).collect()
    }

    /// The invariants every placement keeps; a broken one is a bug here, so it panics.
    fn check(&self) {
        let mut held = vec![0u32; self.nodes as usize];
        for (p, r) in self.partitions.iter().enumerate() {
            assert_eq!(r.nodes.len() as u32, self.kfactor + 1, "partition {p} has the wrong number of replicas");
            for (i, n) in r.nodes.iter().enumerate() {
                assert!(!r.nodes[..i].contains(n), "partition {p} has two replicas on node {n}");
                held[*n as usize] += 1;
            }
        }
        assert!(held.iter().all(|h| *h == self.sites_per_node), "a node holds other than {} replicas", self.sites_per_node);
    }
}

impl fmt::Display for Placement {
    /// One line per partition: `p: leader, replicas…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (p, r) in self.partitions.iter().enumerate() {
            let nodes: Vec<String> = r.nodes.iter().map(|n| n.to_string()).collect();
            writeln!(f, "partition {p}: nodes {}", nodes.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn three_nodes_two_sites_k1_give_three_partitions_one_led_by_each_node() {
        let p = Placement::new(3, 2, 1).unwrap();
        assert_eq!(p.partition_count(), 3);
        let mut leaders: Vec<NodeId> = p.partitions.iter().map(Replicas::leader).collect();
        leaders.sort();
        assert_eq!(leaders, vec![0, 1, 2]);
        for n in 0..3 {
            assert_eq!(p.partitions_of(n).len(), 2, "node {n} holds as many replicas as it has sites");
        }
    }

    #[test]
    fn two_nodes_with_k1_split_the_leaderships() {
        let p = Placement::new(2, 2, 1).unwrap();
        assert_eq!(p.partition_count(), 2);
        assert_ne!(p.partitions[0].leader(), p.partitions[1].leader());
    }

    #[test]
    fn impossible_layouts_say_what_to_change() {
        assert_eq!(Placement::new(2, 2, 2), Err(PlacementError::KFactor { k: 2, nodes: 2 }));
        assert_eq!(Placement::new(3, 1, 1), Err(PlacementError::Indivisible { nodes: 3, sites: 1, k: 1 }));
        assert!(Placement::new(3, 1, 1).unwrap_err().to_string().contains("divides by k + 1"));
        assert_eq!(Placement::new(0, 1, 0), Err(PlacementError::Nodes(0)));
        assert_eq!(Placement::new(1, 0, 0), Err(PlacementError::Sites(0)));
    }

    #[test]
    fn one_node_is_todays_single_node() {
        let p = Placement::new(1, 4, 0).unwrap();
        assert_eq!(p.partition_count(), 4);
        assert!(p.partitions.iter().all(|r| r.nodes == vec![0]));
    }

    proptest! {
        /// Every valid layout keeps the invariants (checked inside `new`), and leaders are
        /// as even as they can be: no node leads more than one partition above the
        /// fair share, rounded up.
        #[test]
        fn every_valid_layout_places_whole_partitions_and_spreads_leaders(nodes in 1u32..12, sites in 1u32..16, k in 0u32..4) {
            let Ok(p) = Placement::new(nodes, sites, k) else { return Ok(()) };
            prop_assert_eq!(p.partition_count() * (k + 1), nodes * sites);
            let mut led = vec![0u32; nodes as usize];
            for r in &p.partitions {
                led[r.leader() as usize] += 1;
            }
            let fair = p.partition_count().div_ceil(nodes);
            prop_assert!(led.iter().all(|l| *l <= fair + 1), "leaders per node {:?}, fair share {}", led, fair);
        }
    }
}
