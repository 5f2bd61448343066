//! Access paths: how one FROM source is read — full scan, index point/prefix lookup or
//! index range — chosen from the filter terms, plus ORDER BY served by index order.
//!
//! A partial index (`CREATE INDEX … WHERE p`) lacks the rows that fail `p`, so it may serve
//! a source only when the source's filters imply `p` (`implied_partial`): every conjunct of
//! `p` is one of the filters (after putting a constant on the right: `5 < a` is `a > 5`), or
//! follows from one by a simple rule (`a = 7` or `a > 9` gives `a > 5`; any comparison of
//! `a` gives `a IS NOT NULL`). Anything else leaves the index unused.

use std::ops::Bound;

use lockstep_core::{DataType, Result, TableDef, Value};

use crate::ddl_index::{indexed_expression, partial_predicate};
use crate::expr::{CmpOp, Env, Expr};
use crate::plan::{Level, SelectPlan, SortKey};

/// A filter term `column op key` on one source; `key` reads only earlier sources.
#[derive(Clone, Debug)]
pub struct KeyTerm {
    pub column: usize,
    pub op: CmpOp,
    pub key: Expr,
}

/// The key terms of one source and the partial indexes its filters imply (by number):
/// what `choose_access` picks from.
#[derive(Clone, Debug, Default)]
pub struct KeyTerms {
    pub terms: Vec<KeyTerm>,
    pub partial: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    Scan,
    /// Equality on the index's leading columns (all of them on a unique index: a point lookup).
    Lookup {
        index: usize,
        key: Vec<Expr>,
    },
    /// Equality on leading columns, then an optional range on the next one.
    Range {
        index: usize,
        eq: Vec<Expr>,
        lo: Option<(Expr, bool)>,
        hi: Option<(Expr, bool)>,
        reverse: bool,
    },
}

/// Whether a key expression certainly yields values of the column's own kind, so that the
/// index order (which orders kinds separately) agrees with SQL order for ranges.
fn same_kind(col: DataType, key: &Expr) -> bool {
    let kind = |t: DataType| if t.is_integer() { DataType::BigInt } else { t };
    match key {
        Expr::Const(v) => v.natural_type().is_some_and(|t| kind(t) == kind(col)),
        // Parameters compared with a column take the column's type (see Binder::comparison).
        Expr::Param(_) => true,
        _ => false,
    }
}

/// Picks the best index for `terms`: a unique point lookup, else the longest equality prefix
/// (with a range on the next column), else a scan. A partial index counts only when the
/// filters imply its condition (`KeyTerms::partial`); it then wins a tie, and is read whole
/// when nothing else applies, since it holds only rows the filters may keep.
pub fn choose_access(table: &TableDef, key_terms: &KeyTerms) -> Access {
    let terms = &key_terms.terms;
    let mut best: Option<(usize, Access)> = None;
    for (ix, def) in table.indexes.iter().enumerate() {
        let partial = def.predicate.is_some();
        if partial && !key_terms.partial.contains(&ix) {
            continue;
        }
        let mut eq = Vec::new();
        for &c in &def.columns {
            match terms.iter().find(|t| t.column == c && t.op == CmpOp::Eq) {
                Some(t) => eq.push(t.key.clone()),
                None => break,
            }
        }
        let unique = def.unique || def.primary || def.assume_unique;
        let full = eq.len() == def.columns.len() && !def.columns.is_empty();
        let (mut lo, mut hi) = (None, None);
        if !full {
            if let Some((next, Some(ty))) = def.columns.get(eq.len()).map(|&n| (n, table.key_type(n))) {
                for t in terms.iter().filter(|t| t.column == next && same_kind(ty, &t.key) && t.key.is_fixed()) {
                    match t.op {
                        CmpOp::Gt | CmpOp::Ge if lo.is_none() => lo = Some((t.key.clone(), t.op == CmpOp::Ge)),
                        CmpOp::Lt | CmpOp::Le if hi.is_none() => hi = Some((t.key.clone(), t.op == CmpOp::Le)),
                        _ => {}
                    }
                }
            }
        }
        let score = if full && unique {
            1_000_000
        } else {
            eq.len() * 100 + usize::from(lo.is_some() || hi.is_some()) * 50 + usize::from(full) * 10
        } + usize::from(partial);
        if score == 0 || best.as_ref().is_some_and(|(s, _)| *s >= score) {
            continue;
        }
        let access = if eq.is_empty() && lo.is_none() && hi.is_none() {
            Access::Range { index: ix, eq, lo, hi, reverse: false }
        } else if lo.is_none() && hi.is_none() {
            Access::Lookup { index: ix, key: eq }
        } else {
            Access::Range { index: ix, eq, lo, hi, reverse: false }
        };
        best = Some((score, access));
    }
    best.map(|(_, a)| a).unwrap_or(Access::Scan)
}

/// The filters of `level` that rows found through its access path still need checked. An
/// equality `column = ?` whose parameter is one of the lookup's keys holds for every row
/// the partition's index returns: the parameter has the column's type, and the index
/// compares exactly. Only columns compared exactly qualify (not FLOAT, whose index tells
/// -0.0 from 0.0, nor DECIMAL).
pub fn residual_filters(level: &Level) -> Vec<Expr> {
    let (index, keys) = match &level.access {
        Access::Lookup { index, key } => (*index, key),
        Access::Range { index, eq, .. } => (*index, eq),
        Access::Scan => return level.on.clone(),
    };
    let table = &level.source.table;
    let columns = &table.indexes[index].columns;
    let implied = |e: &Expr| {
        let Expr::Cmp(CmpOp::Eq, a, b) = e else { return false };
        [(a, b), (b, a)].into_iter().any(|(x, y)| match (x.as_ref(), y.as_ref()) {
            (Expr::Column(c), Expr::Param(_)) => columns.iter().zip(keys).any(|(&k, key)| {
                // A computed key (past the columns) is no column of the row.
                let ty = table.columns.get(k).map(|col| col.ty);
                k + level.source.offset == *c && key == y.as_ref() && ty.is_some_and(compared_exactly)
            }),
            _ => false,
        })
    };
    level.on.iter().filter(|e| !implied(e)).cloned().collect()
}

fn compared_exactly(ty: DataType) -> bool {
    ty.is_integer() || matches!(ty, DataType::Varchar | DataType::Varbinary | DataType::Timestamp | DataType::Boolean)
}

/// When the only source's index order is the ORDER BY order, reads it in that order and
/// marks the plan so no sort is needed.
pub fn order_by_index(plan: &mut SelectPlan) {
    if plan.levels.len() != 1 || plan.agg.is_some() || plan.distinct || plan.order.is_empty() {
        return;
    }
    let desc = plan.order[0].1;
    let mut cols = Vec::new();
    for (k, d) in &plan.order {
        let e = match k {
            SortKey::Output(i) => &plan.output[*i],
            SortKey::Hidden(i) => &plan.hidden[*i],
        };
        if *d != desc {
            return;
        }
        match e {
            Expr::Column(c) => cols.push(*c),
            // An expression an index keeps sorts by that index too.
            _ => match indexed_expression(&plan.levels[0].source.table, e, 0) {
                Some(k) => cols.push(k),
                None => return,
            },
        }
    }
    let level = &mut plan.levels[0];
    let table = level.source.table.clone();
    let matches = |ix: usize, eq_len: usize| -> bool {
        let def = &table.indexes[ix];
        let fixed = &def.columns[..eq_len.min(def.columns.len())];
        let rest: Vec<usize> = cols.iter().copied().filter(|c| !fixed.contains(c)).collect();
        def.columns.len() >= eq_len + rest.len() && def.columns[eq_len..eq_len + rest.len()] == rest[..]
    };
    let new_access = match &level.access {
        Access::Lookup { index, key } => {
            let def = &table.indexes[*index];
            let point = key.len() == def.columns.len() && (def.unique || def.primary || def.assume_unique);
            if point {
                plan.sorted_by_index = true;
                return;
            }
            if !matches(*index, key.len()) {
                return;
            }
            if !desc {
                plan.sorted_by_index = true;
                return;
            }
            Access::Range { index: *index, eq: key.clone(), lo: None, hi: None, reverse: true }
        }
        Access::Range { index, eq, lo, hi, .. } => {
            if !matches(*index, eq.len()) {
                return;
            }
            Access::Range { index: *index, eq: eq.clone(), lo: lo.clone(), hi: hi.clone(), reverse: desc }
        }
        Access::Scan => match (0..table.indexes.len()).find(|&ix| {
            matches(ix, 0) && (table.indexes[ix].predicate.is_none() || implied_partial(&table, ix, &level.on, level.source.offset))
        }) {
            Some(ix) => Access::Range { index: ix, eq: vec![], lo: None, hi: None, reverse: desc },
            None => return,
        },
    };
    level.access = new_access;
    plan.sorted_by_index = true;
}

/// Converts a key value for probing an index on a column of type `ty`. None when nothing
/// can match (NULL never equals anything; a value of another kind cannot be in the index).
pub fn key_value(v: &Value, ty: DataType) -> Option<Value> {
    if v.is_null() {
        return None;
    }
    // Integers of every width are stored as Int: probe with Int without narrowing.
    let target = if ty.is_integer() { DataType::BigInt } else { ty };
    // Usually a key already has its column's type: one copy, no conversion.
    if v.coerces_to_itself(target) {
        return Some(v.clone());
    }
    match v.coerce_to(target) {
        Ok(k) if !k.is_null() => Some(k),
        _ => None,
    }
}

/// Evaluated key values for the index columns `cols`, or None when no row can match.
/// The values of an index key, inline for keys of up to 4 columns: most lookups allocate
/// nothing for their key.
pub type KeyValues = smallvec::SmallVec<[Value; 4]>;

pub fn eval_keys(exprs: &[Expr], table: &TableDef, cols: &[usize], row: &[Value], env: &Env) -> Result<Option<KeyValues>> {
    let mut out = KeyValues::new();
    for (e, &c) in exprs.iter().zip(cols) {
        let Some(ty) = table.key_type(c) else { return Ok(None) };
        match key_value(&*e.eval_ref(row, env)?, ty) {
            Some(k) => out.push(k),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// Resolved bounds of a Range access: (lo, hi) key prefixes, or None when empty.
pub struct RangeKeys {
    pub lo: Bound<Vec<Value>>,
    pub hi: Bound<Vec<Value>>,
}

pub fn eval_range(
    eq: &[Expr],
    lo: &Option<(Expr, bool)>,
    hi: &Option<(Expr, bool)>,
    table: &TableDef,
    cols: &[usize],
    row: &[Value],
    env: &Env,
) -> Result<Option<RangeKeys>> {
    let prefix = match eval_keys(eq, table, cols, row, env)? {
        Some(p) => p,
        None => return Ok(None),
    };
    let next_ty = cols.get(eq.len()).and_then(|&c| table.key_type(c));
    let bound = |b: &Option<(Expr, bool)>| -> Result<Option<Bound<Vec<Value>>>> {
        Ok(Some(match (b, next_ty) {
            (Some((e, incl)), Some(ty)) => {
                let v = match key_value(&*e.eval_ref(row, env)?, ty) {
                    Some(v) => v,
                    None => return Ok(None),
                };
                let mut k = prefix.to_vec();
                k.push(v);
                if *incl {
                    Bound::Included(k)
                } else {
                    Bound::Excluded(k)
                }
            }
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => Bound::Included(prefix.to_vec()),
        }))
    };
    let (l, h) = match (bound(lo)?, bound(hi)?) {
        (Some(l), Some(h)) => (l, h),
        _ => return Ok(None),
    };
    Ok(Some(RangeKeys { lo: l, hi: h }))
}

/// The partial indexes of `table` whose condition `on` (a source's filter terms, its
/// columns starting at `offset`) implies.
pub fn implied_partials(table: &TableDef, on: &[Expr], offset: usize) -> Vec<usize> {
    (0..table.indexes.len()).filter(|&ix| table.indexes[ix].predicate.is_some() && implied_partial(table, ix, on, offset)).collect()
}

/// Whether the filter terms `on` imply partial index `ix`'s condition (see the module
/// doc); false when unsure.
pub fn implied_partial(table: &TableDef, ix: usize, on: &[Expr], offset: usize) -> bool {
    let Some(p) = partial_predicate(table, ix) else { return false };
    let mut p = p.clone();
    if offset > 0 {
        p.map_columns(&|c| c + offset);
    }
    let mut needed = Vec::new();
    p.conjuncts(&mut needed);
    let given: Vec<Expr> = on.iter().map(normalized).collect();
    needed.iter().map(normalized).all(|n| given.iter().any(|g| implies(g, &n)))
}

/// A comparison with a constant or parameter on the left turned around (`5 < a` → `a > 5`),
/// so mirrored forms compare equal; a `Deep` marker seen through.
fn normalized(e: &Expr) -> Expr {
    match e {
        Expr::Deep(inner) => normalized(inner),
        Expr::Cmp(op, a, b) if a.is_fixed() && !b.is_fixed() => Expr::Cmp(op.flip(), b.clone(), a.clone()),
        other => other.clone(),
    }
}

/// Whether filter `given` being true makes `needed` true (both normalized).
fn implies(given: &Expr, needed: &Expr) -> bool {
    if given == needed {
        return true;
    }
    match needed {
        // Every comparison is unknown, so not true, when an operand is NULL.
        Expr::IsNull(x, true) => match given {
            Expr::Cmp(_, a, b) => a == x || b == x,
            _ => false,
        },
        // A BOOLEAN column as a condition, and `column = TRUE`, are one condition.
        Expr::Column(_) => matches!(given, Expr::Cmp(CmpOp::Eq, a, b) if **a == *needed && **b == Expr::Const(Value::Bool(true))),
        Expr::Cmp(CmpOp::Eq, a, b) if matches!(a.as_ref(), Expr::Column(_)) && **b == Expr::Const(Value::Bool(true)) => given == a.as_ref(),
        Expr::Cmp(op, x, c) => match (given, c.as_ref()) {
            (Expr::Cmp(gop, gx, gc), Expr::Const(need)) if gx == x => match gc.as_ref() {
                Expr::Const(have) => bound_implies(*gop, have, *op, need),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    }
}

/// Whether `x gop have` implies `x op need` for constants of one ordered kind.
fn bound_implies(gop: CmpOp, have: &Value, op: CmpOp, need: &Value) -> bool {
    // Floats are left out: NaN orders unlike SQL comparison.
    let ordered = |v: &Value| matches!(v, Value::Int(_) | Value::Decimal(_) | Value::Str(_) | Value::Timestamp(_));
    if !ordered(have) || std::mem::discriminant(have) != std::mem::discriminant(need) {
        return false;
    }
    let Some(ord) = have.sql_cmp(need) else { return false };
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (gop, op) {
        // x = have: the needed comparison holds of `have` itself.
        (CmpOp::Eq, CmpOp::Eq) => ord == Equal,
        (CmpOp::Eq, CmpOp::Ne) => ord != Equal,
        (CmpOp::Eq, CmpOp::Gt) => ord == Greater,
        (CmpOp::Eq, CmpOp::Ge) => ord != Less,
        (CmpOp::Eq, CmpOp::Lt) => ord == Less,
        (CmpOp::Eq, CmpOp::Le) => ord != Greater,
        // Lower bounds: x > have or x >= have within x > need or x >= need.
        (CmpOp::Gt | CmpOp::Ge, CmpOp::Gt | CmpOp::Ge) => ord == Greater || (ord == Equal && (op == CmpOp::Ge || gop == CmpOp::Gt)),
        // Upper bounds, the same way round.
        (CmpOp::Lt | CmpOp::Le, CmpOp::Lt | CmpOp::Le) => ord == Less || (ord == Equal && (op == CmpOp::Le || gop == CmpOp::Lt)),
        _ => false,
    }
}
