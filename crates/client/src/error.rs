//! What can go wrong for a client call. A non-SUCCESS status is not an error here: the call
//! returns its `Response` and the caller checks `status`.

/// Client-side failures. Cloneable because a lost connection fails every call in flight on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Connecting or writing failed.
    #[error("I/O error: {0}")]
    Io(String),
    /// The server refused the login.
    #[error("login failed: {0}")]
    Login(String),
    /// The server sent something we could not decode; the connection was closed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connection closed before the answer came.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The call could not be sent (parameters that cannot be encoded, message too large).
    #[error("invalid call: {0}")]
    InvalidCall(String),
    /// No answer came within the caller's timeout (the call may still run on the server).
    #[error("no response within {0} ms")]
    Timeout(u64),
    /// A system call the client needed answered with a failure status.
    #[error("{0}")]
    Failed(String),
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e.to_string())
    }
}
