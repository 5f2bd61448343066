//! Fragments as data. A multi-partition statement sends each partition it needs a
//! *fragment*: one step of the statement to run on that partition's data. A fragment is a
//! `FragmentSpec`, plain serializable data (which statement, of which catalog version, with
//! which parameters and context, and which step), paired with the closure that runs it on a
//! partition of this node. A node that holds the partition elsewhere rebuilds the very same
//! closure from the spec alone (`fragment_fn`), finding the plan through a
//! `StatementResolver` (its plan cache), so every replica runs the same plan.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lockstep_core::{Catalog, Error, Result, Value};
use serde::{Deserialize, Serialize};

use crate::{coerce_params, mp, prepare, ExecCtx, Prepared, SiteFn};

/// Most ad-hoc plans a `PlanCache` keeps; past it the cache starts over, so a stream of
/// distinct ad-hoc statements costs re-planning, never unbounded memory.
pub const ADHOC_PLANS_MAX: usize = 1024;

/// How another node finds a prepared statement: planning is a pure function of the
/// catalog and the text, so the text identifies an ad-hoc statement; a procedure's
/// statement is found among the procedure's planned statements.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StatementRef {
    /// Planned from this text (ad-hoc SQL, and any statement not named by a procedure).
    Sql(Arc<str>),
    /// Statement `index` (in the order the procedure declares them) of procedure `name`.
    Procedure { name: Arc<str>, index: u32 },
}

/// What a fragment does on a partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// The whole statement, as a single-partition statement runs (a statement routed to
    /// one partition, or an UPDATE/DELETE run everywhere): its answer.
    Execute,
    /// An aggregate over one table, or over a join every partition runs on its own rows
    /// (`colocated.rs`): the partition's partial groups.
    Partials,
    /// The rows of the SELECT's source `level` that pass the filters safe to apply early.
    /// `rows_before`/`bytes_before` is what the statement had gathered before this level:
    /// the gather caps count from there.
    GatherLevel { level: u32, rows_before: u64, bytes_before: u64 },
    /// For a statement with subqueries or set operations, which runs whole at the
    /// coordinator: the rows of source `level` of its SELECT number `query` (0 is the
    /// statement's own, k + 1 its subquery k), filtered as `GatherLevel` does; the caps
    /// count from `rows_before`/`bytes_before`.
    GatherQueryLevel { query: u32, level: u32, rows_before: u64, bytes_before: u64 },
    /// Insert (or upsert) these rows, values in the INSERT's column order, computed by the
    /// coordinator; all or none.
    InsertRows(Vec<Vec<Value>>),
    /// A join without aggregates that every partition runs on its own rows
    /// (`colocated.rs`): the partition's output rows, each followed by its hidden ORDER BY
    /// values, deduplicated under DISTINCT and, with LIMIT, only its first LIMIT + OFFSET;
    /// the coordinator merges them.
    JoinedRows,
}

/// A fragment as data: everything a node needs, besides its own copy of the partition and
/// a plan cache at `catalog_version`, to run it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FragmentSpec {
    pub catalog_version: u64,
    pub statement: StatementRef,
    /// The statement's parameters, already converted to its types.
    pub params: Vec<Value>,
    /// The transaction's id and time, the caps, and the deadline (as time left).
    pub ctx: ExecCtx,
    pub step: Step,
}

/// A fragment as `SiteAccess::run_fragment` receives it: its description, and the closure
/// that runs it on a partition here (built from the plan at hand, so the local path looks
/// nothing up). `fragment_fn(spec)` builds an equivalent closure anywhere.
#[derive(Clone)]
pub struct Fragment {
    pub spec: Arc<FragmentSpec>,
    pub local: SiteFn,
}

/// Finds the prepared statement a fragment names.
pub trait StatementResolver {
    /// The plan of `statement` at catalog version `catalog_version`; an error when this
    /// node's catalog is at another version, or it knows no such statement.
    fn resolve(&self, catalog_version: u64, statement: &StatementRef) -> Result<Arc<Prepared>>;
}

/// Builds the closure that runs `spec` on a partition: the same closure the coordinator
/// built for its own partitions, with the plan found through `resolver`. The spec may come
/// from the network: its parameters, step and rows are checked against the plan here, once,
/// so the closure cannot index past what the plan has.
pub fn fragment_fn(mut spec: FragmentSpec, resolver: &dyn StatementResolver) -> Result<SiteFn> {
    let p = resolver.resolve(spec.catalog_version, &spec.statement)?;
    if p.catalog_version != spec.catalog_version {
        return Err(stale(spec.catalog_version, p.catalog_version));
    }
    let converted = match coerce_params(&p, &spec.params)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(v) => Some(v),
    };
    if let Some(v) = converted {
        spec.params = v;
    }
    mp::check_step(&p, &spec.step)?;
    Ok(mp::site_fn(p, Arc::new(spec)))
}

fn stale(wanted: u64, here: u64) -> Error {
    Error::unavailable(format!(
        "a fragment planned against catalog version {wanted} reached a node at version {here}: the schema changed in between; run the statement again"
    ))
}

/// A resolver over one catalog version: procedures' statements as their planner (the
/// engine's registry) registered them, and ad-hoc SQL planned on first sight and kept.
pub struct PlanCache {
    catalog: Arc<Catalog>,
    /// By lower-case procedure name (names are case-insensitive).
    procedures: HashMap<String, Vec<Arc<Prepared>>>,
    adhoc: Mutex<HashMap<Arc<str>, Arc<Prepared>>>,
}

impl PlanCache {
    pub fn new(catalog: Arc<Catalog>) -> PlanCache {
        PlanCache { catalog, procedures: HashMap::new(), adhoc: Mutex::new(HashMap::new()) }
    }

    /// Registers procedure `name`'s statements, in its order.
    pub fn add_procedure(&mut self, name: &str, statements: Vec<Arc<Prepared>>) {
        self.procedures.insert(name.to_ascii_lowercase(), statements);
    }

    pub fn catalog_version(&self) -> u64 {
        self.catalog.version
    }

    fn adhoc(&self, text: &Arc<str>) -> Result<Arc<Prepared>> {
        let cached = self.adhoc.lock().unwrap_or_else(|p| p.into_inner()).get(text).cloned();
        if let Some(p) = cached {
            return Ok(p);
        }
        // Planned outside the lock: planning is the slow part.
        let p = Arc::new(prepare(&self.catalog, text)?);
        let mut adhoc = self.adhoc.lock().unwrap_or_else(|p| p.into_inner());
        if adhoc.len() >= ADHOC_PLANS_MAX {
            adhoc.clear();
        }
        adhoc.insert(text.clone(), p.clone());
        Ok(p)
    }
}

impl StatementResolver for PlanCache {
    fn resolve(&self, catalog_version: u64, statement: &StatementRef) -> Result<Arc<Prepared>> {
        if catalog_version != self.catalog.version {
            return Err(stale(catalog_version, self.catalog.version));
        }
        match statement {
            StatementRef::Sql(text) => self.adhoc(text),
            StatementRef::Procedure { name, index } => {
                self.procedures.get(&name.to_ascii_lowercase()).and_then(|stmts| stmts.get(*index as usize)).cloned().ok_or_else(|| {
                    Error::unexpected(format!("a fragment names statement {index} of procedure {name}, which this node does not have"))
                })
            }
        }
    }
}
