//! System procedures (`@AdHoc`, `@Statistics`, `@SystemCatalog` …): the ones VoltDB's client
//! calls on its own to learn the topology and route calls, and the ones tools use.

use lockstep_core::{hash::MP_PARTITION_ID, DataType, Error, Result, ResultTable, Value};

use crate::engine::{Call, Engine};
use crate::outcome::{Outcome, Reply};
use crate::registry::ProcRoute;
use crate::site::SiteMsg;
use crate::stats;
use crate::sysproc_table::{find, SysProc};

/// Build string reported at login and by `@SystemInformation`.
pub const BUILD_STRING: &str = concat!("lockstep-", env!("CARGO_PKG_VERSION"));
/// Host id of this (single) node, as used in topology answers.
pub const HOST_ID: i32 = 0;

pub(crate) fn str_param(call: &Call, i: usize, what: &str) -> Result<String> {
    match call.params.get(i) {
        Some(Value::Str(s)) => Ok(s.clone().into()),
        Some(Value::Bytes(b)) => String::from_utf8(b.to_vec()).map_err(|_| Error::graceful(format!("{what} must be text"))),
        _ => Err(Error::graceful(format!("{} needs {what} as parameter {}", call.procedure, i + 1))),
    }
}

pub fn submit(engine: &Engine, call: Call, reply: Reply) {
    // First who may call it: a name not in the table needs ADMIN, so a user without it
    // learns nothing of which names exist.
    if let Some(who) = call.principal.as_deref() {
        if let Err(e) = crate::auth::check_system(Some(who), &engine.catalog(), &call.procedure) {
            return reply(Outcome::error(e));
        }
    }
    let Some(sysproc) = find(&call.procedure).map(|s| s.proc) else {
        return reply(Outcome::error(Error::unexpected(format!("Procedure {} was not found", call.procedure))));
    };
    let result = match sysproc {
        SysProc::AdHoc => {
            let sql = match str_param(&call, 0, "the SQL text") {
                Ok(s) => s,
                Err(e) => return reply(Outcome::error(e)),
            };
            let timeout = engine.call_timeout(call.timeout_ms);
            let params = call.params.into_iter().skip(1).collect();
            return engine.adhoc_as(call.principal.as_deref(), &sql, params, timeout, reply);
        }
        SysProc::Statistics => return stats::statistics(engine, &call, reply),
        SysProc::Quiesce => return quiesce(engine, reply),
        // Snapshots live in the data directory; VoltDB's path and nonce arguments are ignored.
        SysProc::SnapshotSave => return engine.snapshot(reply),
        SysProc::StateHash => return state_hash(engine, reply),
        // `@SnapshotRestore(id)`, or VoltDB's (path, nonce): the nonce names the snapshot.
        SysProc::SnapshotRestore => {
            let id = match str_param(&call, call.params.len().saturating_sub(1).min(1), "the snapshot id (its NONCE in @SnapshotScan)") {
                Ok(id) => id,
                Err(e) => return reply(Outcome::error(e)),
            };
            return engine.shared().send_mp(crate::mp::MpWork::Restore { id, reply });
        }
        SysProc::Ping => {
            let mut o = Outcome::tables(vec![ResultTable::with_columns(&[("STATUS", DataType::BigInt)])]);
            o.status_string = Some("SUCCESS".into());
            return reply(o);
        }
        SysProc::SystemCatalog => system_catalog(engine, &call),
        SysProc::GetPartitionKeys => partition_keys(engine, &call),
        SysProc::SystemInformation => system_information(engine, &call),
        SysProc::Explain => explain(engine, &call),
        SysProc::ExplainProc => explain_proc(engine, &call),
        SysProc::SnapshotScan => snapshot_scan(engine),
        SysProc::Pause => {
            engine.shared().set_paused(true);
            tracing::info!("paused: calls that write are refused until @Resume");
            Ok(vec![ResultTable::scalar("STATUS", 0)])
        }
        SysProc::Resume => {
            engine.shared().set_paused(false);
            tracing::info!("resumed");
            Ok(vec![ResultTable::scalar("STATUS", 0)])
        }
        SysProc::UpdateClasses => update_classes(engine, &call),
        SysProc::UpdateApplicationCatalog => Err(Error::graceful(
            "Lockstep procedures are Lua, not Java classes: put Name.lua in the procedure directory and declare it with CREATE PROCEDURE … FROM CLASS a.b.Name (or FROM FILE 'path.lua')",
        )),
        // Answered by the front ends (the connection's own state); here they are not known.
        SysProc::Subscribe | SysProc::Shutdown => {
            Err(Error::graceful(format!("{} is answered by a client connection, not here", call.procedure)))
        }
    };
    reply(match result {
        Ok(tables) => Outcome::tables(tables),
        Err(e) => Outcome::error(e),
    });
}

/// `@UpdateClasses(jar, classes_to_delete)`: Lockstep cannot run Java, but VoltDB kits
/// send their procedure classes this way before `CREATE PROCEDURE … FROM CLASS`. Nothing is
/// stored: the Lua files are the procedures. A jar is accepted when its classes have
/// `Name.lua` on the procedure path; classes without one are taken for helpers (logged) as
/// long as some class of the jar is bound, since a procedure among them still gets a clear
/// error from its `FROM CLASS`; a jar none of whose classes has a Lua file is refused with
/// their names. Deleting classes is a no-op.
fn update_classes(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let dir = &engine.shared().config.procedure_dir;
    let check = match call.params.first() {
        Some(Value::Bytes(jar)) => crate::ddl::check_jar(dir, jar)?,
        Some(Value::Null) | None => crate::ddl::JarCheck::default(),
        Some(_) => return Err(Error::graceful("@UpdateClasses needs the jar as a VARBINARY (byte[]) first parameter")),
    };
    if check.bound.is_empty() && !check.missing.is_empty() {
        return Err(Error::graceful(missing_lua_message(dir, &check.missing)));
    }
    for (class, file) in &check.bound {
        tracing::info!("@UpdateClasses: class {class} is bound to {file}");
    }
    if !check.missing.is_empty() {
        tracing::info!("@UpdateClasses: {} (taken for helper classes)", missing_lua_message(dir, &check.missing));
    }
    if !check.ignored.is_empty() {
        tracing::info!("@UpdateClasses: ignored jar entries that are not procedure classes: {}", check.ignored.join(", "));
    }
    Ok(vec![ResultTable::scalar("STATUS", 0)])
}

fn missing_lua_message(dir: &std::path::Path, missing: &[String]) -> String {
    let files: Vec<String> = missing.iter().map(|c| format!("{}.lua", c.rsplit('.').next().unwrap_or(c))).collect();
    format!(
        "@UpdateClasses: Lockstep runs procedures written in Lua, and these classes have no Lua file in the procedure directory {}: {} (add {}; CREATE PROCEDURE … FROM CLASS a.b.Name binds Name.lua)",
        dir.display(),
        missing.join(", "),
        files.join(", ")
    )
}

/// `@StateHash`: a hash of every partition's rows (tests compare states with it).
fn state_hash(engine: &Engine, reply: Reply) {
    let n = engine.partition_count() as usize;
    let gather = stats::Gather::new(n, move |hashes: Vec<Option<u64>>| {
        let mut t = ResultTable::with_columns(&[("PARTITION_ID", DataType::Integer), ("STATE_HASH", DataType::BigInt)]);
        for (p, h) in hashes.into_iter().enumerate() {
            t.push(vec![Value::Int(p as i64), h.map(|h| Value::Int(h as i64)).unwrap_or(Value::Null)]);
        }
        reply(Outcome::tables(vec![t]))
    });
    for p in 0..n {
        let g = gather.clone();
        engine.shared().send_site(p as u32, crate::site::SiteMsg::Inspect(Box::new(move |part| g.put(p, part.state_hash()))));
    }
}

/// `@SnapshotScan`: the snapshots in the data directory, complete ones and rejected ones.
fn snapshot_scan(engine: &Engine) -> Result<Vec<ResultTable>> {
    let root = crate::snapshot::snapshots_dir(&engine.shared().config.data_dir);
    let scan = crate::snapshot::scan_snapshots(&root)?;
    let mut t = ResultTable::with_columns(&[
        ("PATH", DataType::Varchar),
        ("NONCE", DataType::Varchar),
        ("TXNID", DataType::BigInt),
        ("CREATED", DataType::BigInt),
        ("SIZE", DataType::BigInt),
        ("PARTITIONS", DataType::Integer),
        ("RESULT", DataType::Varchar),
        ("ERR_MSG", DataType::Varchar),
    ]);
    for s in &scan.complete {
        t.push(vec![
            Value::Str(s.dir.display().to_string().into()),
            Value::Str(s.id.to_string().into()),
            Value::Int(s.txn_id),
            Value::Int(s.created_unix_ms as i64),
            Value::Int(s.total_bytes as i64),
            Value::Int(s.partitions as i64),
            Value::Str("SUCCESS".into()),
            Value::Null,
        ]);
    }
    for (dir, why) in &scan.rejected {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let row =
            vec![Value::Str(dir.display().to_string().into()), Value::Str(name.into()), Value::Null, Value::Null, Value::Null, Value::Null];
        t.push(row.into_iter().chain([Value::Str("FAILURE".into()), Value::from(why.as_str())]).collect());
    }
    Ok(vec![t])
}

/// The answer to a call that writes while the database is paused (VoltDB's wording).
pub fn paused_error() -> Error {
    Error::unavailable(
        "Server is paused and is available in read-only mode - please try again later (an administrator ends this with @Resume)",
    )
}

/// `@Quiesce`: every site writes its buffered export rows to their files, then answers.
/// A site reaches the request after the work queued before it, so everything committed
/// before the call is on disk when it returns.
fn quiesce(engine: &Engine, reply: Reply) {
    let shared = engine.shared();
    let n = engine.partition_count() as usize;
    let gather = stats::Gather::new(n, move |done: Vec<Option<()>>| {
        if done.iter().all(Option::is_some) {
            reply(Outcome::tables(vec![ResultTable::scalar("STATUS", 0)]))
        } else {
            reply(Outcome::error(Error::unavailable("a partition site has stopped; export was not flushed everywhere")))
        }
    });
    for site in 0..n {
        let g = gather.clone();
        shared.send_site(site as u32, SiteMsg::Quiesce(Box::new(move || g.put(site, ()))));
    }
}

/// `@Statistics TOPO`: one row per partition plus the MP initiator, and the hash ring. A
/// site is named `host:partition`; the VoltDB client sends each call to the host of its
/// partition's leader.
pub fn topology(engine: &Engine) -> Vec<ResultTable> {
    let mut parts =
        ResultTable::with_columns(&[("Partition", DataType::Integer), ("Sites", DataType::Varchar), ("Leader", DataType::Varchar)]);
    let n = engine.partition_count();
    let cluster = engine.shared().cluster.get().map(|c| c.topology());
    for p in 0..n {
        let (replicas, leader) = match cluster.as_ref().and_then(|t| t.partitions.get(p as usize)) {
            Some(placed) => (placed.replicas.clone(), placed.leader),
            None => (vec![HOST_ID as u32], Some(HOST_ID as u32)),
        };
        let sites: Vec<String> = replicas.iter().map(|h| format!("{h}:{p}")).collect();
        let leader = leader.map(|h| format!("{h}:{p}")).unwrap_or_default();
        parts.push(vec![Value::Int(p as i64), Value::from(sites.join(",").as_str()), Value::Str(leader.into())]);
    }
    // Multi-partition calls go to the node that coordinates them.
    let mp_host = engine.shared().cluster.get().and_then(|c| c.mp_coordinator()).map_or(engine.host_id(), |h| h as i32);
    let mp = format!("{mp_host}:{n}");
    parts.push(vec![Value::Int(MP_PARTITION_ID as i64), Value::from(mp.as_str()), Value::Str(mp.into())]);
    let mut hash = ResultTable::with_columns(&[("HASHTYPE", DataType::Varchar), ("HASHCONFIG", DataType::Varbinary)]);
    hash.push(vec![Value::Str("ELASTIC".into()), Value::Bytes(engine.shared().ring.config_bytes().into())]);
    vec![parts, hash]
}

fn system_catalog(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let selector = str_param(call, 0, "a selector")?.to_ascii_uppercase();
    let view = engine.shared().view();
    let catalog = &view.catalog;
    match selector.as_str() {
        "PROCEDURES" => Ok(vec![procedures_table(engine)]),
        "TABLES" => Ok(vec![meta::tables(catalog)]),
        "COLUMNS" => Ok(vec![meta::columns(catalog)]),
        "INDEXINFO" => Ok(vec![meta::index_info(catalog)]),
        "PRIMARYKEYS" => Ok(vec![meta::primary_keys(catalog)]),
        "TYPEINFO" => Ok(vec![meta::type_info()]),
        "PROCEDURECOLUMNS" => {
            let mut infos: Vec<_> = view.procs.values().collect();
            infos.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(vec![meta::procedure_columns(catalog, infos.iter().map(|p| &*p.name))])
        }
        other => Err(Error::graceful(format!(
            "@SystemCatalog selector {other} is not supported: use TABLES, COLUMNS, INDEXINFO, PRIMARYKEYS, PROCEDURES, PROCEDURECOLUMNS or TYPEINFO"
        ))),
    }
}

/// `@SystemCatalog PROCEDURES`: the client reads column 2 (name) and 6 (partitioning JSON).
/// Also pushed to subscribed connections when the catalog changes.
pub fn procedures_table(engine: &Engine) -> ResultTable {
    let view = engine.shared().view();
    let cols: Vec<(&str, DataType)> =
        ["PROCEDURE_CAT", "PROCEDURE_SCHEM", "PROCEDURE_NAME", "RESERVED1", "RESERVED2", "RESERVED3", "REMARKS"]
            .iter()
            .map(|c| (*c, DataType::Varchar))
            .chain([("PROCEDURE_TYPE", DataType::SmallInt), ("SPECIFIC_NAME", DataType::Varchar)])
            .collect();
    let mut t = ResultTable::with_columns(&cols);
    let mut infos: Vec<_> = view.procs.values().collect();
    infos.sort_by(|a, b| a.name.cmp(&b.name));
    for p in infos {
        let remarks = match &p.route {
            ProcRoute::Single { param, key_type } => format!(
                r#"{{"readOnly":{},"singlePartition":true,"partitionParameter":{param},"partitionParameterType":{}}}"#,
                p.read_only,
                key_type.wire_code()
            ),
            ProcRoute::Directed => {
                format!(r#"{{"readOnly":{},"singlePartition":true,"partitionParameter":-1,"partitionParameterType":-1}}"#, p.read_only)
            }
            _ => format!(r#"{{"readOnly":{},"singlePartition":false}}"#, p.read_only),
        };
        let s = |v: &str| Value::Str(v.to_string().into());
        // PROCEDURE_TYPE 0: java.sql.DatabaseMetaData.procedureResultUnknown, as VoltDB sends.
        t.push(vec![Value::Null, Value::Null, s(&p.name), Value::Null, Value::Null, Value::Null, s(&remarks), Value::Int(0), s(&p.name)]);
    }
    t
}

fn partition_keys(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let kind = str_param(call, 0, "a key type (INTEGER, STRING or VARBINARY)")?.to_ascii_uppercase();
    let keys = engine.shared().ring.partition_keys();
    let key_type = match kind.as_str() {
        "INTEGER" => DataType::Integer,
        "STRING" | "VARCHAR" => DataType::Varchar,
        "VARBINARY" => DataType::Varbinary,
        other => {
            return Err(Error::graceful(format!(
                "Type {other} is not a supported partition key type (INTEGER, STRING, VARCHAR or VARBINARY)"
            )))
        }
    };
    let mut t = ResultTable::with_columns(&[("PARTITION_ID", DataType::Integer), ("PARTITION_KEY", key_type)]);
    for (p, k) in keys {
        let key = match key_type {
            DataType::Integer => Value::Int(k),
            DataType::Varchar => Value::Str(k.to_string().into()),
            _ => Value::Bytes((k as i32).to_be_bytes()[..].into()),
        };
        t.push(vec![Value::Int(p as i64), key]);
    }
    Ok(vec![t])
}

/// Name of this machine, as `@SystemInformation` and `@Statistics` report it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn system_information(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let selector = match call.params.first() {
        None => "OVERVIEW".to_string(),
        Some(_) => str_param(call, 0, "a selector")?.to_ascii_uppercase(),
    };
    let shared = engine.shared();
    match selector.as_str() {
        "OVERVIEW" => {
            let mut t =
                ResultTable::with_columns(&[("HOST_ID", DataType::Integer), ("KEY", DataType::Varchar), ("VALUE", DataType::Varchar)]);
            let addr = shared.client_address();
            let ip = addr.map(|a| a.ip().to_string()).unwrap_or_else(|| "127.0.0.1".into());
            let port = addr.map(|a| a.port().to_string()).unwrap_or_default();
            let now_ms = now_millis();
            let uptime_ms = (now_ms - shared.started_ms).max(0);
            let state = if shared.is_paused() { "PAUSED" } else { "RUNNING" };
            let topology = shared.cluster.get().map(|c| c.topology());
            let hosts = topology.as_ref().map_or(1, |t| t.hosts.len());
            let kfactor = topology.as_ref().and_then(|t| t.partitions.first()).map_or(0, |p| p.replicas.len().saturating_sub(1));
            let rows = [
                ("IPADDRESS", ip.clone()),
                ("HOSTNAME", hostname()),
                ("CLIENTINTERFACE", ip.clone()),
                ("CLIENTPORT", port.clone()),
                // Admin calls are accepted on the client port.
                ("ADMININTERFACE", ip.clone()),
                ("ADMINPORT", port),
                // No HTTP, internal, ZooKeeper or DR listeners: -1 says "not listening".
                ("HTTPINTERFACE", ip.clone()),
                ("HTTPPORT", "-1".to_string()),
                ("INTERNALINTERFACE", ip.clone()),
                ("INTERNALPORT", "-1".to_string()),
                ("ZKINTERFACE", ip.clone()),
                ("ZKPORT", "-1".to_string()),
                ("DRINTERFACE", ip),
                ("DRPORT", "-1".to_string()),
                ("PUBLICINTERFACE", String::new()),
                ("BUILDSTRING", BUILD_STRING.to_string()),
                ("VERSION", env!("CARGO_PKG_VERSION").to_string()),
                ("CATALOG", shared.config.data_dir.join("catalog.sql").display().to_string()),
                ("DEPLOYMENT", String::new()),
                ("CLUSTERSTATE", state.to_string()),
                ("CLUSTERSAFETY", "FULL".to_string()),
                ("INITIALIZED", "true".to_string()),
                ("STARTTIME", shared.started_ms.to_string()),
                ("CREATIONTIME", shared.started_ms.to_string()),
                ("UPTIME", uptime_text(uptime_ms)),
                ("FULLCLUSTERSIZE", hosts.to_string()),
                ("HOSTCOUNT", hosts.to_string()),
                ("SITESPERHOST", engine.partition_count().to_string()),
                ("KFACTOR", kfactor.to_string()),
                ("REPLICATIONROLE", "NONE".to_string()),
                ("PLACEMENTGROUP", "0".to_string()),
                ("LAST_UPDATECORE_DURATION", "0".to_string()),
                ("LICENSE", "Apache-2.0".to_string()),
                ("VOLTDBROOT", shared.config.data_dir.display().to_string()),
            ];
            let me = engine.host_id();
            for (k, v) in rows {
                t.push(vec![Value::Int(me as i64), Value::Str(k.into()), Value::Str(v.into())]);
            }
            // The other nodes of a cluster: where their clients connect.
            if let Some(topology) = topology {
                for host in topology.hosts.iter().filter(|h| h.id as i32 != me) {
                    let Some(addr) = host.client_address else { continue };
                    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
                    for (k, v) in [("IPADDRESS", ip.clone()), ("CLIENTINTERFACE", ip), ("CLIENTPORT", port)] {
                        t.push(vec![Value::Int(host.id as i64), Value::Str(k.into()), Value::Str(v.into())]);
                    }
                }
            }
            Ok(vec![t])
        }
        "DEPLOYMENT" => {
            let mut t = ResultTable::with_columns(&[("PROPERTY", DataType::Varchar), ("VALUE", DataType::Varchar)]);
            let data = shared.config.data_dir.display().to_string();
            let rows = [
                ("adminstartup", "false".to_string()),
                ("heartbeattimeout", "90".to_string()),
                ("partitiondetection", "false".to_string()),
                ("kfactor", "0".to_string()),
                ("sitesperhost", engine.partition_count().to_string()),
                ("hostcount", "1".to_string()),
                ("voltdbroot", data.clone()),
                ("procedures", shared.config.procedure_dir.display().to_string()),
                ("export", "true".to_string()),
                ("exportoverflowpath", shared.config.data_dir.join("export").display().to_string()),
                // The command log (issue 5) is not built yet: reported off until it is.
                ("commandlogenabled", engine.shared().durable.logging().to_string()),
                ("commandlogmode", engine.shared().durable.log.mode_name().to_string()),
                (
                    "commandlogfreqtime",
                    match shared.config.durability {
                        crate::cmdlog::Durability::Async { flush_ms } => flush_ms.to_string(),
                        _ => "0".to_string(),
                    },
                ),
                ("commandlogfreqtxns", "2147483647".to_string()),
                ("commandlogpath", crate::cmdlog::log_dir(&shared.config.data_dir).display().to_string()),
                ("commandlogsnapshotpath", shared.config.data_dir.join("command_log_snapshot").display().to_string()),
                ("snapshotenabled", "false".to_string()),
                ("snapshotpath", shared.config.data_dir.join("snapshots").display().to_string()),
                ("querytimeout", "10000".to_string()),
                ("temptablesmaxsize", "100".to_string()),
                ("users", String::new()),
            ];
            for (k, v) in rows {
                t.push(vec![Value::Str(k.into()), Value::Str(v.into())]);
            }
            Ok(vec![t])
        }
        other => Err(Error::graceful(format!("@SystemInformation selector {other} is not supported: use OVERVIEW or DEPLOYMENT"))),
    }
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Uptime as VoltDB prints it: "D days HH:MM:SS.mmm".
fn uptime_text(ms: i64) -> String {
    let (days, rest) = (ms / 86_400_000, ms % 86_400_000);
    format!("{days} days {:02}:{:02}:{:02}.{:03}", rest / 3_600_000, rest / 60_000 % 60, rest / 1000 % 60, rest % 1000)
}

fn explain(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let sql = str_param(call, 0, "the SQL text")?;
    let catalog = engine.catalog();
    let mut t = ResultTable::with_columns(&[("EXECUTION_PLAN", DataType::Varchar)]);
    for s in lockstep_sql::split_statements(&sql)? {
        let p = lockstep_sql::prepare(&catalog, &s)?;
        t.push(vec![Value::Str(lockstep_sql::explain(&p).into())]);
    }
    Ok(vec![t])
}

/// `@ExplainProc`: one row per statement of the procedure. A Lua procedure's statements are
/// the `sql [[...]]` declarations of its source, named `sql0`, `sql1` … in order.
fn explain_proc(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let name = str_param(call, 0, "a procedure name")?;
    let catalog = engine.catalog();
    let mut t = ResultTable::with_columns(&[
        ("STATEMENT_NAME", DataType::Varchar),
        ("SQL_STATEMENT", DataType::Varchar),
        ("EXECUTION_PLAN", DataType::Varchar),
    ]);
    let statements: Vec<String> = match catalog.procedure(&name).map(|d| &d.body) {
        Some(lockstep_core::ProcedureBody::Sql(sql)) => vec![sql.clone()],
        Some(lockstep_core::ProcedureBody::Lua { source, .. }) => lua_statements(source),
        None => {
            let view = engine.shared().view();
            if !view.procs.contains_key(&name.to_ascii_lowercase()) {
                return Err(Error::graceful(format!("Procedure {name} was not found")));
            }
            Vec::new()
        }
    };
    for (i, sql) in statements.iter().enumerate() {
        let plan = match lockstep_sql::prepare(&catalog, sql) {
            Ok(p) => lockstep_sql::explain(&p),
            Err(e) => format!("cannot plan: {}", e.message),
        };
        t.push(vec![Value::Str(format!("sql{i}").into()), Value::from(sql.as_str()), Value::Str(plan.into())]);
    }
    Ok(vec![t])
}

/// Statements a Lua source declares with `sql [[...]]` (or `sql[[...]]`); at most
/// `LUA_STATEMENTS_MAX`, as a bound on what one source can make us plan.
fn lua_statements(source: &str) -> Vec<String> {
    const LUA_STATEMENTS_MAX: usize = 1000;
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("sql") {
        let after = rest[at + 3..].trim_start();
        rest = &rest[at + 3..];
        if let Some(body) = after.strip_prefix("[[") {
            if let Some(end) = body.find("]]") {
                out.push(body[..end].trim().to_string());
                if out.len() >= LUA_STATEMENTS_MAX {
                    break;
                }
            }
        }
    }
    out
}

/// JDBC metadata tables (`DatabaseMetaData.getColumns` …) in the layouts the 10.1.1 driver
/// reads: it filters these rows by name and hands them to the application as they are.
mod meta {
    use lockstep_core::{Catalog, DataType, ProcedureBody, ResultTable, TableDef, TableKind, Value};

    /// `java.sql.Types` code of a column type.
    pub fn jdbc_type(ty: DataType) -> i64 {
        match ty {
            DataType::TinyInt => -6,
            DataType::SmallInt => 5,
            DataType::Integer => 4,
            DataType::BigInt => -5,
            DataType::Float => 8,
            DataType::Decimal => 3,
            DataType::Varchar => 12,
            DataType::Varbinary => -3,
            DataType::Timestamp => 93,
            DataType::Boolean => 16,
            // java.sql.Types.OTHER, as VoltDB reports its geography types.
            DataType::GeographyPoint | DataType::Geography => 1111,
        }
    }

    /// VoltDB's DECIMAL is DECIMAL(38,12).
    const DECIMAL_PRECISION: i64 = 38;
    const DECIMAL_SCALE: i64 = 12;
    /// Longest VARCHAR/VARBINARY value VoltDB accepts as a parameter (1 MiB).
    const VALUE_LENGTH_MAX_BYTES: i64 = 1_048_576;

    /// (precision in digits of its radix, radix) of a type, as VoltType reports them.
    fn precision_radix(ty: DataType, size: Option<u32>) -> (Value, Value) {
        let bits = |bytes: i64| (Value::Int(bytes * 8 - 1), Value::Int(2));
        match ty {
            DataType::TinyInt => bits(1),
            DataType::SmallInt => bits(2),
            DataType::Integer => bits(4),
            DataType::BigInt | DataType::Timestamp => bits(8),
            DataType::Float => (Value::Int(53), Value::Int(2)),
            DataType::Decimal => (Value::Int(DECIMAL_PRECISION), Value::Int(10)),
            DataType::Boolean => (Value::Int(1), Value::Int(2)),
            DataType::Varchar | DataType::Varbinary | DataType::Geography => {
                (Value::Int(size.map(i64::from).unwrap_or(VALUE_LENGTH_MAX_BYTES)), Value::Null)
            }
            DataType::GeographyPoint => (Value::Int(16), Value::Null),
        }
    }

    fn decimal_digits(ty: DataType) -> Value {
        if ty == DataType::Decimal {
            Value::Int(DECIMAL_SCALE)
        } else {
            Value::Null
        }
    }

    fn s(v: &str) -> Value {
        Value::Str(v.to_string().into())
    }

    /// TYPEINFO: the column types DDL accepts, in JDBC `getTypeInfo` layout, by DATA_TYPE.
    pub fn type_info() -> ResultTable {
        use DataType::{Integer as I, SmallInt as S, TinyInt as T, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TYPE_NAME", V),
            ("DATA_TYPE", I),
            ("PRECISION", I),
            ("LITERAL_PREFIX", V),
            ("LITERAL_SUFFIX", V),
            ("CREATE_PARAMS", V),
            ("NULLABLE", S),
            ("CASE_SENSITIVE", T),
            ("SEARCHABLE", S),
            ("UNSIGNED_ATTRIBUTE", T),
            ("FIXED_PREC_SCALE", T),
            ("AUTO_INCREMENT", T),
            ("LOCAL_TYPE_NAME", V),
            ("MINIMUM_SCALE", S),
            ("MAXIMUM_SCALE", S),
            ("SQL_DATA_TYPE", I),
            ("SQL_DATETIME_SUB", I),
            ("NUM_PREC_RADIX", I),
        ]);
        let mut types = [
            DataType::TinyInt,
            DataType::SmallInt,
            DataType::Integer,
            DataType::BigInt,
            DataType::Float,
            DataType::Decimal,
            DataType::Varchar,
            DataType::Varbinary,
            DataType::Timestamp,
        ];
        types.sort_by_key(|ty| jdbc_type(*ty));
        for ty in types {
            let (precision, radix) = precision_radix(ty, None);
            let text = matches!(ty, DataType::Varchar | DataType::Varbinary | DataType::Timestamp);
            let (prefix, suffix) = match ty {
                DataType::Varbinary => (s("X'"), s("'")),
                _ if text => (s("'"), s("'")),
                _ => (Value::Null, Value::Null),
            };
            let sized = matches!(ty, DataType::Varchar | DataType::Varbinary);
            let scale = |v: i64| if text { Value::Null } else { Value::Int(v) };
            let scale_max = if ty == DataType::Decimal { DECIMAL_SCALE } else { 0 };
            t.push(vec![
                s(ty.sql_name()),
                Value::Int(jdbc_type(ty)),
                precision,
                prefix,
                suffix,
                if sized { s("max_length") } else { Value::Null },
                Value::Int(1), // typeNullable
                Value::Int(i64::from(ty == DataType::Varchar)),
                Value::Int(if ty == DataType::Varchar { 3 } else { 2 }), // LIKE only on text
                if text { Value::Null } else { Value::Int(0) },
                Value::Int(i64::from(ty == DataType::Decimal)),
                Value::Int(0),
                s(ty.sql_name()),
                scale(scale_max),
                scale(scale_max),
                Value::Null,
                Value::Null,
                radix,
            ]);
        }
        t
    }

    fn table_type(def: &TableDef) -> &'static str {
        match def.kind {
            TableKind::View(_) => "VIEW",
            TableKind::Stream { .. } => "EXPORT",
            TableKind::Table => "TABLE",
        }
    }

    pub fn tables(catalog: &Catalog) -> ResultTable {
        let names = [
            "TABLE_CAT",
            "TABLE_SCHEM",
            "TABLE_NAME",
            "TABLE_TYPE",
            "REMARKS",
            "TYPE_CAT",
            "TYPE_SCHEM",
            "TYPE_NAME",
            "SELF_REFERENCING_COL_NAME",
            "REF_GENERATION",
        ];
        let cols: Vec<_> = names.iter().map(|n| (*n, DataType::Varchar)).collect();
        let mut t = ResultTable::with_columns(&cols);
        for def in catalog.tables() {
            // REMARKS carries the partitioning as JSON, like VoltDB's.
            let remarks = match def.partition_column {
                Some(c) => Value::Str(format!(r#"{{"partitionColumn":"{}"}}"#, def.columns[c].name).into()),
                None => Value::Null,
            };
            let mut row = vec![Value::Null, Value::Null, s(&def.name), s(table_type(def)), remarks];
            row.extend((0..5).map(|_| Value::Null));
            t.push(row);
        }
        t
    }

    pub fn columns(catalog: &Catalog) -> ResultTable {
        use DataType::{Integer as I, SmallInt as Sm, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TABLE_CAT", V),
            ("TABLE_SCHEM", V),
            ("TABLE_NAME", V),
            ("COLUMN_NAME", V),
            ("DATA_TYPE", I),
            ("TYPE_NAME", V),
            ("COLUMN_SIZE", I),
            ("BUFFER_LENGTH", I),
            ("DECIMAL_DIGITS", I),
            ("NUM_PREC_RADIX", I),
            ("NULLABLE", I),
            ("REMARKS", V),
            ("COLUMN_DEF", V),
            ("SQL_DATA_TYPE", I),
            ("SQL_DATETIME_SUB", I),
            ("CHAR_OCTET_LENGTH", I),
            ("ORDINAL_POSITION", I),
            ("IS_NULLABLE", V),
            ("SCOPE_CATALOG", V),
            ("SCOPE_SCHEMA", V),
            ("SCOPE_TABLE", V),
            ("SOURCE_DATA_TYPE", Sm),
            ("IS_AUTOINCREMENT", V),
        ]);
        for def in catalog.tables() {
            for (i, c) in def.columns.iter().enumerate() {
                let (size, radix) = precision_radix(c.ty, Some(c.size));
                let octets = match c.ty {
                    DataType::Varchar | DataType::Varbinary => Value::Int(c.size as i64),
                    _ => Value::Null,
                };
                let default = match &c.default {
                    None | Some(Value::Null) => Value::Null,
                    Some(Value::Str(v)) => Value::Str(format!("'{}'", v.replace('\'', "''")).into()),
                    Some(v) => Value::Str(v.to_string().into()),
                };
                let remarks = if def.partition_column == Some(i) { s("PARTITION_COLUMN") } else { Value::Null };
                t.push(vec![
                    Value::Null,
                    Value::Null,
                    s(&def.name),
                    s(&c.name),
                    Value::Int(jdbc_type(c.ty)),
                    s(c.ty.sql_name()),
                    size,
                    Value::Null,
                    decimal_digits(c.ty),
                    radix,
                    // java.sql.DatabaseMetaData.columnNullable (1) / columnNoNulls (0)
                    Value::Int(c.nullable as i64),
                    remarks,
                    default,
                    Value::Null,
                    Value::Null,
                    octets,
                    Value::Int(i as i64 + 1),
                    s(if c.nullable { "YES" } else { "NO" }),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    s("NO"),
                ]);
            }
        }
        t
    }

    pub fn index_info(catalog: &Catalog) -> ResultTable {
        use DataType::{Integer as I, SmallInt as Sm, TinyInt as Ti, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TABLE_CAT", V),
            ("TABLE_SCHEM", V),
            ("TABLE_NAME", V),
            ("NON_UNIQUE", Ti),
            ("INDEX_QUALIFIER", V),
            ("INDEX_NAME", V),
            ("TYPE", Sm),
            ("ORDINAL_POSITION", Sm),
            ("COLUMN_NAME", V),
            ("ASC_OR_DESC", V),
            ("CARDINALITY", I),
            ("PAGES", I),
            ("FILTER_CONDITION", V),
        ]);
        for def in catalog.tables() {
            for ix in &def.indexes {
                let unique = ix.unique || ix.assume_unique || ix.primary;
                for (pos, &c) in ix.columns.iter().enumerate() {
                    t.push(vec![
                        Value::Null,
                        Value::Null,
                        s(&def.name),
                        Value::Int(if unique { 0 } else { 1 }),
                        Value::Null,
                        s(&ix.name),
                        // java.sql.DatabaseMetaData.tableIndexOther: every index is an ordered tree.
                        Value::Int(3),
                        Value::Int(pos as i64 + 1),
                        // A column's name, or an expression key's text.
                        s(def.key_name(c)),
                        s("A"),
                        Value::Null,
                        Value::Null,
                        // A partial index's WHERE condition (JDBC's FILTER_CONDITION).
                        ix.predicate.as_ref().map_or(Value::Null, |p| s(&p.text)),
                    ]);
                }
            }
        }
        t
    }

    pub fn primary_keys(catalog: &Catalog) -> ResultTable {
        use DataType::{SmallInt as Sm, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TABLE_CAT", V),
            ("TABLE_SCHEM", V),
            ("TABLE_NAME", V),
            ("COLUMN_NAME", V),
            ("KEY_SEQ", Sm),
            ("PK_NAME", V),
        ]);
        for def in catalog.tables() {
            let Some(pk) = def.primary_key() else { continue };
            for (seq, &c) in pk.columns.iter().enumerate() {
                t.push(vec![Value::Null, Value::Null, s(&def.name), s(&def.columns[c].name), Value::Int(seq as i64 + 1), s(&pk.name)]);
            }
        }
        t
    }

    /// Parameter types of a callable procedure: SQL procedures from their planned statement,
    /// default procedures from their table; Lua procedures declare none.
    fn parameter_types(catalog: &Catalog, name: &str) -> Vec<DataType> {
        if let Some(def) = catalog.procedure(name) {
            return match &def.body {
                ProcedureBody::Sql(sql) => lockstep_sql::prepare(catalog, sql)
                    .map(|p| p.param_types.iter().map(|t| t.unwrap_or(DataType::Varchar)).collect())
                    .unwrap_or_default(),
                ProcedureBody::Lua { .. } => Vec::new(),
            };
        }
        let Some((table, op)) = name.rsplit_once('.') else { return Vec::new() };
        let Some(def) = catalog.table(table) else { return Vec::new() };
        let all: Vec<DataType> = def.columns.iter().map(|c| c.ty).collect();
        let pk: Vec<DataType> = def.primary_key().map(|k| k.columns.iter().map(|&c| def.columns[c].ty).collect()).unwrap_or_default();
        match op.to_ascii_lowercase().as_str() {
            "insert" | "upsert" => all,
            "select" | "delete" => pk,
            "update" => all.into_iter().chain(pk).collect(),
            _ => Vec::new(),
        }
    }

    pub fn procedure_columns<'a>(catalog: &Catalog, names: impl Iterator<Item = &'a str>) -> ResultTable {
        use DataType::{Integer as I, SmallInt as Sm, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("PROCEDURE_CAT", V),
            ("PROCEDURE_SCHEM", V),
            ("PROCEDURE_NAME", V),
            ("COLUMN_NAME", V),
            ("COLUMN_TYPE", Sm),
            ("DATA_TYPE", I),
            ("TYPE_NAME", V),
            ("PRECISION", I),
            ("LENGTH", I),
            ("SCALE", Sm),
            ("RADIX", Sm),
            ("NULLABLE", Sm),
            ("REMARKS", V),
            ("COLUMN_DEF", V),
            ("SQL_DATA_TYPE", I),
            ("SQL_DATETIME_SUB", I),
            ("CHAR_OCTET_LENGTH", I),
            ("ORDINAL_POSITION", I),
            ("IS_NULLABLE", V),
            ("SPECIFIC_NAME", V),
        ]);
        for name in names {
            let partition_param = match catalog.procedure(name).map(|d| &d.partitioning) {
                Some(lockstep_core::Partitioning::Single { parameter, .. }) => Some(*parameter),
                _ => None,
            };
            for (i, ty) in parameter_types(catalog, name).into_iter().enumerate() {
                let (precision, radix) = precision_radix(ty, None);
                let length = match ty {
                    DataType::TinyInt | DataType::Boolean => 1,
                    DataType::SmallInt => 2,
                    DataType::Integer => 4,
                    DataType::BigInt | DataType::Float | DataType::Timestamp => 8,
                    DataType::Decimal | DataType::GeographyPoint => 16,
                    DataType::Varchar | DataType::Varbinary | DataType::Geography => VALUE_LENGTH_MAX_BYTES,
                };
                let octets =
                    if matches!(ty, DataType::Varchar | DataType::Varbinary) { Value::Int(VALUE_LENGTH_MAX_BYTES) } else { Value::Null };
                let remarks = if partition_param == Some(i) { s("PARTITION_PARAMETER") } else { Value::Null };
                t.push(vec![
                    Value::Null,
                    Value::Null,
                    s(name),
                    s(&format!("param{i}")),
                    // java.sql.DatabaseMetaData.procedureColumnIn: every parameter is IN.
                    Value::Int(1),
                    Value::Int(jdbc_type(ty)),
                    s(ty.sql_name()),
                    precision,
                    Value::Int(length),
                    decimal_digits(ty),
                    radix,
                    // java.sql.DatabaseMetaData.procedureNullableUnknown
                    Value::Int(2),
                    remarks,
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    octets,
                    Value::Int(i as i64 + 1),
                    s(""),
                    s(name),
                ]);
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;
    use std::sync::Arc;

    fn engine(name: &str) -> (Arc<Engine>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("lockstep-sysprocs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = EngineConfig::new(&dir);
        c.sites = 2;
        (Engine::start(c).unwrap(), dir)
    }

    fn run(engine: &Engine, procedure: &str, params: Vec<Value>) -> Outcome {
        let (tx, rx) = std::sync::mpsc::channel();
        engine.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
        rx.recv().unwrap()
    }

    fn adhoc(engine: &Engine, sql: &str) {
        let o = run(engine, "@AdHoc", vec![Value::Str(sql.into())]);
        assert!(o.is_success(), "{sql}: {:?}", o.status_string);
    }

    fn column(t: &ResultTable, name: &str) -> Vec<Value> {
        let i = t.column_index(name).unwrap();
        t.rows.iter().map(|r| r[i].clone()).collect()
    }

    #[test]
    fn catalog_metadata_and_pause() {
        let (e, dir) = engine("meta");
        adhoc(&e, "CREATE TABLE p (id INTEGER NOT NULL, name VARCHAR(40) NOT NULL, price DECIMAL, PRIMARY KEY (id))");
        adhoc(&e, "PARTITION TABLE p ON COLUMN id");
        adhoc(&e, "CREATE PROCEDURE Above AS SELECT id FROM p WHERE price > ? AND name = ?");

        let cols = &run(&e, "@SystemCatalog", vec![Value::Str("COLUMNS".into())]).tables[0];
        assert_eq!(cols.columns.len(), 23);
        assert_eq!(column(cols, "DATA_TYPE"), vec![Value::Int(4), Value::Int(12), Value::Int(3)]);
        assert_eq!(column(cols, "COLUMN_SIZE"), vec![Value::Int(31), Value::Int(40), Value::Int(38)]);
        assert_eq!(column(cols, "REMARKS")[0], Value::Str("PARTITION_COLUMN".into()));

        let params = &run(&e, "@SystemCatalog", vec![Value::Str("PROCEDURECOLUMNS".into())]).tables[0];
        let above: Vec<Value> = params
            .rows
            .iter()
            .filter(|r| r[2] == Value::Str("ABOVE".into()) || r[2] == Value::Str("Above".into()))
            .map(|r| r[6].clone())
            .collect();
        assert_eq!(above, vec![Value::Str("DECIMAL".into()), Value::Str("VARCHAR".into())]);

        let pk = &run(&e, "@SystemCatalog", vec![Value::Str("PRIMARYKEYS".into())]).tables[0];
        assert_eq!(column(pk, "KEY_SEQ"), vec![Value::Int(1)]);

        assert!(run(&e, "@Pause", vec![]).is_success());
        let refused = run(&e, "P.insert", vec![Value::Int(1), Value::Str("a".into()), Value::Null]);
        assert_eq!(refused.status, -5);
        assert!(run(&e, "@AdHoc", vec![Value::Str("SELECT COUNT(*) FROM p".into())]).is_success());
        assert_eq!(run(&e, "@AdHoc", vec![Value::Str("DELETE FROM p".into())]).status, -5);
        assert!(run(&e, "@Resume", vec![]).is_success());
        assert!(run(&e, "P.insert", vec![Value::Int(1), Value::Str("a".into()), Value::Null]).is_success());

        let stats = &run(&e, "@Statistics", vec![Value::Str("TABLE".into()), Value::Int(0)]).tables[0];
        let tuples: i64 = column(stats, "TUPLE_COUNT").iter().filter_map(Value::as_i64).sum();
        assert_eq!(tuples, 1);
        assert!(run(&e, "@Quiesce", vec![]).is_success());
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    fn run_as(engine: &Engine, who: &Arc<crate::Principal>, procedure: &str, params: Vec<Value>) -> Outcome {
        let (tx, rx) = std::sync::mpsc::channel();
        let call = Call { procedure: procedure.into(), params, principal: Some(who.clone()), ..Default::default() };
        engine.submit(call, Box::new(move |o| tx.send(o).unwrap()));
        rx.recv().unwrap()
    }

    /// Each kind of call is checked in `Engine::submit`, and roles changed by DDL count from
    /// the next call.
    #[test]
    fn calls_are_checked_against_the_callers_permissions() {
        let (e, dir) = engine("auth");
        adhoc(&e, "CREATE TABLE a (id INTEGER NOT NULL PRIMARY KEY, v INTEGER)");
        adhoc(&e, "PARTITION TABLE a ON COLUMN id");
        adhoc(&e, "CREATE ROLE reader WITH sqlread, defaultprocread");
        adhoc(&e, "CREATE PROCEDURE Count ALLOW reader AS SELECT COUNT(*) FROM a");
        adhoc(&e, "CREATE PROCEDURE Wipe AS DELETE FROM a");
        let reader = Arc::new(crate::Principal::new("rita", &["reader".to_string()]));
        let admin = Arc::new(crate::Principal::new("root", &["administrator".to_string()]));
        let sql = |t: &str| vec![Value::Str(t.into())];
        let refused = |o: Outcome, needed: &str| {
            assert_eq!(o.status, -3, "{:?}", o.status_string);
            let m = o.status_string.unwrap_or_default();
            assert!(m.contains("User rita") && m.contains(needed), "{m}");
        };
        assert!(run_as(&e, &reader, "@AdHoc", sql("SELECT COUNT(*) FROM a")).is_success());
        refused(run_as(&e, &reader, "@AdHoc", sql("INSERT INTO a VALUES (1, 1)")), "SQL permission");
        refused(run_as(&e, &reader, "@AdHoc", sql("CREATE TABLE b (x INTEGER)")), "ADMIN");
        assert!(run_as(&e, &reader, "Count", vec![]).is_success());
        refused(run_as(&e, &reader, "Wipe", vec![]), "ALLPROC");
        assert!(run_as(&e, &reader, "A.select", vec![Value::Int(1)]).is_success());
        refused(run_as(&e, &reader, "A.insert", vec![Value::Int(1), Value::Int(1)]), "DEFAULTPROC");
        refused(run_as(&e, &reader, "@Pause", vec![]), "ADMIN");
        refused(run_as(&e, &reader, "@SnapshotSave", vec![]), "ADMIN");
        assert!(run_as(&e, &reader, "@Ping", vec![]).is_success());
        assert!(run_as(&e, &reader, "@SystemCatalog", sql("TABLES")).is_success());
        // DDL by an administrator changes what the connected reader may do at once.
        assert!(run_as(&e, &admin, "@AdHoc", sql("DROP PROCEDURE Count")).is_success());
        assert!(run_as(&e, &admin, "@AdHoc", sql("DROP ROLE reader")).is_success());
        refused(run_as(&e, &reader, "@AdHoc", sql("SELECT COUNT(*) FROM a")), "SQLREAD");
        assert!(run_as(&e, &admin, "@AdHoc", sql("CREATE ROLE reader WITH sql")).is_success());
        assert!(run_as(&e, &reader, "@AdHoc", sql("INSERT INTO a VALUES (1, 1)")).is_success());
        assert!(run_as(&e, &admin, "Wipe", vec![]).is_success());
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn lua_statements_are_found_in_order() {
        let src = "local a = sql [[SELECT 1]]\nlocal b = sql[[ SELECT 2 ]]\nlocal sqlx = 3";
        assert_eq!(lua_statements(src), vec!["SELECT 1".to_string(), "SELECT 2".to_string()]);
    }

    #[test]
    fn uptime_is_formatted_like_voltdb() {
        assert_eq!(uptime_text(90_061_001), "1 days 01:01:01.001");
    }
}
