//! Lockstep's shared vocabulary: values and types, errors, result tables, the catalog and
//! partition hashing. Every other crate depends on this one and on nothing above it.

pub mod catalog;
pub mod cron;
pub mod decimal;
pub mod error;
pub mod geo;
pub mod hash;
pub mod prefetch;
pub mod table;
pub mod throttle;
pub mod time;
pub mod value;
mod value_serde;

pub use catalog::{
    get_ignoring_case, Catalog, ColumnDef, IndexDef, IndexExpr, NameMap, Partitioning, Permissions, PlainViewDef, ProcedureBody,
    ProcedureDef, RoleDef, RowExpr, RowFn, TableDef, TableId, TableKind, TaskDef, TaskOnError, TaskRunOn, TaskSchedule, TtlDef, TtlUnit,
    ViewAggregate, ViewDef, ViewKey, BUILTIN_ROLES,
};
pub use error::{Error, ErrorKind, Result};
pub use hash::HashRing;
pub use table::{ResultColumn, ResultTable};
pub use value::{DataType, Dec, Value};
