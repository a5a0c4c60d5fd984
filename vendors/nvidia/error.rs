//! The vendor's errors, mapped onto the ABI's Result codes.

use super::ffi::{self, CuResult, NvmlRet};
use accel_common::Error;
use nvml_wrapper::error::NvmlError;

#[derive(Debug, thiserror::Error)]
pub enum NvError {
    #[error("{call}: {source}")]
    Nvml {
        call: &'static str,
        #[source]
        source: NvmlError,
    },
    #[error("{call}: NVML return code {code}")]
    Raw { call: &'static str, code: NvmlRet },
    #[error("{call} of process {pid}: {name} ({what})")]
    Cuda {
        call: &'static str,
        pid: i32,
        code: CuResult,
        name: String,
        what: &'static str,
    },
}

impl NvError {
    pub fn nvml(call: &'static str, source: NvmlError) -> NvError {
        NvError::Nvml { call, source }
    }

    pub fn raw(call: &'static str, code: NvmlRet) -> NvError {
        NvError::Raw { call, code }
    }
}

/// CUresult values of the checkpoint API (cuda.h).
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_ILLEGAL_STATE: CuResult = 401;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_NOT_PERMITTED: CuResult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
pub const CUDA_ERROR_TIMEOUT: CuResult = 909;

/// What a checkpoint-API failure means for the caller.
pub fn cuda_meaning(code: CuResult) -> &'static str {
    match code {
        CUDA_ERROR_NOT_FOUND => "no such process, or it is not a CUDA process",
        CUDA_ERROR_ILLEGAL_STATE => "the process is in the wrong state for this step",
        CUDA_ERROR_TIMEOUT => "timed out waiting for the process",
        CUDA_ERROR_NOT_SUPPORTED => "the driver does not support checkpointing this process",
        CUDA_ERROR_NOT_PERMITTED => "not permitted",
        CUDA_ERROR_INVALID_VALUE => "invalid value",
        CUDA_ERROR_NOT_INITIALIZED => "CUDA driver not initialised",
        _ => "the driver refused",
    }
}

impl From<NvError> for Error {
    fn from(e: NvError) -> Error {
        let msg = e.to_string();
        match e {
            NvError::Nvml { source, .. } => match source {
                NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) => {
                    Error::NotSupported(msg)
                }
                NvmlError::NotFound => Error::NotFound(msg),
                NvmlError::InsufficientSize(_) => Error::ResourceExhausted(msg),
                _ => Error::OperationFailed(msg),
            },
            NvError::Raw { code, .. } => match code {
                ffi::NVML_ERROR_NOT_SUPPORTED | ffi::MISSING_SYMBOL => Error::NotSupported(msg),
                ffi::NVML_ERROR_NOT_FOUND => Error::NotFound(msg),
                ffi::NVML_ERROR_INSUFFICIENT_RESOURCES => Error::ResourceExhausted(msg),
                _ => Error::OperationFailed(msg),
            },
            NvError::Cuda { code, .. } => match code {
                CUDA_ERROR_NOT_FOUND => Error::NotFound(msg),
                CUDA_ERROR_NOT_SUPPORTED => Error::NotSupported(msg),
                _ => Error::OperationFailed(msg),
            },
        }
    }
}
