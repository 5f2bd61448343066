//! What a call returns to the client: a status, optional messages and result tables.

use lockstep_core::{Error, ResultTable};
use lockstep_procs::ProcOutput;

/// VoltDB's status for success.
pub const STATUS_SUCCESS: i8 = 1;
/// VoltDB's "app status not set".
pub const APP_STATUS_UNSET: i8 = -128;

/// The answer to one call, ready to be encoded by a front end.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub status: i8,
    pub status_string: Option<String>,
    pub app_status: i8,
    pub app_status_string: Option<String>,
    pub tables: Vec<ResultTable>,
}

impl Outcome {
    pub fn tables(tables: Vec<ResultTable>) -> Self {
        Outcome { status: STATUS_SUCCESS, status_string: None, app_status: APP_STATUS_UNSET, app_status_string: None, tables }
    }

    pub fn from_output(out: ProcOutput) -> Self {
        Outcome {
            status: STATUS_SUCCESS,
            status_string: None,
            app_status: out.app_status,
            app_status_string: out.app_status_string,
            tables: out.tables,
        }
    }

    pub fn error(e: Error) -> Self {
        Outcome {
            status: e.kind.status_code(),
            status_string: Some(e.message),
            app_status: APP_STATUS_UNSET,
            app_status_string: None,
            tables: Vec::new(),
        }
    }

    pub fn from_result(r: lockstep_core::Result<ProcOutput>) -> Self {
        match r {
            Ok(out) => Self::from_output(out),
            Err(e) => Self::error(e),
        }
    }

    pub fn is_success(&self) -> bool {
        self.status == STATUS_SUCCESS
    }
}

/// Called exactly once with the outcome of a call, on whichever thread finished it.
pub type Reply = Box<dyn FnOnce(Outcome) + Send>;
