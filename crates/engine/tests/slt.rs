//! The SQL conformance suite: every `.slt` file under `tests/slt/` (sqllogictest format,
//! expected answers worked out from SQL's semantics) run against a Lockstep engine in this
//! process — once with one partition, and once with three, where the files' `PARTITION
//! TABLE` statements spread the rows, so multi-partition plans must give the answers the
//! single-partition ones give. Records marked `onlyif lockstep` are VoltDB's dialect;
//! `skipif lockstep` ones are other systems' only. All failures are listed, not the first.

mod sqlcheck;

use sqlcheck::{slt_files, Lockstep};
use sqllogictest::{DefaultColumnType, Record, RecordOutput, Runner};

/// Partition counts each file runs with: one (everything local) and several (gathers).
const SITE_COUNTS: [u32; 2] = [1, 3];

/// A failure's text is cut to this many characters: the deep-expression records are long.
const FAILURE_TEXT_MAX_CHARS: usize = 1_500;

fn shorten(text: &str) -> String {
    match text.char_indices().nth(FAILURE_TEXT_MAX_CHARS) {
        Some((at, _)) => format!("{} …[cut]", &text[..at]),
        None => text.to_string(),
    }
}

/// Runs one file on a fresh engine; returns how many records ran and the failures.
fn run_file(path: &std::path::Path, sites: u32) -> (usize, Vec<String>) {
    let records = match sqllogictest::parse_file::<DefaultColumnType>(path) {
        Ok(r) => r,
        Err(e) => return (0, vec![format!("{}: does not parse: {e}", path.display())]),
    };
    let mut runner = Runner::new(move || async move { Ok(Lockstep::start(sites)) });
    runner.add_label("lockstep");
    let mut ran = 0;
    let mut failures = Vec::new();
    for record in records {
        let counts = matches!(record, Record::Statement { .. } | Record::Query { .. });
        match runner.run(record) {
            Ok(RecordOutput::Nothing) => {}
            Ok(_) => ran += usize::from(counts),
            Err(e) => {
                ran += 1;
                failures.push(format!("[{sites} partitions] {}", shorten(&e.to_string())));
            }
        }
    }
    runner.shutdown();
    (ran, failures)
}

#[test]
fn slt_suite_passes_on_one_and_on_several_partitions() {
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files found under tests/slt");
    let mut ran = 0;
    let mut failures = Vec::new();
    for path in &files {
        for sites in SITE_COUNTS {
            let (n, f) = run_file(path, sites);
            ran += n;
            failures.extend(f);
        }
    }
    println!("slt: {} files, {ran} records run, {} failed", files.len(), failures.len());
    assert!(failures.is_empty(), "{} of {ran} records failed:\n{}", failures.len(), failures.join("\n"));
}

/// Nesting depths the generated statements below are tried at: past the limit of 1,000
/// levels, by far.
const GENERATED_DEPTHS: [usize; 3] = [2_000, 20_000, 100_000];

/// Generated SQL nested far past any limit, in every shape that nests (parentheses,
/// operator chains, NOT, function calls, CASE, subqueries, IN lists inside parentheses):
/// each is answered, with rows or with an error that names the nesting, and the engine
/// still answers afterwards. A crash (a stack overflow) would abort the test process.
#[test]
fn deep_generated_sql_is_answered_never_crashes() {
    let db = Lockstep::start(2);
    db.sql("CREATE TABLE d (id INTEGER NOT NULL PRIMARY KEY, x INTEGER)").expect("table");
    db.sql("INSERT INTO d VALUES (1, 1)").expect("row");
    for n in GENERATED_DEPTHS {
        let shapes = [
            format!("SELECT {}1{}", "(".repeat(n), " + 1)".repeat(n)),
            format!("SELECT 1{}", " + 1".repeat(n)),
            format!("SELECT id FROM d WHERE {}x = 1", "NOT ".repeat(n)),
            format!("SELECT {}1{}", "ABS(".repeat(n), ")".repeat(n)),
            format!("SELECT {}1{}", "CASE WHEN x = 1 THEN ".repeat(n), " ELSE 0 END".repeat(n)),
            format!("SELECT id FROM d WHERE x IN {}SELECT x FROM d{}", "(SELECT x FROM d WHERE x IN ".repeat(n), ")".repeat(n)),
            format!("SELECT id FROM d WHERE {}", (0..n).map(|i| format!("x = {i}")).collect::<Vec<_>>().join(" OR ")),
            format!("SELECT id FROM d WHERE x IN ({})", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")),
        ];
        for sql in shapes {
            match db.sql(&sql) {
                Ok(rows) => assert!(rows.len() <= 1, "{}: {rows:?}", shorten(&sql)),
                Err(e) => assert!(
                    e.contains("deep") || e.contains("nest") || e.contains("limit"),
                    "{} levels: the error should say what was too deep: {e}",
                    n
                ),
            }
        }
        assert_eq!(db.sql("SELECT COUNT(*) FROM d"), Ok(vec![vec![lockstep_core::Value::Int(1)]]), "the engine answers after depth {n}");
    }
}
