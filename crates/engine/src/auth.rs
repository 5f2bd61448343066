//! Who may call what: the permission checks of every call, VoltDB's model.
//!
//! A logged-in user (`Principal`) has roles; each role grants permissions (`CREATE ROLE r
//! WITH …`, or the built-in `administrator` and `user`); permissions imply others
//! (`Permissions::implied`). A call is allowed when the user's permissions cover what the
//! procedure needs:
//! - a user procedure: ALLPROC, or a role the procedure ALLOWs;
//! - a default procedure (`T.insert` …): DEFAULTPROC, or DEFAULTPROCREAD for `T.select`;
//! - `@AdHoc`: SQLREAD for statements that only read, SQL for writes, ADMIN for DDL;
//! - a system procedure: what its row of `sysproc_table` says; a name not there needs ADMIN.
//!
//! With security off, front ends pass no principal and everything is allowed. The user's
//! permissions are resolved against the catalog's roles once per catalog version and kept
//! beside that version in one atomic word, so a check is a load, a compare and a bit test:
//! no lock, no allocation, no string hashing (roles that DDL changes apply from the next call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lockstep_core::{Catalog, Error, Permissions};

/// What a procedure needs, decided when the catalog is published (see `ProcInfo::access`).
#[derive(Clone, Debug)]
pub enum ProcAccess {
    /// A default procedure: DEFAULTPROC, or DEFAULTPROCREAD when it only reads.
    Default { read_only: bool },
    /// A user procedure: ALLPROC, or one of these roles (lower-case).
    User { allow: Arc<[String]> },
}

/// What a system procedure needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SysAccess {
    /// Any logged-in user: the information calls VoltDB's client makes on its own.
    AnyUser,
    /// ADMIN: calls that change the server's state or read all of its data.
    Admin,
    /// `@AdHoc`: decided by the statements (`check_adhoc`).
    BySql,
}

/// What the system procedure `name` needs (`sysproc_table`); one not in the table, ADMIN.
pub fn system_access(name: &str) -> SysAccess {
    crate::sysproc_table::find(name).map_or(SysAccess::Admin, |s| s.access)
}

/// No resolution cached yet (a real entry never has all bits set: versions stay far below 2^56).
const UNRESOLVED: u64 = u64::MAX;
/// Bits of the cached word that hold the permissions; the catalog version is above them.
const PERMISSION_BITS: u32 = 8;

/// A logged-in user: the name and roles from the server's configuration, and the
/// permissions they came to under the catalog version last seen.
#[derive(Debug)]
pub struct Principal {
    name: Box<str>,
    /// Lower-case.
    roles: Box<[String]>,
    /// `catalog version << 8 | permission bits`, or UNRESOLVED.
    resolved: AtomicU64,
}

impl Principal {
    pub fn new(name: &str, roles: &[String]) -> Principal {
        let roles = roles.iter().map(|r| r.to_ascii_lowercase()).collect();
        Principal { name: name.into(), roles, resolved: AtomicU64::new(UNRESOLVED) }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn roles(&self) -> &[String] {
        &self.roles
    }

    /// The user's permissions under `catalog`, with their implications. Roles the catalog
    /// does not have grant nothing (they may be created later by DDL).
    pub fn permissions(&self, catalog: &Catalog) -> Permissions {
        let cached = self.resolved.load(Ordering::Relaxed);
        if cached != UNRESOLVED && cached >> PERMISSION_BITS == catalog.version {
            return Permissions::from_bits(cached as u8);
        }
        let p = resolve(&self.roles, catalog);
        self.resolved.store(catalog.version << PERMISSION_BITS | u64::from(p.bits()), Ordering::Relaxed);
        p
    }

    fn has_role_in(&self, allow: &[String]) -> bool {
        self.roles.iter().any(|r| allow.contains(r))
    }

    fn refuse(&self, needed: &str, what: &str) -> Error {
        Error::unexpected(format!(
            "User {} does not have the {needed} permission needed for {what} (an administrator can grant it to one of the user's roles: {})",
            self.name,
            if self.roles.is_empty() { "the user has none".to_string() } else { self.roles.join(", ") }
        ))
    }
}

/// The union of the roles' permissions, with their implications.
pub fn resolve(roles: &[String], catalog: &Catalog) -> Permissions {
    roles.iter().filter_map(|r| catalog.role_permissions(r)).fold(Permissions::NONE, Permissions::union).implied()
}

/// May `who` call the procedure `name`, which needs `access`? None is security off.
pub fn check_procedure(who: Option<&Principal>, catalog: &Catalog, name: &str, access: &ProcAccess) -> Result<(), Error> {
    let Some(who) = who else { return Ok(()) };
    let has = who.permissions(catalog);
    match access {
        ProcAccess::Default { read_only } => {
            let needed = if *read_only { Permissions::DEFAULTPROCREAD } else { Permissions::DEFAULTPROC };
            if has.contains(needed) {
                return Ok(());
            }
            Err(who.refuse(if *read_only { "DEFAULTPROCREAD" } else { "DEFAULTPROC" }, &format!("default procedure {name}")))
        }
        ProcAccess::User { allow } => {
            if has.contains(Permissions::ALLPROC) || who.has_role_in(allow) {
                return Ok(());
            }
            let needed = if allow.is_empty() { "ALLPROC".to_string() } else { format!("ALLPROC (or role {})", allow.join(" or ")) };
            Err(who.refuse(&needed, &format!("procedure {name}")))
        }
    }
}

/// May `who` call the system procedure `lower_name`? `@AdHoc` is checked per statement later.
pub fn check_system(who: Option<&Principal>, catalog: &Catalog, name: &str) -> Result<(), Error> {
    let Some(who) = who else { return Ok(()) };
    match system_access(name) {
        SysAccess::AnyUser | SysAccess::BySql => Ok(()),
        SysAccess::Admin if who.permissions(catalog).contains(Permissions::ADMIN) => Ok(()),
        SysAccess::Admin => Err(who.refuse("ADMIN", &format!("system procedure {name}"))),
    }
}

/// What an `@AdHoc` call does, for its permission check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdHocKind {
    Ddl,
    Write,
    Read,
}

/// May `who` run ad-hoc SQL of this kind?
pub fn check_adhoc(who: Option<&Principal>, catalog: &Catalog, kind: AdHocKind) -> Result<(), Error> {
    let Some(who) = who else { return Ok(()) };
    let (needed, name, what) = match kind {
        AdHocKind::Ddl => (Permissions::ADMIN, "ADMIN", "DDL through @AdHoc"),
        AdHocKind::Write => (Permissions::SQL, "SQL", "@AdHoc statements that write"),
        AdHocKind::Read => (Permissions::SQLREAD, "SQLREAD", "@AdHoc queries"),
    };
    if who.permissions(catalog).contains(needed) {
        return Ok(());
    }
    Err(who.refuse(name, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(ddl_roles: &[(&str, Permissions)]) -> Catalog {
        let mut c = Catalog::default();
        for (n, p) in ddl_roles {
            c.add_role(n, *p).unwrap();
        }
        c
    }

    fn user(roles: &[&str]) -> Principal {
        Principal::new("alice", &roles.iter().map(|r| r.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn no_principal_is_allowed_everything() {
        let c = Catalog::default();
        assert!(check_system(None, &c, "@Shutdown").is_ok());
        assert!(check_adhoc(None, &c, AdHocKind::Ddl).is_ok());
        assert!(check_procedure(None, &c, "p", &ProcAccess::User { allow: Arc::from(vec![]) }).is_ok());
    }

    #[test]
    fn system_procedures_need_admin_unless_listed_for_any_user() {
        let c = Catalog::default();
        let plain = user(&["user"]);
        let admin = user(&["Administrator"]);
        for name in ["@shutdown", "@pause", "@snapshotrestore", "@updateclasses", "@quiesce", "@promote", "@somethingnew"] {
            let e = check_system(Some(&plain), &c, name).unwrap_err();
            assert_eq!(e.kind.status_code(), -3);
            assert!(e.message.contains("User alice") && e.message.contains("ADMIN") && e.message.contains(name), "{e}");
            assert!(check_system(Some(&admin), &c, name).is_ok());
        }
        let nobody = user(&[]);
        for name in ["@ping", "@statistics", "@systemcatalog", "@getpartitionkeys", "@subscribe", "@explain", "@adhoc"] {
            assert!(check_system(Some(&nobody), &c, name).is_ok(), "{name}");
        }
    }

    #[test]
    fn adhoc_needs_sqlread_sql_or_admin() {
        let c = catalog(&[("reader", Permissions::SQLREAD), ("writer", Permissions::SQL)]);
        let reader = user(&["reader"]);
        let writer = user(&["writer"]);
        assert!(check_adhoc(Some(&reader), &c, AdHocKind::Read).is_ok());
        assert!(check_adhoc(Some(&reader), &c, AdHocKind::Write).unwrap_err().message.contains("SQL permission"));
        assert!(check_adhoc(Some(&writer), &c, AdHocKind::Write).is_ok());
        assert!(check_adhoc(Some(&writer), &c, AdHocKind::Read).is_ok());
        assert!(check_adhoc(Some(&writer), &c, AdHocKind::Ddl).unwrap_err().message.contains("ADMIN"));
        assert!(check_adhoc(Some(&user(&["administrator"])), &c, AdHocKind::Ddl).is_ok());
    }

    #[test]
    fn procedures_need_allproc_an_allowed_role_or_defaultproc() {
        let c = catalog(&[("ops", Permissions::DEFAULTPROCREAD), ("crud", Permissions::DEFAULTPROC)]);
        let ops = user(&["OPS"]);
        let allow: Arc<[String]> = Arc::from(vec!["ops".to_string()]);
        assert!(check_procedure(Some(&ops), &c, "Vote", &ProcAccess::User { allow }).is_ok());
        let e = check_procedure(Some(&ops), &c, "Other", &ProcAccess::User { allow: Arc::from(vec![]) }).unwrap_err();
        assert!(e.message.contains("ALLPROC") && e.message.contains("procedure Other"), "{e}");
        assert!(check_procedure(Some(&user(&["user"])), &c, "Other", &ProcAccess::User { allow: Arc::from(vec![]) }).is_ok());
        assert!(check_procedure(Some(&ops), &c, "T.select", &ProcAccess::Default { read_only: true }).is_ok());
        assert!(check_procedure(Some(&ops), &c, "T.insert", &ProcAccess::Default { read_only: false }).is_err());
        assert!(check_procedure(Some(&user(&["crud"])), &c, "T.insert", &ProcAccess::Default { read_only: false }).is_ok());
        assert!(check_procedure(Some(&user(&["crud"])), &c, "T.select", &ProcAccess::Default { read_only: true }).is_ok());
    }

    #[test]
    fn permissions_follow_role_changes_by_version() {
        let mut c = Catalog::default();
        let who = user(&["ops"]);
        assert_eq!(who.permissions(&c), Permissions::NONE);
        c.add_role("ops", Permissions::SQL).unwrap();
        assert!(who.permissions(&c).contains(Permissions::SQLREAD));
        c.drop_role("ops").unwrap();
        assert_eq!(who.permissions(&c), Permissions::NONE);
    }
}
