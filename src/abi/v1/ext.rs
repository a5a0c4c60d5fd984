//! Extensions beyond ABI.md (new functions only, declared in the same
//! header): last error, log callback, ABI version, active vendor.

use super::types::ResultCode;
use crate::abi::boundary::{call, call_void, last_error_code, last_error_ptr};
use crate::log::{self, AcceleratorLogCallback};
use libc::c_char;

/// Version of this ABI: bumped only by additions (major stays 1).
pub const ACCELERATOR_ABI_VERSION: u32 = 1;

/// The reason for the last failed call on this thread ("" after a success),
/// in the style of dlerror. Valid until this thread's next call.
#[no_mangle]
pub extern "C" fn acceleratorGetLastError() -> *const c_char {
    last_error_ptr()
}

/// The Result code of the last call on this thread (RESULT_SUCCESS after a
/// success): the reason's code for the functions that return bool.
#[no_mangle]
pub extern "C" fn acceleratorGetLastErrorCode() -> ResultCode {
    last_error_code()
}

/// Route the library's log to `callback` instead of stderr (NULL restores
/// stderr). The threshold still comes from `ACCELERATOR_LOG`.
#[no_mangle]
pub extern "C" fn acceleratorSetLogCallback(callback: AcceleratorLogCallback) {
    call_void("acceleratorSetLogCallback", || log::set_callback(callback))
}

#[no_mangle]
pub extern "C" fn acceleratorAbiVersion() -> u32 {
    ACCELERATOR_ABI_VERSION
}

/// The active vendor's name ("stub", "nvidia", "ascend", "amd"), or "" when the
/// configuration names no usable vendor (the last error says why).
#[no_mangle]
pub extern "C" fn acceleratorVendorName() -> *const c_char {
    let mut name: &'static std::ffi::CStr = c"";
    let _: ResultCode = call("acceleratorVendorName", || {
        let v = crate::select::vendor()?;
        name = match v.name() {
            "stub" => c"stub",
            "nvidia" => c"nvidia",
            "ascend" => c"ascend",
            "amd" => c"amd",
            _ => c"unknown",
        };
        Ok(())
    });
    name.as_ptr()
}
