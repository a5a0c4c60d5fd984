//! The one error type below the ABI boundary. Each variant is one `Result`
//! code; the message is what the caller reads back from the last-error call.

use crate::ResultCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    #[error("operation failed: {0}")]
    OperationFailed(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Res<T> = std::result::Result<T, Error>;

impl Error {
    pub fn code(&self) -> ResultCode {
        match self {
            Error::InvalidParam(_) => ResultCode::ErrorInvalidParam,
            Error::NotFound(_) => ResultCode::ErrorNotFound,
            Error::NotSupported(_) => ResultCode::ErrorNotSupported,
            Error::ResourceExhausted(_) => ResultCode::ErrorResourceExhausted,
            Error::OperationFailed(_) => ResultCode::ErrorOperationFailed,
            Error::Internal(_) => ResultCode::ErrorInternal,
        }
    }

    /// An I/O failure on a path, reported with the path so the operator can act.
    pub fn io(what: &str, path: &std::path::Path, err: std::io::Error) -> Error {
        Error::OperationFailed(format!("{what} {}: {err}", path.display()))
    }
}
