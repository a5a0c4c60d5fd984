//! AMD SMI failures and their Result codes (the table is in docs/amd.md).

use crate::driver_error::{DriverError, DriverLib};
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

/// AMD SMI, as the shared driver error sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdSmi;

pub type AmdError = DriverError<AmdSmi>;

impl DriverLib for AmdSmi {
    type Code = Status;
    const VENDOR: &'static str = "amd";
    const FILE: &'static str = "libamd_smi.so";
    const INSTALL_HINT: &'static str =
        "; install ROCm's amd-smi-lib or set ACCELERATOR_AMDSMI_PATH";
    const CODE_NAME: &'static str = "AMD SMI status";

    fn describe(code: Status) -> &'static str {
        describe(code)
    }

    fn unsupported(code: Status) -> bool {
        matches!(
            code,
            status::NOT_SUPPORTED | status::NOT_YET_IMPLEMENTED | status::NO_DATA
        )
    }

    fn result(code: Status, msg: String) -> Error {
        match code {
            status::INVAL => Error::InvalidParam(msg),
            status::NOT_FOUND => Error::NotFound(msg),
            status::NOT_SUPPORTED | status::NOT_YET_IMPLEMENTED | status::SETTING_UNAVAILABLE => {
                Error::NotSupported(msg)
            }
            status::OUT_OF_RESOURCES => Error::ResourceExhausted(msg),
            _ => Error::OperationFailed(msg),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_results() {
        let call = |status| Error::from(AmdError::call("f", status)).code();
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
