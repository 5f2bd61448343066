//! Co-located joins: a multi-partition join whose partitioned sources all join on their
//! partition columns, so every joined row is made of rows of one partition (and of
//! replicated tables, which every partition holds whole). Each partition then runs the
//! whole join on its own rows and answers only what the statement keeps of them (its
//! partial groups, or its output rows), and the coordinator merges those, instead of
//! gathering every source's rows and joining them itself: one round of fragments, as
//! VoltDB runs joins on partition columns.
//!
//! Why the rule is right. Say each partitioned source's partition column is equated with
//! another's by inner-join terms (which every answered row satisfies, with non-NULL
//! values), and equal keys hash alike: then the partitioned rows of an answered row share
//! one key, hence one partition p, and p holds every row it is made of. A LEFT JOIN source
//! keeps a row of the sources before it, padded, when nothing matches it; p decides that
//! alone only if every possible match is on p too: so a partitioned LEFT JOIN source must
//! equate, in its own ON, its partition column with that of a partitioned source before it
//! (a replicated one has all its rows everywhere). A partitioned source after only
//! replicated ones (`r LEFT JOIN p`) fails that test: every partition would pad the same
//! `r` row. Each answered row is then made on exactly one partition, its own.

use std::cmp::Ordering;
use std::collections::HashSet;

use lockstep_core::{DataType, Error, Result, ResultColumn, ResultTable, Value};

use crate::exec::{count_of, eval_all, join_rows, RowSource};
use crate::expr::{sort_cmp, CmpOp, Env, Expr};
use crate::limits::row_bytes;
use crate::plan::{Level, SelectPlan, SortKey};

/// Fewest rows a partition's top-N collection holds before it is cut back to N (it is cut
/// back at twice N), as the coordinator's own collection does.
const TOP_N_CUT_ROWS_MIN: usize = 1024;

/// Why a join does not run on each partition (`colocation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apart {
    /// One source, or no partitioned source: nothing to co-locate.
    NotAJoin,
    /// A derived table, or a view whose groups span partitions (its rows are merged first),
    /// or a partitioned source without a partition column: no partition holds its rows whole.
    NotLocal,
    /// The inner-joined partitioned sources are not all tied together by equalities of
    /// their partition columns (of types whose equal values hash alike).
    NotJoinedOnPartitionColumns,
    /// A partitioned LEFT JOIN source whose ON does not equate its partition column with
    /// that of a partitioned source joined before it.
    OuterNotOnPartitionColumn,
}

/// The partition column of level `l` as a column of the joined row, with its type; None
/// for a replicated level.
fn partition_key(l: &Level) -> Result<Option<(usize, DataType)>, Apart> {
    if l.derived.is_some() || l.merge_view {
        return Err(Apart::NotLocal);
    }
    if !l.partitioned {
        return Ok(None);
    }
    let t = &l.source.table;
    let pc = t.partition_column.ok_or(Apart::NotLocal)?;
    let col = t.columns.get(pc).ok_or(Apart::NotLocal)?;
    Ok(Some((l.source.offset + pc, col.ty)))
}

/// Whether equal values of the two types always hash to the same partition
/// (`HashRing::partition_for`): every integer width is held as one `Value::Int`, and text,
/// bytes and timestamps hash their own representation, so only the same type matches.
fn hash_alike(a: DataType, b: DataType) -> bool {
    (a.is_integer() && b.is_integer()) || (a == b && matches!(a, DataType::Varchar | DataType::Varbinary | DataType::Timestamp))
}

/// The levels (by position) whose partition columns `e` equates, when it is a bare
/// `column = column` between two of them with types that hash alike.
fn equated(e: &Expr, keys: &[Option<(usize, DataType)>]) -> Option<(usize, usize)> {
    let Expr::Cmp(CmpOp::Eq, a, b) = e else { return None };
    let (Expr::Column(x), Expr::Column(y)) = (a.as_ref(), b.as_ref()) else { return None };
    let find = |c: usize| keys.iter().position(|k| k.is_some_and(|(col, _)| col == c));
    let (i, j) = (find(*x)?, find(*y)?);
    let (ti, tj) = (keys[i]?.1, keys[j]?.1);
    (i != j && hash_alike(ti, tj)).then_some((i, j))
}

/// Union-find root of `i`.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Whether every partition can run the join of `plan` on its own rows (see the module's
/// comment for why these conditions suffice); the reason when not.
pub fn colocation(plan: &SelectPlan) -> Result<(), Apart> {
    if plan.levels.len() < 2 {
        return Err(Apart::NotAJoin);
    }
    let keys = plan.levels.iter().map(partition_key).collect::<Result<Vec<_>, Apart>>()?;
    if keys.iter().all(Option::is_none) {
        return Err(Apart::NotAJoin);
    }
    // Inner levels' terms hold on every answered row: their equalities tie sources together.
    let mut parent: Vec<usize> = (0..keys.len()).collect();
    for l in plan.levels.iter().filter(|l| !l.left) {
        for (i, j) in l.on.iter().filter_map(|e| equated(e, &keys)) {
            let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
            parent[ri] = rj;
        }
    }
    let mut inner = plan.levels.iter().zip(&keys).enumerate().filter(|(_, (l, k))| !l.left && k.is_some()).map(|(i, _)| i);
    if let Some(first) = inner.next() {
        let r = root(&mut parent, first);
        if inner.any(|i| root(&mut parent, i) != r) {
            return Err(Apart::NotJoinedOnPartitionColumns);
        }
    }
    // A LEFT JOIN's own ON decides its padding: it must find every match on this partition.
    for (j, l) in plan.levels.iter().enumerate().filter(|(j, l)| l.left && keys[*j].is_some()) {
        if !l.on.iter().filter_map(|e| equated(e, &keys)).any(|(a, b)| (a == j && b < j) || (b == j && a < j)) {
            return Err(Apart::OuterNotOnPartitionColumn);
        }
    }
    Ok(())
}

/// Whether the join of `plan` runs on each partition.
pub fn is_colocated(plan: &SelectPlan) -> bool {
    colocation(plan).is_ok()
}

/// Whether a multi-partition read of `plan` runs its join on each partition: a co-located
/// join, with aggregates each partition can compute partially (no DISTINCT aggregate), or
/// none.
pub fn runs_on_each_partition(plan: &SelectPlan) -> bool {
    is_colocated(plan) && (plan.agg.is_none() || crate::exec_agg::pushes_down(plan))
}

/// A co-located join without aggregates, whose output rows each partition computes
/// (`Step::JoinedRows`).
pub fn rows_run_on_each_partition(plan: &SelectPlan) -> bool {
    plan.agg.is_none() && is_colocated(plan)
}

/// Orders two rows of `output ++ hidden` values by the plan's ORDER BY.
fn compare(order: &[(SortKey, bool)], outputs: usize, a: &[Value], b: &[Value]) -> Ordering {
    for (k, desc) in order {
        let i = match k {
            SortKey::Output(i) => *i,
            SortKey::Hidden(i) => outputs + i,
        };
        let o = match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) => sort_cmp(x, y),
            _ => Ordering::Equal,
        };
        if o != Ordering::Equal {
            return if *desc { o.reverse() } else { o };
        }
    }
    Ordering::Equal
}

/// One partition's answer to a co-located join (`plan` as ordered for its row counts):
/// each joined row's output values followed by its hidden ORDER BY values, deduplicated
/// under DISTINCT, and — with LIMIT — only the first LIMIT + OFFSET rows, in ORDER BY order
/// when there is one (the whole answer's first rows are among the partitions' first rows).
/// The coordinator applies DISTINCT, ORDER BY, OFFSET and LIMIT again (`merge_rows`).
pub fn partition_rows(plan: &SelectPlan, src: &dyn RowSource, env: &Env) -> Result<ResultTable> {
    let outputs = plan.output.len();
    let limit = count_of(&plan.limit, env, "LIMIT")?;
    let offset = count_of(&plan.offset, env, "OFFSET")?.unwrap_or(0);
    let first = limit.map(|l| l.saturating_add(offset));
    let need_sort = !plan.order.is_empty() && !plan.sorted_by_index;
    // Rows found in answer order (no sort needed, no DISTINCT) can stop at the first ones.
    let stop_at = first.filter(|_| !need_sort && !plan.distinct);
    // A top N: cut back now and then, so a partition holds about N rows.
    let keep = first.filter(|_| need_sort && !plan.distinct);
    let width = outputs + plan.hidden.len();
    let columns: Vec<ResultColumn> = (0..width).map(|i| ResultColumn { name: format!("R{i}").into(), ty: DataType::BigInt }).collect();
    let mut t = ResultTable::new(columns);
    if first == Some(0) {
        return Ok(t);
    }
    let mut bytes = 0usize;
    join_rows(plan, src, env, &mut |row| {
        let mut r = eval_all(&plan.output, row, env)?;
        if !plan.hidden.is_empty() {
            r.extend(eval_all(&plan.hidden, row, env)?);
        }
        bytes = bytes.saturating_add(row_bytes(&r));
        t.rows.push(r);
        if let Some(k) = keep {
            if t.rows.len() >= k.saturating_mul(2).max(TOP_N_CUT_ROWS_MIN) {
                top(plan, outputs, &mut t.rows, k, env)?;
                bytes = t.rows.iter().map(|r| row_bytes(r)).sum();
            }
        }
        if bytes > env.limits.result_bytes_max {
            return Err(env.limits.result_too_big());
        }
        Ok(stop_at.is_none_or(|n| t.rows.len() < n))
    })?;
    if plan.distinct {
        let mut seen = HashSet::new();
        t.rows.retain(|r| seen.insert(r.clone()));
    }
    if let Some(n) = first {
        if need_sort {
            top(plan, outputs, &mut t.rows, n, env)?;
        } else {
            t.rows.truncate(n);
        }
    }
    Ok(t)
}

/// Keeps the first `k` rows in ORDER BY order (a stable sort: rows found first stay first
/// among equals, as in the coordinator's sort).
fn top(plan: &SelectPlan, outputs: usize, rows: &mut Vec<Vec<Value>>, k: usize, env: &Env) -> Result<()> {
    env.watch.check()?;
    rows.sort_by(|a, b| compare(&plan.order, outputs, a, b));
    rows.truncate(k);
    env.watch.check()
}

/// The answer of a co-located join from each partition's `partition_rows`: their rows
/// together, then DISTINCT, ORDER BY, OFFSET and LIMIT as the plan says.
pub fn merge_rows(plan: &SelectPlan, parts: Vec<ResultTable>, env: &Env) -> Result<ResultTable> {
    let outputs = plan.output.len();
    let width = outputs + plan.hidden.len();
    let mut parts = Some(parts);
    crate::exec::collect_select(plan, env, !plan.order.is_empty(), &mut |out| {
        for t in parts.take().unwrap_or_default() {
            for mut r in t.rows {
                env.watch.tick()?;
                if r.len() != width {
                    return Err(Error::unexpected("a partition's rows of a co-located join have the wrong shape"));
                }
                let hidden = r.split_off(outputs);
                out.push(r, hidden, env)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests_sql::Db;

    const DDL: &str = "
    CREATE TABLE acct (id BIGINT NOT NULL, owner VARCHAR(10) NOT NULL, bal INTEGER, PRIMARY KEY (id));
    PARTITION TABLE acct ON COLUMN id;
    CREATE TABLE txn (acct BIGINT NOT NULL, seq INTEGER NOT NULL, amt INTEGER, PRIMARY KEY (acct, seq));
    PARTITION TABLE txn ON COLUMN acct;
    CREATE TABLE prof (id TINYINT NOT NULL PRIMARY KEY, note VARCHAR(10));
    PARTITION TABLE prof ON COLUMN id;
    CREATE TABLE tag (code VARCHAR(10) NOT NULL PRIMARY KEY, n INTEGER);
    PARTITION TABLE tag ON COLUMN code;
    CREATE TABLE label (code VARCHAR(20) NOT NULL PRIMARY KEY, text VARCHAR(20));
    PARTITION TABLE label ON COLUMN code;
    CREATE TABLE rate (id DECIMAL NOT NULL PRIMARY KEY, r INTEGER);
    PARTITION TABLE rate ON COLUMN id;
    CREATE TABLE kind (k INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));
    CREATE TABLE kind2 (k INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));
    CREATE VIEW by_owner (owner, n) AS SELECT owner, COUNT(*) FROM acct GROUP BY owner;
    CREATE VIEW by_acct (acct, n) AS SELECT acct, COUNT(*) FROM txn GROUP BY acct;
    ";

    fn check(db: &Db, sql: &str) -> Result<(), Apart> {
        let p = crate::prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let s = crate::mp::select_of(&p).unwrap_or_else(|| panic!("{sql}: not a SELECT"));
        colocation(s)
    }

    #[test]
    fn joins_on_partition_columns_are_colocated() {
        let db = Db::new(DDL);
        for sql in [
            "SELECT * FROM acct a JOIN txn t ON t.acct = a.id",
            "SELECT * FROM acct a, txn t WHERE a.id = t.acct AND t.amt > 3",
            // TINYINT and BIGINT keys: one integer, one hash.
            "SELECT * FROM prof p JOIN acct a ON a.id = p.id",
            // The third source is tied through the second; a WHERE term ties as ON does.
            "SELECT * FROM acct a JOIN txn t ON t.acct = a.id JOIN prof p ON p.id = t.acct",
            "SELECT * FROM acct a, txn t, prof p WHERE p.id = t.acct AND a.id = p.id",
            "SELECT * FROM tag g JOIN label l ON l.code = g.code",
            // Replicated tables join in on any terms (every partition holds them whole).
            "SELECT * FROM kind k, acct a, txn t WHERE t.acct = a.id AND t.seq = k.k",
            "SELECT * FROM kind k JOIN kind2 k2 ON k2.k > k.k JOIN acct a ON a.bal = k2.k",
            "SELECT * FROM acct a LEFT JOIN kind k ON k.k = a.bal",
            "SELECT * FROM kind k CROSS JOIN txn t",
            // A LEFT JOIN on the key: its matches are on the row's own partition.
            "SELECT * FROM acct a LEFT JOIN txn t ON t.acct = a.id",
            "SELECT * FROM acct a LEFT JOIN txn t ON t.acct = a.id AND t.amt > a.bal WHERE t.seq IS NULL",
            "SELECT * FROM acct a LEFT JOIN txn t ON a.id = t.acct LEFT JOIN prof p ON p.id = t.acct",
            "SELECT * FROM acct a JOIN txn t ON t.acct = a.id LEFT JOIN prof p ON p.id = a.id JOIN kind k ON k.k = t.seq",
            // A view grouped by its source's partition column: its rows are final there.
            "SELECT * FROM by_acct v JOIN acct a ON a.id = v.acct",
        ] {
            assert_eq!(check(&db, sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn joins_apart_are_refused_with_the_reason() {
        let db = Db::new(DDL);
        for (sql, why) in [
            ("SELECT * FROM acct", Apart::NotAJoin),
            ("SELECT * FROM kind k JOIN kind2 k2 ON k2.k = k.k", Apart::NotAJoin),
            // A non-partition column on either side.
            ("SELECT * FROM acct a JOIN txn t ON t.seq = a.id", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM acct a JOIN txn t ON t.acct = a.bal", Apart::NotJoinedOnPartitionColumns),
            // Tied through a replicated table's column: not taken as a tie.
            ("SELECT * FROM acct a, kind k, txn t WHERE k.k = a.id AND t.acct = k.k", Apart::NotJoinedOnPartitionColumns),
            // Keys of types whose equal values hash apart (BIGINT against DECIMAL), or that
            // meet only through a conversion.
            ("SELECT * FROM acct a JOIN rate r ON r.id = a.id", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM tag g JOIN acct a ON g.code = a.id", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM tag g JOIN acct a ON CAST(g.code AS BIGINT) = a.id", Apart::NotJoinedOnPartitionColumns),
            // An OR, an inequality, a cross join: rows meet across partitions.
            ("SELECT * FROM acct a JOIN txn t ON t.acct = a.id OR t.seq = 1", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM acct a JOIN txn t ON t.acct < a.id", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM acct a CROSS JOIN txn t", Apart::NotJoinedOnPartitionColumns),
            ("SELECT * FROM acct a, txn t, prof p WHERE t.acct = a.id", Apart::NotJoinedOnPartitionColumns),
            // A key equality in a LEFT JOIN's ON between two earlier sources ties nothing
            // (when it fails, the row is padded, not dropped).
            (
                "SELECT * FROM acct a JOIN prof p ON p.note = a.owner LEFT JOIN txn t ON t.acct = a.id AND p.id = a.id",
                Apart::NotJoinedOnPartitionColumns,
            ),
            // Every partition would pad the replicated row that matches nothing.
            ("SELECT * FROM kind k LEFT JOIN acct a ON a.id = k.k", Apart::OuterNotOnPartitionColumn),
            ("SELECT * FROM acct a LEFT JOIN txn t ON t.amt = a.bal", Apart::OuterNotOnPartitionColumn),
            // The key equality is in WHERE, not in the LEFT JOIN's ON (kept out: the ON alone
            // decides the padding).
            ("SELECT * FROM acct a LEFT JOIN txn t ON t.amt = a.bal WHERE t.acct = a.id", Apart::OuterNotOnPartitionColumn),
            // A view whose groups span partitions is merged first.
            ("SELECT * FROM by_owner v JOIN acct a ON a.owner = v.owner", Apart::NotLocal),
        ] {
            assert_eq!(check(&db, sql), Err(why), "{sql}");
        }
    }
}
