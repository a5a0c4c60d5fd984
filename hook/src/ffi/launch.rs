//! The launch entry points: each asks `launch::admit` (which may wait),
//! and `depth::admit` for a worker whose queue is capped, then calls the
//! real one with its arguments untouched (and records the capped launch's
//! event, `events.rs`); a kernel's launch asks `launch::admit_kernel`,
//! which first has the local memory it grows its context to charged
//! (`crate::localmem`).

use super::*;

type CUfunction = *mut c_void;
type CUgraphExec = *mut c_void;
type Params = *mut *mut c_void;
/// `CUlaunchConfig` (cuda.h): passed through; its stream read for a
/// capped worker.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: CUstream,
    attrs: *mut c_void,
    nattrs: c_uint,
}

/// The stream of a `cuLaunchKernelEx` (the driver refuses a null config).
unsafe fn config_stream(config: *const LaunchConfig) -> CUstream {
    // SAFETY: the program's config, as the driver reads it.
    unsafe { config.as_ref() }.map_or(std::ptr::null_mut(), |c| c.stream)
}

/// The launch `call` on `stream` (`per_thread`: a `_ptsz` entry point),
/// admitted by its bucket already: `capped` (the worker's queue on that
/// device is capped), after the queue's depth (`depth.rs`).
#[inline(always)]
fn gated(
    capped: Option<crate::depth::Capped>,
    stream: impl FnOnce() -> CUstream,
    per_thread: bool,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    let Some(capped) = capped else {
        return call();
    };
    let queue = events::queue(stream(), per_thread);
    let ticket = boundary(None, || crate::depth::admit(&Cuda, capped, queue));
    let r = call();
    if let Some(t) = ticket {
        boundary((), || crate::depth::launched(&Cuda, t, r == CUDA_SUCCESS));
    }
    r
}

macro_rules! launch {
    ($name:ident, $id:expr, $pt:expr, $stream:ident; $($arg:ident: $t:ty),*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            let capped = boundary(None, || crate::launch::admit(&Cuda));
            gated(capped, || $stream, $pt, || real($($arg),*))
        }
    };
}

/// `CUfunction_attribute` (cuda.h): LOCAL_SIZE_BYTES.
const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: c_int = 3;

/// The local memory `f` takes on device `dev`: its per-thread local size
/// times the device's resident threads.
pub(super) fn local_memory(f: CUfunction, dev: CUdevice) -> Option<u64> {
    type Get = unsafe extern "C" fn(*mut c_int, c_int, CUfunction) -> CuResult;
    let mut per_thread = 0;
    // SAFETY: the driver's own function, on the handle the program launches.
    let ok = unsafe {
        let get = CUDA.real::<Get>(Cu::FuncGetAttribute as usize)?;
        get(&mut per_thread, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) == CUDA_SUCCESS
    };
    if !ok || per_thread <= 0 {
        return ok.then_some(0);
    }
    Some(per_thread as u64 * resident_threads(dev)?)
}

/// The kernel launches: [`launch!`] with the local memory charged first.
macro_rules! kernel_launch {
    ($name:ident, $id:expr, $f:ident, $pt:expr, $stream:expr; $($arg:ident: $t:ty),*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            let admitted = boundary(Ok(None), || {
                crate::launch::admit_kernel(&Cuda, $f as u64, |dev| local_memory($f, dev))
            });
            let capped = match admitted {
                Ok(capped) => capped,
                Err(refused) => return refused,
            };
            gated(capped, || $stream, $pt, || real($($arg),*))
        }
    };
}

kernel_launch!(cuLaunchKernel, Cu::LaunchKernel, f, false, stream;
               f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
               bz: c_uint, shared: c_uint, stream: CUstream, params: Params, extra: Params);
kernel_launch!(cuLaunchKernel_ptsz, Cu::LaunchKernelPtsz, f, true, stream;
               f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
               bz: c_uint, shared: c_uint, stream: CUstream, params: Params, extra: Params);
kernel_launch!(cuLaunchKernelEx, Cu::LaunchKernelEx, f, false, config_stream(config);
               config: *const LaunchConfig, f: CUfunction, params: Params, extra: Params);
kernel_launch!(cuLaunchKernelEx_ptsz, Cu::LaunchKernelExPtsz, f, true, config_stream(config);
               config: *const LaunchConfig, f: CUfunction, params: Params, extra: Params);
kernel_launch!(cuLaunchCooperativeKernel, Cu::LaunchCooperativeKernel, f, false, stream;
               f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
               bz: c_uint, shared: c_uint, stream: CUstream, params: Params);
kernel_launch!(cuLaunchCooperativeKernel_ptsz, Cu::LaunchCooperativeKernelPtsz, f, true, stream;
               f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
               bz: c_uint, shared: c_uint, stream: CUstream, params: Params);
launch!(cuGraphLaunch, Cu::GraphLaunch, false, stream; exec: CUgraphExec, stream: CUstream);
launch!(cuGraphLaunch_ptsz, Cu::GraphLaunchPtsz, true, stream;
        exec: CUgraphExec, stream: CUstream);
