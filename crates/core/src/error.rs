//! The error type shared by every layer, with the VoltDB status it maps to.

use std::fmt;

/// What kind of failure, which decides the status code a client sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The procedure called `abort(msg)`: USER_ABORT (−1).
    UserAbort,
    /// Bad SQL, bad parameters, a constraint violation, a type error: GRACEFUL_FAILURE (−2).
    Graceful,
    /// A constraint (primary key, unique, not null, length) was violated: GRACEFUL_FAILURE (−2).
    Constraint,
    /// Unknown procedure or an internal failure: UNEXPECTED_FAILURE (−3).
    Unexpected,
    /// The server cannot take the request now (shutting down, paused): SERVER_UNAVAILABLE (−5).
    Unavailable,
}

impl ErrorKind {
    /// The VoltDB `ClientResponse` status byte.
    pub fn status_code(self) -> i8 {
        match self {
            ErrorKind::UserAbort => -1,
            ErrorKind::Graceful | ErrorKind::Constraint => -2,
            ErrorKind::Unexpected => -3,
            ErrorKind::Unavailable => -5,
        }
    }
}

/// An error with a message meant for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }
    pub fn user_abort(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UserAbort, message)
    }
    /// A failure caused by the request itself (bad SQL, bad parameters).
    pub fn graceful(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Graceful, message)
    }
    pub fn sql(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Graceful, message)
    }
    pub fn type_error(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Graceful, message)
    }
    pub fn constraint(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Constraint, message)
    }
    pub fn unexpected(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unexpected, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    /// The error for a caught panic (a bug): UNEXPECTED, with the panic's message.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let what = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
            (Some(s), _) => s,
            (_, Some(s)) => s.as_str(),
            _ => "panic",
        };
        Self::unexpected(format!("internal error: {what}"))
    }

    /// Prefixes the message with where it happened, keeping the kind.
    pub fn context(self, prefix: impl fmt::Display) -> Self {
        Error { kind: self.kind, message: format!("{prefix}: {}", self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
