//! The catalog: tables, streams, views, indexes, procedures and roles, as plain data.
//!
//! DDL is interpreted by the `sql` crate into changes of this structure; every site holds
//! storage shaped by it. Table ids are never reused, so a plan made for a dropped table can
//! never touch a new one by accident.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::value::{DataType, Value};

pub type TableId = u32;

/// A column of a table, stream or view.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: DataType,
    /// Maximum length for VARCHAR (characters, or bytes when `in_bytes`) and VARBINARY (bytes).
    pub size: u32,
    pub in_bytes: bool,
    pub nullable: bool,
    pub default: Option<Value>,
}

/// An index over columns of one table. The primary key is the index with `primary` set.
///
/// A key part may be an expression over the row (`FIELD(doc, 'k')`, `a + b`): storage
/// computes it when a row is written and keeps the value after the row's columns, hidden
/// from readers, so the index orders and hashes it like a column. `columns[part]` of such
/// a part is that hidden position: the table's column count plus the expression's number
/// among all the table's expression parts, in index order (`TableDef::number_computed`).
///
/// A partial index (`CREATE INDEX … WHERE cond`) holds only the rows for which `predicate`
/// is true (NULL counts as false), and a unique one refuses duplicates only among them.
/// Storage keeps whether a row passes as one more hidden value (`TableDef::predicate_flag`).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexDef {
    pub name: String,
    pub columns: Vec<usize>,
    pub unique: bool,
    /// VoltDB's ASSUMEUNIQUE: unique, but only checked within a partition.
    pub assume_unique: bool,
    pub primary: bool,
    /// The key parts that are expressions, in part order.
    pub exprs: Vec<IndexExpr>,
    /// A partial index's condition over the row, compiled by the `sql` crate.
    pub predicate: Option<RowExpr>,
}

/// A key part of an index that is a deterministic expression over the row.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexExpr {
    /// Which key part of the index it is (0-based).
    pub part: usize,
    /// The expression, compiled by the `sql` crate; its value has type `ty`.
    pub expr: RowExpr,
    pub ty: DataType,
}

/// An aggregate kept by a materialized view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewAggregate {
    CountStar,
    Count(usize),
    Sum(usize),
    Min(usize),
    Max(usize),
}

/// A deterministic function of one source row, computed by storage (a view's filter or an
/// expression group key). Storage knows no SQL: the `sql` crate compiles the expression and
/// hands it over behind this trait.
pub trait RowFn: Send + Sync + std::fmt::Debug {
    fn eval(&self, row: &[Value]) -> Result<Value>;

    /// The compiled form, for the crate that made it (the planner compares an indexed
    /// expression with a query's).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A compiled row expression with the SQL text it came from; two are equal when their
/// texts are (the compiled form cannot be compared).
#[derive(Clone, Debug)]
pub struct RowExpr {
    pub text: String,
    pub eval: Arc<dyn RowFn>,
}

impl PartialEq for RowExpr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl RowExpr {
    pub fn eval(&self, row: &[Value]) -> Result<Value> {
        self.eval.eval(row)
    }
}

/// One group key of a materialized view: a source column, or a deterministic expression
/// over the source row (`TRUNCATE(DAY, ts)`).
#[derive(Clone, Debug, PartialEq)]
pub enum ViewKey {
    Column(usize),
    Expr(RowExpr),
}

impl ViewKey {
    /// The source column this key is, when it is a plain column.
    pub fn column(&self) -> Option<usize> {
        match self {
            ViewKey::Column(c) => Some(*c),
            ViewKey::Expr(_) => None,
        }
    }

    /// The key's value for source row `row`.
    pub fn eval(&self, row: &[Value]) -> Result<Value> {
        match self {
            ViewKey::Column(c) => Ok(row.get(*c).cloned().unwrap_or(Value::Null)),
            ViewKey::Expr(e) => e.eval(row),
        }
    }
}

/// A materialized view over one source table or stream:
/// `SELECT k…, aggs FROM src [WHERE filter] GROUP BY k…`.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewDef {
    pub source: TableId,
    /// Group keys computed from a source row; they are the view's first columns and its key.
    pub group_by: Vec<ViewKey>,
    /// The remaining view columns, in order.
    pub aggregates: Vec<ViewAggregate>,
    /// Only source rows for which this is true are counted (VoltDB's WHERE in a view).
    pub filter: Option<RowExpr>,
}

impl ViewDef {
    /// Whether source row `row` counts in the view (passes its WHERE; NULL does not).
    pub fn counts(&self, row: &[Value]) -> Result<bool> {
        match &self.filter {
            None => Ok(true),
            Some(f) => Ok(f.eval(row)?.truth() == Some(true)),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TableKind {
    Table,
    /// Append-only, not queryable; committed rows go to the export target.
    Stream {
        target: Option<String>,
    },
    View(ViewDef),
}

/// A table, stream or view.
#[derive(Clone, Debug, PartialEq)]
pub struct TableDef {
    pub id: TableId,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub indexes: Vec<IndexDef>,
    /// The partitioning column; None means replicated (or, for a stream, not partitioned).
    pub partition_column: Option<usize>,
    pub kind: TableKind,
}

impl TableDef {
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    pub fn primary_key(&self) -> Option<&IndexDef> {
        self.indexes.iter().find(|i| i.primary)
    }

    /// The expression key parts of all indexes, in the order their values follow the
    /// row's columns in storage.
    pub fn computed(&self) -> impl Iterator<Item = &IndexExpr> {
        self.indexes.iter().flat_map(|i| i.exprs.iter())
    }

    /// Gives every expression key part its hidden position after the columns (see
    /// `IndexDef`); run whenever columns or indexes change.
    pub fn number_computed(&mut self) {
        let mut next = self.columns.len();
        for ix in &mut self.indexes {
            for e in &ix.exprs {
                if let Some(c) = ix.columns.get_mut(e.part) {
                    *c = next;
                    next += 1;
                }
            }
        }
    }

    /// How many values storage keeps after a row's columns: the expression key parts, then
    /// one flag per partial index saying whether the row passes its predicate.
    pub fn computed_width(&self) -> usize {
        self.computed().count() + self.indexes.iter().filter(|i| i.predicate.is_some()).count()
    }

    /// The stored position of index `i`'s flag (`Value::Bool(true)` when the row belongs in
    /// it), for a partial index: after every expression key, in index order.
    pub fn predicate_flag(&self, i: usize) -> Option<usize> {
        self.indexes.get(i)?.predicate.as_ref()?;
        let before = self.indexes[..i].iter().filter(|x| x.predicate.is_some()).count();
        Some(self.columns.len() + self.computed().count() + before)
    }

    /// The type of key position `c`: a column's, or a computed key's.
    pub fn key_type(&self, c: usize) -> Option<DataType> {
        match self.columns.get(c) {
            Some(col) => Some(col.ty),
            None => self.computed().nth(c - self.columns.len()).map(|e| e.ty),
        }
    }

    /// How key position `c` reads in catalogs: the column's name, or the expression.
    pub fn key_name(&self, c: usize) -> &str {
        match self.columns.get(c) {
            Some(col) => &col.name,
            None => self.computed().nth(c - self.columns.len()).map_or("?", |e| e.expr.text.as_str()),
        }
    }

    pub fn is_replicated(&self) -> bool {
        self.partition_column.is_none() && matches!(self.kind, TableKind::Table)
    }

    pub fn is_stream(&self) -> bool {
        matches!(self.kind, TableKind::Stream { .. })
    }

    pub fn view(&self) -> Option<&ViewDef> {
        match &self.kind {
            TableKind::View(v) => Some(v),
            _ => None,
        }
    }
}

/// How a procedure's calls are routed.
#[derive(Clone, Debug, PartialEq)]
pub enum Partitioning {
    /// Runs under the multi-partition coordinator, seeing every partition.
    Multi,
    /// Runs on the partition that owns the value of parameter `parameter` (0-based).
    Single { table: String, column: String, parameter: usize, key_type: DataType },
    /// Runs on the one partition the caller names (every-partition calls).
    Directed,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ProcedureBody {
    /// One SQL statement; its `?` are the procedure's parameters.
    Sql(String),
    /// A Lua module: its source and where it came from (for error messages).
    Lua { path: String, source: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcedureDef {
    pub name: String,
    pub body: ProcedureBody,
    pub partitioning: Partitioning,
    /// Set when declared `FROM CLASS a.b.Name` (the Lua file is `Name.lua`).
    pub class_name: Option<String>,
    /// Roles allowed to call it besides those with ALLPROC (`ALLOW r, …`), lower-case.
    pub allow: Vec<String>,
}

/// What a role lets its users do: VoltDB's permissions, one bit each. A role's set is kept
/// as declared; `implied` adds what each permission implies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Permissions(u8);

impl Permissions {
    pub const NONE: Permissions = Permissions(0);
    /// Everything: DDL, system procedures that change state, and all of the below.
    pub const ADMIN: Permissions = Permissions(1);
    /// Ad-hoc SQL that writes (implies SQLREAD and DEFAULTPROC).
    pub const SQL: Permissions = Permissions(1 << 1);
    /// Ad-hoc SQL that only reads.
    pub const SQLREAD: Permissions = Permissions(1 << 2);
    /// Every default procedure (`T.insert` …; implies DEFAULTPROCREAD).
    pub const DEFAULTPROC: Permissions = Permissions(1 << 3);
    /// The default procedures that only read (`T.select`).
    pub const DEFAULTPROCREAD: Permissions = Permissions(1 << 4);
    /// Every user-defined procedure.
    pub const ALLPROC: Permissions = Permissions(1 << 5);

    /// Names as DDL spells them, with VoltDB's legacy aliases last.
    const NAMES: [(&'static str, Permissions); 8] = [
        ("ADMIN", Permissions::ADMIN),
        ("SQL", Permissions::SQL),
        ("SQLREAD", Permissions::SQLREAD),
        ("DEFAULTPROC", Permissions::DEFAULTPROC),
        ("DEFAULTPROCREAD", Permissions::DEFAULTPROCREAD),
        ("ALLPROC", Permissions::ALLPROC),
        ("SYSPROC", Permissions::ADMIN),
        ("ADHOC", Permissions::SQL),
    ];

    /// A permission by name, in any case (SYSPROC = ADMIN and ADHOC = SQL, as VoltDB).
    pub fn parse(word: &str) -> Option<Permissions> {
        Self::NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(word)).map(|(_, p)| *p)
    }

    pub const fn union(self, other: Permissions) -> Permissions {
        Permissions(self.0 | other.0)
    }

    /// Whether every permission of `other` is in this set.
    pub const fn contains(self, other: Permissions) -> bool {
        self.0 & other.0 == other.0
    }

    /// The set with what its permissions imply, as VoltDB: ADMIN implies everything, SQL
    /// implies SQLREAD and DEFAULTPROC, DEFAULTPROC implies DEFAULTPROCREAD.
    pub const fn implied(self) -> Permissions {
        if self.contains(Permissions::ADMIN) {
            return Permissions(0x3f);
        }
        let mut p = self;
        if p.contains(Permissions::SQL) {
            p = p.union(Permissions::SQLREAD).union(Permissions::DEFAULTPROC);
        }
        if p.contains(Permissions::DEFAULTPROC) {
            p = p.union(Permissions::DEFAULTPROCREAD);
        }
        p
    }

    /// The raw bits (a connection caches them beside a catalog version).
    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn from_bits(bits: u8) -> Permissions {
        Permissions(bits & 0x3f)
    }

    /// The canonical names of the permissions in the set.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES[..6].iter().filter(|(_, p)| self.contains(*p)).map(|(n, _)| *n).collect()
    }
}

/// A role created by `CREATE ROLE name [WITH permission, …]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleDef {
    /// Lower-case: role names are matched in any case.
    pub name: String,
    pub permissions: Permissions,
}

/// The roles every database has (VoltDB's): they cannot be created or dropped.
pub const BUILTIN_ROLES: [(&str, Permissions); 2] =
    [("administrator", Permissions::ADMIN), ("user", Permissions::SQL.union(Permissions::ALLPROC))];

/// A plain view (`CREATE VIEW v AS SELECT …` without grouping): a named query that the
/// planner expands where it is read. It holds no rows and nothing maintains it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainViewDef {
    pub name: String,
    /// Its query, as written.
    pub query: String,
    /// Its column names, in order.
    pub columns: Vec<String>,
    /// Lower-case names of the tables and plain views its query reads: dropping one of
    /// them must not leave the view reading nothing.
    pub reads: Vec<String>,
}

/// The unit of a TTL's age (VoltDB's `USING TTL n [SECONDS|MINUTES|HOURS|DAYS]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUnit {
    Seconds,
    Minutes,
    Hours,
    Days,
}

impl TtlUnit {
    pub fn seconds(self) -> i64 {
        match self {
            TtlUnit::Seconds => 1,
            TtlUnit::Minutes => 60,
            TtlUnit::Hours => 3600,
            TtlUnit::Days => 86_400,
        }
    }

    pub fn sql_name(self) -> &'static str {
        match self {
            TtlUnit::Seconds => "SECONDS",
            TtlUnit::Minutes => "MINUTES",
            TtlUnit::Hours => "HOURS",
            TtlUnit::Days => "DAYS",
        }
    }
}

/// A table's time to live (`USING TTL`): rows whose `column` is older than `amount` `unit`
/// are deleted in the background, at most `batch_size` rows per partition per run and at
/// most `max_frequency` runs per second.
#[derive(Clone, Debug, PartialEq)]
pub struct TtlDef {
    /// The column's name as the table spells it: a TIMESTAMP, or an integer holding
    /// seconds since the Unix epoch; NOT NULL.
    pub column: String,
    pub amount: i64,
    pub unit: TtlUnit,
    pub batch_size: u32,
    pub max_frequency: u32,
}

impl TtlDef {
    /// The age past which a row expires, in microseconds.
    pub fn max_age_micros(&self) -> i64 {
        self.amount.saturating_mul(self.unit.seconds()).saturating_mul(1_000_000)
    }
}

/// When a task runs (`CREATE TASK … ON SCHEDULE …`).
#[derive(Clone, Debug, PartialEq)]
pub enum TaskSchedule {
    /// Every `millis`, counted from when the task was created or enabled.
    Every { millis: i64 },
    /// `millis` after the previous run ended.
    Delay { millis: i64 },
    /// At the seconds the cron expression names (UTC); checked when the task is created.
    Cron(String),
    /// `CREATE TASK … FROM CLASS a.b.Name`: VoltDB's Java scheduler class, which picks both
    /// the times and the procedure. Lockstep cannot run Java, so such a task is kept (for
    /// DROP TASK and the catalog) but only ever disabled.
    FromClass(String),
}

/// Where a task's procedure runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskRunOn {
    /// Once per run (VoltDB's default).
    Database,
    /// Once on every partition per run (a directed procedure).
    Partitions,
}

/// What a task does when its procedure fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskOnError {
    Log,
    Ignore,
    /// Stop running until the task is enabled again.
    Stop,
}

/// A scheduled task: `procedure` called with `args` on `schedule`.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskDef {
    pub name: String,
    pub schedule: TaskSchedule,
    pub procedure: String,
    pub args: Vec<Value>,
    pub run_on: TaskRunOn,
    pub on_error: TaskOnError,
    pub enabled: bool,
}

/// The whole schema. Cheap to clone: definitions are shared.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    tables: BTreeMap<String, Arc<TableDef>>,
    /// Tables with a TTL, by table id.
    ttl: BTreeMap<TableId, Arc<TtlDef>>,
    /// Scheduled tasks, by lower-case name.
    tasks: BTreeMap<String, Arc<TaskDef>>,
    plain_views: BTreeMap<String, Arc<PlainViewDef>>,
    by_id: BTreeMap<TableId, Arc<TableDef>>,
    procedures: BTreeMap<String, Arc<ProcedureDef>>,
    roles: BTreeMap<String, Arc<RoleDef>>,
    next_table_id: TableId,
    /// Bumped by every change, so cached plans know when to re-plan.
    pub version: u64,
}

fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// A map keyed by lower-case names. Procedures are looked up by name on every call, where
/// SipHash took more instructions than the rest of the lookup: foldhash, with a fixed seed.
pub type NameMap<V> = std::collections::HashMap<String, V, foldhash::fast::FixedState>;

/// The entry of `map` for `name` in any ASCII case, without allocating for names of up to
/// 128 bytes.
pub fn get_ignoring_case<'a, V>(map: &'a NameMap<V>, name: &str) -> Option<&'a V> {
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return map.get(name);
    }
    let mut buf = [0u8; 128];
    let Some(dst) = buf.get_mut(..name.len()) else {
        return map.get(&key(name));
    };
    for (d, s) in dst.iter_mut().zip(name.bytes()) {
        *d = s.to_ascii_lowercase();
    }
    // ASCII lower-casing keeps UTF-8 valid, so this cannot fail.
    map.get(std::str::from_utf8(dst).ok()?)
}

impl Catalog {
    pub fn table(&self, name: &str) -> Option<&Arc<TableDef>> {
        self.tables.get(&key(name))
    }

    pub fn table_by_id(&self, id: TableId) -> Option<&Arc<TableDef>> {
        self.by_id.get(&id)
    }

    /// Tables, streams and views in name order.
    pub fn tables(&self) -> impl Iterator<Item = &Arc<TableDef>> {
        self.tables.values()
    }

    /// Views whose source is `id`.
    pub fn views_of(&self, id: TableId) -> impl Iterator<Item = &Arc<TableDef>> {
        self.by_id.values().filter(move |t| t.view().is_some_and(|v| v.source == id))
    }

    pub fn procedure(&self, name: &str) -> Option<&Arc<ProcedureDef>> {
        self.procedures.get(&key(name))
    }

    pub fn procedures(&self) -> impl Iterator<Item = &Arc<ProcedureDef>> {
        self.procedures.values()
    }

    /// The id the next added table will get.
    pub fn next_table_id(&self) -> TableId {
        self.next_table_id
    }

    pub fn plain_view(&self, name: &str) -> Option<&Arc<PlainViewDef>> {
        self.plain_views.get(&key(name))
    }

    /// Plain views in name order.
    pub fn plain_views(&self) -> impl Iterator<Item = &Arc<PlainViewDef>> {
        self.plain_views.values()
    }

    /// Adds a plain view; its name must be free of tables, streams and views.
    pub fn add_plain_view(&mut self, def: PlainViewDef) -> Result<Arc<PlainViewDef>> {
        let k = key(&def.name);
        if self.tables.contains_key(&k) || self.plain_views.contains_key(&k) {
            return Err(Error::sql(format!("object name already exists: {}", def.name)));
        }
        let def = Arc::new(def);
        self.plain_views.insert(k, def.clone());
        self.version += 1;
        Ok(def)
    }

    pub fn drop_plain_view(&mut self, name: &str) -> Result<Arc<PlainViewDef>> {
        let def = self.plain_views.remove(&key(name)).ok_or_else(|| Error::sql(format!("object not found: {name}")))?;
        self.version += 1;
        Ok(def)
    }

    /// Adds a table; its `id` is assigned here.
    pub fn add_table(&mut self, mut def: TableDef) -> Result<Arc<TableDef>> {
        if self.tables.contains_key(&key(&def.name)) || self.plain_views.contains_key(&key(&def.name)) {
            return Err(Error::sql(format!("object name already exists: {}", def.name)));
        }
        def.id = self.next_table_id;
        self.next_table_id += 1;
        def.number_computed();
        let def = Arc::new(def);
        self.tables.insert(key(&def.name), def.clone());
        self.by_id.insert(def.id, def.clone());
        self.version += 1;
        Ok(def)
    }

    /// Replaces a table's definition in place (same id), e.g. after ALTER or CREATE INDEX.
    pub fn replace_table(&mut self, mut def: TableDef) -> Result<Arc<TableDef>> {
        if !self.by_id.contains_key(&def.id) {
            return Err(Error::sql(format!("object not found: {}", def.name)));
        }
        def.number_computed();
        let def = Arc::new(def);
        self.tables.insert(key(&def.name), def.clone());
        self.by_id.insert(def.id, def.clone());
        self.version += 1;
        Ok(def)
    }

    /// The TTL of table `id`, if it has one.
    pub fn ttl(&self, id: TableId) -> Option<&Arc<TtlDef>> {
        self.ttl.get(&id)
    }

    /// Every table with a TTL, with it, in table id order.
    pub fn ttls(&self) -> impl Iterator<Item = (&Arc<TableDef>, &Arc<TtlDef>)> {
        self.ttl.iter().filter_map(|(id, ttl)| self.by_id.get(id).map(|t| (t, ttl)))
    }

    /// Sets (or, with None, removes) the TTL of table `id`.
    pub fn set_ttl(&mut self, id: TableId, ttl: Option<TtlDef>) {
        match ttl {
            Some(t) => self.ttl.insert(id, Arc::new(t)),
            None => self.ttl.remove(&id),
        };
        self.version += 1;
    }

    pub fn task(&self, name: &str) -> Option<&Arc<TaskDef>> {
        self.tasks.get(&key(name))
    }

    /// Every task, in name order.
    pub fn tasks(&self) -> impl Iterator<Item = &Arc<TaskDef>> {
        self.tasks.values()
    }

    /// Adds or replaces a task (a new definition even when equal: the scheduler starts it
    /// afresh, as after `ALTER TASK … ENABLE`).
    pub fn put_task(&mut self, def: TaskDef) -> Arc<TaskDef> {
        let def = Arc::new(def);
        self.tasks.insert(key(&def.name), def.clone());
        self.version += 1;
        def
    }

    pub fn drop_task(&mut self, name: &str) -> Option<Arc<TaskDef>> {
        let def = self.tasks.remove(&key(name));
        self.version += 1;
        def
    }

    pub fn drop_table(&mut self, name: &str) -> Result<Arc<TableDef>> {
        let def = self.tables.remove(&key(name)).ok_or_else(|| Error::sql(format!("object not found: {name}")))?;
        self.by_id.remove(&def.id);
        self.ttl.remove(&def.id);
        self.version += 1;
        Ok(def)
    }

    /// Adds or replaces a procedure.
    pub fn put_procedure(&mut self, def: ProcedureDef) -> Arc<ProcedureDef> {
        let def = Arc::new(def);
        self.procedures.insert(key(&def.name), def.clone());
        self.version += 1;
        def
    }

    pub fn drop_procedure(&mut self, name: &str) -> Result<Arc<ProcedureDef>> {
        let def = self.procedures.remove(&key(name)).ok_or_else(|| Error::sql(format!("procedure not found: {name}")))?;
        self.version += 1;
        Ok(def)
    }

    /// The permissions a role grants as declared (built-in or created), if it exists.
    pub fn role_permissions(&self, name: &str) -> Option<Permissions> {
        if let Some((_, p)) = BUILTIN_ROLES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return Some(*p);
        }
        self.roles.get(&key(name)).map(|r| r.permissions)
    }

    /// The roles created by DDL, in name order (the built-in ones are not listed).
    pub fn roles(&self) -> impl Iterator<Item = &Arc<RoleDef>> {
        self.roles.values()
    }

    /// Adds a role; its name must not be taken (the built-in names are).
    pub fn add_role(&mut self, name: &str, permissions: Permissions) -> Result<Arc<RoleDef>> {
        if self.role_permissions(name).is_some() {
            return Err(Error::sql(format!("role {name} already exists")));
        }
        let def = Arc::new(RoleDef { name: key(name), permissions });
        self.roles.insert(def.name.clone(), def.clone());
        self.version += 1;
        Ok(def)
    }

    /// Drops a created role. A built-in role, or one that a procedure still ALLOWs, stays:
    /// the catalog must never refer to a role it does not have.
    pub fn drop_role(&mut self, name: &str) -> Result<Arc<RoleDef>> {
        if BUILTIN_ROLES.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return Err(Error::sql(format!("role {name} is built in and cannot be dropped")));
        }
        let k = key(name);
        let users: Vec<&str> = self.procedures.values().filter(|p| p.allow.contains(&k)).map(|p| p.name.as_str()).collect();
        if !users.is_empty() {
            return Err(Error::sql(format!(
                "role {name} is allowed on procedures {}: drop them or recreate them without ALLOW {name} first",
                users.join(", ")
            )));
        }
        let def = self.roles.remove(&k).ok_or_else(|| Error::sql(format!("role {name} does not exist")))?;
        self.version += 1;
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use super::{get_ignoring_case, Catalog, NameMap, Permissions};

    #[test]
    fn permissions_imply_as_voltdb() {
        let all = ["ADMIN", "SQL", "SQLREAD", "DEFAULTPROC", "DEFAULTPROCREAD", "ALLPROC"];
        assert_eq!(Permissions::ADMIN.implied().names(), all.to_vec());
        assert_eq!(Permissions::SQL.implied().names(), vec!["SQL", "SQLREAD", "DEFAULTPROC", "DEFAULTPROCREAD"]);
        assert_eq!(Permissions::DEFAULTPROC.implied().names(), vec!["DEFAULTPROC", "DEFAULTPROCREAD"]);
        assert_eq!(Permissions::SQLREAD.implied(), Permissions::SQLREAD);
        assert_eq!(Permissions::ALLPROC.implied(), Permissions::ALLPROC);
        assert!(!Permissions::SQLREAD.implied().contains(Permissions::DEFAULTPROCREAD));
    }

    #[test]
    fn permission_names_and_aliases_parse_in_any_case() {
        assert_eq!(Permissions::parse("sysproc"), Some(Permissions::ADMIN));
        assert_eq!(Permissions::parse("AdHoc"), Some(Permissions::SQL));
        assert_eq!(Permissions::parse("defaultprocread"), Some(Permissions::DEFAULTPROCREAD));
        assert_eq!(Permissions::parse("root"), None);
    }

    #[test]
    fn roles_are_added_found_and_dropped_in_any_case() {
        let mut c = Catalog::default();
        assert_eq!(c.role_permissions("Administrator"), Some(Permissions::ADMIN));
        assert!(c.add_role("USER", Permissions::SQL).is_err());
        let v = c.version;
        c.add_role("Ops", Permissions::SQLREAD).unwrap();
        assert!(c.version > v);
        assert_eq!(c.role_permissions("ops"), Some(Permissions::SQLREAD));
        assert!(c.add_role("OPS", Permissions::SQL).is_err());
        assert!(c.drop_role("administrator").is_err());
        c.drop_role("OPS").unwrap();
        assert_eq!(c.role_permissions("ops"), None);
        assert!(c.drop_role("ops").is_err());
    }

    #[test]
    fn names_are_found_in_any_ascii_case_and_at_any_length() {
        let long = "p".repeat(300);
        let map: NameMap<i32> = [("vote".to_string(), 1), (long.clone(), 2)].into_iter().collect();
        assert_eq!(get_ignoring_case(&map, "vote"), Some(&1));
        assert_eq!(get_ignoring_case(&map, "VoTe"), Some(&1));
        assert_eq!(get_ignoring_case(&map, "votes"), None);
        assert_eq!(get_ignoring_case(&map, &long.to_uppercase()), Some(&2));
        assert_eq!(get_ignoring_case(&map, "VÖTE"), None);
    }
}
