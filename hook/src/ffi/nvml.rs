//! The sampler's NVML: `nvmlDeviceGetProcessUtilization` on a device named
//! by UUID. Loaded by the sampler thread itself (`dlopen`, once; the path
//! from `ACCELERATOR_NVML_PATH` or the soname), never at load time.

use super::*;
use std::ffi::CString;

const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
/// Samples read per call: more processes than this on one device are rare.
const MAX_SAMPLES: usize = 256;

/// `nvmlProcessUtilizationSample_t` (nvml.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessSample {
    pid: c_uint,
    time_stamp: u64,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

/// One process's SM utilization (%) over a sample, at `ts` (NVML's µs).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub pid: u32,
    pub sm: u32,
    pub ts: u64,
}

#[derive(Debug, Clone)]
pub enum NvmlError {
    Unavailable(String),
    Call(&'static str, NvmlReturn),
}

impl std::fmt::Display for NvmlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlError::Unavailable(why) => write!(f, "NVML unavailable ({why})"),
            NvmlError::Call(name, r) => write!(f, "{name} returned {r}"),
        }
    }
}

type HandleFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> NvmlReturn;
type UtilFn = unsafe extern "C" fn(*mut c_void, *mut ProcessSample, *mut c_uint, u64) -> NvmlReturn;

struct Api {
    handle: HandleFn,
    util: UtilFn,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn load() -> Result<Api, String> {
    let path = std::env::var("ACCELERATOR_NVML_PATH").unwrap_or("libnvidia-ml.so.1".into());
    let c = CString::new(path.clone()).map_err(|_| format!("bad path {path:?}"))?;
    // SAFETY: dlopen of a NUL-terminated path; from the sampler thread,
    // after the program's first limited launch.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("cannot load {path}"));
    }
    let real = real_dlsym();
    // SAFETY: the real dlsym on the handle and constant names.
    let sym = |n: &CStr| unsafe { real(h, n.as_ptr()) };
    let (init, handle, util) = (
        sym(c"nvmlInit_v2"),
        sym(c"nvmlDeviceGetHandleByUUID"),
        sym(c"nvmlDeviceGetProcessUtilization"),
    );
    if init.is_null() || handle.is_null() || util.is_null() {
        return Err(format!("{path} lacks nvmlDeviceGetProcessUtilization"));
    }
    // SAFETY: the three symbols have these C signatures (nvml.h).
    unsafe {
        let init = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> NvmlReturn>(init);
        match init() {
            NVML_SUCCESS => {}
            r => return Err(format!("nvmlInit_v2 returned {r}")),
        }
        Ok(Api {
            handle: std::mem::transmute::<*mut c_void, HandleFn>(handle),
            util: std::mem::transmute::<*mut c_void, UtilFn>(util),
        })
    }
}

/// Per-process samples on device `uuid` newer than `since` (NVML's µs
/// timestamp; 0: whatever NVML keeps). No samples (NVML_ERROR_NOT_FOUND)
/// is an empty list.
pub fn process_utilization(uuid: &str, since: u64) -> Result<Vec<Sample>, NvmlError> {
    let api = API
        .get_or_init(load)
        .as_ref()
        .map_err(|e| NvmlError::Unavailable(e.clone()))?;
    let c = CString::new(uuid).map_err(|_| NvmlError::Unavailable("bad UUID".into()))?;
    let mut dev = std::ptr::null_mut();
    let mut buf = [ProcessSample::default(); MAX_SAMPLES];
    let mut n = MAX_SAMPLES as c_uint;
    // SAFETY: nvml.h signatures; `dev` and `n` are valid out-pointers and
    // `buf` holds `n` samples.
    unsafe {
        match (api.handle)(c.as_ptr(), &mut dev) {
            NVML_SUCCESS => {}
            r => return Err(NvmlError::Call("nvmlDeviceGetHandleByUUID", r)),
        }
        match (api.util)(dev, buf.as_mut_ptr(), &mut n, since) {
            NVML_SUCCESS => {}
            NVML_ERROR_NOT_FOUND => return Ok(Vec::new()),
            r => return Err(NvmlError::Call("nvmlDeviceGetProcessUtilization", r)),
        }
    }
    Ok(buf[..(n as usize).min(MAX_SAMPLES)]
        .iter()
        .map(|s| Sample {
            pid: s.pid,
            sm: s.sm_util,
            ts: s.time_stamp,
        })
        .collect())
}
