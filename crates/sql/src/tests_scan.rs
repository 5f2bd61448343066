//! A measurement, not a check: how long an ad-hoc `SELECT SUM(x), COUNT(*)` takes over a
//! large table. Run it with `cargo test -p lockstep-sql --lib scan_speed -- --ignored
//! --nocapture`; it asserts only the answer.

use lockstep_core::Value;

use crate::tests_sql::Db;

/// Rows of the measured table.
const SCAN_ROWS: i64 = 300_000;
/// Runs of each query; the fastest is printed (the others warm caches, and give a
/// profiler more of the query than of the loading).
const MEASURE_RUNS: usize = 5;

#[test]
#[ignore = "a measurement: run it by name with --ignored --nocapture"]
fn scan_speed_of_sum_and_count() {
    let mut db = Db::new("CREATE TABLE big (id INTEGER NOT NULL PRIMARY KEY, x BIGINT, g INTEGER, name VARCHAR(20));");
    let mut values = Vec::with_capacity(1000);
    for id in 0..SCAN_ROWS {
        values.push(format!("({id}, {}, {}, 'name {id}')", id % 1000, id % 7));
        if values.len() == 1000 {
            db.run(&format!("INSERT INTO big VALUES {}", values.join(", ")));
            values.clear();
        }
    }
    let n = SCAN_ROWS;
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
