//! `lockstep user add|list|remove`: the users of a server with `--security on`, kept in its
//! TOML configuration file as `[[users]]` entries. A password is asked for (without echo on
//! a terminal) or read from stdin, and stored only as VoltDB's server stores it: the digest
//! of its digest, for SHA-256 and SHA-1 (`password_sha256`, `password_sha1`), and as the
//! SCRAM-SHA-256 verifier the PostgreSQL port checks logins with (`scram`, PostgreSQL's form,
//! with a random salt). The rest of the file, comments included, is kept as it was. The
//! server reads users when it starts.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lockstep_server::config::FileConfig;
use lockstep_server::security::{UserEntry, NAME_MAX_BYTES};
use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

/// The configuration file used when `--config` is not given.
pub const CONFIG_FILE_DEFAULT: &str = "lockstep.toml";
/// Longest password accepted, in bytes.
pub const PASSWORD_MAX_BYTES: usize = 4096;
/// Largest configuration file read.
const CONFIG_FILE_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Permissions of a configuration file this command creates or rewrites: owner only.
const CONFIG_FILE_MODE: u32 = 0o600;

#[derive(clap::Args)]
pub struct UserArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Add a user, or set an existing user's roles and password.
    Add {
        /// The user name clients log in with (exact case).
        name: String,
        /// Comma-separated roles: administrator, user, or roles created with CREATE ROLE.
        #[arg(long, value_delimiter = ',', required = true)]
        roles: Vec<String>,
        /// Read the password from the first line of stdin instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
        /// The server's TOML configuration file (created if missing).
        #[arg(long, default_value = CONFIG_FILE_DEFAULT)]
        config: PathBuf,
    },
    /// List the users and their roles.
    List {
        #[arg(long, default_value = CONFIG_FILE_DEFAULT)]
        config: PathBuf,
    },
    /// Remove a user.
    Remove {
        name: String,
        #[arg(long, default_value = CONFIG_FILE_DEFAULT)]
        config: PathBuf,
    },
}

pub fn run(args: UserArgs) -> ExitCode {
    let result = match args.action {
        Action::Add { name, roles, password_stdin, config } => add(&name, &roles, password_stdin, &config),
        Action::List { config } => list(&config),
        Action::Remove { name, config } => remove(&name, &config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn add(name: &str, roles: &[String], password_stdin: bool, path: &Path) -> Result<(), String> {
    check_name(name, "user name")?;
    let roles: Vec<String> = roles.iter().map(|r| r.trim().to_ascii_lowercase()).filter(|r| !r.is_empty()).collect();
    for r in &roles {
        check_name(r, "role name")?;
    }
    let mut doc = load(path)?;
    let password = read_password(name, password_stdin)?;
    let entry = UserEntry::new(name, &roles, &password)?;
    let replaced = put_user(&mut doc, &entry)?;
    save(path, &doc)?;
    let verb = if replaced { "updated" } else { "added" };
    println!(
        "user {name} {verb} in {} with roles {}; (re)start the server with --config {} to apply",
        path.display(),
        roles.join(", "),
        path.display()
    );
    Ok(())
}

fn list(path: &Path) -> Result<(), String> {
    let config = parse(&read_text(path)?.unwrap_or_default(), path)?;
    for u in config.users.unwrap_or_default() {
        println!("{}\t{}", u.name, u.roles.join(","));
    }
    Ok(())
}

fn remove(name: &str, path: &Path) -> Result<(), String> {
    let mut doc = load(path)?;
    let users = doc.get_mut("users").and_then(Item::as_array_of_tables_mut);
    let Some(users) = users else { return Err(format!("{} has no user {name}", path.display())) };
    let before = users.len();
    users.retain(|t| t.get("name").and_then(Item::as_str) != Some(name));
    if users.len() == before {
        return Err(format!("{} has no user {name}", path.display()));
    }
    save(path, &doc)?;
    println!("user {name} removed from {}", path.display());
    Ok(())
}

/// A user or role name: 1 to NAME_MAX_BYTES bytes, no control characters or whitespace
/// at the ends (it is matched exactly at login).
fn check_name(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_MAX_BYTES {
        return Err(format!("the {what} must be 1 to {NAME_MAX_BYTES} bytes"));
    }
    if name.chars().any(char::is_control) || name.trim() != name {
        return Err(format!("the {what} {name:?} has control characters or surrounding spaces"));
    }
    Ok(())
}

/// The file's text, or None when it does not exist yet.
fn read_text(path: &Path) -> Result<Option<String>, String> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > CONFIG_FILE_MAX_BYTES => Err(format!("{} is larger than {CONFIG_FILE_MAX_BYTES} bytes", path.display())),
        Ok(_) => std::fs::read_to_string(path).map(Some).map_err(|e| format!("cannot read {}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The file as the server reads it: so a file this command writes is one the server takes.
fn parse(text: &str, path: &Path) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| format!("{} is not a valid server configuration: {e}", path.display()))
}

fn load(path: &Path) -> Result<DocumentMut, String> {
    let text = read_text(path)?.unwrap_or_default();
    parse(&text, path)?;
    text.parse::<DocumentMut>().map_err(|e| format!("{} is not valid TOML: {e}", path.display()))
}

/// Sets the `[[users]]` entry of `u.name`, or appends one; whether it replaced one.
fn put_user(doc: &mut DocumentMut, u: &UserEntry) -> Result<bool, String> {
    let users = doc.entry("users").or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()));
    let users = users.as_array_of_tables_mut().ok_or("the key `users` must be a list of [[users]] tables")?;
    let mut roles = Array::new();
    for r in &u.roles {
        roles.push(r.as_str());
    }
    let existing = users.iter_mut().find(|t| t.get("name").and_then(Item::as_str) == Some(u.name.as_str()));
    let replaced = existing.is_some();
    let table = match existing {
        Some(t) => t,
        None => {
            users.push(Table::new());
            users.iter_mut().last().ok_or("cannot add a [[users]] table")?
        }
    };
    table["name"] = value(u.name.as_str());
    table["roles"] = value(roles);
    table["password_sha256"] = value(u.password_sha256.as_str());
    table["password_sha1"] = value(u.password_sha1.as_str());
    match &u.scram {
        Some(verifier) => table["scram"] = value(verifier.as_str()),
        None => {
            table.remove("scram");
        }
    }
    Ok(replaced)
}

/// Writes the file whole, readable by its owner only: next to it, synced, then renamed.
fn save(path: &Path, doc: &DocumentMut) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let text = doc.to_string();
    parse(&text, path)?;
    let io = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(CONFIG_FILE_MODE).open(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The password: the first line of stdin with --password-stdin, else asked for twice on the
/// terminal without echo.
fn read_password(user: &str, from_stdin: bool) -> Result<String, String> {
    let stdin = std::io::stdin();
    let password = if from_stdin {
        let mut line = String::new();
        stdin.lock().read_line(&mut line).map_err(|e| format!("cannot read the password from stdin: {e}"))?;
        line.trim_end_matches(['\n', '\r']).to_string()
    } else if stdin.is_terminal() {
        let first = prompt_hidden(&format!("Password for {user}: "))?;
        if prompt_hidden("Repeat it: ")? != first {
            return Err("the two passwords differ; nothing was changed".into());
        }
        first
    } else {
        return Err("stdin is not a terminal: pass --password-stdin to read the password from it".into());
    };
    if password.is_empty() {
        return Err("the password is empty; nothing was changed".into());
    }
    if password.len() > PASSWORD_MAX_BYTES {
        return Err(format!("the password is longer than {PASSWORD_MAX_BYTES} bytes"));
    }
    Ok(password)
}

/// Asks on stderr and reads a line from the terminal with echo off (restored after).
fn prompt_hidden(prompt: &str) -> Result<String, String> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let echo = EchoOff::new();
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    drop(echo);
    eprintln!();
    read.map_err(|e| format!("cannot read the password: {e}"))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

/// Terminal echo turned off on stdin while it lives.
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> EchoOff {
        // SAFETY: tcgetattr/tcsetattr only read and write the termios struct we pass, for
        // file descriptor 0; a failure leaves the terminal as it was.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return EchoOff(None);
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            t.c_lflag |= libc::ECHONL;
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return EchoOff(None);
            }
            EchoOff(Some(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            // SAFETY: restores the settings read in `new` on the same descriptor.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, &saved);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_added_replaced_and_the_rest_of_the_file_kept() {
        let text = "# my server\nlisten = \"127.0.0.1:9\" # port\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        let entry = |name: &str, roles: &[String], password: &str| UserEntry::new(name, roles, password).unwrap();
        let (ann, bob) = (entry("ann", &["user".into()], "pw3"), entry("bob", &[], "pw2"));
        assert!(!put_user(&mut doc, &entry("ann", &["administrator".into()], "pw1")).unwrap());
        assert!(!put_user(&mut doc, &bob).unwrap());
        assert!(put_user(&mut doc, &ann).unwrap());
        let out = doc.to_string();
        assert!(out.starts_with("# my server\nlisten = \"127.0.0.1:9\" # port\n"), "{out}");
        let parsed = parse(&out, Path::new("x")).unwrap();
        let users = parsed.users.unwrap();
        assert_eq!(users, vec![ann.clone(), bob]);
        assert!(ann.scram.as_deref().is_some_and(|v| v.starts_with("SCRAM-SHA-256$4096:")), "{ann:?}");
        assert!(!out.contains("pw3"));
        // An entry written before verifiers existed keeps working, and gets one when set again.
        let old = "[[users]]\nname = \"cy\"\nroles = []\npassword_sha256 = \"00\"\npassword_sha1 = \"00\"\n";
        let mut doc: DocumentMut = old.parse().unwrap();
        assert_eq!(parse(old, Path::new("x")).unwrap().users.unwrap()[0].scram, None);
        let cy = entry("cy", &[], "pw4");
        assert!(put_user(&mut doc, &cy).unwrap());
        assert_eq!(parse(&doc.to_string(), Path::new("x")).unwrap().users.unwrap(), vec![cy]);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("alice", "user name").is_ok());
        assert!(check_name("", "user name").is_err());
        assert!(check_name(" a", "user name").is_err());
        assert!(check_name("a\u{7}", "user name").is_err());
    }
}
