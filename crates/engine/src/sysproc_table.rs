//! Every system procedure in one table: its name, its parameters, who may call it and which
//! thread answers it. The front ends (which answer a few themselves), the permission checks
//! and the engine's dispatch all read it; `docs/guide/monitoring.md` prints it (the docs
//! test compares the two).

use crate::auth::SysAccess;

/// The system procedures, as the code that runs them names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SysProc {
    AdHoc,
    Ping,
    Statistics,
    SystemCatalog,
    SystemInformation,
    GetPartitionKeys,
    Subscribe,
    Explain,
    ExplainProc,
    Shutdown,
    Pause,
    Resume,
    Quiesce,
    SnapshotSave,
    SnapshotScan,
    SnapshotRestore,
    StateHash,
    UpdateClasses,
    UpdateApplicationCatalog,
}

/// Which thread answers a system procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnsweredBy {
    /// The client's connection, without the engine (it concerns the connection or the
    /// server process).
    FrontEnd,
    /// The caller's thread, from what the engine shares (the catalog, counters, files).
    Caller,
    /// Every partition's site, one short message each, between transactions.
    Sites,
    /// The multi-partition coordinator, in the order of multi-partition transactions.
    Coordinator,
    /// By its SQL: one partition's site, or the coordinator.
    BySql,
}

impl AnsweredBy {
    pub fn describe(self) -> &'static str {
        match self {
            AnsweredBy::FrontEnd => "the connection",
            AnsweredBy::Caller => "the caller's thread",
            AnsweredBy::Sites => "every partition",
            AnsweredBy::Coordinator => "the coordinator",
            AnsweredBy::BySql => "one partition or the coordinator",
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct SysProcInfo {
    pub proc: SysProc,
    /// As VoltDB spells it; calls match it in any case.
    pub name: &'static str,
    /// The parameters, as the guide writes them.
    pub params: &'static str,
    pub access: SysAccess,
    pub answered_by: AnsweredBy,
}

const fn row(proc: SysProc, name: &'static str, params: &'static str, access: SysAccess, answered_by: AnsweredBy) -> SysProcInfo {
    SysProcInfo { proc, name, params, access, answered_by }
}

use AnsweredBy::{BySql, Caller, Coordinator, FrontEnd, Sites};
use SysAccess::{Admin, AnyUser};

/// Every system procedure Lockstep runs. A name not here is not a procedure; for the
/// permission check it needs ADMIN, so a system procedure added later is closed until it
/// is classified here.
pub const SYSTEM_PROCEDURES: &[SysProcInfo] = &[
    row(SysProc::AdHoc, "@AdHoc", "sql, params…", SysAccess::BySql, BySql),
    row(SysProc::Ping, "@Ping", "", AnyUser, Caller),
    row(SysProc::Statistics, "@Statistics", "selector, interval", AnyUser, Sites),
    row(SysProc::SystemCatalog, "@SystemCatalog", "selector", AnyUser, Caller),
    row(SysProc::SystemInformation, "@SystemInformation", "[OVERVIEW | DEPLOYMENT]", AnyUser, Caller),
    row(SysProc::GetPartitionKeys, "@GetPartitionKeys", "INTEGER | STRING | VARBINARY", AnyUser, Caller),
    row(SysProc::Subscribe, "@Subscribe", "TOPOLOGY", AnyUser, FrontEnd),
    row(SysProc::Explain, "@Explain", "sql", AnyUser, Caller),
    row(SysProc::ExplainProc, "@ExplainProc", "procedure", AnyUser, Caller),
    row(SysProc::Shutdown, "@Shutdown", "", Admin, FrontEnd),
    row(SysProc::Pause, "@Pause", "", Admin, Caller),
    row(SysProc::Resume, "@Resume", "", Admin, Caller),
    row(SysProc::Quiesce, "@Quiesce", "", Admin, Sites),
    row(SysProc::SnapshotSave, "@SnapshotSave", "[path, nonce, blocking] (ignored)", Admin, Coordinator),
    row(SysProc::SnapshotScan, "@SnapshotScan", "[path] (ignored)", Admin, Caller),
    row(SysProc::SnapshotRestore, "@SnapshotRestore", "id, or path and nonce", Admin, Coordinator),
    // A hash of every row: a way to compare all data, so as privileged as reading it all.
    row(SysProc::StateHash, "@StateHash", "", Admin, Sites),
    row(SysProc::UpdateClasses, "@UpdateClasses", "jar, classes to delete", Admin, Caller),
    row(SysProc::UpdateApplicationCatalog, "@UpdateApplicationCatalog", "catalog, deployment (refused)", Admin, Caller),
];

/// The system procedure `name` names, in any case.
pub fn find(name: &str) -> Option<&'static SysProcInfo> {
    SYSTEM_PROCEDURES.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_system_names_and_unique_and_found_in_any_case() {
        for (i, s) in SYSTEM_PROCEDURES.iter().enumerate() {
            assert!(s.name.starts_with('@'), "{}", s.name);
            assert!(SYSTEM_PROCEDURES[..i].iter().all(|o| !o.name.eq_ignore_ascii_case(s.name) && o.proc != s.proc), "{} twice", s.name);
            assert_eq!(find(&s.name.to_ascii_uppercase()).map(|f| f.proc), Some(s.proc));
        }
        assert!(find("@NoSuchThing").is_none());
    }
}
