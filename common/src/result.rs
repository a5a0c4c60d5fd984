//! The `Result` enum of ABI.md. Named `ResultCode` in Rust so it does not
//! shadow `std::result::Result`; cbindgen renames it to `Result`.

/// Outcome of every ABI call (ABI.md, "Result codes").
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultCode {
    Success = 0,
    ErrorInvalidParam = 1,
    ErrorNotFound = 2,
    ErrorNotSupported = 3,
    ErrorResourceExhausted = 4,
    ErrorOperationFailed = 5,
    ErrorInternal = 6,
}
