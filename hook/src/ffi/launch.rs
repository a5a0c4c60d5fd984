//! The launch entry points: each asks `launch::admit` (which may wait)
//! and then calls the real one with its arguments untouched; a kernel's
//! launch asks `launch::admit_kernel`, which first has the local memory it
//! grows its context to charged (`crate::localmem`).

use super::*;

type CUfunction = *mut c_void;
type CUgraphExec = *mut c_void;
/// `CUlaunchConfig` (cuda.h): passed through, never read.
type LaunchConfig = *const c_void;
type Params = *mut *mut c_void;

macro_rules! launch {
    ($name:ident, $id:expr, $($arg:ident: $t:ty),*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            boundary((), || crate::launch::admit(&Cuda));
            real($($arg),*)
        }
    };
}

/// `CUfunction_attribute` (cuda.h): LOCAL_SIZE_BYTES.
const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: c_int = 3;

/// The local memory `f` takes on device `dev`: its per-thread local size
/// times the device's resident threads.
fn local_memory(f: CUfunction, dev: CUdevice) -> Option<u64> {
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
    ($name:ident, $id:expr, $f:ident; $($arg:ident: $t:ty),*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            let grown = boundary(CUDA_SUCCESS, || {
                crate::launch::admit_kernel(&Cuda, $f as u64, |dev| local_memory($f, dev))
            });
            if grown != CUDA_SUCCESS {
                return grown;
            }
            real($($arg),*)
        }
    };
}

kernel_launch!(cuLaunchKernel, Cu::LaunchKernel, f; f: CUfunction, gx: c_uint, gy: c_uint,
               gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint,
               stream: CUstream, params: Params, extra: Params);
kernel_launch!(cuLaunchKernel_ptsz, Cu::LaunchKernelPtsz, f; f: CUfunction, gx: c_uint,
               gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint,
               stream: CUstream, params: Params, extra: Params);
kernel_launch!(cuLaunchKernelEx, Cu::LaunchKernelEx, f; config: LaunchConfig, f: CUfunction,
               params: Params, extra: Params);
kernel_launch!(cuLaunchKernelEx_ptsz, Cu::LaunchKernelExPtsz, f; config: LaunchConfig,
               f: CUfunction, params: Params, extra: Params);
kernel_launch!(cuLaunchCooperativeKernel, Cu::LaunchCooperativeKernel, f; f: CUfunction,
               gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
               shared: c_uint, stream: CUstream, params: Params);
kernel_launch!(cuLaunchCooperativeKernel_ptsz, Cu::LaunchCooperativeKernelPtsz, f;
               f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint,
               bz: c_uint, shared: c_uint, stream: CUstream, params: Params);
launch!(cuGraphLaunch, Cu::GraphLaunch, exec: CUgraphExec, stream: CUstream);
launch!(cuGraphLaunch_ptsz, Cu::GraphLaunchPtsz, exec: CUgraphExec, stream: CUstream);
