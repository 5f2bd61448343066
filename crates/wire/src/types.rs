//! VoltType wire codes (§1.4.1) and their NULL sentinels.

/// A VoltType code as it appears on the wire.
pub type WireType = i8;

pub const NULL: WireType = 1;
pub const TINYINT: WireType = 3;
pub const SMALLINT: WireType = 4;
pub const INTEGER: WireType = 5;
pub const BIGINT: WireType = 6;
pub const FLOAT: WireType = 8;
pub const STRING: WireType = 9;
pub const TIMESTAMP: WireType = 11;
pub const VOLTTABLE: WireType = 21;
pub const DECIMAL: WireType = 22;
pub const BOOLEAN: WireType = 23;
pub const VARBINARY: WireType = 25;
pub const GEOGRAPHY_POINT: WireType = 26;
pub const GEOGRAPHY: WireType = 27;
/// Marks an array parameter; the element type follows.
pub const ARRAY: WireType = -99;

/// FLOAT NULL sentinel; readers treat anything at or below it as NULL.
pub const FLOAT_NULL: f64 = -1.7e308;
/// GEOGRAPHY_POINT NULL sentinel: both coordinates.
pub const POINT_NULL: f64 = 360.0;
/// DECIMAL NULL sentinel.
pub const DECIMAL_NULL: i128 = i128::MIN;

/// A readable name for a type code, for error messages.
pub fn name(code: WireType) -> String {
    match code {
        NULL => "NULL".into(),
        TINYINT => "TINYINT".into(),
        SMALLINT => "SMALLINT".into(),
        INTEGER => "INTEGER".into(),
        BIGINT => "BIGINT".into(),
        FLOAT => "FLOAT".into(),
        STRING => "STRING".into(),
        TIMESTAMP => "TIMESTAMP".into(),
        VOLTTABLE => "VOLTTABLE".into(),
        DECIMAL => "DECIMAL".into(),
        BOOLEAN => "BOOLEAN".into(),
        VARBINARY => "VARBINARY".into(),
        GEOGRAPHY_POINT => "GEOGRAPHY_POINT".into(),
        GEOGRAPHY => "GEOGRAPHY".into(),
        ARRAY => "ARRAY".into(),
        other => format!("unknown type code {other}"),
    }
}
