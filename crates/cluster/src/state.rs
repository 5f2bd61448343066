//! The cluster state: the data of the membership group's state machine. It says which nodes
//! are alive (and which start of each node the group has seen), which node leads each
//! partition, the schema changes every node applies in the same order, and an epoch that
//! grows with every change.
//!
//! Applying a `Command` is a pure, deterministic function of the state and the command, so
//! every node that applies the same committed commands in the same order holds the same
//! state. Commands come from the Raft log, which came over the network: a command naming an
//! unknown node or partition is refused (the state does not change), never a panic.

use serde::{Deserialize, Serialize};

use crate::placement::{NodeId, PartitionId, Placement};
use crate::replication::View;

/// Which start of a node this is: every node counts its starts on its own disk, so a node
/// that restarted (and lost its in-memory partitions) is told apart from one that was only
/// out of touch. 0 means "no start of this node recorded yet".
pub type Incarnation = u64;

/// A change to the cluster state, proposed by the group's leader and applied once committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// The node has been silent longer than the failure timeout: it is no longer alive, and
    /// every partition it led gets a new leader among its live replicas.
    NodeDown(NodeId),
    /// The node is heard from in the given incarnation. If it was down, it is back as a
    /// replica (it leads nothing until a later `SetLeader`). If it was alive in an older
    /// incarnation, it restarted without anyone noticing it gone: it lost its partitions, so
    /// it gives up every leadership it held, as if it had gone down and come back at once.
    NodeUp { node: NodeId, incarnation: Incarnation },
    /// Moves a partition's leadership to one of its members (a rebalance).
    SetLeader { partition: PartitionId, node: NodeId },
    /// A live replica that came back has caught up with the partition's history (a rejoin):
    /// it becomes a member again, one every transaction must reach. Only if the node is
    /// still in `incarnation` and the partition in `term` (its view's), the leadership it
    /// caught up under: a restarted node, or a new leader, makes the catching up void.
    Rejoined { partition: PartitionId, node: NodeId, incarnation: Incarnation, term: u64 },
    /// The partition has no member left, and `node`, the member it lost last, restarted (in
    /// `incarnation`) with the partition recovered from its command log: it becomes the
    /// partition's only member and its leader; the other replicas rejoin from it.
    Restore { partition: PartitionId, node: NodeId, incarnation: Incarnation },
    /// The partition's leader in `term` says member `node` acknowledges nothing though the
    /// group hears it (a one-way cut between them): it leaves the partition's members (and
    /// rejoins when it can). Only in that term, and never the leader.
    Evict { partition: PartitionId, node: NodeId, term: u64 },
    /// A schema change (DDL statements, applied together) that every node applies, in the
    /// order the group commits them. `origin` and `id` name the call that proposed it, so
    /// the proposing node can answer that call once it applied the change itself.
    Schema(SchemaChange),
}

/// One schema change of `Command::Schema`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaChange {
    pub statements: Vec<String>,
    /// The node that proposed it.
    pub origin: NodeId,
    /// Unique among `origin`'s proposals since it started (with its incarnation in the
    /// high bits, so a restarted node never reuses one).
    pub id: u64,
}

/// What applying a command did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The state changed; this is its new epoch.
    Changed { epoch: u64 },
    /// The command asked for what was already so; the epoch stayed.
    Unchanged { epoch: u64 },
    /// The command could not be applied; the state did not change.
    Refused(Refusal),
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("node {0} is not in the cluster")]
    UnknownNode(NodeId),
    #[error("partition {0} is not in the cluster")]
    UnknownPartition(PartitionId),
    #[error("node {node} holds no replica of partition {partition}")]
    NotAReplica { partition: PartitionId, node: NodeId },
    #[error("node {0} is down")]
    NodeIsDown(NodeId),
    #[error("node {node} does not hold partition {partition}'s whole history: it cannot lead it")]
    NotAMember { partition: PartitionId, node: NodeId },
    #[error("node {node} is already known in incarnation {known}, later than {given}")]
    StaleIncarnation { node: NodeId, known: Incarnation, given: Incarnation },
    #[error("node {node} cannot become a member of partition {partition}: it caught up in an earlier incarnation or under an earlier leader, or the partition has no member to catch up from")]
    OutdatedRejoin { partition: PartitionId, node: NodeId },
    #[error("partition {partition} cannot be restored from node {node}: only the member it lost last, with no member left, can")]
    NotTheLastMember { partition: PartitionId, node: NodeId },
    #[error("node {node} cannot be dropped from partition {partition}: it is not a member other than the leader, or the partition's term moved on")]
    CannotEvict { partition: PartitionId, node: NodeId },
}

/// Why a state read from disk or the network cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the stored cluster state is inconsistent: {0}")]
pub struct InvalidState(pub String);

/// The cluster's membership and leadership, as committed by the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    epoch: u64,
    placement: Placement,
    /// By node id.
    alive: Vec<bool>,
    /// By node id: the latest start of the node that the group has seen (0: none yet).
    incarnations: Vec<Incarnation>,
    /// By partition id; `None` when no replica of the partition was alive as its leader went:
    /// the cluster cannot serve it, and no leader is invented for it. A replica that comes
    /// back does not lead it either (its data has to be recovered first): a `SetLeader`
    /// names the new leader.
    leaders: Vec<Option<NodeId>>,
    /// By partition id: the replicas that hold the partition's whole history, in node
    /// order. A node leaves them when it goes down or restarts, and comes back only with
    /// `Rejoined`; only a member may lead.
    members: Vec<Vec<NodeId>>,
    /// By partition id: the epoch at which its leader last changed (the replication term).
    terms: Vec<u64>,
    /// By partition id, for a partition with no member left: the member that left last. It
    /// held every committed transaction, so its command log can bring the partition back
    /// (`Restore`) after the whole cluster went down; no other node's can.
    #[serde(default)]
    last_members: Vec<Option<NodeId>>,
    /// Every schema change committed, in order: a node applies those it has not applied yet.
    schema: Vec<SchemaChange>,
}

impl ClusterState {
    /// The state before any command: every node alive, each partition led by its placement
    /// leader, epoch 0.
    pub fn new(placement: Placement) -> ClusterState {
        let nodes = placement.nodes as usize;
        let leaders = placement.partitions.iter().map(|r| Some(r.leader())).collect();
        let members = placement.partitions.iter().map(|r| sorted(&r.nodes)).collect();
        let terms = vec![0; placement.partitions.len()];
        ClusterState {
            epoch: 0,
            alive: vec![true; nodes],
            incarnations: vec![0; nodes],
            leaders,
            members,
            last_members: vec![None; placement.partitions.len()],
            terms,
            placement,
            schema: Vec::new(),
        }
    }

    /// Grows by one with every change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn node_count(&self) -> u32 {
        self.placement.nodes
    }

    pub fn is_alive(&self, node: NodeId) -> bool {
        self.alive.get(node as usize).copied().unwrap_or(false)
    }

    /// The live nodes, in id order.
    pub fn live_nodes(&self) -> Vec<NodeId> {
        (0..self.node_count()).filter(|n| self.is_alive(*n)).collect()
    }

    /// The latest start of `node` the group has seen (0: none yet, or no such node).
    pub fn incarnation(&self, node: NodeId) -> Incarnation {
        self.incarnations.get(node as usize).copied().unwrap_or(0)
    }

    /// The partition's leader, or `None` when no replica of it is alive (or no such partition).
    pub fn leader(&self, partition: PartitionId) -> Option<NodeId> {
        self.leaders.get(partition as usize).copied().flatten()
    }

    /// The partition's members: the replicas that hold its whole history.
    pub fn members(&self, partition: PartitionId) -> &[NodeId] {
        self.members.get(partition as usize).map_or(&[], Vec::as_slice)
    }

    /// The partition as its replication sees it: the term (the epoch its leader took office,
    /// plus one so the first term is 1), the leader and the members.
    pub fn view(&self, partition: PartitionId) -> View {
        View {
            term: self.terms.get(partition as usize).map_or(0, |t| t + 1),
            leader: self.leader(partition),
            members: self.members(partition).iter().copied().collect(),
        }
    }

    /// Every partition's leader, by partition id.
    pub fn leaders(&self) -> &[Option<NodeId>] {
        &self.leaders
    }

    /// The partitions `node` leads, in partition order.
    pub fn led_by(&self, node: NodeId) -> Vec<PartitionId> {
        (0..self.leaders.len() as PartitionId).filter(|p| self.leader(*p) == Some(node)).collect()
    }

    /// The partitions no live replica holds: the cluster cannot serve them.
    pub fn unserved(&self) -> Vec<PartitionId> {
        (0..self.leaders.len() as PartitionId).filter(|p| self.leader(*p).is_none()).collect()
    }

    /// Every schema change committed so far, in the order every node applies them.
    pub fn schema_changes(&self) -> &[SchemaChange] {
        &self.schema
    }

    /// Applies one committed command.
    pub fn apply(&mut self, command: &Command) -> Outcome {
        let leaders_before = self.leaders.clone();
        let changed = match command {
            Command::NodeDown(node) => self.node_down(*node),
            Command::NodeUp { node, incarnation } => self.node_up(*node, *incarnation),
            Command::SetLeader { partition, node } => self.set_leader(*partition, *node),
            Command::Rejoined { partition, node, incarnation, term } => self.rejoined(*partition, *node, *incarnation, *term),
            Command::Restore { partition, node, incarnation } => self.restore(*partition, *node, *incarnation),
            Command::Evict { partition, node, term } => self.evict(*partition, *node, *term),
            Command::Schema(change) => {
                // Whether the statements are valid is for each node's engine to find: they
                // all find the same, as they all hold the same schema before it.
                self.schema.push(change.clone());
                Ok(true)
            }
        };
        match changed {
            Err(refusal) => Outcome::Refused(refusal),
            Ok(false) => Outcome::Unchanged { epoch: self.epoch },
            Ok(true) => {
                self.epoch += 1;
                for (p, term) in self.terms.iter_mut().enumerate() {
                    if self.leaders[p] != leaders_before[p] {
                        *term = self.epoch;
                    }
                }
                Outcome::Changed { epoch: self.epoch }
            }
        }
    }

    fn known_node(&self, node: NodeId) -> Result<usize, Refusal> {
        if node < self.node_count() {
            Ok(node as usize)
        } else {
            Err(Refusal::UnknownNode(node))
        }
    }

    fn node_down(&mut self, node: NodeId) -> Result<bool, Refusal> {
        let n = self.known_node(node)?;
        if !self.alive[n] {
            return Ok(false);
        }
        self.alive[n] = false;
        self.leave_partitions(node);
        Ok(true)
    }

    fn node_up(&mut self, node: NodeId, incarnation: Incarnation) -> Result<bool, Refusal> {
        let n = self.known_node(node)?;
        let known = self.incarnations[n];
        if incarnation < known {
            return Err(Refusal::StaleIncarnation { node, known, given: incarnation });
        }
        let restarted = known != 0 && incarnation > known;
        self.incarnations[n] = incarnation;
        if !self.alive[n] {
            self.alive[n] = true;
            return Ok(true);
        }
        if restarted {
            // Its partitions' data went with the old process: it must neither lead them nor
            // count as holding them, the same as going down and up at once.
            self.leave_partitions(node);
        }
        Ok(restarted || known != incarnation)
    }

    /// Checks that `node` is a live replica of `partition`; Err says which part is not so.
    fn check_live_replica(&self, partition: PartitionId, node: NodeId) -> Result<(), Refusal> {
        let n = self.known_node(node)?;
        let replicas = self.placement.partitions.get(partition as usize).ok_or(Refusal::UnknownPartition(partition))?;
        if !replicas.nodes.contains(&node) {
            return Err(Refusal::NotAReplica { partition, node });
        }
        if !self.alive[n] {
            return Err(Refusal::NodeIsDown(node));
        }
        Ok(())
    }

    fn set_leader(&mut self, partition: PartitionId, node: NodeId) -> Result<bool, Refusal> {
        self.check_live_replica(partition, node)?;
        if !self.members[partition as usize].contains(&node) {
            return Err(Refusal::NotAMember { partition, node });
        }
        let slot = &mut self.leaders[partition as usize];
        let changed = *slot != Some(node);
        *slot = Some(node);
        Ok(changed)
    }

    fn rejoined(&mut self, partition: PartitionId, node: NodeId, incarnation: Incarnation, term: u64) -> Result<bool, Refusal> {
        self.check_live_replica(partition, node)?;
        // A partition with no member has nobody its node caught up from.
        let stale = self.incarnations[node as usize] != incarnation || self.view(partition).term != term;
        if stale || self.members[partition as usize].is_empty() {
            return Err(Refusal::OutdatedRejoin { partition, node });
        }
        let members = &mut self.members[partition as usize];
        if members.contains(&node) {
            return Ok(false);
        }
        members.push(node);
        members.sort_unstable();
        Ok(true)
    }

    fn restore(&mut self, partition: PartitionId, node: NodeId, incarnation: Incarnation) -> Result<bool, Refusal> {
        self.check_live_replica(partition, node)?;
        if self.incarnations[node as usize] != incarnation {
            return Err(Refusal::StaleIncarnation { node, known: self.incarnations[node as usize], given: incarnation });
        }
        let p = partition as usize;
        if !self.members[p].is_empty() || self.last_member(partition) != Some(node) {
            return Err(Refusal::NotTheLastMember { partition, node });
        }
        self.members[p] = vec![node];
        self.leaders[p] = Some(node);
        self.last_members[p] = None;
        Ok(true)
    }

    fn evict(&mut self, partition: PartitionId, node: NodeId, term: u64) -> Result<bool, Refusal> {
        self.known_node(node)?;
        let p = self.members.get(partition as usize).ok_or(Refusal::UnknownPartition(partition))?;
        if !p.contains(&node) || self.leader(partition) == Some(node) || self.view(partition).term != term {
            return Err(Refusal::CannotEvict { partition, node });
        }
        self.members[partition as usize].retain(|&m| m != node);
        Ok(true)
    }

    /// `node` no longer holds any partition: it leaves every partition's members, and each
    /// partition it led gets a new leader.
    fn leave_partitions(&mut self, node: NodeId) {
        self.last_members.resize(self.members.len(), None);
        for (m, last) in self.members.iter_mut().zip(&mut self.last_members) {
            if m.contains(&node) {
                m.retain(|&r| r != node);
                if m.is_empty() {
                    *last = Some(node);
                }
            }
        }
        self.hand_over_leaderships(node);
    }

    /// The member a partition with no member left lost last (see `last_members`).
    pub fn last_member(&self, partition: PartitionId) -> Option<NodeId> {
        self.last_members.get(partition as usize).copied().flatten()
    }

    /// Gives every partition `gone` led a new leader: the member that leads the fewest
    /// partitions at that moment, the first in placement order on a tie (so the load of a
    /// dead node spreads instead of landing on one survivor). Partitions are taken in id
    /// order and each choice counts for the next, so the result is deterministic. A
    /// partition with no member left is left without a leader.
    fn hand_over_leaderships(&mut self, gone: NodeId) {
        let mut led = vec![0u32; self.alive.len()];
        for l in self.leaders.iter().flatten() {
            led[*l as usize] += 1;
        }
        for p in 0..self.leaders.len() {
            if self.leaders[p] != Some(gone) {
                continue;
            }
            led[gone as usize] -= 1;
            let next =
                self.placement.partitions[p].nodes.iter().copied().filter(|r| self.members[p].contains(r)).min_by_key(|r| led[*r as usize]);
            if let Some(r) = next {
                led[r as usize] += 1;
            }
            self.leaders[p] = next;
        }
    }

    /// Checks what every state reached by `apply` keeps, for a state that came from disk or
    /// the network: the sizes fit the placement, and every leader is a live replica.
    pub fn validate(&self) -> Result<(), InvalidState> {
        let nodes = self.placement.nodes as usize;
        if self.alive.len() != nodes || self.incarnations.len() != nodes {
            return Err(InvalidState(format!("{} nodes placed, {} with a liveness", nodes, self.alive.len())));
        }
        if self.leaders.len() != self.placement.partitions.len() {
            return Err(InvalidState(format!(
                "{} partitions placed, {} with a leader slot",
                self.placement.partitions.len(),
                self.leaders.len()
            )));
        }
        if self.members.len() != self.leaders.len() || self.terms.len() != self.leaders.len() {
            return Err(InvalidState(format!("{} partitions placed, {} with members", self.leaders.len(), self.members.len())));
        }
        for (p, (leader, replicas)) in self.leaders.iter().zip(&self.placement.partitions).enumerate() {
            let members = &self.members[p];
            if let Some(m) = members.iter().find(|m| !self.is_alive(**m) || !replicas.nodes.contains(m)) {
                return Err(InvalidState(format!("partition {p} counts node {m} as a member, which is not a live replica")));
            }
            if let Some(l) = leader {
                if !members.contains(l) {
                    return Err(InvalidState(format!("partition {p} is led by node {l}, which is not a member")));
                }
            }
        }
        Ok(())
    }
}

fn sorted(nodes: &[NodeId]) -> Vec<NodeId> {
    let mut v = nodes.to_vec();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(nodes: u32, sites: u32, k: u32) -> ClusterState {
        ClusterState::new(Placement::new(nodes, sites, k).unwrap())
    }

    #[test]
    fn a_dead_node_hands_its_partitions_to_live_replicas_and_the_epoch_grows() {
        let mut s = state(3, 2, 1);
        let led = s.led_by(0);
        assert!(!led.is_empty());
        assert_eq!(s.apply(&Command::NodeDown(0)), Outcome::Changed { epoch: 1 });
        assert!(!s.is_alive(0));
        for p in led {
            let l = s.leader(p).unwrap();
            assert_ne!(l, 0);
            assert!(s.placement().partitions[p as usize].nodes.contains(&l));
        }
        assert!(s.led_by(0).is_empty());
        assert_eq!(s.apply(&Command::NodeDown(0)), Outcome::Unchanged { epoch: 1 }, "going down twice changes nothing");
        s.validate().unwrap();
    }

    #[test]
    fn a_partition_without_live_replicas_is_reported_not_given_a_leader() {
        let mut s = state(3, 2, 1);
        s.apply(&Command::NodeDown(0));
        s.apply(&Command::NodeDown(1));
        // With k = 1 every partition has two replicas; the one on nodes 0 and 1 has none left.
        let orphaned: Vec<PartitionId> =
            (0..s.placement().partition_count()).filter(|p| s.placement().partitions[*p as usize].nodes.iter().all(|r| *r != 2)).collect();
        assert!(!orphaned.is_empty());
        assert_eq!(s.unserved(), orphaned);
        for p in &orphaned {
            assert_eq!(s.leader(*p), None);
        }
        s.validate().unwrap();
        // Coming back does not make the node a member or a leader again, even of what nobody
        // serves: its data has to be recovered first.
        s.apply(&Command::NodeUp { node: 0, incarnation: 2 });
        assert_eq!(s.unserved(), orphaned);
        assert!(s.led_by(0).is_empty());
        let p = orphaned[0];
        assert!(s.members(p).is_empty());
        assert_eq!(s.apply(&Command::SetLeader { partition: p, node: 0 }), Outcome::Refused(Refusal::NotAMember { partition: p, node: 0 }));
        // Nobody to catch up from: rejoining is refused.
        let term = s.view(p).term;
        assert_eq!(
            s.apply(&Command::Rejoined { partition: p, node: 0, incarnation: 2, term }),
            Outcome::Refused(Refusal::OutdatedRejoin { partition: p, node: 0 })
        );
        // Node 1 went last: only its command log holds everything; node 0 cannot restore.
        assert_eq!(s.last_member(p), Some(1));
        assert_eq!(
            s.apply(&Command::Restore { partition: p, node: 0, incarnation: 2 }),
            Outcome::Refused(Refusal::NotTheLastMember { partition: p, node: 0 })
        );
        s.apply(&Command::NodeUp { node: 1, incarnation: 2 });
        assert!(matches!(
            s.apply(&Command::Restore { partition: p, node: 1, incarnation: 1 }),
            Outcome::Refused(Refusal::StaleIncarnation { .. })
        ));
        assert!(matches!(s.apply(&Command::Restore { partition: p, node: 1, incarnation: 2 }), Outcome::Changed { .. }));
        assert_eq!((s.leader(p), s.members(p)), (Some(1), &[1][..]));
        assert_eq!(s.last_member(p), None);
        // Then node 0 rejoins from it, in its term, as itself now.
        let term = s.view(p).term;
        let outdated = [
            Command::Rejoined { partition: p, node: 0, incarnation: 1, term },
            Command::Rejoined { partition: p, node: 0, incarnation: 2, term: term + 1 },
        ];
        for c in outdated {
            assert_eq!(s.apply(&c), Outcome::Refused(Refusal::OutdatedRejoin { partition: p, node: 0 }), "{c:?}");
        }
        assert!(matches!(s.apply(&Command::Rejoined { partition: p, node: 0, incarnation: 2, term }), Outcome::Changed { .. }));
        assert_eq!(s.members(p), &[0, 1]);
        s.validate().unwrap();
    }

    #[test]
    fn a_member_is_evicted_only_in_its_term_and_never_the_leader() {
        let mut s = state(3, 2, 1);
        let p = 0;
        let leader = s.leader(p).unwrap();
        let other = *s.members(p).iter().find(|m| **m != leader).unwrap();
        let term = s.view(p).term;
        assert_eq!(
            s.apply(&Command::Evict { partition: p, node: leader, term }),
            Outcome::Refused(Refusal::CannotEvict { partition: p, node: leader })
        );
        assert_eq!(
            s.apply(&Command::Evict { partition: p, node: other, term: term + 1 }),
            Outcome::Refused(Refusal::CannotEvict { partition: p, node: other })
        );
        assert!(matches!(s.apply(&Command::Evict { partition: p, node: other, term }), Outcome::Changed { .. }));
        assert_eq!(s.members(p), &[leader]);
        assert_eq!(s.view(p).term, term, "the leader stays, and so does the term");
        s.validate().unwrap();
    }

    #[test]
    fn a_partitions_view_has_a_new_term_only_when_its_leader_changes() {
        let mut s = state(3, 2, 1);
        let led = s.led_by(0);
        let kept = (0..3).find(|p| s.leader(*p) != Some(0) && !s.members(*p).contains(&0)).unwrap();
        assert_eq!(s.view(led[0]).term, 1);
        s.apply(&Command::NodeDown(0));
        let v = s.view(led[0]);
        assert_eq!((v.term, v.leader), (2, s.leader(led[0])));
        assert!(!v.members.contains(&0));
        assert_eq!(s.view(kept).term, 1, "a partition whose leader stayed keeps its term");
    }

    #[test]
    fn leaderships_of_a_dead_node_spread_over_the_survivors() {
        // 5 nodes, 6 sites, k = 2: 10 partitions of 3 replicas, two led by each node. The
        // two that node 0 led go to two different survivors, though both have the same
        // replica first in placement order.
        let mut s = state(5, 6, 2);
        let led = s.led_by(0);
        assert_eq!(led.len(), 2);
        s.apply(&Command::NodeDown(0));
        let new: Vec<NodeId> = led.iter().map(|p| s.leader(*p).unwrap()).collect();
        assert_ne!(new[0], new[1], "partitions {led:?} went to {new:?}");
        let counts: Vec<usize> = (1..5).map(|n| s.led_by(n).len()).collect();
        assert!(counts.iter().all(|c| *c <= 3), "leaders per survivor {counts:?}");
    }

    #[test]
    fn a_restarted_node_gives_up_its_leaderships_but_stays_alive() {
        let mut s = state(3, 2, 1);
        for n in 0..3 {
            assert!(matches!(s.apply(&Command::NodeUp { node: n, incarnation: 1 }), Outcome::Changed { .. }));
        }
        assert_eq!(s.apply(&Command::NodeUp { node: 1, incarnation: 1 }), Outcome::Unchanged { epoch: 3 });
        assert!(!s.led_by(1).is_empty());
        assert_eq!(s.apply(&Command::NodeUp { node: 1, incarnation: 2 }), Outcome::Changed { epoch: 4 });
        assert!(s.is_alive(1));
        assert!(s.led_by(1).is_empty());
        assert!((0..s.placement().partition_count()).all(|p| !s.members(p).contains(&1)), "a restarted node holds nothing");
        assert_eq!(s.incarnation(1), 2);
        assert_eq!(
            s.apply(&Command::NodeUp { node: 1, incarnation: 1 }),
            Outcome::Refused(Refusal::StaleIncarnation { node: 1, known: 2, given: 1 }),
            "a late message from the old process does not turn the clock back"
        );
    }

    #[test]
    fn commands_naming_what_does_not_exist_are_refused_without_change() {
        let mut s = state(3, 2, 1);
        let before = s.clone();
        assert_eq!(s.apply(&Command::NodeDown(3)), Outcome::Refused(Refusal::UnknownNode(3)));
        assert_eq!(s.apply(&Command::NodeUp { node: 99, incarnation: 1 }), Outcome::Refused(Refusal::UnknownNode(99)));
        assert_eq!(s.apply(&Command::SetLeader { partition: 7, node: 0 }), Outcome::Refused(Refusal::UnknownPartition(7)));
        let p = (0..3).find(|p| !s.placement().partitions[*p as usize].nodes.contains(&2)).unwrap();
        assert_eq!(
            s.apply(&Command::SetLeader { partition: p, node: 2 }),
            Outcome::Refused(Refusal::NotAReplica { partition: p, node: 2 })
        );
        assert_eq!(s, before);
    }

    #[test]
    fn schema_changes_are_kept_in_commit_order_and_move_no_leader() {
        let mut s = state(3, 2, 1);
        let leaders = s.leaders().to_vec();
        let change = |n: u64| SchemaChange { statements: vec![format!("CREATE TABLE t{n} (a INTEGER);")], origin: 1, id: n };
        assert_eq!(s.apply(&Command::Schema(change(7))), Outcome::Changed { epoch: 1 });
        assert_eq!(s.apply(&Command::Schema(change(3))), Outcome::Changed { epoch: 2 });
        assert_eq!(s.schema_changes(), &[change(7), change(3)]);
        assert_eq!(s.leaders(), &leaders[..]);
        assert_eq!(s.view(0).term, 1, "a schema change is no new term");
        s.validate().unwrap();
    }

    #[test]
    fn validate_catches_a_leader_that_is_not_a_live_replica() {
        let mut s = state(3, 2, 1);
        s.validate().unwrap();
        s.alive[s.leaders[0].unwrap() as usize] = false;
        assert!(s.validate().is_err());
        let mut s = state(3, 2, 1);
        s.leaders.pop();
        assert!(s.validate().is_err());
    }

    fn command(nodes: u32, partitions: u32) -> impl Strategy<Value = Command> {
        prop_oneof![
            (0..nodes + 1).prop_map(Command::NodeDown),
            (0..nodes + 1, 0u64..4).prop_map(|(node, incarnation)| Command::NodeUp { node, incarnation }),
            (0..partitions + 1, 0..nodes + 1).prop_map(|(partition, node)| Command::SetLeader { partition, node }),
            (0..partitions + 1, 0..nodes + 1, 0u64..4, 0u64..8).prop_map(|(partition, node, incarnation, term)| Command::Rejoined {
                partition,
                node,
                incarnation,
                term
            }),
            (0..partitions + 1, 0..nodes + 1, 0u64..4).prop_map(|(partition, node, incarnation)| Command::Restore {
                partition,
                node,
                incarnation
            }),
            (0..partitions + 1, 0..nodes + 1, 0u64..8).prop_map(|(partition, node, term)| Command::Evict { partition, node, term }),
            (0..nodes, 0u64..4).prop_map(|(origin, id)| Command::Schema(SchemaChange { statements: vec![format!("-- {id}")], origin, id })),
        ]
    }

    fn layout_and_commands() -> impl Strategy<Value = (Placement, Vec<Command>)> {
        (2u32..7, 1u32..5, 0u32..3).prop_filter_map("valid layout", |(n, s, k)| Placement::new(n, s, k).ok()).prop_flat_map(|p| {
            let cmds = proptest::collection::vec(command(p.nodes, p.partition_count()), 0..60);
            (Just(p), cmds)
        })
    }

    proptest! {
        /// After any sequence of commands every leader is a live replica of its partition,
        /// every partition with a live replica has a leader, the epoch never decreases (and
        /// grows exactly when the state changes), and two copies agree.
        #[test]
        fn any_command_sequence_keeps_leaders_live_replicas((placement, commands) in layout_and_commands()) {
            let mut a = ClusterState::new(placement.clone());
            let mut b = ClusterState::new(placement);
            for c in &commands {
                let before = a.clone();
                let outcome = a.apply(c);
                prop_assert_eq!(&outcome, &b.apply(c));
                prop_assert!(a.validate().is_ok(), "{:?} after {:?}", a.validate(), c);
                if let Command::NodeDown(gone) = c {
                    for p in before.led_by(*gone) {
                        prop_assert_eq!(a.leader(p).is_some(), !a.members(p).is_empty(), "partition {} after node {} went", p, gone);
                    }
                }
                // A partition's term moves exactly when its leader changes.
                for p in 0..a.placement().partition_count() {
                    let moved = a.leader(p) != before.leader(p);
                    prop_assert_eq!(a.view(p).term != before.view(p).term, moved, "partition {} after {:?}", p, c);
                    prop_assert!(a.view(p).term >= before.view(p).term);
                }
                match outcome {
                    Outcome::Changed { epoch } => {
                        prop_assert_eq!(epoch, before.epoch + 1);
                        prop_assert_ne!(&a, &before);
                    }
                    Outcome::Unchanged { .. } | Outcome::Refused(_) => prop_assert_eq!(&a, &before),
                }
            }
            prop_assert_eq!(a, b);
        }
    }
}
