//! The procedures one executor can run: Lua modules, single-statement SQL procedures and
//! the default CRUD procedures (`T.insert` …), each with its statements planned once when
//! the catalog changes. Each site has a registry for single-partition work; the MP
//! coordinator has one for multi-partition work.

use std::rc::Rc;
use std::sync::Arc;

use lockstep_core::{
    get_ignoring_case, Catalog, DataType, Error, NameMap, Partitioning, ProcedureBody, Result, ResultTable, TableDef, TableKind, Value,
};
use lockstep_procs::{each_row_of, CallContext, LuaConfig, LuaProc, LuaRuntime, ProcOutput, StmtInfo, TimeLimit, TxnHost};
use lockstep_sql::{quote_ident, Deadline, PlanCache, Prepared, Route, StatementRef};

use crate::name_cache::NameCache;

/// Where the calls of a procedure run.
#[derive(Clone, Debug, PartialEq)]
pub enum ProcRoute {
    /// On the partition owning parameter `param` (coerced to `key_type` for hashing).
    Single { param: usize, key_type: DataType },
    /// On the partition owning a fixed key (used for unpartitioned streams: partition 0's).
    Fixed(u32),
    /// Reads only replicated data: any one partition.
    Any,
    /// Under the multi-partition coordinator.
    Multi,
    /// On the partition the caller names (every-partition calls).
    Directed,
    /// A compound procedure: not a transaction, run on the compound thread as a chain of
    /// ordinary calls (`compound.rs`).
    Compound,
}

impl ProcRoute {
    pub fn is_multi(&self) -> bool {
        matches!(self, ProcRoute::Multi)
    }
}

enum ProcImpl {
    Sql(Arc<Prepared>),
    /// The body, loaded in the registry's Lua runtime.
    Lua {
        body: Rc<LuaProc>,
        stmts: Vec<Arc<Prepared>>,
    },
}

struct ProcEntry {
    name: String,
    imp: ProcImpl,
}

/// Runs one planned statement inside the current transaction.
pub trait StatementRunner {
    fn run(&mut self, p: &Arc<Prepared>, params: &[Value]) -> Result<ResultTable>;
    /// As `TxnHost::execute_each`: the rows `run` would return, one at a time, without
    /// building a table where the runner can.
    fn run_each(&mut self, p: &Arc<Prepared>, params: &[Value], row: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<i64> {
        each_row_of(&self.run(p, params)?, row)
    }
    /// Undoes every statement run so far in this call (see `TxnHost::restart`).
    fn restart(&mut self) -> Result<()>;
}

/// Describes one callable procedure, for routing and for `@SystemCatalog PROCEDURES`.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    /// Shared: every call routed to a site carries it.
    pub name: Arc<str>,
    pub route: ProcRoute,
    pub read_only: bool,
    /// Partition column type for single-partition procedures.
    pub key_type: Option<DataType>,
    pub param: Option<usize>,
    /// Who may call it (see `auth`).
    pub access: crate::auth::ProcAccess,
}

/// Which procedures a registry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Site,
    Coordinator,
}

pub struct Registry {
    scope: Scope,
    procs: NameMap<Rc<ProcEntry>>,
    /// Entries by the shared name routed calls carry; emptied when the entries change.
    recent: NameCache<Rc<ProcEntry>>,
    lua: LuaRuntime,
}

impl Registry {
    /// What each Lua procedure's module keeps on this runtime's heap, in bytes.
    pub fn procedure_memory(&self) -> Vec<(String, usize)> {
        self.lua.procedure_memory()
    }

    pub fn new(scope: Scope, instruction_budget: u64, memory_limit_bytes: usize) -> Result<Self> {
        // A site can undo a call and run it again (its runner's `restart`); a coordinator's
        // call has fragments on other sites, so its instructions are always counted.
        let config = LuaConfig { instruction_budget, memory_limit_bytes, restartable: scope == Scope::Site, ..LuaConfig::default() };
        Ok(Registry { scope, procs: NameMap::default(), recent: NameCache::default(), lua: LuaRuntime::new(config)? })
    }

    /// Whether procedure `name` only reads: every statement it can run is read-only (a Lua
    /// procedure plans all of its statements while its module loads). False if unknown.
    pub fn reads_only(&self, name: &str) -> bool {
        match get_ignoring_case(&self.procs, name).map(|e| &e.imp) {
            Some(ProcImpl::Sql(p)) => p.read_only,
            Some(ProcImpl::Lua { stmts, .. }) => stmts.iter().all(|p| p.read_only),
            None => false,
        }
    }

    /// Re-plans every procedure of this scope against `catalog`; a Lua module's top level
    /// may run `load_time_limit` (`None`: no limit, for a catalog rebuilt at start-up or in
    /// recovery, which must not fail on a slow machine). On error the registry is
    /// left as it was before the call for every procedure not yet rebuilt; the caller
    /// treats an error as "this catalog is invalid" and restores the previous one.
    pub fn rebuild(&mut self, catalog: &Catalog, load_time_limit: Option<std::time::Duration>) -> Result<()> {
        self.lua.set_load_time_limit(load_time_limit);
        let mut procs = NameMap::default();
        for info in procedure_infos(catalog) {
            if (self.scope == Scope::Coordinator) != info.route.is_multi() || info.route == ProcRoute::Compound {
                continue;
            }
            let key = info.name.to_ascii_lowercase();
            let entry = self.build_entry(catalog, &info)?;
            procs.insert(key, Rc::new(entry));
        }
        for old in self.procs.keys() {
            if !procs.contains_key(old) {
                self.lua.unload(old);
            }
        }
        self.procs = procs;
        self.recent.clear();
        Ok(())
    }

    fn build_entry(&mut self, catalog: &Catalog, info: &ProcInfo) -> Result<ProcEntry> {
        let scope = self.scope;
        let name = info.name.clone();
        // Statement `index` of the procedure: its fragments name it so (procedure, index),
        // which another node's plan cache of the same catalog resolves (`plan_cache`).
        let check = |mut p: Prepared, index: usize| -> Result<Arc<Prepared>> {
            if scope == Scope::Site && p.writes_replicated {
                return Err(Error::sql(format!(
                    "procedure {name} is single-partition but writes a replicated table: {}; declare it without PARTITION ON to run it multi-partition",
                    p.sql
                )));
            }
            let index = u32::try_from(index).map_err(|_| Error::sql(format!("procedure {name} declares too many statements")))?;
            p.statement = StatementRef::Procedure { name: name.clone(), index };
            Ok(Arc::new(p))
        };
        // A Lua procedure: its statements are prepared as its source declares them.
        let mut load_lua = |name: &str, path: &str, source: &str| -> Result<ProcImpl> {
            let mut stmts = Vec::new();
            let mut prepare = |text: &str| -> Result<StmtInfo> {
                let p = check(lockstep_sql::prepare(catalog, text)?, stmts.len())?;
                let info = StmtInfo { id: stmts.len(), param_types: p.param_types.clone() };
                stmts.push(p);
                Ok(info)
            };
            let body = self.lua.load(name, path, source, &mut prepare)?;
            Ok(ProcImpl::Lua { body, stmts })
        };
        if let Some(source) = crate::ttl::delete_procedure_source(catalog, &info.name) {
            return Ok(ProcEntry { name: info.name.to_string(), imp: load_lua(&info.name, "ttl", &source)? });
        }
        if let Some(source) = crate::migrate::procedure_source(catalog, &info.name) {
            return Ok(ProcEntry { name: info.name.to_string(), imp: load_lua(&info.name, "migrate", &source)? });
        }
        if let Some(sql) = crud_sql(catalog, &info.name) {
            let p = lockstep_sql::prepare(catalog, &sql).map_err(|e| e.context(format!("procedure {}", info.name)))?;
            return Ok(ProcEntry { name: info.name.to_string(), imp: ProcImpl::Sql(check(p, 0)?) });
        }
        let def =
            catalog.procedure(&info.name).ok_or_else(|| Error::unexpected(format!("procedure {} vanished from the catalog", info.name)))?;
        let imp = match &def.body {
            ProcedureBody::Sql(sql) => {
                let p = lockstep_sql::prepare(catalog, sql).map_err(|e| e.context(format!("procedure {}", def.name)))?;
                ProcImpl::Sql(check(p, 0)?)
            }
            ProcedureBody::Lua { source, .. } if lockstep_procs::is_compound(source) => {
                return Err(Error::sql(format!(
                    "procedure {} is a compound procedure ({}): declare it without PARTITION ON; it runs as a chain of calls, not on one partition",
                    def.name,
                    lockstep_procs::COMPOUND_DECLARATION
                )))
            }
            ProcedureBody::Lua { path, source } => load_lua(&def.name, path, source)?,
        };
        Ok(ProcEntry { name: def.name.clone(), imp })
    }

    /// A resolver for fragments of `catalog` (the one this registry was last built from):
    /// every procedure's statements, by the (name, index) their fragments carry, and ad-hoc
    /// SQL planned on demand. A node that runs fragments it did not plan holds one.
    pub fn plan_cache(&self, catalog: Arc<Catalog>) -> PlanCache {
        let mut cache = PlanCache::new(catalog);
        for entry in self.procs.values() {
            match &entry.imp {
                ProcImpl::Sql(p) => cache.add_procedure(&entry.name, vec![p.clone()]),
                ProcImpl::Lua { stmts, .. } => cache.add_procedure(&entry.name, stmts.clone()),
            }
        }
        cache
    }

    pub fn has(&self, name: &str) -> bool {
        get_ignoring_case(&self.procs, name).is_some()
    }

    /// Calls procedure `name` inside the caller's transaction.
    pub fn call(&mut self, name: &str, params: &[Value], ctx: &CallContext, runner: &mut dyn StatementRunner) -> Result<ProcOutput> {
        let entry = get_ignoring_case(&self.procs, name).cloned().ok_or_else(|| not_found(name))?;
        self.call_entry(&entry, params, ctx, runner)
    }

    /// `call` for a routed call, whose name is shared by every call of its procedure.
    pub fn call_shared(
        &mut self,
        name: &Arc<str>,
        params: &[Value],
        ctx: &CallContext,
        runner: &mut dyn StatementRunner,
    ) -> Result<ProcOutput> {
        let procs = &self.procs;
        let entry = self.recent.get_or_find(name, || get_ignoring_case(procs, name).cloned()).cloned().ok_or_else(|| not_found(name))?;
        self.call_entry(&entry, params, ctx, runner)
    }

    fn call_entry(
        &mut self,
        entry: &ProcEntry,
        params: &[Value],
        ctx: &CallContext,
        runner: &mut dyn StatementRunner,
    ) -> Result<ProcOutput> {
        match &entry.imp {
            ProcImpl::Sql(p) => {
                if params.len() != p.param_types.len() {
                    // VoltDB's words, which its users' code may look for.
                    return Err(Error::graceful(format!(
                        "PROCEDURE {} EXPECTS {} PARAMS, BUT RECEIVED {}",
                        entry.name,
                        p.param_types.len(),
                        params.len()
                    )));
                }
                let table = runner.run(p, params)?;
                Ok(ProcOutput { tables: vec![table], app_status: -128, app_status_string: None })
            }
            ProcImpl::Lua { body, stmts } => {
                let mut host = LuaHost { stmts, runner };
                self.lua.call_proc(body, params, ctx, &mut host)
            }
        }
    }
}

/// The time limit of a procedure call whose statements stop at `deadline` (the query
/// timeout of a live call; a replayed transaction has none).
pub fn time_limit(deadline: Option<Deadline>) -> Option<TimeLimit> {
    deadline.map(|d| TimeLimit { started: d.started, at: d.at })
}

fn not_found(name: &str) -> Error {
    Error::unexpected(format!("Procedure {name} was not found"))
}

/// Gives a Lua procedure its planned statements.
struct LuaHost<'a> {
    stmts: &'a [Arc<Prepared>],
    runner: &'a mut dyn StatementRunner,
}

impl<'a> LuaHost<'a> {
    fn stmt(&self, stmt: usize) -> Result<&'a Arc<Prepared>> {
        self.stmts.get(stmt).ok_or_else(|| Error::unexpected(format!("no statement {stmt}")))
    }
}

impl TxnHost for LuaHost<'_> {
    fn execute(&mut self, stmt: usize, params: Vec<Value>) -> Result<ResultTable> {
        self.runner.run(self.stmt(stmt)?, &params)
    }

    fn execute_each(&mut self, stmt: usize, params: &[Value], row: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<i64> {
        self.runner.run_each(self.stmt(stmt)?, params, row)
    }

    fn execute_batch(&mut self, calls: Vec<(usize, Vec<Value>)>) -> Result<Vec<ResultTable>> {
        calls.into_iter().map(|(s, p)| self.execute(s, p)).collect()
    }

    fn restart(&mut self) -> Result<()> {
        self.runner.restart()
    }
}

/// Every procedure the catalog defines, user procedures first, then default CRUD ones.
pub fn procedure_infos(catalog: &Catalog) -> Vec<ProcInfo> {
    let mut out = Vec::new();
    for def in catalog.procedures() {
        let (route, read_only) = match &def.partitioning {
            Partitioning::Single { parameter, key_type, .. } => (ProcRoute::Single { param: *parameter, key_type: *key_type }, false),
            Partitioning::Directed => (ProcRoute::Directed, false),
            Partitioning::Multi => match &def.body {
                ProcedureBody::Sql(sql) => match lockstep_sql::prepare(catalog, sql) {
                    Ok(p) if matches!(p.route, Route::AnyPartition) && p.read_only => (ProcRoute::Any, true),
                    Ok(p) => (ProcRoute::Multi, p.read_only),
                    Err(_) => (ProcRoute::Multi, false),
                },
                ProcedureBody::Lua { source, .. } if lockstep_procs::is_compound(source) => (ProcRoute::Compound, false),
                ProcedureBody::Lua { .. } => (ProcRoute::Multi, false),
            },
        };
        let read_only = read_only
            || match &def.body {
                ProcedureBody::Sql(sql) => lockstep_sql::prepare(catalog, sql).map(|p| p.read_only).unwrap_or(false),
                ProcedureBody::Lua { .. } => false,
            };
        let (param, key_type) = match &route {
            ProcRoute::Single { param, key_type } => (Some(*param), Some(*key_type)),
            _ => (None, None),
        };
        let access = crate::auth::ProcAccess::User { allow: def.allow.as_slice().into() };
        out.push(ProcInfo { name: def.name.as_str().into(), route, read_only, key_type, param, access });
    }
    for table in catalog.tables() {
        // A migrating table's companions are written only by MIGRATE FROM and its own
        // generated procedures: they have no default procedures.
        if lockstep_sql::ddl_migrate::check_not_companion(&table.name, "call").is_err() {
            continue;
        }
        for (suffix, route) in crud_routes(table) {
            let (param, key_type) = match &route {
                ProcRoute::Single { param, key_type } => (Some(*param), Some(*key_type)),
                _ => (None, None),
            };
            let read_only = suffix == "select";
            let access = crate::auth::ProcAccess::Default { read_only };
            out.push(ProcInfo { name: format!("{}.{}", table.name, suffix).into(), route, read_only, key_type, param, access });
        }
    }
    for (table, _) in catalog.ttls() {
        // One batch of expired rows on the partition the caller names (the TTL scheduler
        // names each in turn); a replicated table's rows are everywhere: one MP run.
        let route = if table.partition_column.is_some() { ProcRoute::Directed } else { ProcRoute::Multi };
        let access = crate::auth::ProcAccess::Default { read_only: false };
        let name = crate::ttl::delete_procedure_name(&table.name).into();
        out.push(ProcInfo { name, route, read_only: false, key_type: None, param: None, access });
    }
    // A migrating table's deletions after acknowledgement, on the partition named.
    for name in crate::migrate::procedure_names(catalog) {
        let access = crate::auth::ProcAccess::Default { read_only: false };
        out.push(ProcInfo { name: name.into(), route: ProcRoute::Directed, read_only: false, key_type: None, param: None, access });
    }
    out
}

/// The default procedures of a table and how each is routed (VoltDB's conventions,
/// benchmarks.md §0): insert (every table) and upsert take all columns, select/delete the
/// primary key columns, update all columns then the primary key columns.
fn crud_routes(t: &TableDef) -> Vec<(&'static str, ProcRoute)> {
    match &t.kind {
        TableKind::View(_) => Vec::new(),
        TableKind::Stream { .. } => {
            let route = match t.partition_column {
                Some(c) => ProcRoute::Single { param: c, key_type: t.columns[c].ty },
                None => ProcRoute::Fixed(0),
            };
            vec![("insert", route)]
        }
        TableKind::Table => {
            let insert_route = match t.partition_column {
                Some(c) => ProcRoute::Single { param: c, key_type: t.columns[c].ty },
                None => ProcRoute::Multi,
            };
            let mut out = vec![("insert", insert_route.clone())];
            // The other default procedures address rows by primary key.
            let Some(pk) = t.primary_key() else { return out };
            out.push(("upsert", insert_route.clone()));
            match t.partition_column {
                None => out.extend(["update", "delete"].iter().map(|s| (*s, ProcRoute::Multi))),
                Some(c) => {
                    let key_type = t.columns[c].ty;
                    out.push(("update", insert_route));
                    // A primary key without the partition column cannot route by key.
                    if let Some(in_pk) = pk.columns.iter().position(|&k| k == c) {
                        out.push(("select", ProcRoute::Single { param: in_pk, key_type }));
                        out.push(("delete", ProcRoute::Single { param: in_pk, key_type }));
                    }
                }
            }
            out
        }
    }
}

/// The SQL text of default procedure `name` (`TABLE.op`), if it is one.
fn crud_sql(catalog: &Catalog, name: &str) -> Option<String> {
    let (table, op) = name.rsplit_once('.')?;
    let t = catalog.table(table)?;
    let op = op.to_ascii_lowercase();
    if !crud_routes(t).iter().any(|(s, _)| *s == op) {
        return None;
    }
    // Names quoted: a column may be named with a space or a reserved word.
    let cols: Vec<String> = t.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let marks = vec!["?"; cols.len()].join(", ");
    let pk_where = || {
        t.primary_key()
            .map(|pk| pk.columns.iter().map(|&i| format!("{} = ?", quote_ident(&t.columns[i].name))).collect::<Vec<_>>().join(" AND "))
            .unwrap_or_default()
    };
    let table = quote_ident(&t.name);
    Some(match op.as_str() {
        "insert" => format!("INSERT INTO {table} VALUES ({marks})"),
        "upsert" => format!("UPSERT INTO {table} VALUES ({marks})"),
        "select" => format!("SELECT * FROM {table} WHERE {}", pk_where()),
        "delete" => format!("DELETE FROM {table} WHERE {}", pk_where()),
        "update" => {
            format!("UPDATE {table} SET {} WHERE {}", cols.iter().map(|c| format!("{c} = ?")).collect::<Vec<_>>().join(", "), pk_where())
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LUA_INSTRUCTION_BUDGET_DEFAULT, LUA_MEMORY_LIMIT_BYTES_DEFAULT};
    use lockstep_core::HashRing;
    use lockstep_sql::testing::LocalSites;
    use lockstep_sql::{execute_mp, fragment_fn, ExecCtx, Fragment, FragmentSpec, SiteAccess, SiteFn, Target};

    /// Partitions reached as if on another node: each fragment's spec goes through postcard
    /// and is rebuilt by `fragment_fn` with the registry's plan cache; the statements the
    /// specs named are kept.
    struct Remote {
        sites: LocalSites,
        cache: PlanCache,
        named: Vec<StatementRef>,
    }

    impl SiteAccess for Remote {
        fn partition_count(&self) -> u32 {
            self.sites.partition_count()
        }
        fn ring(&self) -> &HashRing {
            self.sites.ring()
        }
        fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
            self.sites.run(target, f)
        }
        fn run_fragment(&mut self, target: Target, fragment: Fragment) -> Result<Vec<ResultTable>> {
            let bytes = postcard::to_stdvec(&*fragment.spec).unwrap_or_else(|e| panic!("encoding a spec: {e}"));
            let spec: FragmentSpec = postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("decoding a spec: {e}"));
            self.named.push(spec.statement.clone());
            let f = fragment_fn(spec, &self.cache)?;
            self.sites.run(target, f)
        }
    }

    /// Runs a procedure's statements across the partitions of `sites`, as the coordinator does.
    struct Runner<'a> {
        sites: &'a mut dyn SiteAccess,
        ctx: ExecCtx,
    }

    impl StatementRunner for Runner<'_> {
        fn run(&mut self, p: &Arc<Prepared>, params: &[Value]) -> Result<ResultTable> {
            execute_mp(p, params, &self.ctx, self.sites)
        }
        fn restart(&mut self) -> Result<()> {
            Err(Error::unexpected("not restartable"))
        }
    }

    const DDL: [&str; 6] = [
        "CREATE TABLE t (id INTEGER NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (id))",
        "PARTITION TABLE t ON COLUMN id",
        // Each statement sends a different step: partials, a gather, UPDATE everywhere,
        // rows routed to their partitions.
        "CREATE PROCEDURE Shuffle FROM FILE 's.lua' SOURCE $lua$
         local count = sql [[SELECT COUNT(*) AS n, SUM(v) AS s FROM t WHERE v > ?]]
         local top = sql [[SELECT id, v FROM t ORDER BY v DESC, id LIMIT 3]]
         local bump = sql [[UPDATE t SET v = v + ? WHERE v < ?]]
         local add = sql [[INSERT INTO t VALUES (?, ?), (? + 1, ?)]]
         return function(by, below, new_id)
           bump:exec(by, below)
           add:exec(new_id, by, new_id, by)
           return count:query(below), top:query()
         end$lua$",
        "CREATE PROCEDURE Fill AS INSERT INTO t SELECT id + 100, v FROM t",
        "CREATE PROCEDURE Ids AS SELECT id FROM t WHERE v = ? ORDER BY id",
        "CREATE PROCEDURE Load AS INSERT INTO t VALUES (?, ?)",
    ];

    fn every_row(sites: &LocalSites, catalog: &Catalog) -> Vec<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        for part in &sites.partitions {
            for def in catalog.tables() {
                out.push(part.table(def.id).unwrap_or_else(|e| panic!("{e}")).scan().map(|(_, r)| r).collect());
            }
        }
        out
    }

    /// A multi-partition Lua procedure and SQL procedures give the same answers, errors and
    /// rows when their fragments are rebuilt from descriptions naming (procedure, statement).
    #[test]
    fn procedures_run_alike_from_their_fragments_descriptions() {
        let mut catalog = Catalog::default();
        let env = crate::ddl::FsDdlEnv::new(std::env::temp_dir());
        for sql in DDL {
            lockstep_sql::apply_ddl(&mut catalog, sql, &env).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let mut reg = Registry::new(Scope::Coordinator, LUA_INSTRUCTION_BUDGET_DEFAULT, LUA_MEMORY_LIMIT_BYTES_DEFAULT)
            .unwrap_or_else(|e| panic!("{e}"));
        reg.rebuild(&catalog, None).unwrap_or_else(|e| panic!("{e}"));
        let mut local = LocalSites::new(3, &catalog).unwrap_or_else(|e| panic!("{e}"));
        let sites = LocalSites::new(3, &catalog).unwrap_or_else(|e| panic!("{e}"));
        let mut remote = Remote { sites, cache: reg.plan_cache(Arc::new(catalog.clone())), named: Vec::new() };
        let call = CallContext { txn_id: 7, timestamp_micros: 1_700_000_000_000_000, partition: None, time_limit: None };
        let ctx = ExecCtx::new(call.txn_id, call.timestamp_micros);
        let mut both = |name: &str, params: &[Value]| {
            let here = reg.call(name, params, &call, &mut Runner { sites: &mut local, ctx }).map(|o| o.tables);
            let there = reg.call(name, params, &call, &mut Runner { sites: &mut remote, ctx }).map(|o| o.tables);
            assert_eq!(here, there, "{name}");
            assert_eq!(every_row(&local, &catalog), every_row(&remote.sites, &catalog), "rows after {name}");
            here
        };
        let [zero, one, five, ten] = [0, 1, 5, 10].map(Value::Int);
        for k in 0..12 {
            assert!(both("Load", &[Value::Int(k), Value::Int(k * 3)]).is_ok());
        }
        let tables = both("Shuffle", &[one.clone(), ten.clone(), Value::Int(50)]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tables[0].rows, vec![vec![Value::Int(8), Value::Int(180)]]);
        assert_eq!(tables[1].rows[0], vec![Value::Int(11), Value::Int(33)]);
        assert_eq!(both("Fill", &[]).map(|t| t[0].first_value().and_then(Value::as_i64)), Ok(Some(14)));
        assert_eq!(both("Ids", std::slice::from_ref(&one)).map(|t| t[0].rows.len()), Ok(6));
        // A duplicate key (new_id 5 exists) fails the call the same way, leaving no trace.
        let e = both("Shuffle", &[zero, five.clone(), five]).map(|_| ()).unwrap_err();
        assert_eq!(e.kind, lockstep_core::ErrorKind::Constraint, "{}", e.message);
        // Every fragment named its statement as (procedure, index), never by text.
        assert!(remote.named.iter().all(|s| matches!(s, StatementRef::Procedure { .. })), "{:?}", remote.named);
        let shuffle = |index| StatementRef::Procedure { name: "Shuffle".into(), index };
        for index in 0..4 {
            assert!(remote.named.contains(&shuffle(index)), "statement {index} of Shuffle sent no fragment");
        }
    }
}
