//! The `Accel*` ABI of ABI-v2.md: its types and exported functions, over
//! the same vendor as v1. Both sit on `abi::boundary` (one panic-catching
//! wrapper, one way to read and write C strings); the v2 semantics live in
//! safe Rust in `crate::hypervisor`.
// Parameter and field names are ABI-v2.md's, which cbindgen copies into the header.
#![allow(non_snake_case)]

mod convert;
mod exports;
pub mod types;

use super::boundary;
use accel_common::{Res, ResultCode};
use types::AccelResult;

impl From<ResultCode> for AccelResult {
    fn from(code: ResultCode) -> Self {
        match code {
            ResultCode::Success => Self::AccelSuccess,
            ResultCode::ErrorInvalidParam => Self::AccelErrorInvalidParam,
            ResultCode::ErrorNotFound => Self::AccelErrorNotFound,
            ResultCode::ErrorNotSupported => Self::AccelErrorNotSupported,
            ResultCode::ErrorResourceExhausted => Self::AccelErrorResourceExhausted,
            ResultCode::ErrorOperationFailed => Self::AccelErrorOperationFailed,
            ResultCode::ErrorInternal => Self::AccelErrorInternal,
        }
    }
}

/// Run a v2 export inside the shared boundary.
fn call(name: &str, f: impl FnOnce() -> Res<()>) -> AccelResult {
    boundary::call(name, f).into()
}
