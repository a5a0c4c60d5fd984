//! AMD SMI failures and their Result codes (the table is in docs/amd.md).

use accel_common::Error;

/// amdsmi_status_t (an enum: 4 bytes).
pub type Status = u32;

/// The amdsmi_status_t values this vendor tells apart (the same in amdsmi.h 24.7 to 26.x).
pub mod status {
    use super::Status;
    pub const INVAL: Status = 1;
    pub const NOT_SUPPORTED: Status = 2;
    pub const NOT_YET_IMPLEMENTED: Status = 3;
    pub const API_FAILED: Status = 7;
    pub const NO_PERM: Status = 10;
    pub const OUT_OF_RESOURCES: Status = 15;
    pub const BUSY: Status = 30;
    pub const NOT_FOUND: Status = 31;
    pub const NOT_INIT: Status = 32;
    pub const DRIVER_NOT_LOADED: Status = 34;
    pub const NO_DATA: Status = 40;
    pub const SETTING_UNAVAILABLE: Status = 55;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmdError {
    #[error("libamd_smi.so could not be loaded ({0}); install ROCm's amd-smi-lib or set ACCELERATOR_AMDSMI_PATH")]
    NotLoaded(String),
    #[error("{path} is AMD SMI {found}, whose structure layouts this build does not know; it reads AMD SMI {supported}")]
    Version {
        found: String,
        path: String,
        supported: String,
    },
    #[error("libamd_smi.so lacks the required function {0}")]
    MissingRequired(&'static str),
    #[error("this libamd_smi.so does not provide {0}")]
    MissingOptional(&'static str),
    #[error("{func} failed: AMD SMI status {status} ({})", describe(*status))]
    Call { func: &'static str, status: Status },
}

impl AmdError {
    /// The library or the device cannot do this: callers of optional facts
    /// turn it into "not available" (0 / empty).
    pub fn is_unsupported(&self) -> bool {
        match self {
            AmdError::MissingOptional(_) => true,
            AmdError::Call { status, .. } => matches!(
                *status,
                status::NOT_SUPPORTED | status::NOT_YET_IMPLEMENTED | status::NO_DATA
            ),
            _ => false,
        }
    }
}

pub fn describe(s: Status) -> &'static str {
    match s {
        status::INVAL => "invalid parameters",
        status::NOT_SUPPORTED => "not supported",
        status::NOT_YET_IMPLEMENTED => "not implemented",
        status::API_FAILED => "API call failed",
        status::NO_PERM => "permission denied",
        status::OUT_OF_RESOURCES => "not enough memory",
        status::BUSY => "device busy",
        status::NOT_FOUND => "device not found (reset or removed?)",
        status::NOT_INIT => "not initialized",
        status::DRIVER_NOT_LOADED => "amdgpu driver not loaded",
        status::NO_DATA => "no data",
        status::SETTING_UNAVAILABLE => "setting unavailable on this device",
        _ => "AMD SMI error",
    }
}

impl From<AmdError> for Error {
    fn from(e: AmdError) -> Error {
        let msg = e.to_string();
        match e {
            AmdError::NotLoaded(_) | AmdError::MissingRequired(_) => Error::OperationFailed(msg),
            AmdError::Version { .. } => Error::NotSupported(msg),
            AmdError::MissingOptional(_) => Error::NotSupported(msg),
            AmdError::Call { status, .. } => match status {
                status::INVAL => Error::InvalidParam(msg),
                status::NOT_FOUND => Error::NotFound(msg),
                status::NOT_SUPPORTED
                | status::NOT_YET_IMPLEMENTED
                | status::SETTING_UNAVAILABLE => Error::NotSupported(msg),
                status::OUT_OF_RESOURCES => Error::ResourceExhausted(msg),
                _ => Error::OperationFailed(msg),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_results() {
        let call = |status| Error::from(AmdError::Call { func: "f", status }).code();
        use accel_common::ResultCode as C;
        assert_eq!(call(status::INVAL), C::ErrorInvalidParam);
        assert_eq!(call(status::NOT_FOUND), C::ErrorNotFound);
        assert_eq!(call(status::NOT_SUPPORTED), C::ErrorNotSupported);
        assert_eq!(call(status::SETTING_UNAVAILABLE), C::ErrorNotSupported);
        assert_eq!(call(status::BUSY), C::ErrorOperationFailed);
        assert_eq!(call(status::OUT_OF_RESOURCES), C::ErrorResourceExhausted);
        assert_eq!(call(status::API_FAILED), C::ErrorOperationFailed);
        assert_eq!(call(0xFFFF_FFFF), C::ErrorOperationFailed);
        assert_eq!(
            Error::from(AmdError::MissingOptional("x")).code(),
            C::ErrorNotSupported
        );
    }
}
