//! The launch entry points: each asks `launch::admit` (which may wait)
//! and then calls the real one with its arguments untouched.

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

launch!(cuLaunchKernel, Cu::LaunchKernel, f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint,
        bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: Params,
        extra: Params);
launch!(cuLaunchKernel_ptsz, Cu::LaunchKernelPtsz, f: CUfunction, gx: c_uint, gy: c_uint,
        gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream,
        params: Params, extra: Params);
launch!(cuLaunchKernelEx, Cu::LaunchKernelEx, config: LaunchConfig, f: CUfunction,
        params: Params, extra: Params);
launch!(cuLaunchKernelEx_ptsz, Cu::LaunchKernelExPtsz, config: LaunchConfig, f: CUfunction,
        params: Params, extra: Params);
launch!(cuLaunchCooperativeKernel, Cu::LaunchCooperativeKernel, f: CUfunction, gx: c_uint,
        gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint,
        stream: CUstream, params: Params);
launch!(cuLaunchCooperativeKernel_ptsz, Cu::LaunchCooperativeKernelPtsz, f: CUfunction,
        gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint,
        stream: CUstream, params: Params);
launch!(cuGraphLaunch, Cu::GraphLaunch, exec: CUgraphExec, stream: CUstream);
launch!(cuGraphLaunch_ptsz, Cu::GraphLaunchPtsz, exec: CUgraphExec, stream: CUstream);
