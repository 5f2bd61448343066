//! Materialized views with a WHERE and with expression group keys (`TRUNCATE(HOUR, ts)`):
//! kept in step with DML, populated on create, refused when not deterministic, and the
//! same over three partitions as over one.

use std::sync::Arc;

use lockstep_core::{DataType, Value};

use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, s, Db, NoFiles};
use crate::{apply_ddl, execute_mp, prepare};

const HOUR_MICROS: i64 = 3_600_000_000;
/// 2024-03-01 00:00:00 UTC.
const DAY_MICROS: i64 = 1_709_251_200_000_000;

fn ts(micros: i64) -> Value {
    Value::Timestamp(micros)
}

#[test]
fn a_view_with_a_where_counts_only_the_rows_that_pass() {
    let mut db = Db::new("CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, g VARCHAR(4) NOT NULL, x INTEGER);");
    db.run("INSERT INTO t VALUES (1, 'a', 5), (2, 'a', -1), (3, 'b', NULL), (4, 'b', 7)");
    // Created over existing rows: populated through the filter.
    apply_ddl(&mut db.cat, "CREATE VIEW v (g, n, total, hi) AS SELECT g, COUNT(*), SUM(x), MAX(x) FROM t WHERE x > 0 GROUP BY g", &NoFiles)
        .unwrap();
    db.part.apply_schema(&db.cat, &lockstep_core::HashRing::new(1)).unwrap();
    let view = "SELECT g, n, total, hi FROM v ORDER BY g";
    assert_eq!(db.rows(view), vec![vec![s("a"), i(1), i(5), i(5)], vec![s("b"), i(1), i(7), i(7)]]);
    // Inserts: one passes, one does not.
    db.run("INSERT INTO t VALUES (5, 'a', 9), (6, 'a', 0)");
    assert_eq!(db.rows(view)[0], vec![s("a"), i(2), i(14), i(9)]);
    // An update that makes a row stop passing takes it out; MAX is recomputed from the
    // passing rows (the -1 and 0 stay out).
    db.run("UPDATE t SET x = -9 WHERE id = 5");
    assert_eq!(db.rows(view)[0], vec![s("a"), i(1), i(5), i(5)]);
    // One that makes a row start passing puts it in; the b group goes when its last
    // passing row stops passing.
    db.run("UPDATE t SET x = 3 WHERE id = 2");
    db.run("UPDATE t SET x = NULL WHERE id = 4");
    assert_eq!(db.rows(view), vec![vec![s("a"), i(2), i(8), i(5)]]);
    // Deleting rows that never passed changes nothing; deleting a passing one does.
    db.run("DELETE FROM t WHERE id IN (3, 5, 6)");
    assert_eq!(db.rows(view), vec![vec![s("a"), i(2), i(8), i(5)]]);
    db.run("DELETE FROM t WHERE id = 1");
    assert_eq!(db.rows(view), vec![vec![s("a"), i(1), i(3), i(3)]]);
}

#[test]
fn a_view_groups_by_truncate_and_other_deterministic_expressions() {
    let mut db = Db::new(
        "CREATE TABLE ev (id INTEGER NOT NULL PRIMARY KEY, at TIMESTAMP NOT NULL, amount INTEGER NOT NULL, who VARCHAR(8));
         CREATE VIEW per_hour (hour, n, total) AS SELECT TRUNCATE(HOUR, at), COUNT(*), SUM(amount) FROM ev GROUP BY TRUNCATE(HOUR, at);
         CREATE VIEW per_day_who AS SELECT TRUNCATE(DAY, at) AS day, UPPER(who) AS who, COUNT(*) AS n FROM ev WHERE amount <> 0 GROUP BY TRUNCATE(DAY, at), UPPER(who);
         CREATE VIEW by_bucket (bucket, n) AS SELECT ABS(amount) / 10, COUNT(*) FROM ev GROUP BY ABS(amount) / 10;",
    );
    let hour = db.cat.table("per_hour").unwrap();
    assert_eq!(hour.columns[0].ty, DataType::Timestamp);
    // A computed string may be longer than the columns it reads (CONCAT): sized as VoltDB's longest.
    assert_eq!(db.cat.table("per_day_who").unwrap().columns[1].size, crate::ddl_parse::VARIABLE_SIZE_MAX);
    for (id, minutes, amount, who) in [(1, 5, 10, "ann"), (2, 59, 20, "Ann"), (3, 60, -5, "bob"), (4, 24 * 60 + 1, 0, "bob")] {
        db.try_run("INSERT INTO ev VALUES (?, ?, ?, ?)", &[i(id), ts(DAY_MICROS + minutes * 60_000_000), i(amount), s(who)]).unwrap();
    }
    assert_eq!(
        db.rows("SELECT hour, n, total FROM per_hour ORDER BY hour"),
        vec![
            vec![ts(DAY_MICROS), i(2), i(30)],
            vec![ts(DAY_MICROS + HOUR_MICROS), i(1), i(-5)],
            vec![ts(DAY_MICROS + 24 * HOUR_MICROS), i(1), i(0)],
        ]
    );
    assert_eq!(
        db.rows("SELECT day, who, n FROM per_day_who ORDER BY who"),
        vec![vec![ts(DAY_MICROS), s("ANN"), i(2)], vec![ts(DAY_MICROS), s("BOB"), i(1)]]
    );
    // An update moves a row to another computed group.
    db.run("UPDATE ev SET at = DATEADD(HOUR, 1, at) WHERE id = 2");
    assert_eq!(db.rows("SELECT n FROM per_hour ORDER BY hour"), vec![vec![i(1)], vec![i(2)], vec![i(1)]]);
    assert_eq!(db.rows("SELECT bucket, n FROM by_bucket ORDER BY bucket"), vec![vec![i(0), i(2)], vec![i(1), i(1)], vec![i(2), i(1)]]);
    db.run("DELETE FROM ev WHERE amount = 20");
    assert_eq!(db.rows("SELECT bucket, n FROM by_bucket ORDER BY bucket"), vec![vec![i(0), i(2)], vec![i(1), i(1)]]);
}

#[test]
fn views_refuse_what_is_not_deterministic_or_not_grouped() {
    let mut db = Db::new("CREATE TABLE t (k INTEGER NOT NULL, at TIMESTAMP, x INTEGER);");
    let mut fails = |sql: &str| match apply_ddl(&mut db.cat, sql, &NoFiles) {
        Ok(o) => panic!("{sql} should fail but gave {}", o.message),
        Err(e) => e.message,
    };
    let clock = fails("CREATE VIEW v AS SELECT k, COUNT(*) FROM t WHERE at < NOW GROUP BY k");
    assert!(clock.contains("same answer for a row every time") && clock.contains("clock"), "{clock}");
    assert!(fails("CREATE VIEW v AS SELECT TRUNCATE(DAY, NOW()), COUNT(*) FROM t GROUP BY TRUNCATE(DAY, NOW())").contains("same answer"));
    assert!(fails("CREATE VIEW v AS SELECT k, COUNT(*) FROM t WHERE x IN (SELECT k FROM t) GROUP BY k").contains("subquery"));
    assert!(fails("CREATE VIEW v AS SELECT k, COUNT(*) FROM t WHERE x + 1 GROUP BY k").contains("must be a condition"));
    assert!(fails("CREATE VIEW v AS SELECT k, COUNT(*) FROM t WHERE SUM(x) > 1 GROUP BY k").contains("aggregate"));
    assert!(fails("CREATE VIEW v AS SELECT x + 1, COUNT(*) FROM t GROUP BY k").contains("must be in its GROUP BY"));
    assert!(fails("CREATE VIEW v AS SELECT k, COUNT(*) FROM t WHERE nope > 1 GROUP BY k").contains("NOPE"));
}

#[test]
fn filtered_and_computed_views_agree_over_three_partitions() {
    let ddl = "CREATE TABLE ev (id INTEGER NOT NULL PRIMARY KEY, at TIMESTAMP NOT NULL, amount INTEGER NOT NULL);
               PARTITION TABLE ev ON COLUMN id;
               CREATE VIEW per_hour (hour, n, total, lo) AS SELECT TRUNCATE(HOUR, at), COUNT(*), SUM(amount), MIN(amount) FROM ev WHERE amount > 0 GROUP BY TRUNCATE(HOUR, at);";
    let mut one = Db::new(ddl);
    let mut sites = LocalSites::new(3, &one.cat).unwrap();
    for id in 0..40i64 {
        let params = [i(id), ts(DAY_MICROS + id * 17 * 60_000_000), i(id % 5 - 1)];
        let sql = "INSERT INTO ev VALUES (?, ?, ?)";
        let p = Arc::new(prepare(&one.cat, sql).unwrap());
        execute_mp(&p, &params, &ctx(), &mut sites).unwrap();
        one.try_run(sql, &params).unwrap();
    }
    for sql in ["SELECT hour, n, total, lo FROM per_hour ORDER BY hour", "SELECT SUM(n), SUM(total) FROM per_hour"] {
        let p = Arc::new(prepare(&one.cat, sql).unwrap());
        let three = execute_mp(&p, &[], &ctx(), &mut sites).unwrap();
        assert_eq!(three, one.run(sql), "{sql}");
    }
    // 40 rows, of which amount > 0 for id % 5 in 2..=4: 24, summing 8 × (1 + 2 + 3).
    assert_eq!(one.rows("SELECT SUM(n), SUM(total) FROM per_hour"), vec![vec![i(24), i(48)]]);
}

#[test]
fn a_view_of_a_stream_with_a_where_counts_only_the_events_that_pass() {
    let mut db = Db::new(
        "CREATE STREAM ev PARTITION ON COLUMN userid (userid BIGINT NOT NULL, amount BIGINT NOT NULL);
         CREATE VIEW big (userid, n, total) AS SELECT userid, COUNT(*), SUM(amount) FROM ev WHERE amount >= 10 GROUP BY userid;",
    );
    for (user, amount) in [(1, 10), (1, 5), (2, 3), (1, 20)] {
        db.try_run("INSERT INTO ev VALUES (?, ?)", &[i(user), i(amount)]).unwrap();
    }
    assert_eq!(db.rows("SELECT userid, n, total FROM big ORDER BY userid"), vec![vec![i(1), i(2), i(30)]]);
}
