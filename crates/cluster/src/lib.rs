//! The cluster: where partitions live (`placement`), and, as it lands, the membership
//! group and the replication of transactions between nodes. See `docs/cluster.md`.

pub mod placement;

pub use placement::{NodeId, PartitionId, Placement, PlacementError, Replicas};
