//! DDL support for the engine: finding Lua files for `FROM FILE` / `FROM CLASS`, and what
//! to record in the catalog store for an applied statement.

use std::path::{Path, PathBuf};

use lockstep_core::{Catalog, Error, Result};
use lockstep_sql::DdlEnv;

use crate::store::procedure_ddl;

/// Largest Lua source file accepted.
pub const LUA_FILE_SIZE_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// Resolves procedure files against the procedure directory, then the working directory.
pub struct FsDdlEnv {
    procedure_dir: PathBuf,
}

impl FsDdlEnv {
    pub fn new(procedure_dir: PathBuf) -> Self {
        FsDdlEnv { procedure_dir }
    }

    fn read(path: &Path) -> Result<String> {
        let meta = std::fs::metadata(path).map_err(|e| Error::sql(format!("cannot read {}: {e}", path.display())))?;
        if meta.len() > LUA_FILE_SIZE_MAX_BYTES {
            return Err(Error::sql(format!("{} is larger than {LUA_FILE_SIZE_MAX_BYTES} bytes", path.display())));
        }
        std::fs::read_to_string(path).map_err(|e| Error::sql(format!("cannot read {}: {e}", path.display())))
    }
}

impl DdlEnv for FsDdlEnv {
    fn read_file(&self, path: &str) -> Result<(String, String)> {
        let p = Path::new(path);
        let candidates = if p.is_absolute() { vec![p.to_path_buf()] } else { vec![self.procedure_dir.join(p), p.to_path_buf()] };
        for c in &candidates {
            if c.is_file() {
                return Ok((path.to_string(), Self::read(c)?));
            }
        }
        Err(Error::sql(format!(
            "procedure file '{path}' not found (looked in {} and the working directory); with `lockstep sql -f` the shell sends the file itself",
            self.procedure_dir.display()
        )))
    }

    fn find_class(&self, class_name: &str) -> Result<(String, String)> {
        let short = class_name.rsplit('.').next().unwrap_or(class_name);
        for file in [format!("{short}.lua"), format!("{}.lua", short.to_ascii_lowercase())] {
            let p = self.procedure_dir.join(&file);
            if p.is_file() {
                return Ok((file, Self::read(&p)?));
            }
        }
        Err(Error::sql(format!(
            "class {class_name} has no Lua procedure: Lockstep runs procedures written in Lua, and binds `FROM CLASS {class_name}` to {short}.lua in the procedure directory {}",
            self.procedure_dir.display()
        )))
    }
}

/// What to store for an applied DDL statement: the statement itself, except that
/// procedure changes are stored as generated DDL carrying the Lua source inline.
pub fn records_for(sql: &str, old: &Catalog, new: &Catalog) -> Vec<String> {
    let mut out = Vec::new();
    let mut procs_changed = false;
    for p in new.procedures() {
        if old.procedure(&p.name).map(|o| **o != **p).unwrap_or(true) {
            out.push(procedure_ddl(p));
            procs_changed = true;
        }
    }
    for p in old.procedures() {
        if new.procedure(&p.name).is_none() {
            out.push(format!("DROP PROCEDURE {}", p.name));
            procs_changed = true;
        }
    }
    if !procs_changed {
        out.push(sql.to_string());
    }
    out
}
