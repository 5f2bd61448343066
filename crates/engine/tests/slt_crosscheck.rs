//! Checks the suite's expected answers against other systems: the portable records of every
//! `tests/slt/*.slt` file (those not marked `onlyif lockstep`; `skipif sqlite` and `skipif
//! postgresql` mark dialect differences) run on SQLite (bundled, always) and on PostgreSQL
//! (when `LOCKSTEP_PG_URL` names one; `scripts/slt-crosscheck.sh` starts PostgreSQL 15 and
//! sets it). Prints, per system, how many records ran and how many agree, and lists the
//! others; SQLite must agree on every record it runs, so an expected answer that is wrong by
//! SQL's rules (as SQLite reads them) fails `cargo test`.

mod sqlcheck;

use sqlcheck::{slt_files, Postgres, Sqlite};
use sqllogictest::{DefaultColumnType, MakeConnection, Record, RecordOutput, Runner, DB};

/// What one system made of the suite.
#[derive(Default)]
struct Tally {
    ran: usize,
    disagreements: Vec<String>,
}

impl Tally {
    fn line(&self, system: &str) -> String {
        format!("{system}: {} records run, {} agree, {} differ", self.ran, self.ran - self.disagreements.len(), self.disagreements.len())
    }
}

/// Runs every portable record of one file with `label` set, through connections `make` opens.
fn check_file<D, M>(path: &std::path::Path, label: &str, make: M, tally: &mut Tally)
where
    D: DB<ColumnType = DefaultColumnType> + Send + 'static,
    M: MakeConnection<Conn = D>,
{
    let records = match sqllogictest::parse_file::<DefaultColumnType>(path) {
        Ok(r) => r,
        Err(e) => return tally.disagreements.push(format!("{}: does not parse: {e}", path.display())),
    };
    let mut runner = Runner::new(make);
    runner.add_label(label);
    for record in records {
        let counts = matches!(record, Record::Statement { .. } | Record::Query { .. });
        match runner.run(record) {
            Ok(RecordOutput::Nothing) => {}
            Ok(_) => tally.ran += usize::from(counts),
            Err(e) => {
                tally.ran += 1;
                let text = e.to_string();
                let short: String = text.chars().take(800).collect();
                tally.disagreements.push(short);
            }
        }
    }
    runner.shutdown();
}

#[test]
fn expected_answers_agree_with_sqlite_and_postgresql() {
    let files = slt_files();
    let mut sqlite = Tally::default();
    for path in &files {
        check_file(path, "sqlite", || async { Ok(Sqlite::open()) }, &mut sqlite);
    }
    println!("{}", sqlite.line("SQLite"));
    for d in &sqlite.disagreements {
        println!("  SQLite differs: {d}");
    }

    if let Ok(url) = std::env::var("LOCKSTEP_PG_URL") {
        let mut pg = Tally::default();
        for path in &files {
            let schema = format!("slt_{}", path.file_stem().map_or("x".into(), |s| s.to_string_lossy().replace('-', "_")));
            let url = url.clone();
            check_file(
                path,
                "postgresql",
                move || std::future::ready(Postgres::connect(&url, &schema).map_err(sqlcheck::SqlError)),
                &mut pg,
            );
        }
        println!("{}", pg.line("PostgreSQL"));
        for d in &pg.disagreements {
            println!("  PostgreSQL differs: {d}");
        }
    } else {
        println!("PostgreSQL: not checked (set LOCKSTEP_PG_URL, or run scripts/slt-crosscheck.sh)");
    }
    assert!(sqlite.ran > 0, "no record ran on SQLite");
    assert!(sqlite.disagreements.is_empty(), "{}: see the list above", sqlite.line("SQLite"));
}
