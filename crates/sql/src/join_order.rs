//! Join order: which FROM source a SELECT reads first and which next, chosen greedily by a
//! small cost model, and which of its joins run as hash joins.
//!
//! The planner has no row counts: a plan is made once per catalog version, often before a
//! row is loaded, and reused whatever the tables then hold. So the model assumes every
//! table holds `ASSUMED_TABLE_ROWS` rows and ranks what it can see — a unique index lookup
//! (one row), an index lookup or hash join on equalities (few rows per joined row), a
//! range, a full scan for every joined row (a cross product) — the way VoltDB's own planner
//! ranks them without statistics.
//!
//! Outer joins keep their meaning: a LEFT JOIN source stays after every source written
//! before it, and the sources written after it stay after it. So the FROM list is cut into
//! segments at each LEFT JOIN, and only the inner-joined sources within one segment change
//! places. Every filter term is then placed again at the first level where all the sources
//! it reads have been joined; a LEFT JOIN's own ON and the WHERE terms that must see its
//! padded row stay where they were.

use lockstep_core::{DataType, TableDef};

use crate::access::{choose_access, Access};
use crate::bind::Source;
use crate::expr::{CmpOp, Expr};
use crate::plan::{key_terms_over, level_of_column, Level};

/// Rows the cost model assumes a table holds (it has no statistics).
const ASSUMED_TABLE_ROWS: f64 = 1000.0;
/// Fraction of a table's rows an equality on one column lets through.
const EQ_SELECTIVITY: f64 = 0.01;
/// Fraction of rows a range (`<`, `>`, BETWEEN) on an index column lets through.
const RANGE_SELECTIVITY: f64 = 0.3;
/// Fraction of rows any other filter term lets through.
const FILTER_SELECTIVITY: f64 = 0.5;
/// Cost of one index probe, in rows visited.
const PROBE_COST: f64 = 2.0;

/// One column pair of a hash join: `inner`, a column of the level's own rows (numbered
/// within them), equals `outer`, a column of the joined row read before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashKey {
    pub inner: usize,
    pub outer: usize,
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

/// Reorders `levels` (in FROM's written order, as `sources` is) into the chosen join
/// order, places the filter terms again, and picks access paths and hash joins for the
/// new order.
pub fn arrange(levels: &mut Vec<Level>, sources: &[Source]) {
    if levels.len() < 2 || levels.len() > u64::BITS as usize {
        return;
    }
    let mut terms = Vec::new();
    for l in levels.iter_mut().filter(|l| !l.left) {
        terms.extend(std::mem::take(&mut l.on).into_iter().map(|expr| Term { reads: reads_of(sources, &expr), expr }));
    }
    let order = choose_order(levels, sources, &terms);
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
}

/// The written positions in join order: segment by segment, a segment's LEFT JOIN source
/// first, then its inner-joined sources, the cheapest next one each time.
fn choose_order(levels: &[Level], sources: &[Source], terms: &[Term]) -> Vec<usize> {
    let mut order = Vec::with_capacity(levels.len());
    let mut joined = 0u64;
    let mut rows = 1.0f64;
    let mut j = 0;
    while j < levels.len() {
        // A segment: [a LEFT JOIN source] then the inner-joined sources up to the next one.
        let mut members = Vec::new();
        if levels[j].left {
            let own: Vec<&Expr> = levels[j].on.iter().collect();
            rows *= estimate(&levels[j], sources, &own, joined).rows;
            order.push(j);
            joined |= bit(j);
            j += 1;
        }
        while j < levels.len() && !levels[j].left {
            members.push(j);
            j += 1;
        }
        while !members.is_empty() {
            let mut best: Option<(usize, f64, f64)> = None;
            for (i, &m) in members.iter().enumerate() {
                let applicable: Vec<&Expr> =
                    terms.iter().filter(|t| t.reads & bit(m) != 0 && t.reads & !(joined | bit(m)) == 0).map(|t| &t.expr).collect();
                let e = estimate(&levels[m], sources, &applicable, joined);
                let cost = e.build + rows * e.per_row;
                let out = rows * e.rows;
                if best.is_none_or(|(_, c, o)| cost < c || (cost == c && out < o)) {
                    best = Some((i, cost, out));
                }
            }
            let Some((i, _, out)) = best else { break };
            let m = members.remove(i);
            order.push(m);
            joined |= bit(m);
            rows = out.max(1.0);
        }
    }
    order
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

/// The cost of reading `l` after the sources in `joined`, with the filter terms `terms`.
fn estimate(l: &Level, sources: &[Source], terms: &[&Expr], joined: u64) -> Estimate {
    let n = ASSUMED_TABLE_ROWS;
    let owned: Vec<Expr> = terms.iter().map(|e| (*e).clone()).collect();
    let is_joined = |c: usize| joined & bit(level_of_column(sources, c)) != 0;
    let access = choose_access(&l.source.table, &key_terms_over(&owned, &l.source, &is_joined));
    let hash = if access_is_fixed(&access) { hash_keys(l, sources, &owned, &is_joined).len() } else { 0 };
    let eqs = owned.iter().filter(|e| matches!(e, Expr::Cmp(CmpOp::Eq, ..))).count();
    let (mut est, used_eq, used_other) = match &access {
        Access::Lookup { index, key } if is_unique_lookup(&l.source.table, *index, key.len()) => {
            (Estimate { build: 0.0, per_row: PROBE_COST + 1.0, rows: 1.0 }, key.len(), 0)
        }
        Access::Lookup { key, .. } => {
            let m = n * EQ_SELECTIVITY.powi(key.len() as i32);
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
        let m = est.rows * EQ_SELECTIVITY.powi(hash as i32);
        est = Estimate { build: est.rows, per_row: 1.0 + m, rows: m };
    }
    let other_eqs = eqs.saturating_sub(used_eq + hash);
    let others = owned.len().saturating_sub(eqs + used_other);
    est.rows *= EQ_SELECTIVITY.powi(other_eqs as i32) * FILTER_SELECTIVITY.powi(others as i32);
    est
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
