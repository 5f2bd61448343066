//! The peers' versions of the four apps (under apps/*/peers/), built into the binary, with
//! Voter's area codes taken from Lockstep's own Initialize.lua so the lists cannot drift.

use lockstep_core::Error;

use crate::apps;

/// Which peer a source is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    Postgres,
    Tarantool,
    Redis,
}

impl PeerKind {
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Postgres => "postgres",
            PeerKind::Tarantool => "tarantool",
            PeerKind::Redis => "redis",
        }
    }
}

const AREA_CODES_MARK: &str = "--@AREA_CODES@";

/// Functions every Tarantool app uses for the workloads' generic statements.
pub const TARANTOOL_PRELUDE: &str = include_str!("tarantool_prelude.lua");

fn raw(app: &str, peer: PeerKind) -> Option<&'static str> {
    Some(match (app, peer) {
        ("voter", PeerKind::Postgres) => include_str!("../../../../apps/voter/peers/postgres.sql"),
        ("voter", PeerKind::Tarantool) => include_str!("../../../../apps/voter/peers/tarantool.lua"),
        ("voter", PeerKind::Redis) => include_str!("../../../../apps/voter/peers/redis.lua"),
        ("tatp", PeerKind::Postgres) => include_str!("../../../../apps/tatp/peers/postgres.sql"),
        ("tatp", PeerKind::Tarantool) => include_str!("../../../../apps/tatp/peers/tarantool.lua"),
        ("charging", PeerKind::Postgres) => include_str!("../../../../apps/charging/peers/postgres.sql"),
        ("charging", PeerKind::Tarantool) => include_str!("../../../../apps/charging/peers/tarantool.lua"),
        ("ycsb", PeerKind::Postgres) => include_str!("../../../../apps/ycsb/peers/postgres.sql"),
        ("ycsb", PeerKind::Tarantool) => include_str!("../../../../apps/ycsb/peers/tarantool.lua"),
        ("ycsb", PeerKind::Redis) => include_str!("../../../../apps/ycsb/peers/redis.lua"),
        _ => return None,
    })
}

/// The (code, state) pairs of Voter's Initialize.lua.
pub fn area_codes() -> Result<Vec<(i64, String)>, Error> {
    let src = apps::VOTER
        .files
        .iter()
        .find(|(p, _)| p.ends_with("Initialize.lua"))
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::unexpected("voter: Initialize.lua is not built in"))?;
    let bad = || Error::unexpected("voter: cannot read AREA_CODES in Initialize.lua");
    let start = src.find("local AREA_CODES = {").ok_or_else(bad)? + "local AREA_CODES = {".len();
    let len = src[start..].find('}').ok_or_else(bad)?;
    let mut out = Vec::new();
    let mut code = None;
    for token in src[start..start + len].split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match (code.take(), token.strip_prefix('"').and_then(|t| t.strip_suffix('"'))) {
            (None, None) => code = Some(token.parse::<i64>().map_err(|_| bad())?),
            (Some(c), Some(state)) => out.push((c, state.to_string())),
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// The app's source for the peer (SQL script, Lua chunk or Redis library), or None when the
/// peer has no version of the app (TATP and charging do not fit a key-value store).
pub fn source(app: &str, peer: PeerKind) -> Result<Option<String>, Error> {
    let Some(text) = raw(app, peer) else { return Ok(None) };
    if !text.contains(AREA_CODES_MARK) {
        return Ok(Some(text.to_string()));
    }
    let codes = area_codes()?;
    let list = match peer {
        PeerKind::Postgres => codes.iter().map(|(c, s)| format!("({c}, '{s}')")).collect::<Vec<_>>().join(", "),
        _ => codes.iter().map(|(c, s)| format!("{c}, \"{s}\"")).collect::<Vec<_>>().join(", "),
    };
    Ok(Some(text.replace(AREA_CODES_MARK, &list)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_codes_come_from_initialize() {
        let codes = area_codes().unwrap();
        assert_eq!(codes.len(), 289);
        assert_eq!(codes[0], (201, "NJ".to_string()));
        assert_eq!(codes[288], (989, "MI".to_string()));
        let pg = source("voter", PeerKind::Postgres).unwrap().unwrap();
        assert!(pg.contains("VALUES (201, 'NJ'), (202, 'DC')"));
        assert!(source("tatp", PeerKind::Redis).unwrap().is_none());
    }
}
