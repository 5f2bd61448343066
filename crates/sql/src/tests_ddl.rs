//! DDL: every statement form, the catalog it builds, and its errors.

use lockstep_core::{Catalog, DataType, Partitioning, ProcedureBody, TableKind, ViewAggregate, ViewKey};

use crate::tests_sql::NoFiles;
use crate::{apply_ddl, split_statements};

fn apply(cat: &mut Catalog, script: &str) -> Vec<String> {
    split_statements(script).unwrap().iter().map(|s| apply_ddl(cat, s, &NoFiles).unwrap_or_else(|e| panic!("{s}: {e}")).message).collect()
}

fn fails(cat: &mut Catalog, sql: &str) -> String {
    match apply_ddl(cat, sql, &NoFiles) {
        Ok(o) => panic!("{sql} should fail but gave {}", o.message),
        Err(e) => e.message,
    }
}

const VOTER: &str = "
CREATE TABLE contestants (
  contestant_number INTEGER NOT NULL,
  contestant_name VARCHAR(50 BYTES) NOT NULL,
  CONSTRAINT PK_contestants PRIMARY KEY (contestant_number)
);
CREATE TABLE votes (
  phone_number BIGINT NOT NULL,
  state VARCHAR(2) NOT NULL,
  contestant_number INTEGER NOT NULL,
  created TIMESTAMP DEFAULT NOW,
  note VARCHAR DEFAULT 'n/a',
  CONSTRAINT lim LIMIT PARTITION ROWS 100000 EXECUTE (DELETE FROM votes WHERE phone_number < 0)
);
PARTITION TABLE votes ON COLUMN phone_number;
CREATE VIEW v_votes_by_phone_number (phone_number, num_votes) AS
  SELECT phone_number, COUNT(*) FROM votes GROUP BY phone_number;
CREATE VIEW v_votes_by_contestant_number_state (contestant_number, state, num_votes) AS
  SELECT contestant_number, state, COUNT(*) FROM votes GROUP BY contestant_number, state;
CREATE PROCEDURE Initialize FROM FILE 'procedures/initialize.lua';
CREATE PROCEDURE Vote PARTITION ON TABLE votes COLUMN phone_number PARAMETER 0 FROM CLASS voter.procedures.Vote;
CREATE PROCEDURE Results AS SELECT a.contestant_name, b.num_votes FROM v_votes_by_contestant_number_state b, contestants a WHERE a.contestant_number = b.contestant_number ORDER BY 2 DESC;
LOAD CLASSES voter-procs.jar;
";

#[test]
fn a_voltdb_application_schema_loads() {
    let mut cat = Catalog::default();
    let msgs = apply(&mut cat, VOTER);
    assert_eq!(msgs[0], "table CONTESTANTS created");
    assert_eq!(msgs[2], "table VOTES partitioned on column PHONE_NUMBER");
    assert!(msgs[8].contains("ignored"), "{}", msgs[8]);
    let c = cat.table("contestants").unwrap();
    assert_eq!(c.indexes[0].name, "PK_CONTESTANTS");
    assert!(c.indexes[0].primary);
    assert!(c.columns[1].in_bytes);
    assert_eq!(c.columns[1].size, 50);
    let v = cat.table("votes").unwrap();
    assert_eq!(v.partition_column, Some(0));
    assert_eq!(v.columns[3].default, Some(crate::DEFAULT_NOW_SENTINEL));
    assert_eq!(v.columns[4].default, Some(lockstep_core::Value::Str("n/a".into())));
    let by_phone = cat.table("v_votes_by_phone_number").unwrap();
    assert_eq!(by_phone.partition_column, Some(0));
    let by_state = cat.table("V_VOTES_BY_CONTESTANT_NUMBER_STATE").unwrap();
    assert_eq!(by_state.partition_column, None);
    assert_eq!(by_state.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["CONTESTANT_NUMBER", "STATE", "NUM_VOTES"]);
    match &by_state.kind {
        TableKind::View(vd) => {
            assert_eq!(vd.group_by, vec![ViewKey::Column(2), ViewKey::Column(1)]);
            assert_eq!(vd.aggregates, vec![ViewAggregate::CountStar]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(by_state.indexes[0].columns, vec![0, 1]);
    let vote = cat.procedure("vote").unwrap();
    assert_eq!(vote.class_name.as_deref(), Some("voter.procedures.Vote"));
    assert_eq!(vote.body, ProcedureBody::Lua { path: "procs/Vote.lua".into(), source: "-- Vote".into() });
    assert_eq!(
        vote.partitioning,
        Partitioning::Single { table: "VOTES".into(), column: "PHONE_NUMBER".into(), parameter: 0, key_type: DataType::BigInt }
    );
    assert!(matches!(cat.procedure("results").unwrap().body, ProcedureBody::Sql(_)));
    assert_eq!(cat.procedure("initialize").unwrap().partitioning, Partitioning::Multi);
}

#[test]
fn keys_and_partitioning_are_checked() {
    let mut cat = Catalog::default();
    apply(&mut cat, "CREATE TABLE t (a INTEGER NOT NULL, b INTEGER, c VARCHAR(4) UNIQUE, d BIGINT ASSUMEUNIQUE, PRIMARY KEY (a, b));");
    let t = cat.table("t").unwrap().clone();
    assert_eq!(t.indexes.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), vec!["PK_T", "UK_T_C", "AK_T_D"]);
    assert!(!t.columns[1].nullable, "primary key columns are NOT NULL");
    assert!(t.indexes[2].assume_unique && !t.indexes[2].unique);
    assert!(fails(&mut cat, "PARTITION TABLE t ON COLUMN a").contains("UK_T_C of T must include the partition column A"));
    apply(&mut cat, "CREATE TABLE u (a INTEGER NOT NULL, n INTEGER, PRIMARY KEY (a)); PARTITION TABLE u ON COLUMN a;");
    assert!(fails(&mut cat, "PARTITION TABLE u ON COLUMN n").contains("must be NOT NULL"));
    assert!(fails(&mut cat, "CREATE UNIQUE INDEX u_n ON u (n)").contains("must include the partition column"));
    assert_eq!(apply(&mut cat, "CREATE ASSUMEUNIQUE INDEX u_n ON u (n)"), vec!["index U_N created on U"]);
    assert!(fails(&mut cat, "CREATE INDEX u_n ON t (b)").contains("already used"));
    assert!(fails(&mut cat, "CREATE TABLE x (a INTEGER PRIMARY KEY, b INTEGER PRIMARY KEY)").contains("more than one PRIMARY KEY"));
    assert!(fails(&mut cat, "CREATE TABLE x (a INTEGER, a BIGINT)").contains("defined twice"));
    assert!(fails(&mut cat, "CREATE TABLE x (a BLOB)").contains("unknown column type BLOB"));
    // A trailing comma before `)`, as VoltDB's example schemas have, is accepted.
    apply(&mut cat, "CREATE TABLE x (a INTEGER, PRIMARY KEY (a),\n)");
    assert_eq!(cat.table("x").unwrap().indexes.len(), 1);
    assert!(fails(&mut cat, "CREATE TABLE x2 (,)").contains("expected a column name"));
    assert!(fails(&mut cat, "CREATE TABLE x2 (a INTEGER,,)").contains("expected a column name"));
    // DESC index columns are accepted: the ordered index is read backwards for them.
    apply(&mut cat, "CREATE INDEX x_a ON x (a DESC); CREATE INDEX u_na ON u (n ASC, a DESC)");
    assert_eq!(cat.table("u").unwrap().indexes.iter().find(|i| i.name == "U_NA").unwrap().columns.len(), 2);
    assert!(fails(&mut cat, "CREATE INDEX x_b ON x (a DESC DESC)").contains("expected"));
    assert!(fails(&mut cat, "CREATE TABLE u (a INTEGER)").ends_with("object name already exists: U"));
    // FOREIGN KEY is accepted and not enforced, as VoltDB does.
    apply(
        &mut cat,
        "CREATE TABLE fk (a INTEGER NOT NULL, b INTEGER, PRIMARY KEY (a), \
         CONSTRAINT fk_u FOREIGN KEY (a, b) REFERENCES u (n, m), FOREIGN KEY (b) REFERENCES u)",
    );
    let fk = cat.table("fk").unwrap();
    assert_eq!(fk.columns.len(), 2);
    assert_eq!(fk.indexes.len(), 1);
    assert!(fails(&mut cat, "CREATE TABLE fk2 (a INTEGER, FOREIGN KEY (a) u)").contains("REFERENCES"));
    assert_eq!(apply(&mut cat, "DROP INDEX u_n; DROP INDEX u_n IF EXISTS").len(), 2);
    assert!(fails(&mut cat, "DROP INDEX pk_u").contains("primary key"));
}

#[test]
fn alter_drop_stream_and_view_forms() {
    let mut cat = Catalog::default();
    apply(&mut cat, "CREATE TABLE t (a INTEGER NOT NULL, b INTEGER) LIMIT PARTITION ROWS 10; CREATE VIEW tv AS SELECT a, COUNT(*) AS n, SUM(b) AS s FROM t GROUP BY a;");
    assert_eq!(apply(&mut cat, "ALTER TABLE t ADD COLUMN c VARCHAR(3) DEFAULT 'x' NOT NULL"), vec!["column C added to T"]);
    assert_eq!(cat.table("t").unwrap().columns.len(), 3);
    assert_eq!(cat.table("tv").unwrap().columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["A", "N", "S"]);
    assert!(fails(&mut cat, "DROP TABLE t").contains("CASCADE"));
    assert!(fails(&mut cat, "DROP VIEW t").contains("use DROP TABLE"));
    assert_eq!(apply(&mut cat, "DROP TABLE t CASCADE"), vec!["table T dropped (with views TV)"]);
    assert!(cat.table("tv").is_none());
    assert_eq!(apply(&mut cat, "DROP TABLE IF EXISTS t"), vec!["table T does not exist; nothing dropped"]);
    apply(&mut cat, "CREATE STREAM s PARTITION ON COLUMN id EXPORT TO TARGET kafka1 (id BIGINT NOT NULL, v VARCHAR(5));");
    let s = cat.table("s").unwrap();
    assert_eq!(s.kind, TableKind::Stream { target: Some("KAFKA1".into()) });
    assert_eq!(s.partition_column, Some(0));
    apply(&mut cat, "CREATE TABLE src (k INTEGER NOT NULL, v INTEGER);");
    let param = fails(&mut cat, "CREATE VIEW bad AS SELECT k, COUNT(*) FROM src WHERE v > ? GROUP BY k");
    assert!(param.contains("same answer") && param.contains("a parameter"), "{param}");
    assert!(fails(&mut cat, "CREATE VIEW bad AS SELECT COUNT(*), k FROM src GROUP BY k").contains("must come before"));
    assert!(fails(&mut cat, "CREATE VIEW bad AS SELECT k, AVG(v) FROM src GROUP BY k").contains("not supported"));
    // A view that does not group is a plain view: any query, checked when it is created.
    assert_eq!(apply(&mut cat, "CREATE VIEW pv AS SELECT k, v FROM src WHERE v > 0;"), vec!["view PV created"]);
    assert_eq!(apply(&mut cat, "CREATE VIEW pv2 (a) AS SELECT k FROM pv UNION SELECT v FROM src;"), vec!["view PV2 created"]);
    assert_eq!(cat.plain_view("pv2").unwrap().reads, vec!["pv".to_string(), "src".to_string()]);
    assert!(fails(&mut cat, "CREATE VIEW pv3 AS SELECT nope FROM src").contains("unknown column NOPE"));
    assert!(fails(&mut cat, "CREATE VIEW pv3 AS SELECT k FROM src WHERE v = ?").contains("cannot have parameters"));
    assert!(fails(&mut cat, "CREATE VIEW pv3 (a, b) AS SELECT k FROM src").contains("names 2 columns but selects 1"));
    assert!(fails(&mut cat, "CREATE VIEW pv3 AS SELECT k, k FROM src").contains("two columns named K"));
    assert!(fails(&mut cat, "CREATE TABLE pv (a INTEGER)").contains("object name already exists"));
    assert!(fails(&mut cat, "CREATE VIEW src AS SELECT 1 FROM src").contains("object name already exists"));
    assert!(fails(&mut cat, "DROP TABLE pv").contains("use DROP VIEW"));
    assert!(fails(&mut cat, "DROP VIEW pv").contains("views read PV (PV2)"));
    assert!(fails(&mut cat, "DROP TABLE src").contains("views read SRC (PV, PV2)"));
    assert_eq!(
        apply(&mut cat, "DROP VIEW pv2; DROP VIEW pv2 IF EXISTS"),
        vec!["view PV2 dropped", "view PV2 does not exist; nothing dropped"]
    );
    apply(&mut cat, "CREATE VIEW pv2 AS SELECT k FROM pv;");
    assert_eq!(
        apply(&mut cat, "DROP TABLE src CASCADE; CREATE TABLE src (k INTEGER NOT NULL, v INTEGER);"),
        vec!["table SRC dropped (with views PV, PV2)", "table SRC created"]
    );
    assert!(cat.plain_view("pv").is_none() && cat.plain_view("pv2").is_none());
    assert_eq!(apply(&mut cat, "DR TABLE src; SET DR=ACTIVE; CREATE ROLE admin WITH sysproc; IMPORT CLASS a.b.C").len(), 4);
}

#[test]
fn procedure_forms_and_errors() {
    let mut cat = Catalog::default();
    apply(&mut cat, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, v INTEGER); PARTITION TABLE t ON COLUMN id;");
    let msgs = apply(
        &mut cat,
        "CREATE PROCEDURE GetT PARTITION ON TABLE t COLUMN id AS SELECT v FROM t WHERE id = ?;
         CREATE PROCEDURE Inline PARTITION ON TABLE t COLUMN id PARAMETER 1 FROM FILE 'x.lua' SOURCE $lua$ return function() end $lua$;
         CREATE PROCEDURE Each DIRECTED AS BEGIN SELECT COUNT(*) FROM t; END;",
    );
    assert_eq!(msgs, vec!["procedure GetT created", "procedure Inline created", "procedure Each created"]);
    assert_eq!(
        cat.procedure("inline").unwrap().body,
        ProcedureBody::Lua { path: "x.lua".into(), source: " return function() end ".into() }
    );
    assert_eq!(cat.procedure("each").unwrap().partitioning, Partitioning::Directed);
    assert_eq!(cat.procedure("each").unwrap().body, ProcedureBody::Sql("SELECT COUNT(*) FROM t".into()));
    assert!(fails(&mut cat, "CREATE PROCEDURE GetT AS SELECT 1").contains("already exists"));
    assert_eq!(apply(&mut cat, "CREATE OR REPLACE PROCEDURE GetT AS SELECT v FROM t"), vec!["procedure GetT replaced"]);
    assert!(fails(&mut cat, "CREATE PROCEDURE Bad AS SELECT nope FROM t").contains("unknown column NOPE"));
    assert!(fails(&mut cat, "CREATE PROCEDURE Bad PARTITION ON TABLE t COLUMN v AS SELECT 1").contains("not partitioned on that column"));
    assert!(fails(&mut cat, "CREATE PROCEDURE Bad AS BEGIN SELECT 1; SELECT 2; END").contains("multi-statement"));
    apply(&mut cat, "PARTITION PROCEDURE GetT ON TABLE t COLUMN id PARAMETER 0");
    assert!(matches!(cat.procedure("gett").unwrap().partitioning, Partitioning::Single { parameter: 0, .. }));
    assert_eq!(apply(&mut cat, "DROP PROCEDURE GetT; DROP PROCEDURE GetT IF EXISTS").len(), 2);
    assert!(fails(&mut cat, "DROP PROCEDURE GetT").contains("not found"));
    assert!(fails(&mut cat, "CREATE FUNCTION f FROM METHOD a.b").contains("not supported"));
}

#[test]
fn directed_from_class_is_named_by_its_class() {
    let mut cat = Catalog::default();
    apply(&mut cat, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY); PARTITION TABLE t ON COLUMN id;");
    // VoltDB's form (the charging demo's DeleteStaleAllocations): no name before DIRECTED.
    assert_eq!(apply(&mut cat, "CREATE PROCEDURE DIRECTED\n FROM CLASS chargingdemoprocs.Sweep"), vec!["procedure Sweep created"]);
    let sweep = cat.procedure("sweep").unwrap();
    assert_eq!(sweep.partitioning, Partitioning::Directed);
    assert_eq!(sweep.class_name.as_deref(), Some("chargingdemoprocs.Sweep"));
    assert!(cat.procedure("directed").is_none());
    // A procedure may still be called Directed when it says where its body is.
    assert_eq!(apply(&mut cat, "CREATE PROCEDURE Directed AS SELECT id FROM t"), vec!["procedure Directed created"]);
    assert_eq!(cat.procedure("directed").unwrap().partitioning, Partitioning::Multi);
    let both = fails(&mut cat, "CREATE PROCEDURE PARTITION ON TABLE t COLUMN id DIRECTED FROM CLASS a.Both");
    assert!(both.contains("PARTITION ON and DIRECTED exclude each other"), "{both}");
    let both = fails(&mut cat, "CREATE PROCEDURE Both DIRECTED PARTITION ON TABLE t COLUMN id AS SELECT 1");
    assert!(both.contains("exclude each other"), "{both}");
}

#[test]
fn roles_and_allow_lists() {
    use lockstep_core::Permissions;
    let mut cat = Catalog::default();
    apply(&mut cat, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY); PARTITION TABLE t ON COLUMN id;");
    let msgs = apply(&mut cat, "CREATE ROLE Ops WITH sqlread, DefaultProc; CREATE ROLE nobody; CREATE ROLE legacy WITH sysproc, adhoc");
    assert_eq!(
        msgs,
        vec![
            "role ops created with SQLREAD, DEFAULTPROC",
            "role nobody created with no permissions",
            "role legacy created with ADMIN, SQL"
        ]
    );
    assert_eq!(cat.role_permissions("OPS"), Some(Permissions::SQLREAD.union(Permissions::DEFAULTPROC)));
    assert!(fails(&mut cat, "CREATE ROLE ops").contains("already exists"));
    assert!(fails(&mut cat, "CREATE ROLE administrator").contains("already exists"));
    assert!(fails(&mut cat, "CREATE ROLE r WITH everything").contains("unknown permission EVERYTHING"));
    apply(&mut cat, "CREATE PROCEDURE GetT ALLOW ops, OPS, user PARTITION ON TABLE t COLUMN id AS SELECT id FROM t WHERE id = ?");
    assert_eq!(cat.procedure("gett").unwrap().allow, vec!["ops".to_string(), "user".to_string()]);
    apply(&mut cat, "PARTITION PROCEDURE GetT ON TABLE t COLUMN id PARAMETER 0");
    assert_eq!(cat.procedure("gett").unwrap().allow, vec!["ops".to_string(), "user".to_string()]);
    assert!(fails(&mut cat, "CREATE PROCEDURE P2 ALLOW ghosts AS SELECT 1").contains("role ghosts, which does not exist"));
    assert!(fails(&mut cat, "DROP ROLE ops").contains("allowed on procedures GetT"));
    assert!(fails(&mut cat, "DROP ROLE user").contains("built in"));
    assert_eq!(apply(&mut cat, "DROP PROCEDURE GetT; DROP ROLE Ops"), vec!["procedure GetT dropped", "role ops dropped"]);
    assert_eq!(cat.role_permissions("ops"), None);
    assert!(fails(&mut cat, "DROP ROLE ops").contains("does not exist"));
    assert_eq!(apply(&mut cat, "DROP ROLE IF EXISTS ops; DROP ROLE ops IF EXISTS").len(), 2);
}

#[test]
fn ttl_is_created_altered_and_dropped_on_a_not_null_time_column() {
    let mut cat = Catalog::default();
    apply(
        &mut cat,
        "CREATE TABLE ev (id BIGINT NOT NULL, at TIMESTAMP NOT NULL, n INTEGER NOT NULL, note VARCHAR(10), maybe TIMESTAMP, PRIMARY KEY (id))
           USING TTL 10 MINUTES ON COLUMN at BATCH_SIZE 50 MAX_FREQUENCY 3;",
    );
    let id = cat.table("ev").unwrap().id;
    let ttl = cat.ttl(id).unwrap().clone();
    assert_eq!(
        (ttl.column.as_str(), ttl.amount, ttl.unit, ttl.batch_size, ttl.max_frequency),
        ("AT", 10, lockstep_core::TtlUnit::Minutes, 50, 3)
    );
    assert_eq!(ttl.max_age_micros(), 600_000_000);

    assert!(fails(&mut cat, "ALTER TABLE ev USING TTL 5 ON COLUMN at").contains("already has a TTL"));
    assert_eq!(apply(&mut cat, "ALTER TABLE ev ALTER USING TTL 2 HOURS ON COLUMN n")[0], "TTL of EV set to 2 HOURS on column N");
    let ttl = cat.ttl(id).unwrap();
    assert_eq!((ttl.column.as_str(), ttl.batch_size, ttl.max_frequency), ("N", 1000, 1), "defaults come back with a new clause");
    apply(&mut cat, "ALTER TABLE ev DROP TTL");
    assert!(cat.ttl(id).is_none());
    assert!(fails(&mut cat, "ALTER TABLE ev DROP TTL").contains("has no TTL"));
    assert!(fails(&mut cat, "ALTER TABLE ev ALTER USING TTL 1 ON COLUMN at").contains("has no TTL to alter"));
    apply(&mut cat, "ALTER TABLE ev USING TTL 1 DAYS ON COLUMN at");
    assert_eq!(cat.ttl(id).unwrap().unit, lockstep_core::TtlUnit::Days);

    assert!(fails(&mut cat, "CREATE TABLE a (v VARCHAR(5) NOT NULL) USING TTL 1 ON COLUMN v").contains("must be a TIMESTAMP"));
    assert!(fails(&mut cat, "CREATE TABLE a (t TIMESTAMP) USING TTL 1 ON COLUMN t").contains("must be NOT NULL"));
    assert!(fails(&mut cat, "CREATE TABLE a (t TIMESTAMP NOT NULL) USING TTL 1 ON COLUMN x").contains("not a column of A"));
    assert!(fails(&mut cat, "CREATE TABLE a (t TIMESTAMP NOT NULL) USING TTL 0 ON COLUMN t").contains("positive"));
    assert!(fails(&mut cat, "CREATE TABLE a (t TIMESTAMP NOT NULL) USING TTL 1 ON COLUMN t BATCH_SIZE 0").contains("BATCH_SIZE must be"));
    assert!(cat.table("a").is_none(), "a refused TTL creates no table");

    apply(&mut cat, "DROP TABLE ev");
    assert_eq!(cat.ttls().count(), 0, "the TTL goes with its table");
}

#[test]
fn tasks_are_created_enabled_disabled_and_dropped() {
    use lockstep_core::{TaskOnError, TaskRunOn, TaskSchedule, Value};
    let mut cat = Catalog::default();
    apply(
        &mut cat,
        "CREATE TABLE t (id BIGINT NOT NULL, note VARCHAR(10));
         CREATE PROCEDURE Tidy DIRECTED AS DELETE FROM t WHERE id < ?;
         CREATE TASK tidy ON SCHEDULE EVERY 2 SECONDS PROCEDURE Tidy WITH (-5, 'x', NULL, 1.5) RUN ON PARTITIONS ON ERROR STOP DISABLE;
         CREATE TASK nightly ON SCHEDULE CRON '0 30 2 * * *' PROCEDURE T.insert WITH (1, 'n');
         CREATE TASK ping ON SCHEDULE DELAY 250 MILLISECONDS PROCEDURE @Ping;",
    );
    let tidy = cat.task("TIDY").unwrap();
    assert_eq!(tidy.schedule, TaskSchedule::Every { millis: 2000 });
    assert_eq!(tidy.args, vec![Value::Int(-5), Value::from("x"), Value::Null, Value::Float(1.5)]);
    assert_eq!((tidy.run_on, tidy.on_error, tidy.enabled), (TaskRunOn::Partitions, TaskOnError::Stop, false));
    let nightly = cat.task("nightly").unwrap();
    assert_eq!(
        (&nightly.schedule, nightly.run_on, nightly.on_error, nightly.enabled),
        (&TaskSchedule::Cron("0 30 2 * * *".into()), TaskRunOn::Database, TaskOnError::Log, true)
    );
    assert_eq!(cat.task("ping").unwrap().procedure, "@Ping");
    assert_eq!(cat.task("ping").unwrap().schedule, TaskSchedule::Delay { millis: 250 });

    assert_eq!(apply(&mut cat, "ALTER TASK tidy ENABLE")[0], "task TIDY enabled");
    assert!(cat.task("tidy").unwrap().enabled);
    apply(&mut cat, "ALTER TASK tidy DISABLE");
    assert!(!cat.task("tidy").unwrap().enabled);
    assert_eq!(apply(&mut cat, "DROP TASK tidy")[0], "task TIDY dropped");
    assert!(cat.task("tidy").is_none());
    apply(&mut cat, "DROP TASK IF EXISTS tidy");

    assert!(fails(&mut cat, "DROP TASK tidy").contains("does not exist"));
    assert!(fails(&mut cat, "CREATE TASK ping ON SCHEDULE EVERY 1 SECONDS PROCEDURE @Ping").contains("already exists"));
    assert!(fails(&mut cat, "CREATE TASK a ON SCHEDULE EVERY 1 SECONDS PROCEDURE Nope").contains("Nope does not exist"));
    assert!(fails(&mut cat, "CREATE TASK a ON SCHEDULE EVERY 0 SECONDS PROCEDURE @Ping").contains("interval"));
    assert!(fails(&mut cat, "CREATE TASK a ON SCHEDULE EVERY 1 WEEKS PROCEDURE @Ping").contains("not a unit"));
    assert!(fails(&mut cat, "CREATE TASK a ON SCHEDULE CRON '0 99 * * * *' PROCEDURE @Ping").contains("minutes field"));
    assert!(fails(&mut cat, "CREATE TASK a ON SCHEDULE EVERY 1 SECONDS PROCEDURE @Ping RUN ON HOSTS").contains("RUN ON HOSTS"));
    assert!(fails(&mut cat, "ALTER TASK ping PAUSE").contains("ENABLE and DISABLE"));
}

#[test]
fn a_scheduler_class_task_is_kept_disabled() {
    use lockstep_core::{TaskRunOn, TaskSchedule, Value};
    let mut cat = Catalog::default();
    // The charging demo's line, created disabled: recorded with its arguments.
    let demo =
        "CREATE TASK PurgeWrangler  FROM CLASS chargingdemotasks.PurgeWrangler WITH (10,30000) ON ERROR LOG RUN ON PARTITIONS DISABLE";
    assert_eq!(apply(&mut cat, demo), vec!["task PURGEWRANGLER created"]);
    let t = cat.task("purgewrangler").unwrap();
    assert_eq!(t.schedule, TaskSchedule::FromClass("chargingdemotasks.PurgeWrangler".into()));
    assert_eq!((t.args.clone(), t.run_on, t.enabled), (vec![Value::Int(10), Value::Int(30000)], TaskRunOn::Partitions, false));
    // Enabling it, now or later, is refused with what is missing and what to use instead.
    let e = fails(&mut cat, "ALTER TASK PurgeWrangler ENABLE");
    assert!(e.contains("runs Java scheduler class chargingdemotasks.PurgeWrangler, and Lockstep cannot run Java classes"), "{e}");
    assert!(e.contains("ON SCHEDULE"), "{e}");
    assert!(!cat.task("purgewrangler").unwrap().enabled);
    assert_eq!(apply(&mut cat, "ALTER TASK PurgeWrangler DISABLE"), vec!["task PURGEWRANGLER disabled"]);
    assert_eq!(apply(&mut cat, "DROP TASK PurgeWrangler"), vec!["task PURGEWRANGLER dropped"]);
    assert!(fails(&mut cat, "CREATE TASK p FROM CLASS a.b.P").contains("can only be created DISABLE"));
    assert!(fails(&mut cat, "CREATE TASK p FROM CLASS a.b.P DISABLE ENABLE").contains("cannot run Java"));
    assert!(cat.task("p").is_none());
    assert!(fails(&mut cat, "CREATE TASK p FROM a.b.P DISABLE").contains("CLASS"));
}
