//! HLML failures and their Result codes (the table is in docs/habana.md).

use crate::driver_error::{DriverError, DriverLib};
use accel_common::Error;

/// hlml_return_t (an enum: 4 bytes).
pub type Status = u32;

/// The hlml_return_t values (the same in every release from 1.10 to 1.24).
pub mod status {
    use super::Status;
    pub const UNINITIALIZED: Status = 1;
    pub const INVALID_ARGUMENT: Status = 2;
    pub const NOT_SUPPORTED: Status = 3;
    pub const ALREADY_INITIALIZED: Status = 5;
    pub const NOT_FOUND: Status = 6;
    pub const INSUFFICIENT_SIZE: Status = 7;
    pub const DRIVER_NOT_LOADED: Status = 9;
    pub const TIMEOUT: Status = 10;
    pub const AIP_IS_LOST: Status = 15;
    pub const MEMORY: Status = 20;
    pub const NO_DATA: Status = 21;
}

/// HLML, as the shared driver error sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hlml;

pub type HlmlError = DriverError<Hlml>;

impl DriverLib for Hlml {
    type Code = Status;
    const VENDOR: &'static str = "habana";
    const FILE: &'static str = "libhlml.so";
    const INSTALL_HINT: &'static str =
        "; install the habanalabs-firmware-tools package or set ACCELERATOR_HLML_PATH";
    const CODE_NAME: &'static str = "HLML status";

    fn describe(code: Status) -> &'static str {
        match code {
            status::UNINITIALIZED => "not initialized",
            status::INVALID_ARGUMENT => "invalid argument",
            status::NOT_SUPPORTED => "not supported",
            status::ALREADY_INITIALIZED => "already initialized",
            status::NOT_FOUND => "not found",
            status::INSUFFICIENT_SIZE => "buffer too small",
            status::DRIVER_NOT_LOADED => "habanalabs driver not loaded",
            status::TIMEOUT => "timed out",
            status::AIP_IS_LOST => "device lost (reset or fatal error?)",
            status::MEMORY => "out of memory",
            status::NO_DATA => "no data",
            _ => "HLML error",
        }
    }

    fn unsupported(code: Status) -> bool {
        matches!(code, status::NOT_SUPPORTED | status::NO_DATA)
    }

    fn result(code: Status, msg: String) -> Error {
        match code {
            status::INVALID_ARGUMENT => Error::InvalidParam(msg),
            status::NOT_FOUND | status::AIP_IS_LOST => Error::NotFound(msg),
            status::NOT_SUPPORTED => Error::NotSupported(msg),
            status::MEMORY => Error::ResourceExhausted(msg),
            _ => Error::OperationFailed(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_results() {
        let call = |s| Error::from(HlmlError::call("f", s)).code();
        use accel_common::ResultCode as C;
        assert_eq!(call(status::INVALID_ARGUMENT), C::ErrorInvalidParam);
        assert_eq!(call(status::NOT_FOUND), C::ErrorNotFound);
        assert_eq!(call(status::AIP_IS_LOST), C::ErrorNotFound);
        assert_eq!(call(status::NOT_SUPPORTED), C::ErrorNotSupported);
        assert_eq!(call(status::MEMORY), C::ErrorResourceExhausted);
        assert_eq!(call(status::DRIVER_NOT_LOADED), C::ErrorOperationFailed);
        assert_eq!(call(49), C::ErrorOperationFailed);
        assert!(HlmlError::call("f", status::NO_DATA).is_unsupported());
    }
}
