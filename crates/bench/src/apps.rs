//! The four applications' DDL and Lua sources, built into the binary, and loading them into
//! a database that lacks them (procedure files are inlined as `SOURCE $…$`, as the shell
//! does, so the server needs no access to our files).

use lockstep_core::Error;

use crate::conn::Conn;

/// One application: its DDL and its procedure files (path relative to the DDL, source).
pub struct App {
    pub name: &'static str,
    pub ddl: &'static str,
    pub files: &'static [(&'static str, &'static str)],
}

macro_rules! app_file {
    ($app:literal, $file:literal) => {
        ($file, include_str!(concat!("../../../apps/", $app, "/", $file)))
    };
}

pub const VOTER: App = App {
    name: "voter",
    ddl: include_str!("../../../apps/voter/ddl.sql"),
    files: &[
        app_file!("voter", "procedures/Vote.lua"),
        app_file!("voter", "procedures/Initialize.lua"),
        app_file!("voter", "procedures/Results.lua"),
        app_file!("voter", "procedures/ContestantWinningStates.lua"),
        app_file!("voter", "procedures/GetStateHeatmap.lua"),
    ],
};

pub const BANK: App =
    App { name: "bank", ddl: include_str!("../../../apps/bank/ddl.sql"), files: &[app_file!("bank", "procedures/Transfer.lua")] };

pub const TATP: App = App {
    name: "tatp",
    // The kit's schema and procedures, then the spec's rules for the four that differ.
    ddl: concat!(include_str!("../../../apps/tatp/ddl.sql"), "\n", include_str!("../../../apps/tatp/spec.sql")),
    files: &[
        app_file!("tatp", "procedures/LoadSubscriber.lua"),
        app_file!("tatp", "procedures/Reset.lua"),
        app_file!("tatp", "procedures/UpdateSubscriberData.lua"),
        app_file!("tatp", "procedures/UpdateLocation.lua"),
        app_file!("tatp", "procedures/InsertCallForwarding.lua"),
        app_file!("tatp", "procedures/MapSubStringToNumberAllPartitions.lua"),
        app_file!("tatp", "procedures/UpdateLocationMultiPartition.lua"),
        app_file!("tatp", "procedures/InsertCallForwardingMultiPartition.lua"),
        app_file!("tatp", "procedures/DeleteCallForwardingMultiPartition.lua"),
        app_file!("tatp", "procedures/UpdateSubNbr.lua"),
        app_file!("tatp", "procedures/UpdateLocationCompound.lua"),
        app_file!("tatp", "procedures/InsertCallForwardingCompound.lua"),
        app_file!("tatp", "procedures/DeleteCallForwardingCompound.lua"),
        app_file!("tatp", "spec/LoadSubscriber.lua"),
        app_file!("tatp", "spec/InsertCallForwarding.lua"),
        app_file!("tatp", "spec/InsertCallForwardingMultiPartition.lua"),
        app_file!("tatp", "spec/DeleteCallForwardingMultiPartition.lua"),
    ],
};

pub const CHARGING: App = App {
    name: "charging",
    ddl: include_str!("../../../apps/charging/ddl.sql"),
    files: &[
        app_file!("charging", "procedures/UpsertUser.lua"),
        app_file!("charging", "procedures/DelUser.lua"),
        app_file!("charging", "procedures/GetUser.lua"),
        app_file!("charging", "procedures/AddCredit.lua"),
        app_file!("charging", "procedures/ReportQuotaUsage.lua"),
        app_file!("charging", "procedures/GetAndLockUser.lua"),
        app_file!("charging", "procedures/UpdateLockedUser.lua"),
        app_file!("charging", "procedures/DeleteStaleAllocations.lua"),
    ],
};

pub const YCSB: App = App {
    name: "ycsb",
    ddl: include_str!("../../../apps/ycsb/ddl.sql"),
    files: &[
        app_file!("ycsb", "procedures/Put.lua"),
        app_file!("ycsb", "procedures/Scan.lua"),
        app_file!("ycsb", "procedures/ScanAll.lua"),
    ],
};

/// The dollar-quote tag around inlined sources (must not occur in them).
const SOURCE_TAG: &str = "$lockstep_src$";

/// The app's DDL statements, with each `FROM FILE 'x'` followed by `SOURCE $…$<x>$…$`.
pub fn statements(app: &App) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for stmt in lockstep_sql::split_statements(app.ddl)? {
        out.push(inline_source(app, &stmt)?);
    }
    Ok(out)
}

fn inline_source(app: &App, stmt: &str) -> Result<String, Error> {
    let upper = stmt.to_ascii_uppercase();
    let Some(at) = upper.find("FROM FILE '") else { return Ok(stmt.to_string()) };
    let start = at + "FROM FILE '".len();
    let len = stmt[start..].find('\'').ok_or_else(|| Error::sql(format!("{}: unterminated file name in: {stmt}", app.name)))?;
    let path = &stmt[start..start + len];
    let (_, source) = app
        .files
        .iter()
        .find(|(p, _)| *p == path)
        .ok_or_else(|| Error::sql(format!("{}: procedure file {path} is not built into the benchmark", app.name)))?;
    if source.contains(SOURCE_TAG) {
        return Err(Error::sql(format!("{}: {path} contains {SOURCE_TAG}", app.name)));
    }
    let end = start + len + 1;
    Ok(format!("{} SOURCE {SOURCE_TAG}{source}{SOURCE_TAG}{}", &stmt[..end], &stmt[end..]))
}

/// Loads the app unless `probe_table` already exists; returns whether it loaded.
pub async fn ensure_loaded(conn: &Conn, app: &App, probe_table: &str) -> Result<bool, Error> {
    if let Conn::Peer(peer) = conn {
        return peer.ensure_loaded(app, probe_table).await;
    }
    let probe = conn.call("@AdHoc", vec![format!("SELECT COUNT(*) FROM {probe_table}").into()]).await?;
    if probe.is_success() {
        return Ok(false);
    }
    for stmt in statements(app)? {
        conn.adhoc(&stmt).await.map_err(|e| e.context(format!("loading app {}", app.name)))?;
    }
    // The population that follows goes straight to each partition's leader.
    conn.refresh_routing().await;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_reference_is_inlined() {
        for app in [&VOTER, &TATP, &CHARGING, &YCSB] {
            let stmts = statements(app).unwrap();
            assert!(stmts.len() > 3, "{}", app.name);
            for s in &stmts {
                if s.to_ascii_uppercase().contains("FROM FILE") {
                    assert!(s.contains(SOURCE_TAG), "{}: {s}", app.name);
                    assert!(s.contains("return function"), "{}: {s}", app.name);
                }
            }
        }
    }
}
