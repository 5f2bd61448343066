//! Human-readable plans for @Explain.

use std::fmt::Write;

use crate::access::Access;
use crate::plan::{Level, SelectPlan, SetOp, SubBody, SubqueryPlan};
use crate::plan_dml::InsertSource;
use crate::{Plan, Prepared, Route};

fn access_text(l: &Level) -> String {
    if let Some(id) = l.derived {
        let name = if l.source.name.is_empty() { String::new() } else { format!(" {}", l.source.name) };
        return format!("SCAN of subquery {id}{name}");
    }
    let t = &l.source.table;
    let index_name = |i: usize| t.indexes.get(i).map(|x| x.name.clone()).unwrap_or_else(|| format!("#{i}"));
    match &l.access {
        Access::Scan => format!("SEQUENTIAL SCAN of {}", l.source.name),
        Access::Lookup { index, key } => {
            let def = &t.indexes[*index];
            let point = key.len() == def.columns.len() && (def.unique || def.primary || def.assume_unique);
            let kind = if point { "UNIQUE LOOKUP" } else { "INDEX PREFIX LOOKUP" };
            format!("{kind} of {} using {} ({} key columns)", l.source.name, index_name(*index), key.len())
        }
        Access::Range { index, eq, lo, hi, reverse } => format!(
            "INDEX {}SCAN of {} using {} ({} equality columns{}{})",
            if *reverse { "REVERSE " } else { "" },
            l.source.name,
            index_name(*index),
            eq.len(),
            if lo.is_some() { ", lower bound" } else { "" },
            if hi.is_some() { ", upper bound" } else { "" },
        ),
    }
}

/// How a level joins the ones before it: nested loop (probing its access path for each
/// joined row) or hash join (on so many column pairs).
fn join_text(j: usize, l: &Level) -> String {
    let left = if l.left { "LEFT " } else { "" };
    match (j, l.hash.len()) {
        (0, _) => String::new(),
        (_, 0) => format!("{left}NESTED LOOP JOIN: "),
        (_, n) => format!("{left}HASH JOIN on {n} column{}: ", if n == 1 { "" } else { "s" }),
    }
}

/// The order the sources are joined in, when the planner changed FROM's.
fn join_order_text(s: &SelectPlan, out: &mut String, indent: &str) {
    if s.levels.iter().enumerate().all(|(j, l)| l.written == j) {
        return;
    }
    let names: Vec<&str> = s.levels.iter().map(|l| l.source.name.as_str()).collect();
    let mut written: Vec<&Level> = s.levels.iter().collect();
    written.sort_by_key(|l| l.written);
    let as_written: Vec<&str> = written.iter().map(|l| l.source.name.as_str()).collect();
    let _ = writeln!(out, "{indent}JOIN ORDER: {} (written: {})", names.join(", "), as_written.join(", "));
}

/// How the join order was found and what the model expects it to cost.
fn join_cost_text(s: &SelectPlan, out: &mut String, indent: &str) {
    let Some(e) = &s.joins.estimate else { return };
    let how = if e.greedy { "greedy (a segment past the dynamic programming size)" } else { "dynamic programming" };
    let counts = match &e.buckets {
        None => "assumed row counts; the order is chosen again from each run's row counts".to_string(),
        Some(b) => {
            let names: Vec<String> = s.levels.iter().map(|l| l.source.name.clone()).collect();
            let mut by_written: Vec<(usize, &str)> = s.levels.iter().map(|l| l.written).zip(names.iter().map(String::as_str)).collect();
            by_written.sort();
            let shown: Vec<String> = by_written
                .iter()
                .map(|&(w, n)| match b.get(w).copied() {
                    Some(u8::MAX) | None => format!("{n} unknown"),
                    Some(0) => format!("{n} 0"),
                    Some(k) => format!("{n} < {}", 1u128 << (2 * u32::from(k).min(63))),
                })
                .collect();
            format!("row counts {}", shown.join(", "))
        }
    };
    let _ = writeln!(out, "{indent}JOIN COST: ~{:.0} rows visited, by {how}, from {counts}", e.cost);
}

/// The rows the model expects after level `j`, when it made an estimate.
fn rows_text(s: &SelectPlan, j: usize) -> String {
    match s.joins.estimate.as_ref().and_then(|e| e.rows_after.get(j)) {
        Some(r) => format!(" (~{r:.0} rows)"),
        None => String::new(),
    }
}

fn select_text(s: &SelectPlan, out: &mut String, indent: &str) {
    join_order_text(s, out, indent);
    join_cost_text(s, out, indent);
    for (j, l) in s.levels.iter().enumerate() {
        let join = join_text(j, l);
        let filt = l.on.len() + l.post.len();
        let _ = writeln!(
            out,
            "{indent}{join}{}{}{}",
            access_text(l),
            if filt > 0 { format!(" filtered by {filt} terms") } else { String::new() },
            rows_text(s, j)
        );
    }
    if let Some(a) = &s.agg {
        let _ = writeln!(
            out,
            "{indent}AGGREGATE: {} group keys, {} aggregates{}",
            a.group.len(),
            a.aggs.len(),
            if s.having.is_some() { ", HAVING" } else { "" }
        );
    }
    if s.distinct {
        let _ = writeln!(out, "{indent}DISTINCT");
    }
    if !s.order.is_empty() {
        let how = if s.sorted_by_index { "ORDER BY (index order, no sort)" } else { "ORDER BY (sort)" };
        let _ = writeln!(out, "{indent}{how}");
    }
    if s.limit.is_some() || s.offset.is_some() {
        let _ = writeln!(out, "{indent}LIMIT/OFFSET");
    }
    let _ = writeln!(out, "{indent}PROJECTION: {} columns", s.columns.len());
}

/// Each subquery of the statement, by the id the lines above name it by.
fn subqueries_text(subs: &[SubqueryPlan], out: &mut String) {
    if !subs.is_empty() {
        let _ = writeln!(out, "SUBQUERIES (run at the coordinator over gathered tables when the route is all partitions):");
    }
    for (id, sq) in subs.iter().enumerate() {
        let when = if sq.correlated {
            "for each row of the query around it"
        } else if sq.recursive {
            "in each iteration"
        } else {
            "once"
        };
        match &sq.body {
            SubBody::Select(s) => {
                let _ = writeln!(out, "  SUBQUERY {id} (runs {when}):");
                select_text(s, out, "    ");
            }
            SubBody::SetOp(s) => {
                let op = match s.op {
                    SetOp::Union => "UNION",
                    SetOp::Intersect => "INTERSECT",
                    SetOp::Except => "EXCEPT",
                };
                let all = if s.all { " ALL" } else { "" };
                let _ = writeln!(out, "  SUBQUERY {id} (runs {when}): subquery {} {op}{all} subquery {}", s.left, s.right);
            }
            SubBody::Recursive(r) => {
                let all = if r.all { " ALL" } else { "" };
                let _ = writeln!(
                    out,
                    "  SUBQUERY {id} (runs {when}): WITH RECURSIVE {}: subquery {}, then UNION{all} subquery {} over the last iteration's rows (subquery {}) until it finds none",
                    r.name, r.base, r.step, r.working
                );
            }
            SubBody::Working(_) => {
                let _ = writeln!(out, "  SUBQUERY {id}: the rows the last iteration of a recursive WITH found");
            }
        }
    }
}

/// Human-readable plan (for @Explain).
pub fn explain(p: &Prepared) -> String {
    let mut out = String::new();
    let route = match &p.route {
        Route::PartitionParam { param, key_type } => {
            format!("single partition, by parameter {} ({key_type})", param + 1)
        }
        Route::PartitionConst(v) => format!("single partition, by key {v}"),
        Route::AnyPartition => "any one partition (replicated tables only)".to_string(),
        Route::All => "all partitions".to_string(),
    };
    let _ = writeln!(out, "ROUTE: {route}{}", if p.writes_replicated { " (writes a replicated table)" } else { "" });
    if let Some(s) =
        crate::mp::select_of(p).filter(|s| p.route == Route::All && p.subqueries.is_empty() && crate::colocated::runs_on_each_partition(s))
    {
        let what = if s.agg.is_some() { "its partial groups" } else { "its rows" };
        let _ = writeln!(out, "CO-LOCATED JOIN: joined on partition columns, so each partition runs the join on its own rows and the coordinator merges {what}");
    }
    match &p.plan {
        Plan::Select(s) => select_text(s, &mut out, ""),
        Plan::Insert(i) => {
            let verb = if i.upsert { "UPSERT" } else { "INSERT" };
            match &i.source {
                InsertSource::Values(rows) => {
                    let _ = writeln!(out, "{verb} {} row(s) INTO {}", rows.len(), i.table.name);
                }
                InsertSource::Select(s) => {
                    let _ = writeln!(out, "{verb} INTO {} FROM SELECT:", i.table.name);
                    select_text(s, &mut out, "  ");
                }
            }
        }
        Plan::Update(u) => {
            let _ = writeln!(out, "UPDATE {} ({} columns) via {}", u.level.source.name, u.sets.len(), access_text(&u.level));
        }
        Plan::Delete(d) => {
            let _ = writeln!(out, "DELETE FROM {} via {}", d.level.source.name, access_text(&d.level));
        }
    }
    subqueries_text(&p.subqueries, &mut out);
    out
}
