//! A deterministic simulation of one partition's replication (`replication.rs`): a seeded
//! scheduler runs its replicas over a simulated network that delays and drops messages
//! (in order per link, as TCP), delivers each node its views of the cluster state late and
//! at different times, crashes leaders and members, removes live nodes from the partition
//! (a false suspicion), moves leadership (a rebalance), brings lost nodes back (a rejoin: a
//! snapshot from the leader, then its entries as a learner) and cuts one direction between
//! the leader and a member (which the group does not see: the leader must say the member
//! does not answer). Afterwards it checks what a
//! client must be able to rely on:
//! - every replica ran the same entries in the same order (each history is a prefix of one
//!   order), and the surviving members end identical;
//! - every entry a client was told had committed is in that order, at its place;
//! - no member was reported diverged, unless one really ran an entry differently;
//! - the partition takes and commits new work once the faults stop.
//!
//! `LOCKSTEP_LONG=1` runs many more seeds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use lockstep_cluster::replication::{Action, Entry, Message, Replication, Seq, View};
use lockstep_cluster::NodeId;

/// SplitMix64: a small seeded generator, so a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// A replica's "partition": its state is a hash chain of the operations it ran.
fn run(state: u64, op: u64, faulty: bool) -> u64 {
    let mixed = state.rotate_left(7) ^ op.wrapping_mul(0x2545_F491_4F6C_DD1D);
    if faulty && op.is_multiple_of(5) {
        mixed ^ 1
    } else {
        mixed
    }
}

struct Node {
    alive: bool,
    repl: Replication<u64>,
    state: u64,
    /// Entries handed out to run, in order (the site's queue).
    site: VecDeque<Entry<u64>>,
    /// What it ran, in order: (seq, op).
    history: Vec<(Seq, u64)>,
    /// Views not yet delivered, oldest first.
    views: VecDeque<(u64, View)>,
    /// Client calls appended here and not yet answered: seq → op.
    calls: BTreeMap<Seq, u64>,
    faulty: bool,
}

struct Sim {
    rng: Rng,
    now: u64,
    nodes: Vec<Node>,
    /// The cluster state's view (what the membership group decided).
    view: View,
    /// Per link (from, to): messages in order, each with its delivery time.
    links: BTreeMap<(NodeId, NodeId), VecDeque<(u64, Message<u64>)>>,
    acked: Vec<(Seq, u64)>,
    diverged: Vec<(NodeId, Seq)>,
    /// Nodes lost to the partition (crashed or removed): at most k.
    lost: u32,
    kfactor: u32,
    loss_per_mille: u64,
    next_op: u64,
    /// A node coming back: it gets the leader's snapshot at `ready`.
    rejoin: Option<Rejoin>,
    /// Nodes that loaded a snapshot and learn, with the term they learn in.
    learning: BTreeMap<NodeId, u64>,
    /// `CaughtUp` said by (leader, learner), for the group to act on.
    caught_up: Vec<(NodeId, NodeId, u64)>,
    /// `Unresponsive` said by (leader, member, term).
    unresponsive: Vec<(NodeId, NodeId, u64)>,
    /// A one-way cut: messages on this link are lost until then (the group hears both ends).
    cut: Option<((NodeId, NodeId), u64)>,
    evicted: u32,
    rejoined: u32,
}

/// A rejoin in progress: the leader's state at entry `seq`, on its way to `node`.
struct Rejoin {
    node: NodeId,
    ready: u64,
    term: u64,
    seq: Seq,
    state: u64,
    history: Vec<(Seq, u64)>,
}

impl Sim {
    fn new(seed: u64, replicas: u32, faulty: Option<NodeId>) -> Sim {
        let mut rng = Rng(seed);
        let loss_per_mille = [0, 0, 20, 100][rng.below(4) as usize];
        let members: BTreeSet<NodeId> = (0..replicas).collect();
        let leader = rng.below(replicas as u64) as NodeId;
        let view = View { term: 1, leader: Some(leader), members };
        let nodes = (0..replicas)
            .map(|n| Node {
                alive: true,
                repl: Replication::new(n, 0),
                state: 0,
                site: VecDeque::new(),
                history: Vec::new(),
                views: VecDeque::new(),
                calls: BTreeMap::new(),
                faulty: faulty == Some(n),
            })
            .collect();
        let mut sim = Sim {
            rng,
            now: 0,
            nodes,
            view,
            links: BTreeMap::new(),
            acked: Vec::new(),
            diverged: Vec::new(),
            lost: 0,
            kfactor: replicas - 1,
            loss_per_mille,
            next_op: 1,
            rejoin: None,
            learning: BTreeMap::new(),
            caught_up: Vec::new(),
            unresponsive: Vec::new(),
            cut: None,
            evicted: 0,
            rejoined: 0,
        };
        sim.publish_view();
        sim
    }

    /// The group committed a new view: every live node learns it, each at its own time.
    fn publish_view(&mut self) {
        for n in 0..self.nodes.len() {
            if self.nodes[n].alive {
                let at = self.now + self.rng.below(40);
                let at = self.nodes[n].views.back().map_or(at, |(t, _)| at.max(*t));
                self.nodes[n].views.push_back((at, self.view.clone()));
            }
        }
    }

    fn act(&mut self, node: NodeId, actions: Vec<Action<u64>>) {
        for a in actions {
            match a {
                Action::Send { to, message } => {
                    let cut = self.cut.is_some_and(|(link, until)| link == (node, to) && self.now < until);
                    if cut || self.rng.chance(self.loss_per_mille) {
                        continue;
                    }
                    let link = self.links.entry((node, to)).or_default();
                    let at = self.now + 1 + self.rng.below(10);
                    let at = link.back().map_or(at, |(t, _)| at.max(*t));
                    link.push_back((at, message));
                }
                Action::Apply(e) => self.nodes[node as usize].site.push_back(e),
                Action::Commit(upto) => {
                    let n = &mut self.nodes[node as usize];
                    let done: Vec<Seq> = n.calls.range(..=upto).map(|(s, _)| *s).collect();
                    for s in done {
                        if let Some(op) = n.calls.remove(&s) {
                            self.acked.push((s, op));
                        }
                    }
                }
                Action::Deposed(after) => {
                    // Their outcome is unknown: the client is told so, and the check below
                    // neither needs nor forbids them.
                    let n = &mut self.nodes[node as usize];
                    n.calls.retain(|s, _| *s <= after);
                }
                Action::Diverged { node: d, seq } => self.diverged.push((d, seq)),
                Action::CaughtUp { node: learner, term } => self.caught_up.push((node, learner, term)),
                Action::Unresponsive { node: member, term } => self.unresponsive.push((node, member, term)),
            }
        }
    }

    fn client_call(&mut self, node: NodeId) {
        let n = &mut self.nodes[node as usize];
        if !n.alive || !n.repl.accepts() {
            return;
        }
        let op = self.next_op;
        self.next_op += 1;
        let state = run(n.state, op, n.faulty);
        let (seq, actions) = n.repl.append(op, state).expect("accepts() said it would take an entry");
        n.state = state;
        n.history.push((seq, op));
        n.calls.insert(seq, op);
        self.act(node, actions);
    }

    fn run_site(&mut self, node: NodeId) {
        let n = &mut self.nodes[node as usize];
        let Some(e) = n.site.pop_front() else { return };
        n.state = run(n.state, e.payload, n.faulty);
        n.history.push((e.seq, e.payload));
        let actions = n.repl.applied_entry(e.seq, n.state);
        self.act(node, actions);
    }

    fn deliver(&mut self) {
        let due: Vec<(NodeId, NodeId)> =
            self.links.iter().filter(|(_, q)| q.front().is_some_and(|(t, _)| *t <= self.now)).map(|(k, _)| *k).collect();
        for (from, to) in due {
            let Some((_, message)) = self.links.get_mut(&(from, to)).and_then(|q| q.pop_front()) else { continue };
            if !self.nodes[from as usize].alive || !self.nodes[to as usize].alive {
                continue;
            }
            let actions = self.nodes[to as usize].repl.receive(from, message);
            self.act(to, actions);
        }
        for n in 0..self.nodes.len() {
            while self.nodes[n].alive && self.nodes[n].views.front().is_some_and(|(t, _)| *t <= self.now) {
                let Some((_, view)) = self.nodes[n].views.pop_front() else { break };
                let actions = self.nodes[n].repl.set_view(view);
                self.act(n as NodeId, actions);
            }
        }
    }

    fn members(&self) -> Vec<NodeId> {
        self.view.members.iter().copied().collect()
    }

    fn pick_member(&mut self) -> NodeId {
        let m = self.members();
        m[self.rng.below(m.len() as u64) as usize]
    }

    /// A member leaves the partition: crashed, or declared gone while still running.
    fn lose(&mut self, crash: bool) {
        if self.lost >= self.kfactor || self.view.members.len() < 2 {
            return;
        }
        let victim = self.pick_member();
        self.lost += 1;
        if crash {
            let n = &mut self.nodes[victim as usize];
            n.alive = false;
            n.site.clear();
            n.views.clear();
            n.calls.clear();
        }
        self.view.members.remove(&victim);
        if self.view.leader == Some(victim) {
            let next = self.pick_member();
            self.view.leader = Some(next);
            self.view.term += 1;
        }
        self.publish_view();
    }

    /// A node outside the partition (crashed or removed) starts again and asks the leader
    /// for a snapshot; the leader takes it at once and makes the node a learner.
    fn start_rejoin(&mut self) {
        let Some(leader) = self.view.leader else { return };
        let outside: Vec<NodeId> = (0..self.nodes.len() as NodeId)
            .filter(|n| {
                !self.view.members.contains(n) && !self.learning.contains_key(n) && self.rejoin.as_ref().is_none_or(|r| r.node != *n)
            })
            .collect();
        if outside.is_empty() {
            return;
        }
        let node = outside[self.rng.below(outside.len() as u64) as usize];
        // A new process: nothing of the old one is left, not even its connections.
        self.links.retain(|(from, to), _| *from != node && *to != node);
        let n = &mut self.nodes[node as usize];
        (n.alive, n.repl, n.state) = (true, Replication::new(node, 0), 0);
        n.site.clear();
        n.history.clear();
        n.views.clear();
        n.calls.clear();
        let actions = n.repl.set_view(self.view.clone());
        self.act(node, actions);
        let l = &mut self.nodes[leader as usize];
        let Ok(seq) = l.repl.add_learner(node) else { return };
        assert_eq!(l.history.len() as Seq, seq, "the leader's snapshot point is not its last entry");
        // The term the leader took the image in (its view may lag the group's).
        let (state, history, term) = (l.state, l.history.clone(), l.repl.view().term);
        let ready = self.now + 1 + self.rng.below(60);
        self.rejoin = Some(Rejoin { node, ready, term, seq, state, history });
    }

    /// Loads a snapshot that arrived; promotes learners that caught up (the group commits
    /// `Rejoined` only in the term they learnt in).
    fn progress_rejoins(&mut self) {
        if self.rejoin.as_ref().is_some_and(|r| r.ready <= self.now) {
            let Some(r) = self.rejoin.take() else { return };
            let n = &mut self.nodes[r.node as usize];
            if let Some(Ok(actions)) = n.alive.then(|| n.repl.learn(r.term, r.seq)) {
                (n.state, n.history) = (r.state, r.history);
                n.site.clear();
                self.learning.insert(r.node, r.term);
                self.act(r.node, actions);
            }
        }
        for (leader, node, said) in std::mem::take(&mut self.caught_up) {
            let Some(term) = self.learning.remove(&node) else { continue };
            if term == said && term == self.view.term && self.view.leader == Some(leader) && self.nodes[node as usize].alive {
                self.view.members.insert(node);
                self.lost -= 1;
                self.rejoined += 1;
                self.publish_view();
            }
        }
        // A member its leader says does not answer leaves the partition (the group drops it
        // in that term, never the leader).
        for (leader, node, term) in std::mem::take(&mut self.unresponsive) {
            if term == self.view.term && self.view.leader == Some(leader) && leader != node && self.view.members.remove(&node) {
                self.lost += 1;
                self.evicted += 1;
                self.publish_view();
            }
        }
        // A learner whose term ended starts over later.
        let term = self.view.term;
        self.learning.retain(|_, t| *t == term);
    }

    /// Cuts one direction between the leader and a member for a while: the member is not
    /// down, so only the leader's `Unresponsive` can get the partition going again.
    fn cut_one_way(&mut self) {
        let Some(leader) = self.view.leader else { return };
        let others: Vec<NodeId> = self.view.members.iter().copied().filter(|m| *m != leader).collect();
        if others.is_empty() {
            return;
        }
        let member = others[self.rng.below(others.len() as u64) as usize];
        let link = if self.rng.chance(500) { (leader, member) } else { (member, leader) };
        let until = self.now + 200 + self.rng.below(2_000);
        self.cut = Some((link, until));
    }

    fn rebalance(&mut self) {
        let next = self.pick_member();
        if self.view.leader != Some(next) {
            self.view.leader = Some(next);
            self.view.term += 1;
            self.publish_view();
        }
    }

    fn step(&mut self, faults: bool, calls: bool) {
        self.now += 1;
        self.deliver();
        let nodes = self.nodes.len() as NodeId;
        for _ in 0..1 + self.rng.below(3) {
            let n = self.rng.below(nodes as u64) as NodeId;
            if self.nodes[n as usize].alive {
                self.run_site(n);
            }
        }
        if calls && self.rng.chance(500) {
            let n = self.rng.below(nodes as u64) as NodeId;
            self.client_call(n);
        }
        if self.now.is_multiple_of(5) {
            for n in 0..nodes {
                if self.nodes[n as usize].alive {
                    let actions = self.nodes[n as usize].repl.tick();
                    self.act(n, actions);
                }
            }
        }
        self.progress_rejoins();
        if faults {
            match self.rng.below(1000) {
                0..=2 => self.lose(true),
                3 => self.lose(false),
                4..=5 => self.rebalance(),
                6..=8 if self.rejoin.is_none() => self.start_rejoin(),
                9 if self.cut.is_none() => self.cut_one_way(),
                _ => {}
            }
        }
    }

    /// Runs without faults or new calls until every live member has run everything and every
    /// rejoin under way has ended.
    fn quiesce(&mut self) {
        self.cut = None;
        for _ in 0..20_000 {
            self.step(false, false);
            let leader = self.view.leader.map(|l| &self.nodes[l as usize]);
            let settled = leader.is_some_and(|l| {
                l.repl.accepts()
                    && self.view.members.iter().all(|&m| {
                        let n = &self.nodes[m as usize];
                        n.views.is_empty() && n.site.is_empty() && n.repl.applied() == l.repl.applied()
                    })
                    && l.repl.committed() == l.repl.applied()
            });
            // A rejoin under way finishes too, with no new calls to carry it along.
            let rejoined = self.rejoin.is_none() && self.learning.is_empty();
            if settled && rejoined && self.links.values().all(VecDeque::is_empty) {
                return;
            }
        }
        panic!("the partition did not settle (or a rejoin did not finish) once the faults stopped");
    }

    fn check(&self, seed: u64) {
        let leader = self.view.leader.expect("a leader remains");
        let order = &self.nodes[leader as usize].history;
        for (k, &(seq, _)) in order.iter().enumerate() {
            assert_eq!(seq, k as Seq + 1, "seed {seed}: the leader ran entry {seq} in place {}", k + 1);
        }
        // The surviving members ran exactly that order.
        for &m in &self.view.members {
            let n = &self.nodes[m as usize];
            assert_eq!(&n.history, order, "seed {seed}: member {m} ended with another history than leader {leader}");
            if !n.faulty && !self.nodes[leader as usize].faulty {
                assert_eq!(n.state, self.nodes[leader as usize].state, "seed {seed}: member {m} ended in another state");
            }
        }
        // A node that crashed or was removed may have run entries nobody else got (they
        // never committed); what it knew to be committed is in the order.
        for (i, n) in self.nodes.iter().enumerate() {
            let committed = n.repl.committed().min(n.history.len() as Seq) as usize;
            assert_eq!(&n.history[..committed], &order[..committed.min(order.len())], "seed {seed}: node {i}'s committed entries differ");
        }
        for &(seq, op) in &self.acked {
            let at = order.get((seq - 1) as usize);
            assert_eq!(at, Some(&(seq, op)), "seed {seed}: committed entry {seq} (op {op}) is not in the order");
        }
    }
}

fn seeds(short: u64, long: u64) -> u64 {
    if std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1") {
        long
    } else {
        short
    }
}

fn simulate(seed: u64) -> Sim {
    let replicas = 2 + (seed % 3) as u32;
    let mut sim = Sim::new(seed, replicas, None);
    for _ in 0..3_000 {
        sim.step(true, true);
    }
    sim.quiesce();
    sim.check(seed);
    assert!(sim.diverged.is_empty(), "seed {seed}: deterministic replicas were reported diverged: {:?}", sim.diverged);
    // Still serving: a new call commits.
    let before = sim.acked.len();
    let leader = sim.view.leader.expect("a leader remains");
    sim.client_call(leader);
    sim.quiesce();
    assert_eq!(sim.acked.len(), before + 1, "seed {seed}: a call after the faults did not commit");
    sim
}

#[test]
fn replicas_agree_and_keep_every_committed_entry_through_crashes_removals_and_rebalances() {
    let (mut acked, mut terms, mut rejoined, mut evicted) = (0, 0, 0, 0);
    for seed in 0..seeds(300, 20_000) {
        let sim = simulate(seed);
        acked += sim.acked.len();
        terms += sim.view.term;
        rejoined += sim.rejoined;
        evicted += sim.evicted;
    }
    // The runs did something: calls committed, leaders changed, nodes came back.
    assert!(acked > 10_000, "only {acked} calls committed over all seeds");
    assert!(terms > 400, "leaders changed only {terms} times over all seeds");
    assert!(rejoined > 100, "only {rejoined} nodes rejoined over all seeds");
    assert!(evicted > 10, "only {evicted} members were dropped for a one-way cut over all seeds");
}

#[test]
fn a_member_whose_results_differ_is_reported() {
    for seed in 0..seeds(20, 500) {
        let leader = Sim::new(seed, 3, None).view.leader.expect("a leader");
        let faulty = (leader + 1) % 3;
        let mut sim = Sim::new(seed, 3, Some(faulty));
        for _ in 0..2_000 {
            sim.step(false, true);
        }
        sim.quiesce();
        sim.check(seed);
        let reported: BTreeSet<NodeId> = sim.diverged.iter().map(|(n, _)| *n).collect();
        assert_eq!(reported, BTreeSet::from([faulty]), "seed {seed}: the leader {leader} reported {:?}", sim.diverged);
    }
}
