//! A measurement more than a check: how long an ad-hoc `SELECT SUM(x), COUNT(*)` takes over
//! a large table. It asserts only the answers; by default over a small table, and with
//! LOCKSTEP_LONG=1 over the measured size (`LOCKSTEP_LONG=1 cargo test --release -p
//! lockstep-sql --lib scan_speed -- --nocapture`).

use lockstep_core::Value;

use crate::tests_sql::Db;

/// Rows of the measured table (LOCKSTEP_LONG=1), and of the short run's.
const SCAN_ROWS: i64 = 300_000;
const SCAN_ROWS_SHORT: i64 = 7_000;
/// Runs of each query; the fastest is printed (the others warm caches, and give a
/// profiler more of the query than of the loading).
const MEASURE_RUNS: usize = 5;

#[test]
fn scan_speed_of_sum_and_count() {
    let long = std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1");
    let rows_wanted = if long { SCAN_ROWS } else { SCAN_ROWS_SHORT };
    let mut db = Db::new("CREATE TABLE big (id INTEGER NOT NULL PRIMARY KEY, x BIGINT, g INTEGER, name VARCHAR(20));");
    let mut values = Vec::with_capacity(1000);
    for id in 0..rows_wanted {
        values.push(format!("({id}, {}, {}, 'name {id}')", id % 1000, id % 7));
        if values.len() == 1000 {
            db.run(&format!("INSERT INTO big VALUES {}", values.join(", ")));
            values.clear();
        }
    }
    let n = rows_wanted;
    let cases = [
        ("SUM(x), COUNT(*)", "SELECT SUM(x), COUNT(*) FROM big", vec![Value::Int((0..n).map(|i| i % 1000).sum()), Value::Int(n)]),
        ("GROUP BY g", "SELECT g, COUNT(*) FROM big GROUP BY g ORDER BY g LIMIT 1", vec![Value::Int(0), Value::Int((n + 6) / 7)]),
        ("selective filter", "SELECT COUNT(*) FROM big WHERE x = 5", vec![Value::Int(n / 1000)]),
    ];
    for (what, sql, want) in cases {
        let mut took = std::time::Duration::MAX;
        let mut rows = Vec::new();
        for _ in 0..MEASURE_RUNS {
            let start = std::time::Instant::now();
            rows = db.rows(sql);
            took = took.min(start.elapsed());
        }
        println!("{what}: {took:?} over {n} rows ({:.0} ns per row)", took.as_nanos() as f64 / n as f64);
        assert_eq!(rows, vec![want], "{sql}");
    }
}
