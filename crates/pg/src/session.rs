//! One connection's state beyond what pgwire keeps: who logged in, the settings `SET` gave,
//! where it is in a `BEGIN` block, and the names of its prepared statements and portals
//! (counted against the per-connection limits).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use lockstep_engine::Principal;
use pgwire::api::ClientInfo;

/// Named prepared statements one connection may hold at once.
pub const PREPARED_STATEMENTS_MAX: usize = 1_000;
/// Named portals one connection may hold at once (the unnamed one replaces itself).
pub const PORTALS_MAX: usize = 100;
/// Settings `SET` may create on one connection, and the bytes of one value.
pub const SETTINGS_MAX: usize = 256;
pub const SETTING_VALUE_MAX_BYTES: usize = 4_096;

/// Where the connection is in an explicit transaction block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Block {
    /// No `BEGIN`: every statement commits on its own (as it does inside a block too).
    #[default]
    None,
    /// After `BEGIN`; whether a statement that changes data has run in it.
    Open { wrote: bool },
    /// A statement failed inside the block: everything but `COMMIT`/`ROLLBACK` is refused.
    Failed,
}

#[derive(Default)]
pub struct Session {
    /// The logged-in user when security is on.
    pub principal: Option<Arc<Principal>>,
    /// Parameters set with `SET` (names lower-cased).
    pub settings: BTreeMap<String, String>,
    pub block: Block,
    pub statements: HashSet<String>,
    pub portals: HashSet<String>,
    /// The `COPY … FROM STDIN` under way.
    pub copy: Option<Box<crate::copy_in::CopyState>>,
}

/// The connection's session, created on first use.
pub fn of(client: &(impl ClientInfo + ?Sized)) -> Arc<Mutex<Session>> {
    client.session_extensions().get_or_insert_with(|| Mutex::new(Session::default()))
}

/// Runs `f` on the session (never across an await: the lock is a plain mutex).
pub fn with<T>(client: &(impl ClientInfo + ?Sized), f: impl FnOnce(&mut Session) -> T) -> T {
    let s = of(client);
    let mut guard = match s.lock() {
        Ok(g) => g,
        // A panic elsewhere with the lock held leaves plain data behind: keep using it.
        Err(poisoned) => poisoned.into_inner(),
    };
    f(&mut guard)
}
