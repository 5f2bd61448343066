//! The cluster: where partitions live (`placement`), the cluster state the membership group
//! agrees on (`state`), the failure detector's decisions (`detector`), and the membership
//! group itself (`node`: one openraft group of all nodes, over the internal network of
//! `transport`), and how each partition's replicas run the same transactions in the same
//! order (`replication`, carried out over the internal network by `replicas`). See
//! `docs/cluster.md`.

pub mod detector;
pub mod message;
pub mod node;
pub mod placement;
pub mod raft;
mod record;
pub mod replicas;
pub mod replication;
pub mod state;
pub mod store;
pub mod transport;

pub use detector::{Standing, Timing};
pub use node::{ClusterConfig, ClusterNode, ClusterView, ProposeError, StartError};
pub use placement::{NodeId, PartitionId, Placement, PlacementError, Replicas};
pub use state::{ClusterState, Command, Incarnation, Outcome, Refusal};
pub use transport::Faults;
