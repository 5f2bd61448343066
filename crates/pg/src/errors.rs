//! Lockstep's errors as PostgreSQL error responses: a SQLSTATE code chosen from the error's
//! kind (the VoltDB status) and, for the common failures, its message.

use lockstep_core::ErrorKind;
use pgwire::error::{ErrorInfo, PgWireError, SEVERITY_ERROR};

/// SQLSTATE codes used here (PostgreSQL's appendix A names them).
pub mod code {
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const DUPLICATE_OBJECT: &str = "42P07";
    pub const AMBIGUOUS_COLUMN: &str = "42702";
    pub const GROUPING_ERROR: &str = "42803";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const SYNTAX_OR_ACCESS_RULE: &str = "42000";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const UNIQUE_VIOLATION: &str = "23505";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const INTEGRITY_CONSTRAINT: &str = "23000";
    pub const STRING_TOO_LONG: &str = "22001";
    pub const NUMERIC_OUT_OF_RANGE: &str = "22003";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const INVALID_TEXT: &str = "22P02";
    pub const DATA_EXCEPTION: &str = "22000";
    pub const RAISE_EXCEPTION: &str = "P0001";
    pub const QUERY_CANCELED: &str = "57014";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const PROGRAM_LIMIT: &str = "54000";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    pub const INVALID_PASSWORD: &str = "28P01";
    /// A connection refused before its login (PostgreSQL's answer when no pg_hba.conf line
    /// allows it, such as a client without TLS where TLS is required).
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const INTERNAL_ERROR: &str = "XX000";
}

/// The kind of a Lockstep error from the VoltDB status an outcome carries.
pub fn kind_from_status(status: i8) -> ErrorKind {
    match status {
        -1 => ErrorKind::UserAbort,
        -2 => ErrorKind::Graceful,
        -5 => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    }
}

/// The SQLSTATE for a Lockstep error. The message decides among the failures a request
/// causes (they share one status); the kind decides the rest.
pub fn sqlstate(kind: ErrorKind, message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    let has = |s: &str| m.contains(s);
    match kind {
        ErrorKind::UserAbort => return code::RAISE_EXCEPTION,
        ErrorKind::Unavailable if has("too many") => return code::TOO_MANY_CONNECTIONS,
        ErrorKind::Unavailable => return code::CANNOT_CONNECT_NOW,
        _ => {}
    }
    if has("does not have the") && has("permission") {
        code::INSUFFICIENT_PRIVILEGE
    } else if has("timed out") || has("timeout") || has("was stopped after") {
        code::QUERY_CANCELED
    } else if has("duplicate key") {
        code::UNIQUE_VIOLATION
    } else if has("constraint violation") && has("not null") || has("cannot be null") {
        code::NOT_NULL_VIOLATION
    } else if has("value too long") {
        code::STRING_TOO_LONG
    } else if has("constraint violation") || kind == ErrorKind::Constraint {
        code::INTEGRITY_CONSTRAINT
    } else if has("syntax error") || has("no sql statement given") {
        code::SYNTAX_ERROR
    } else if has("object not found") || has("unknown table") {
        code::UNDEFINED_TABLE
    } else if has("unknown column") || has("has no column") {
        code::UNDEFINED_COLUMN
    } else if has("is ambiguous") {
        code::AMBIGUOUS_COLUMN
    } else if has("must appear in the group by") {
        code::GROUPING_ERROR
    } else if has("unknown function") || (has("procedure") && (has("was not found") || has("does not exist"))) {
        code::UNDEFINED_FUNCTION
    } else if has("already exists") || has("already used") {
        code::DUPLICATE_OBJECT
    } else if has("division by zero") {
        code::DIVISION_BY_ZERO
    } else if has("out of range") || has("overflow") {
        code::NUMERIC_OUT_OF_RANGE
    } else if has("cannot convert") || has("is not a timestamp") || has("invalid input syntax") {
        code::INVALID_TEXT
    } else if has("is not supported") {
        code::FEATURE_NOT_SUPPORTED
    } else if has("limit") && (has("bytes") || has("rows")) {
        code::PROGRAM_LIMIT
    } else if has("needs") || has("cannot compare") || has("arithmetic") {
        code::DATATYPE_MISMATCH
    } else if kind == ErrorKind::Graceful {
        code::SYNTAX_OR_ACCESS_RULE
    } else {
        code::INTERNAL_ERROR
    }
}

/// An ERROR response with this code and message (boxed: it is large, and travels in
/// `Result`s).
pub fn error_info(code: &str, message: impl Into<String>) -> Box<ErrorInfo> {
    Box::new(ErrorInfo::new(SEVERITY_ERROR.to_owned(), code.to_owned(), message.into()))
}

/// A Lockstep error as an ERROR response.
pub fn from_lockstep(e: &lockstep_core::Error) -> Box<ErrorInfo> {
    error_info(sqlstate(e.kind, &e.message), e.message.clone())
}

/// A Lockstep error as the error a pgwire handler returns (the connection answers it and
/// goes on).
pub fn to_pgwire(e: &lockstep_core::Error) -> PgWireError {
    PgWireError::UserError(from_lockstep(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::Error;

    fn state(e: Error) -> &'static str {
        sqlstate(e.kind, &e.message)
    }

    #[test]
    fn request_failures_map_to_their_sqlstate() {
        assert_eq!(state(Error::sql("SQL syntax error: Expected an expression, found: FROM")), "42601");
        assert_eq!(state(Error::sql("object not found: NOPE")), "42P01");
        assert_eq!(state(Error::sql("unknown column zz in T")), "42703");
        assert_eq!(state(Error::constraint("Constraint violation: PRIMARY KEY \"PK_T\" on T: duplicate key (1)")), "23505");
        assert_eq!(state(Error::constraint("Constraint violation: column B of T is NOT NULL")), "23502");
        assert_eq!(state(Error::constraint("Value too long for column V of T: 9 characters, limit 4")), "22001");
        assert_eq!(state(Error::sql("division by zero")), "22012");
        assert_eq!(state(Error::sql("object name already exists: T")), "42P07");
        assert_eq!(state(Error::type_error("cannot convert VARCHAR 'x' to INTEGER")), "22P02");
        assert_eq!(state(Error::type_error("value 300 is out of range for TINYINT")), "22003");
        assert_eq!(state(Error::unexpected("Procedure Nope was not found")), "42883");
        let refusal = "User nina does not have the SQLREAD permission needed for procedure Get (an administrator can grant it to one of the user's roles: nothing)";
        assert_eq!(state(Error::unexpected(refusal)), "42501");
    }

    #[test]
    fn the_kind_decides_when_the_message_does_not() {
        assert_eq!(state(Error::user_abort("anything")), "P0001");
        assert_eq!(state(Error::unavailable("the server is shutting down")), "57P03");
        assert_eq!(state(Error::graceful("something else went wrong")), "42000");
        assert_eq!(state(Error::unexpected("internal error: boom")), "XX000");
        assert_eq!(kind_from_status(-1), ErrorKind::UserAbort);
        assert_eq!(kind_from_status(-2), ErrorKind::Graceful);
        assert_eq!(kind_from_status(-3), ErrorKind::Unexpected);
        assert_eq!(kind_from_status(-5), ErrorKind::Unavailable);
    }
}
