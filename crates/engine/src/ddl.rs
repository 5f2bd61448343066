//! DDL support for the engine: finding Lua files for `FROM FILE` / `FROM CLASS`, checking
//! the class names of a jar sent with `@UpdateClasses` against them, and what to record in
//! the catalog store for an applied statement.

use std::path::{Path, PathBuf};

use lockstep_core::{Catalog, Error, Result};
use lockstep_sql::DdlEnv;

use crate::store::procedure_ddl;

/// Largest Lua source file accepted.
pub const LUA_FILE_SIZE_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// Finds procedure files in the procedure directory, and only there: `FROM FILE` and
/// `FROM CLASS` may not read anything outside it (after `..` and symbolic links), so DDL
/// cannot be used to read the server's other files.
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

    fn outside(&self, requested: &str) -> Error {
        Error::sql(format!(
            "procedure file '{requested}' is outside the procedure directory {}: FROM FILE reads only files in that directory (put the file there, or send its source inline with FROM FILE '…' SOURCE $$…$$, as `lockstep sql -f` does)",
            self.procedure_dir.display()
        ))
    }
}

/// `path` with `.` and `..` resolved by their names alone, without the file system.
fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Where `requested` leads once resolved, if that is inside `dir`: Err(true) when it leads
/// outside, Err(false) when there is no such file. A path whose names alone (`..`, an
/// absolute path) leave the directory is refused before anything outside is looked at,
/// so the answer never tells whether a file outside exists.
fn confined(dir: &Path, requested: &Path) -> std::result::Result<PathBuf, bool> {
    let joined = if requested.is_absolute() { requested.to_path_buf() } else { dir.join(requested) };
    let absolute = |p: &Path| std::path::absolute(p).map(|p| lexical_normalize(&p)).map_err(|_| false);
    if !absolute(&joined)?.starts_with(absolute(dir)?) {
        return Err(true);
    }
    let real_dir = dir.canonicalize().map_err(|_| false)?;
    let real = joined.canonicalize().map_err(|_| false)?;
    if !real.starts_with(&real_dir) {
        return Err(true);
    }
    if real.is_file() {
        Ok(real)
    } else {
        Err(false)
    }
}

impl DdlEnv for FsDdlEnv {
    fn read_file(&self, path: &str) -> Result<(String, String)> {
        match confined(&self.procedure_dir, Path::new(path)) {
            Ok(real) => Ok((path.to_string(), Self::read(&real)?)),
            Err(true) => Err(self.outside(path)),
            Err(false) => Err(Error::sql(format!(
                "procedure file '{path}' not found in the procedure directory {}; with `lockstep sql -f` the shell sends the file itself",
                self.procedure_dir.display()
            ))),
        }
    }

    fn find_class(&self, class_name: &str) -> Result<(String, String)> {
        let short = class_name.rsplit('.').next().unwrap_or(class_name);
        if let Some((file, p)) = lua_file_for_class(&self.procedure_dir, short) {
            return Ok((file, Self::read(&p)?));
        }
        Err(Error::sql(format!(
            "class {class_name} has no Lua procedure: Lockstep runs procedures written in Lua, and binds `FROM CLASS {class_name}` to {short}.lua in the procedure directory {}",
            self.procedure_dir.display()
        )))
    }
}

/// Whether `short` can name a class (and so a file name without any path in it).
fn is_class_name(short: &str) -> bool {
    !short.is_empty() && short.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

/// The Lua file `FROM CLASS a.b.Short` binds to: `Short.lua`, else `short.lua`, inside the
/// procedure directory (a symbolic link out of it does not count).
fn lua_file_for_class(procedure_dir: &Path, short: &str) -> Option<(String, PathBuf)> {
    if !is_class_name(short) {
        return None;
    }
    [format!("{short}.lua"), format!("{}.lua", short.to_ascii_lowercase())]
        .into_iter()
        .find_map(|file| confined(procedure_dir, Path::new(&file)).ok().map(|p| (file, p)))
}

/// Entries read from a jar's central directory at most (a procedure jar holds a few dozen).
pub const JAR_ENTRIES_MAX: usize = 65_535;
/// "End of central directory" record: signature, then fixed fields (22 bytes in all).
const ZIP_EOCD_SIGNATURE: u32 = 0x0605_4b50;
const ZIP_EOCD_BYTES: usize = 22;
/// The archive comment after that record is at most this long (a u16 length).
const ZIP_COMMENT_MAX_BYTES: usize = 65_535;
/// Central directory file header: signature, then 42 bytes of fields, then the name.
const ZIP_CENTRAL_SIGNATURE: u32 = 0x0201_4b50;
const ZIP_CENTRAL_HEADER_BYTES: usize = 46;

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The entry names of a zip (jar) archive, read from its central directory only: nothing
/// is decompressed, so the cost is bounded by the directory, which is bounded by the input.
pub fn jar_entry_names(jar: &[u8]) -> Result<Vec<String>> {
    let bad = |why: &str| {
        Error::graceful(format!(
            "@UpdateClasses: the jar is not a valid zip archive ({why}); Lockstep procedures are Lua: put Name.lua in the procedure directory, then CREATE PROCEDURE … FROM CLASS a.b.Name binds it"
        ))
    };
    if jar.len() < ZIP_EOCD_BYTES {
        return Err(bad("too short"));
    }
    // The end record sits in the last 22 + comment bytes; search backwards for its signature.
    let lowest = jar.len().saturating_sub(ZIP_EOCD_BYTES + ZIP_COMMENT_MAX_BYTES);
    let eocd = (lowest..=jar.len() - ZIP_EOCD_BYTES)
        .rev()
        .find(|&i| u32_at(jar, i) == Some(ZIP_EOCD_SIGNATURE))
        .ok_or_else(|| bad("no end of central directory record"))?;
    let count = u16_at(jar, eocd + 10).ok_or_else(|| bad("truncated end record"))?;
    let dir_size = u32_at(jar, eocd + 12).ok_or_else(|| bad("truncated end record"))? as usize;
    let dir_start = u32_at(jar, eocd + 16).ok_or_else(|| bad("truncated end record"))? as usize;
    if count > JAR_ENTRIES_MAX {
        return Err(bad("too many entries"));
    }
    let dir =
        dir_start.checked_add(dir_size).and_then(|end| jar.get(dir_start..end)).ok_or_else(|| bad("central directory out of range"))?;
    let mut names = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        if u32_at(dir, at) != Some(ZIP_CENTRAL_SIGNATURE) {
            return Err(bad("bad central directory entry"));
        }
        let field = |off: usize| u16_at(dir, at + off).ok_or_else(|| bad("truncated central directory entry"));
        let (name_len, extra_len, comment_len) = (field(28)?, field(30)?, field(32)?);
        let name_start = at + ZIP_CENTRAL_HEADER_BYTES;
        let name = dir.get(name_start..name_start + name_len).ok_or_else(|| bad("truncated entry name"))?;
        names.push(String::from_utf8_lossy(name).into_owned());
        at = name_start + name_len + extra_len + comment_len;
    }
    Ok(names)
}

/// What `@UpdateClasses` found in a jar: the procedure classes bound to Lua files, the
/// entries ignored (inner classes, resources), and the classes that have no Lua file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct JarCheck {
    pub bound: Vec<(String, String)>,
    pub ignored: Vec<String>,
    pub missing: Vec<String>,
}

/// Sorts a jar's entries against the procedure directory: top-level classes with a Lua file
/// are bound, those without one are `missing`; inner classes (`Outer$Inner`) and non-class
/// entries are ignored. Whether a missing class is a procedure or a helper (YCSB's
/// `ByteWrapper`) is not known here: that would mean inflating and parsing the class file.
pub fn check_jar(procedure_dir: &Path, jar: &[u8]) -> Result<JarCheck> {
    let mut check = JarCheck::default();
    for name in jar_entry_names(jar)? {
        let Some(path) = name.strip_suffix(".class") else {
            if !name.ends_with('/') {
                check.ignored.push(name);
            }
            continue;
        };
        let short = path.rsplit('/').next().unwrap_or(path);
        if short.contains('$') || short == "package-info" || short == "module-info" {
            check.ignored.push(name);
            continue;
        }
        let class = path.replace('/', ".");
        match lua_file_for_class(procedure_dir, short) {
            Some((file, _)) => check.bound.push((class, file)),
            None => check.missing.push(class),
        }
    }
    Ok(check)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A zip with empty stored entries: local headers, central directory, end record.
    fn zip(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for name in names {
            let offset = out.len() as u32;
            out.extend(0x0403_4b50u32.to_le_bytes());
            out.extend([0u8; 22]);
            out.extend((name.len() as u16).to_le_bytes());
            out.extend(0u16.to_le_bytes());
            out.extend(name.as_bytes());
            central.extend(ZIP_CENTRAL_SIGNATURE.to_le_bytes());
            central.extend([0u8; 24]);
            central.extend((name.len() as u16).to_le_bytes());
            central.extend([0u8; 12]);
            central.extend(offset.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let dir_start = out.len() as u32;
        out.extend(&central);
        out.extend(ZIP_EOCD_SIGNATURE.to_le_bytes());
        out.extend([0u8; 4]);
        out.extend((names.len() as u16).to_le_bytes());
        out.extend((names.len() as u16).to_le_bytes());
        out.extend((central.len() as u32).to_le_bytes());
        out.extend(dir_start.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out
    }

    #[test]
    fn procedure_files_are_read_only_inside_the_procedure_directory() {
        let root = std::env::temp_dir().join(format!("lockstep-ddl-confine-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("procs");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/Ok.lua"), "return function() return 1 end").unwrap();
        std::fs::write(root.join("secret.txt"), "top-secret-token").unwrap();
        std::os::unix::fs::symlink(root.join("secret.txt"), dir.join("Leak.lua")).unwrap();
        let env = FsDdlEnv::new(dir.clone());
        assert!(env.read_file("sub/Ok.lua").unwrap().1.contains("return 1"));
        assert!(env.read_file("./sub/../sub/Ok.lua").is_ok());
        assert!(env.read_file(dir.join("sub/Ok.lua").to_str().unwrap()).is_ok());
        let absolute = root.join("secret.txt");
        for outside in ["../secret.txt", "sub/../../secret.txt", absolute.to_str().unwrap(), "/etc/passwd", "Leak.lua", "../nothing"] {
            let e = env.read_file(outside).unwrap_err();
            assert!(e.message.contains("outside the procedure directory"), "{outside}: {e}");
            assert!(!e.message.contains("top-secret-token"), "{e}");
        }
        assert!(env.read_file("missing.lua").unwrap_err().message.contains("not found"));
        // FROM CLASS: a symbolic link out of the directory does not count, nor does a path.
        assert!(env.find_class("a.b.Leak").unwrap_err().message.contains("has no Lua procedure"));
        assert!(lua_file_for_class(&dir, "../secret").is_none());
        std::fs::write(dir.join("Vote.lua"), "return function() return 2 end").unwrap();
        assert!(env.find_class("voter.Vote").unwrap().1.contains("return 2"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn jar_names_come_from_the_central_directory() {
        let names = ["META-INF/MANIFEST.MF", "voltdbtatp/db/Reset.class"];
        assert_eq!(jar_entry_names(&zip(&names)).unwrap(), names.to_vec());
    }

    #[test]
    fn bad_jars_are_refused_with_a_reason() {
        let e = jar_entry_names(b"not a zip at all, just some bytes").unwrap_err();
        assert!(e.to_string().contains("no end of central directory record"), "{e}");
        let mut z = zip(&["a/B.class"]);
        let n = z.len();
        z[n - 6..n - 2].copy_from_slice(&1_000_000u32.to_le_bytes()); // directory offset past the end
        assert!(jar_entry_names(&z).unwrap_err().to_string().contains("central directory out of range"));
    }

    #[test]
    fn jar_classes_are_checked_against_lua_files() {
        let dir = std::env::temp_dir().join(format!("lockstep-ddl-jar-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Reset.lua"), "return function() return 0 end").unwrap();
        std::fs::write(dir.join("put.lua"), "return function() return 0 end").unwrap();
        let jar = zip(&["META-INF/", "META-INF/MANIFEST.MF", "p/q/Reset.class", "p/q/Put.class", "p/q/Put$1.class", "p/q/Gone.class"]);
        let check = check_jar(&dir, &jar).unwrap();
        assert_eq!(check.bound, vec![("p.q.Reset".to_string(), "Reset.lua".to_string()), ("p.q.Put".to_string(), "put.lua".to_string())]);
        assert_eq!(check.ignored, vec!["META-INF/MANIFEST.MF".to_string(), "p/q/Put$1.class".to_string()]);
        assert_eq!(check.missing, vec!["p.q.Gone".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
