//! The catalog on disk: `<data>/catalog.sql`, the DDL statements applied so far, in order,
//! each appended and fsynced before the change is acknowledged. Procedures are stored with
//! their Lua source inline, so a restart does not depend on files that may have changed.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use lockstep_core::{Error, Partitioning, ProcedureBody, ProcedureDef, Result};

pub struct CatalogStore {
    path: PathBuf,
}

impl CatalogStore {
    pub fn open(data_dir: &Path) -> Result<Self> {
        fs::create_dir_all(data_dir).map_err(|e| Error::unexpected(format!("cannot create data directory {}: {e}", data_dir.display())))?;
        Ok(CatalogStore { path: data_dir.join("catalog.sql") })
    }

    /// The stored statements, in the order they were applied.
    pub fn load(&self) -> Result<Vec<String>> {
        match fs::read_to_string(&self.path) {
            Ok(text) => lockstep_sql::split_statements(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::unexpected(format!("cannot read {}: {e}", self.path.display()))),
        }
    }

    /// Appends statements and syncs them to disk.
    pub fn append(&self, statements: &[String]) -> Result<()> {
        let io = |e: std::io::Error| Error::unexpected(format!("cannot write {}: {e}", self.path.display()));
        let mut f = OpenOptions::new().create(true).append(true).open(&self.path).map_err(io)?;
        let mut text = String::new();
        for s in statements {
            text.push_str(s.trim().trim_end_matches(';'));
            text.push_str(";\n");
        }
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_data().map_err(io)
    }
}

impl CatalogStore {
    /// Replaces the file with `statements`, atomically (write aside, sync, rename).
    pub fn rewrite(&self, statements: &[String]) -> Result<()> {
        let io = |e: std::io::Error| Error::unexpected(format!("cannot write {}: {e}", self.path.display()));
        let tmp = self.path.with_extension("sql.tmp");
        let mut text = String::new();
        for s in statements {
            text.push_str(s.trim().trim_end_matches(';'));
            text.push_str(";\n");
        }
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// DDL that recreates a procedure exactly, with its Lua source inline.
pub fn procedure_ddl(def: &ProcedureDef) -> String {
    let mut s = format!("CREATE OR REPLACE PROCEDURE {}", def.name);
    if !def.allow.is_empty() {
        // Quoted: a role name is matched in any case, and may have been quoted when created.
        let roles: Vec<String> = def.allow.iter().map(|r| format!("\"{}\"", r.replace('"', "\"\""))).collect();
        s.push_str(&format!(" ALLOW {}", roles.join(", ")));
    }
    match &def.partitioning {
        Partitioning::Single { table, column, parameter, .. } => {
            s.push_str(&format!(" PARTITION ON TABLE {table} COLUMN {column} PARAMETER {parameter}"))
        }
        Partitioning::Directed => s.push_str(" DIRECTED"),
        Partitioning::Multi => {}
    }
    match &def.body {
        ProcedureBody::Sql(sql) => s.push_str(&format!(" AS {sql}")),
        ProcedureBody::Lua { path, source } => {
            let mut tag = String::from("lockstep");
            while source.contains(&format!("${tag}$")) {
                tag.push('_');
            }
            s.push_str(&format!(" FROM FILE {} SOURCE ${tag}${source}${tag}$", quote(path)));
        }
    }
    s
}
