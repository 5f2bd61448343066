//! Join order: which FROM source a SELECT reads first and which next, chosen by a small
//! cost model — by dynamic programming over the subsets of a segment's sources, greedily
//! past `DP_SOURCES_MAX` of them — and which of its joins run as hash joins.
//!
//! A plan is made once per catalog version, often before a row is loaded, and another node
//! must make the very same plan from the same catalog and text (a fragment names a level by
//! its number in the plan). So the cached plan is made without statistics: the model
//! assumes every table holds `ASSUMED_TABLE_ROWS` rows and ranks what it can see — a unique
//! index lookup (one row), an index lookup or hash join on equalities (few rows per joined
//! row), a range, a full scan for every joined row (a cross product).
//!
//! Row counts come in at run time (`for_row_counts`): the partition a statement runs on
//! (its tables' row counts), or the rows a multi-partition read gathered, choose the order
//! again, from counts rounded to powers of 4 (`row_bucket`). A plan is thus a pure function
//! of the cached plan and the buckets, which are part of the data every replica holds at
//! the same point of the same transactions: replicas (and a replay of the command log) pick
//! the same order, so even a query without ORDER BY returns its rows in the same order on
//! each, and the result hashes replicas compare agree. A table whose count moves by about
//! 4× gets another plan; each statement keeps `ROW_COUNT_PLANS_MAX` of them. The reasoning
//! is in docs/design.md ("Join order from row counts, chosen where it runs").
//!
//! Outer joins keep their meaning: a LEFT JOIN source stays after every source written
//! before it, and the sources written after it stay after it. So the FROM list is cut into
//! segments at each LEFT JOIN, and only the inner-joined sources within one segment change
//! places. Every filter term is then placed again at the first level where all the sources
//! it reads have been joined; a LEFT JOIN's own ON and the WHERE terms that must see its
//! padded row stay where they were.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use lockstep_core::{DataType, TableDef};
use lockstep_storage::Partition;
use smallvec::SmallVec;

use crate::access::{choose_access, Access};
use crate::bind::Source;
use crate::expr::{CmpOp, Expr};
use crate::plan::{key_terms_over, level_of_column, Level, SelectPlan};

/// Rows the cost model assumes a table holds when it has no count (the cached plan, and a
/// derived table at run time).
const ASSUMED_TABLE_ROWS: f64 = 1000.0;
/// Fraction of a table's rows an equality on one column lets through (no index tells its
/// number of distinct keys cheaply, so this is a fixed guess; a unique index's full key
/// finds one row).
const EQ_SELECTIVITY: f64 = 0.01;
/// Fraction of rows a range (`<`, `>`, BETWEEN) on an index column lets through.
const RANGE_SELECTIVITY: f64 = 0.3;
/// Fraction of rows any other filter term lets through.
const FILTER_SELECTIVITY: f64 = 0.5;
/// Cost of one index probe, in rows visited.
const PROBE_COST: f64 = 2.0;
/// Most inner-joined sources of one segment ordered by dynamic programming, which weighs
/// n · 2^(n−1) placements (5,120 for 10) and keeps 2^n partial orders; a longer segment is
/// ordered greedily (64 sources: about 2,000 placements).
pub const DP_SOURCES_MAX: usize = 10;
/// Most plans one SELECT keeps for the row counts it has run against; past it they are
/// dropped and made again as needed (each is a pure function of its counts' buckets, so
/// which ones are kept never changes an answer).
pub const ROW_COUNT_PLANS_MAX: usize = 16;

/// One column pair of a hash join: `inner`, a column of the level's own rows (numbered
/// within them), equals `outer`, a column of the joined row read before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashKey {
    pub inner: usize,
    pub outer: usize,
}

/// How the order was chosen and what the model expects of it, for @Explain.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderEstimate {
    /// Rows of the joined row so far after each level, in run order.
    pub rows_after: Vec<f64>,
    /// The whole order's cost, in rows visited.
    pub cost: f64,
    /// Whether some segment was too long for dynamic programming and ordered greedily.
    pub greedy: bool,
    /// The row-count bucket of each level by written position, when run-time counts chose
    /// the order (None: the cached plan's assumed counts).
    pub buckets: Option<Vec<u8>>,
}

/// The join planning a `SelectPlan` keeps.
#[derive(Clone, Debug, Default)]
pub struct JoinPlan {
    pub estimate: Option<OrderEstimate>,
    /// Plans of this SELECT for the row counts it has run against; None when its order
    /// cannot change (one source, or the written order was asked for).
    pub by_row_counts: Option<Arc<ByRowCounts>>,
}

/// Plans of one SELECT by the buckets of its sources' row counts (`for_row_counts`).
#[derive(Debug, Default)]
pub struct ByRowCounts {
    plans: RwLock<HashMap<Buckets, Arc<SelectPlan>>>,
}

#[cfg(test)]
impl ByRowCounts {
    /// How many plans it holds.
    pub fn plans_kept(&self) -> usize {
        self.plans.read().unwrap_or_else(|p| p.into_inner()).len()
    }
}

type Buckets = SmallVec<[u8; 8]>;

/// A row count rounded to a power of 4: 0 for none, b for 4^(b−1) ≤ rows < 4^b. Plans
/// are made from the bucket, never the exact count, so the same bucket makes the same plan.
pub fn row_bucket(rows: u64) -> u8 {
    (u64::BITS - rows.leading_zeros()).div_ceil(2) as u8
}

/// The rows a bucket stands for: the middle of its range on a log scale.
fn bucket_rows(b: u8) -> f64 {
    if b == 0 {
        0.0
    } else {
        2.0 * 4f64.powi(i32::from(b) - 1)
    }
}

/// Row counts the model reads, by written position (None: assume `ASSUMED_TABLE_ROWS`).
#[derive(Clone, Debug, Default)]
pub struct RowCounts(pub Vec<Option<f64>>);

impl RowCounts {
    fn table_rows(&self, written: usize) -> f64 {
        self.0.get(written).copied().flatten().unwrap_or(ASSUMED_TABLE_ROWS).max(1.0)
    }
}

/// A filter term moved between inner-joined levels, with the sources it reads (bits by
/// position in FROM as written).
struct Term {
    expr: Expr,
    reads: u64,
}

fn bit(j: usize) -> u64 {
    1u64 << j
}

/// The sources (by written position) whose columns `e` reads.
fn reads_of(sources: &[Source], e: &Expr) -> u64 {
    let mut m = 0;
    e.visit_columns(&mut |c| m |= bit(level_of_column(sources, c)));
    m
}

/// Reorders `levels` (in FROM's written order, as `sources` is) into the order the model
/// finds cheapest for `counts`, places the filter terms again, and picks access paths and
/// hash joins for the new order. Returns what the model expects of it.
pub fn arrange(levels: &mut Vec<Level>, sources: &[Source], counts: &RowCounts) -> Option<OrderEstimate> {
    arrange_with(levels, sources, counts, DP_SOURCES_MAX)
}

/// `arrange`, with segments of more than `dp_max` inner-joined sources ordered greedily.
pub(crate) fn arrange_with(levels: &mut Vec<Level>, sources: &[Source], counts: &RowCounts, dp_max: usize) -> Option<OrderEstimate> {
    if levels.len() < 2 || levels.len() > u64::BITS as usize {
        return None;
    }
    let mut terms = Vec::new();
    for l in levels.iter_mut().filter(|l| !l.left) {
        terms.extend(std::mem::take(&mut l.on).into_iter().map(|expr| Term { reads: reads_of(sources, &expr), expr }));
    }
    let model = Model { levels, sources, terms: &terms, counts, dp_max };
    let (order, greedy) = model.choose_order();
    let (rows_after, cost) = model.walk(&order);
    let mut slots: Vec<Option<Level>> = levels.drain(..).map(Some).collect();
    let mut position = vec![0usize; slots.len()];
    for (p, &w) in order.iter().enumerate() {
        position[w] = p;
        levels.extend(slots[w].take());
    }
    for t in terms {
        let at = (0..position.len()).filter(|&w| t.reads & bit(w) != 0).map(|w| position[w]).max().unwrap_or(0);
        levels[at].on.push(t.expr);
    }
    choose_access_paths(levels, sources);
    Some(OrderEstimate { rows_after, cost, greedy, buckets: None })
}

/// The plan of `plan` for the row counts of the partition it runs on: see
/// `for_row_counts`.
pub fn for_partition(plan: &SelectPlan, part: &Partition) -> Option<Arc<SelectPlan>> {
    plan.joins.by_row_counts.as_ref()?;
    for_row_counts(plan, &|j| {
        let l = plan.levels.get(j).filter(|l| l.derived.is_none())?;
        part.table(l.source.table.id).ok().map(|t| t.len() as u64)
    })
}

/// The plan of `plan` for the row counts `rows_of` gives for each of its levels (by its
/// index in `plan.levels`; None for a level without one, such as a derived table): the
/// cached plan's levels ordered again from the counts' buckets. None when the plan's order
/// cannot change; the plan is then to be run as it is.
pub fn for_row_counts(plan: &SelectPlan, rows_of: &dyn Fn(usize) -> Option<u64>) -> Option<Arc<SelectPlan>> {
    let cache = plan.joins.by_row_counts.as_ref()?;
    let mut key: Buckets = SmallVec::from_elem(u8::MAX, plan.levels.len());
    for (j, l) in plan.levels.iter().enumerate() {
        if let (Some(rows), Some(slot)) = (rows_of(j), key.get_mut(l.written)) {
            *slot = row_bucket(rows);
        }
    }
    let found = cache.plans.read().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
    if let Some(p) = found {
        return Some(p);
    }
    // Planned outside the lock: two threads may both plan it, and make the same plan.
    let made = Arc::new(replan(plan, &key));
    let mut plans = cache.plans.write().unwrap_or_else(|p| p.into_inner());
    if plans.len() >= ROW_COUNT_PLANS_MAX {
        // One goes, not all: a workload that moves between a few more bucket combinations
        // than the cap still finds most of its plans made.
        if let Some(old) = plans.keys().next().cloned() {
            plans.remove(&old);
        }
    }
    plans.insert(key, made.clone());
    Some(made)
}

/// `plan` with its levels ordered for the row-count buckets `key` (by written position;
/// `u8::MAX`: no count).
fn replan(plan: &SelectPlan, key: &[u8]) -> SelectPlan {
    let mut p = plan.clone();
    p.joins.by_row_counts = None;
    p.levels.sort_by_key(|l| l.written);
    let sources: Vec<Source> = p.levels.iter().map(|l| l.source.clone()).collect();
    let counts = RowCounts(key.iter().map(|&b| (b != u8::MAX).then(|| bucket_rows(b))).collect());
    p.joins.estimate = arrange(&mut p.levels, &sources, &counts).map(|e| OrderEstimate { buckets: Some(key.to_vec()), ..e });
    for l in &mut p.levels {
        l.residual = crate::access::residual_filters(l);
    }
    p
}

/// What the model sees of one SELECT's join.
struct Model<'a> {
    levels: &'a [Level],
    sources: &'a [Source],
    terms: &'a [Term],
    counts: &'a RowCounts,
    dp_max: usize,
}

/// A partial order's state: the sources joined, the rows so far, the cost so far.
#[derive(Clone, Copy)]
struct State {
    joined: u64,
    rows: f64,
    cost: f64,
}

impl Model<'_> {
    /// The written positions in join order, segment by segment (a segment's LEFT JOIN
    /// source first, then its inner-joined sources in the order found cheapest), and
    /// whether some segment was ordered greedily.
    fn choose_order(&self) -> (Vec<usize>, bool) {
        let levels = self.levels;
        let mut order = Vec::with_capacity(levels.len());
        let mut state = State { joined: 0, rows: 1.0, cost: 0.0 };
        let mut greedy = false;
        let mut j = 0;
        while j < levels.len() {
            if levels[j].left {
                state = self.step(state, j);
                order.push(j);
                j += 1;
            }
            let mut members = Vec::new();
            while j < levels.len() && !levels[j].left {
                members.push(j);
                j += 1;
            }
            let (part, next) = if members.len() <= self.dp_max {
                self.dynamic(&members, state)
            } else {
                greedy = true;
                self.greedy(members, state)
            };
            order.extend(part);
            state = next;
        }
        (order, greedy)
    }

    /// Joins level `m` to `s`: the state after it. A LEFT JOIN level reads its own ON.
    fn step(&self, s: State, m: usize) -> State {
        let l = &self.levels[m];
        let e = if l.left {
            let own: Vec<&Expr> = l.on.iter().collect();
            self.estimate(l, &own, s.joined)
        } else {
            let applicable: Vec<&Expr> =
                self.terms.iter().filter(|t| t.reads & bit(m) != 0 && t.reads & !(s.joined | bit(m)) == 0).map(|t| &t.expr).collect();
            self.estimate(l, &applicable, s.joined)
        };
        // A LEFT JOIN keeps every joined row, matched or not.
        let rows = if l.left { (s.rows * e.rows).max(s.rows) } else { s.rows * e.rows };
        State { joined: s.joined | bit(m), rows: rows.max(1.0), cost: s.cost + e.build + s.rows * e.per_row }
    }

    /// The cheapest order of `members` after `start` (left-deep), found by dynamic
    /// programming over their subsets: the best order of a subset ends with one of its
    /// members after the best order of the rest. On equal cost and rows the order whose
    /// last member was written later wins, so written order breaks ties.
    fn dynamic(&self, members: &[usize], start: State) -> (Vec<usize>, State) {
        let k = members.len();
        // Per subset of members (bit i: members[i]): its best state and last member.
        let mut best: Vec<Option<(State, usize)>> = vec![None; 1 << k];
        best[0] = Some((start, usize::MAX));
        let bits_of = |mask: usize| members.iter().enumerate().filter(|&(i, _)| mask & (1 << i) != 0).fold(0, |b, (_, &m)| b | bit(m));
        for mask in 1usize..1 << k {
            for (i, &m) in members.iter().enumerate().filter(|&(i, _)| mask & (1 << i) != 0) {
                let Some((prev, _)) = best[mask & !(1 << i)] else { continue };
                let rest = bits_of(((1 << k) - 1) & !mask);
                if !self.may_follow(m, prev.joined, rest | bit(m)) {
                    continue;
                }
                let s = self.step(prev, m);
                if best[mask].is_none_or(|(b, _)| s.cost < b.cost || (s.cost == b.cost && s.rows <= b.rows)) {
                    best[mask] = Some((s, i));
                }
            }
        }
        let mut order = Vec::with_capacity(k);
        let mut mask = (1usize << k) - 1;
        let end = best[mask].map_or(start, |(s, _)| s);
        while let Some((_, i)) = best[mask].filter(|_| mask != 0) {
            order.push(members[i]);
            mask &= !(1 << i);
        }
        order.reverse();
        (order, end)
    }

    /// The order of `members` after `start` taking the cheapest next source each time.
    fn greedy(&self, mut members: Vec<usize>, start: State) -> (Vec<usize>, State) {
        let mut order = Vec::with_capacity(members.len());
        let mut state = start;
        while !members.is_empty() {
            let mut best: Option<(usize, State)> = None;
            let rest = members.iter().fold(0, |b, &m| b | bit(m));
            for (i, &m) in members.iter().enumerate() {
                if !self.may_follow(m, state.joined, rest) {
                    continue;
                }
                let s = self.step(state, m);
                let step_cost = s.cost - state.cost;
                if best.is_none_or(|(_, b)| step_cost < b.cost - state.cost || (step_cost == b.cost - state.cost && s.rows < b.rows)) {
                    best = Some((i, s));
                }
            }
            let Some((i, s)) = best else { break };
            order.push(members.remove(i));
            state = s;
        }
        (order, state)
    }

    /// Whether source `m` may be joined next after `joined`, `left` being the sources not
    /// joined yet (`m` among them): not as a cross product while some source of `left`
    /// joins the sources read so far by a term. A cross product's rows multiply everything
    /// read after it, and the model, looking at one step, would take the small tables'
    /// products first and pay for them at every level after (64 tables of 3 rows each
    /// joined in a chain ran for minutes that way).
    fn may_follow(&self, m: usize, joined: u64, left: u64) -> bool {
        let joins = |x: usize| self.terms.iter().any(|t| t.reads & bit(x) != 0 && t.reads & joined & !bit(x) != 0);
        joined == 0 || joins(m) || !(0..self.levels.len()).any(|x| left & bit(x) != 0 && joins(x))
    }

    /// The rows after each level of `order`, and its whole cost.
    fn walk(&self, order: &[usize]) -> (Vec<f64>, f64) {
        let mut s = State { joined: 0, rows: 1.0, cost: 0.0 };
        let mut rows = Vec::with_capacity(order.len());
        for &m in order {
            s = self.step(s, m);
            rows.push(s.rows);
        }
        (rows, s.cost)
    }

    /// The cost of reading `l` after the sources in `joined`, with the filter terms `terms`.
    fn estimate(&self, l: &Level, terms: &[&Expr], joined: u64) -> Estimate {
        let sources = self.sources;
        let n = if l.derived.is_some() { ASSUMED_TABLE_ROWS } else { self.counts.table_rows(l.written) };
        let owned: Vec<Expr> = terms.iter().map(|e| (*e).clone()).collect();
        let is_joined = |c: usize| joined & bit(level_of_column(sources, c)) != 0;
        let access = choose_access(&l.source.table, &key_terms_over(&owned, &l.source, &is_joined));
        let hash = if access_is_fixed(&access) { hash_keys(l, sources, &owned, &is_joined).len() } else { 0 };
        let eqs = owned.iter().filter(|e| matches!(e, Expr::Cmp(CmpOp::Eq, ..))).count();
        let (mut est, used_eq, used_other) = match &access {
            Access::Lookup { index, key } if is_unique_lookup(&l.source.table, *index, key.len()) => {
                (Estimate { build: 0.0, per_row: PROBE_COST + 1.0, rows: n.min(1.0) }, key.len(), 0)
            }
            Access::Lookup { key, .. } => {
                let m = matching(n, key.len());
                (Estimate { build: 0.0, per_row: PROBE_COST + m, rows: m }, key.len(), 0)
            }
            Access::Range { eq, lo, hi, .. } => {
                let m = n * EQ_SELECTIVITY.powi(eq.len() as i32) * RANGE_SELECTIVITY;
                let bounds = usize::from(lo.is_some()) + usize::from(hi.is_some());
                (Estimate { build: 0.0, per_row: PROBE_COST + m, rows: m }, eq.len(), bounds)
            }
            Access::Scan => (Estimate { build: 0.0, per_row: n, rows: n }, 0, 0),
        };
        if hash > 0 {
            let m = matching(est.rows, hash);
            est = Estimate { build: est.rows, per_row: 1.0 + m, rows: m };
        }
        let other_eqs = eqs.saturating_sub(used_eq + hash);
        let others = owned.len().saturating_sub(eqs + used_other);
        est.rows *= EQ_SELECTIVITY.powi(other_eqs as i32) * FILTER_SELECTIVITY.powi(others as i32);
        est
    }
}

/// The rows of `n` that equalities on `keys` columns let through for one joined row: at
/// least one while there are rows (a table of n rows has at most n distinct keys, so the
/// fixed guess must not make a small table's join look emptier than a cross product).
fn matching(n: f64, keys: usize) -> f64 {
    (n * EQ_SELECTIVITY.powi(keys as i32)).max(n.min(1.0))
}

/// What reading one level costs, per the model.
struct Estimate {
    /// Paid once: building a hash table.
    build: f64,
    /// Paid for each joined row so far.
    per_row: f64,
    /// Rows it adds per joined row so far, after its filters.
    rows: f64,
}

fn is_unique_lookup(t: &TableDef, index: usize, keys: usize) -> bool {
    t.indexes.get(index).is_some_and(|d| keys == d.columns.len() && (d.unique || d.primary || d.assume_unique))
}

/// Whether an access path reads the same rows whatever the joined row so far: its keys
/// are constants, parameters or expressions of them. Such a level can be read once into
/// a hash table.
fn access_is_fixed(a: &Access) -> bool {
    let fixed = |e: &Expr| e.max_column().is_none() && e.stands_alone();
    match a {
        Access::Scan => true,
        Access::Lookup { key, .. } => key.iter().all(fixed),
        Access::Range { eq, lo, hi, .. } => eq.iter().chain(lo.iter().map(|b| &b.0)).chain(hi.iter().map(|b| &b.0)).all(fixed),
    }
}

/// Whether values of the two types compare equal exactly when they are the same value, so
/// a hash of one finds the other: integers of any width (all held as one kind), or one
/// type of text, bytes, time or truth. FLOAT (-0.0 and 0.0) and DECIMAL (scales) are not.
fn hashes_alike(a: DataType, b: DataType) -> bool {
    (a.is_integer() && b.is_integer())
        || (a == b && matches!(a, DataType::Varchar | DataType::Varbinary | DataType::Timestamp | DataType::Boolean))
}

fn column_type(sources: &[Source], c: usize) -> Option<DataType> {
    let s = sources.get(level_of_column(sources, c))?;
    s.table.columns.get(c.checked_sub(s.offset)?).map(|col| col.ty)
}

/// The `inner column = joined column` equalities among `terms` that a hash table of `l`'s
/// rows can answer.
fn hash_keys(l: &Level, sources: &[Source], terms: &[Expr], is_joined: &dyn Fn(usize) -> bool) -> Vec<HashKey> {
    let own = l.source.offset..l.source.offset + l.source.width();
    let mut keys: Vec<HashKey> = Vec::new();
    for e in terms {
        let Expr::Cmp(CmpOp::Eq, a, b) = e else { continue };
        let (Expr::Column(x), Expr::Column(y)) = (a.as_ref(), b.as_ref()) else { continue };
        for (inner, outer) in [(*x, *y), (*y, *x)] {
            if !own.contains(&inner) || own.contains(&outer) || !is_joined(outer) {
                continue;
            }
            let alike = match (column_type(sources, inner), column_type(sources, outer)) {
                (Some(p), Some(q)) => hashes_alike(p, q),
                _ => false,
            };
            let key = HashKey { inner: inner - l.source.offset, outer };
            if alike && !keys.iter().any(|k| k.inner == key.inner) {
                keys.push(key);
            }
        }
    }
    keys
}

/// Access paths for the levels in their new order: a level's index keys may read every
/// level before it; one whose rows do not depend on those levels and that an equality
/// joins to them becomes a hash join.
fn choose_access_paths(levels: &mut [Level], sources: &[Source]) {
    let mut joined = 0u64;
    for (p, l) in levels.iter_mut().enumerate() {
        let is_joined = |c: usize| joined & bit(level_of_column(sources, c)) != 0;
        let access = choose_access(&l.source.table, &key_terms_over(&l.on, &l.source, &is_joined));
        let hash = if p > 0 && access_is_fixed(&access) { hash_keys(l, sources, &l.on, &is_joined) } else { Vec::new() };
        l.access = access;
        l.hash = hash;
        joined |= bit(l.written);
    }
}
