//! The benchmark workloads: Voter, TATP, telco charging and YCSB A–F.

pub mod bank;
pub mod charging;
pub mod tatp;
pub mod voter;
pub mod ycsb;

use lockstep_core::Error;

use crate::conn::Answer;
use crate::stats::Done;

/// Turns a call's result into an outcome: lost calls and failures are errors, user aborts
/// are aborts (the workload expects some), success goes to `ok`.
pub fn classify(r: Result<Answer, Error>, ok: impl FnOnce(&Answer) -> Done) -> Done {
    match r {
        Err(e) => Done::error(e.message),
        Ok(a) if a.status == crate::conn::STATUS_USER_ABORT => Done::abort(a.status_string.unwrap_or_default()),
        Ok(a) if !a.is_success() => Done::error(a.describe()),
        Ok(a) => ok(&a),
    }
}

/// A failed answer as an error (population and setup calls, which expect no failure).
pub fn ok_or_err(a: &Answer) -> Result<(), Error> {
    if a.is_success() {
        Ok(())
    } else {
        Err(Error::unexpected(a.describe()))
    }
}
