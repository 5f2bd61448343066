//! Routing: does a statement touch one partition (and which), any, or all of them?
//!
//! A partitioned source is *pinned* when a filter fixes its partition column to a constant
//! or parameter, directly or through join equalities (`a.id = b.id AND a.id = ?`). A
//! statement is single-partition when every partitioned source is pinned to the same value.

use lockstep_core::{Catalog, DataType, TableDef, TableKind, Value};

use crate::expr::{CmpOp, Expr};
use crate::plan::{is_partitioned, Level, SelectPlan, SubBody, SubqueryPlan};
use crate::plan_dml::InsertSource;
use crate::{Plan, Route};

#[derive(Clone, Debug, PartialEq)]
enum Pin {
    Param(usize),
    Const(Value),
}

/// Union-find over the joined row's columns.
struct Classes {
    parent: Vec<usize>,
}

impl Classes {
    fn new(n: usize) -> Self {
        Classes { parent: (0..n).collect() }
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra] = rb;
        }
    }
}

/// The column a source is partitioned on, if it can be pinned at all.
fn routing_column(t: &TableDef) -> Option<usize> {
    match &t.kind {
        TableKind::View(_) => t.partition_column,
        _ => t.partition_column,
    }
}

fn pin_of(e: &Expr) -> Option<Pin> {
    match e {
        Expr::Param(i) => Some(Pin::Param(*i)),
        Expr::Const(v) if !matches!(v, Value::Array(_)) => Some(Pin::Const(v.clone())),
        _ => None,
    }
}

/// The single partition key all partitioned levels are pinned to, if any.
fn pinned_route(levels: &[Level], width: usize) -> Option<Route> {
    let mut classes = Classes::new(width.max(1));
    let mut pins: Vec<(usize, Pin)> = Vec::new();
    for l in levels {
        let terms = if l.left { &l.post[..] } else { &l.on[..] };
        let extra: &[Expr] = if l.left { &[] } else { &l.post };
        for e in terms.iter().chain(extra) {
            if let Expr::Cmp(CmpOp::Eq, a, b) = e {
                match (a.as_ref(), b.as_ref()) {
                    (Expr::Column(x), Expr::Column(y)) => classes.union(*x, *y),
                    (Expr::Column(x), other) | (other, Expr::Column(x)) => {
                        if let Some(p) = pin_of(other) {
                            pins.push((*x, p));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let mut chosen: Option<(Pin, DataType)> = None;
    for l in levels.iter().filter(|l| l.partitioned) {
        let pc = routing_column(&l.source.table)?;
        let ty = l.source.table.columns[pc].ty;
        let class = classes.find(l.source.offset + pc);
        let pin = pins.iter().find(|(c, _)| classes.find(*c) == class).map(|(_, p)| p.clone())?;
        match &chosen {
            None => chosen = Some((pin, ty)),
            Some((p, _)) if *p == pin => {}
            Some(_) => return None,
        }
    }
    let (pin, ty) = chosen?;
    Some(match pin {
        Pin::Param(i) => Route::PartitionParam { param: i, key_type: ty },
        Pin::Const(v) => Route::PartitionConst(v.coerce_to(ty).ok()?),
    })
}

fn select_route(levels: &[Level], width: usize) -> Route {
    if levels.iter().all(|l| !l.partitioned) {
        return Route::AnyPartition;
    }
    pinned_route(levels, width).unwrap_or(Route::All)
}

/// The route of a SELECT with subqueries: every SELECT in it (the statement's and its
/// subqueries') that reads a partitioned table must be pinned to the same partition key
/// for it to run on one partition; if none reads one, any partition will do.
pub fn query_route(top: &SelectPlan, subs: &[SubqueryPlan]) -> Route {
    selects_route(std::iter::once(top).chain(sub_selects(subs)))
}

fn sub_selects(subs: &[SubqueryPlan]) -> impl Iterator<Item = &SelectPlan> {
    subs.iter().filter_map(|s| match &s.body {
        SubBody::Select(p) => Some(&**p),
        SubBody::SetOp(_) | SubBody::Recursive(_) | SubBody::Working(_) => None,
    })
}

fn selects_route<'a>(selects: impl Iterator<Item = &'a SelectPlan>) -> Route {
    let mut chosen: Option<Route> = None;
    for p in selects {
        if p.levels.iter().all(|l| !l.partitioned) {
            continue;
        }
        let Some(r) = pinned_route(&p.levels, p.width) else {
            return Route::All;
        };
        match &chosen {
            None => chosen = Some(r),
            Some(c) if *c == r => {}
            Some(_) => return Route::All,
        }
    }
    chosen.unwrap_or(Route::AnyPartition)
}

/// (route, writes_replicated) of an UPDATE or DELETE with subqueries. Each partition it
/// runs on runs its subqueries over its own rows, so a subquery may read a partitioned
/// table only when the statement runs on one partition and the subquery is pinned to the
/// same one; a replicated table (the same on every partition) it may always read.
pub fn dml_with_subqueries_route(catalog: &Catalog, plan: &Plan, subs: &[SubqueryPlan]) -> lockstep_core::Result<(Route, bool)> {
    let (route, writes_replicated) = route(catalog, plan);
    match selects_route(sub_selects(subs)) {
        Route::AnyPartition => Ok((route, writes_replicated)),
        r if r == route && r != Route::All && !writes_replicated => Ok((route, writes_replicated)),
        _ => Err(lockstep_core::Error::sql(
            "a subquery in UPDATE or DELETE may read a partitioned table only when it and the statement are both fixed to the same \
             partition key (col = value): read replicated tables there, or select the keys first and then change the rows",
        )),
    }
}

/// (route, writes_replicated) of a planned statement.
pub fn route(catalog: &Catalog, plan: &Plan) -> (Route, bool) {
    match plan {
        Plan::Select(s) => (select_route(&s.levels, s.width), false),
        Plan::Update(u) => dml_route(catalog, &u.level),
        Plan::Delete(d) => dml_route(catalog, &d.level),
        Plan::Insert(i) => {
            let t = &i.table;
            let pc = match t.partition_column {
                Some(pc) if is_partitioned(catalog, t) => pc,
                _ => return (Route::All, true),
            };
            let ty = t.columns[pc].ty;
            let rows = match &i.source {
                InsertSource::Values(rows) => rows,
                InsertSource::Select(_) => return (Route::All, false),
            };
            let pos = i.columns.iter().position(|&c| c == pc);
            let mut chosen: Option<Pin> = None;
            for r in rows {
                let e = match pos {
                    Some(p) => &r[p],
                    None => &i.defaults[pc],
                };
                let Some(pin) = pin_of(e) else {
                    return (Route::All, false);
                };
                match &chosen {
                    None => chosen = Some(pin),
                    Some(p) if *p == pin => {}
                    Some(_) => return (Route::All, false),
                }
            }
            match chosen {
                Some(Pin::Param(p)) => (Route::PartitionParam { param: p, key_type: ty }, false),
                Some(Pin::Const(v)) => match v.coerce_to(ty) {
                    Ok(v) => (Route::PartitionConst(v), false),
                    Err(_) => (Route::All, false),
                },
                None => (Route::All, false),
            }
        }
    }
}

fn dml_route(catalog: &Catalog, level: &Level) -> (Route, bool) {
    if !is_partitioned(catalog, &level.source.table) {
        return (Route::All, true);
    }
    (pinned_route(std::slice::from_ref(level), level.source.width()).unwrap_or(Route::All), false)
}
