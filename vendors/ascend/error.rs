//! DCMI failures and their Result codes (the table is in docs/ascend.md).

use crate::driver_error::{DriverError, DriverLib};
use accel_common::Error;

/// DCMI's documented return codes (dcmi_interface_api.h).
pub mod code {
    pub const INVALID_PARAMETER: i32 = -8001;
    pub const OPER_NOT_PERMITTED: i32 = -8002;
    pub const MEM_OPERATE_FAIL: i32 = -8003;
    pub const SECURE_FUN_FAIL: i32 = -8004;
    pub const INNER_ERR: i32 = -8005;
    pub const TIME_OUT: i32 = -8006;
    pub const INVALID_DEVICE_ID: i32 = -8007;
    pub const DEVICE_NOT_EXIST: i32 = -8008;
    pub const IOCTL_FAIL: i32 = -8009;
    pub const SEND_MSG_FAIL: i32 = -8010;
    pub const RECV_MSG_FAIL: i32 = -8011;
    pub const NOT_READY: i32 = -8012;
    pub const NOT_SUPPORT_IN_CONTAINER: i32 = -8013;
    pub const FILE_OPERATE_FAIL: i32 = -8014;
    pub const RESET_FAIL: i32 = -8015;
    pub const ABORT_OPERATE: i32 = -8016;
    pub const IS_UPGRADING: i32 = -8017;
    pub const RESOURCE_OCCUPIED: i32 = -8020;
    pub const PARTITION_NOT_RIGHT: i32 = -8022;
    pub const NOT_SUPPORT: i32 = -8255;
}

/// DCMI, as the shared driver error sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dcmi;

pub type AscendError = DriverError<Dcmi>;

impl DriverLib for Dcmi {
    type Code = i32;
    const VENDOR: &'static str = "ascend";
    const FILE: &'static str = "libdcmi.so";
    const INSTALL_HINT: &'static str = "";
    const CODE_NAME: &'static str = "DCMI error";

    fn describe(code: i32) -> &'static str {
        describe(code)
    }

    /// The driver says the device or the function cannot do this.
    fn unsupported(c: i32) -> bool {
        matches!(c, code::NOT_SUPPORT | code::NOT_SUPPORT_IN_CONTAINER)
    }

    fn result(c: i32, msg: String) -> Error {
        match c {
            code::INVALID_PARAMETER => Error::InvalidParam(msg),
            code::INVALID_DEVICE_ID | code::DEVICE_NOT_EXIST => Error::NotFound(msg),
            code::NOT_SUPPORT | code::NOT_SUPPORT_IN_CONTAINER => Error::NotSupported(msg),
            code::RESOURCE_OCCUPIED | code::MEM_OPERATE_FAIL => Error::ResourceExhausted(msg),
            _ => Error::OperationFailed(msg),
        }
    }
}

pub fn describe(c: i32) -> &'static str {
    match c {
        code::INVALID_PARAMETER => "invalid parameter",
        code::OPER_NOT_PERMITTED => "operation not permitted",
        code::MEM_OPERATE_FAIL => "memory operation failed",
        code::SECURE_FUN_FAIL => "secure function failed",
        code::INNER_ERR => "internal driver error",
        code::TIME_OUT => "timed out",
        code::INVALID_DEVICE_ID => "invalid device id",
        code::DEVICE_NOT_EXIST => "device does not exist",
        code::IOCTL_FAIL => "ioctl failed",
        code::SEND_MSG_FAIL => "sending a message to the device failed",
        code::RECV_MSG_FAIL => "receiving a message from the device failed",
        code::NOT_READY => "device not ready",
        code::NOT_SUPPORT_IN_CONTAINER => "not supported in a container",
        code::FILE_OPERATE_FAIL => "file operation failed",
        code::RESET_FAIL => "reset failed",
        code::ABORT_OPERATE => "operation aborted",
        code::IS_UPGRADING => "device is upgrading",
        code::RESOURCE_OCCUPIED => "resource occupied",
        code::PARTITION_NOT_RIGHT => "partition not right",
        code::NOT_SUPPORT => "not supported",
        _ => "unknown DCMI error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_results() {
        let call = |code| Error::from(AscendError::call("f", code)).code();
        use accel_common::ResultCode as C;
        assert_eq!(call(code::INVALID_PARAMETER), C::ErrorInvalidParam);
        assert_eq!(call(code::DEVICE_NOT_EXIST), C::ErrorNotFound);
        assert_eq!(call(code::INVALID_DEVICE_ID), C::ErrorNotFound);
        assert_eq!(call(code::NOT_SUPPORT), C::ErrorNotSupported);
        assert_eq!(call(code::RESOURCE_OCCUPIED), C::ErrorResourceExhausted);
        assert_eq!(call(code::INNER_ERR), C::ErrorOperationFailed);
        assert_eq!(call(-1), C::ErrorOperationFailed);
        assert_eq!(
            Error::from(AscendError::MissingOptional("x")).code(),
            C::ErrorNotSupported
        );
    }
}
