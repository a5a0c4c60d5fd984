//! The driver's events, for the queue depth gate (`crate::depth`): the
//! real `cuEventCreate`, `cuEventRecord`, `cuEventQuery` and
//! `cuEventDestroy_v2`, never wrapped (a program's own events pass
//! through untouched).

use super::*;
use crate::depth::Events;

/// `CU_EVENT_DISABLE_TIMING` (cuda.h): the gate needs no timestamps, and
/// events without them are the driver's cheapest.
const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CUDA_ERROR_NOT_READY` (cuda.h): recorded work not complete yet.
const CUDA_ERROR_NOT_READY: CuResult = 600;
/// `CU_STREAM_PER_THREAD` (cuda.h).
const CU_STREAM_PER_THREAD: u64 = 2;

type CUevent = *mut c_void;

/// The queue a launch on `stream` goes to, as an event's record names it:
/// a `_ptsz` entry point's default stream is the thread's own.
pub(super) fn queue(stream: CUstream, per_thread: bool) -> u64 {
    match stream as u64 {
        0 if per_thread => CU_STREAM_PER_THREAD,
        s => s,
    }
}

impl Events for Cuda {
    fn create(&self) -> Option<u64> {
        type F = unsafe extern "C" fn(*mut CUevent, c_uint) -> CuResult;
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: cuEventCreate(CUevent*, unsigned) into our own pointer.
        let r =
            unsafe { CUDA.real::<F>(Cu::EventCreate as usize)?(&mut e, CU_EVENT_DISABLE_TIMING) };
        (r == CUDA_SUCCESS && !e.is_null()).then_some(e as u64)
    }

    fn record(&self, event: u64, stream: u64) -> bool {
        type F = unsafe extern "C" fn(CUevent, CUstream) -> CuResult;
        // SAFETY: cuEventRecord(CUevent, CUstream): our event, the stream
        // the program just launched on.
        unsafe { CUDA.real::<F>(Cu::EventRecord as usize) }
            .is_some_and(|f| unsafe { f(event as CUevent, stream as CUstream) } == CUDA_SUCCESS)
    }

    fn done(&self, event: u64) -> Option<bool> {
        type F = unsafe extern "C" fn(CUevent) -> CuResult;
        // SAFETY: cuEventQuery(CUevent) on our event.
        match unsafe { CUDA.real::<F>(Cu::EventQuery as usize)?(event as CUevent) } {
            CUDA_SUCCESS => Some(true),
            CUDA_ERROR_NOT_READY => Some(false),
            _ => None,
        }
    }

    fn destroy(&self, event: u64) {
        type F = unsafe extern "C" fn(CUevent) -> CuResult;
        // SAFETY: cuEventDestroy_v2(CUevent) on our event.
        if let Some(f) = unsafe { CUDA.real::<F>(Cu::EventDestroyV2 as usize) } {
            unsafe { f(event as CUevent) };
        }
    }

    fn capturing(&self, stream: u64) -> bool {
        pools::capturing(stream as CUstream, false)
    }
}
