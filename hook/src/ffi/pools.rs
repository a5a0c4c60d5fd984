//! What stream-ordered pools keep (`memory.rs`, pools): the calls after
//! which a pool may have released memory (the synchronizations,
//! `cuMemPoolTrimTo`), each settling the pools' kept bytes with what the
//! driver says they still hold unused, and the pool `cuMemAllocAsync`
//! takes from.

use super::*;

type CUevent = *mut c_void;

/// `CUmemPool_attribute` (cuda.h): cuuint64_t figures of a pool.
const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;
const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: c_int = 7;

/// The bytes pool `pool` holds and does not use, as the driver says
/// (reserved less used); None when it cannot say.
fn idle(pool: u64) -> Option<u64> {
    type F = unsafe extern "C" fn(CUmemoryPool, c_int, *mut c_void) -> CuResult;
    // SAFETY: cuMemPoolGetAttribute(pool, attr, cuuint64_t*) for two
    // cuuint64_t attributes, into our own u64s.
    unsafe {
        let get = CUDA.real::<F>(Cu::MemPoolGetAttribute as usize)?;
        let read = |attr| {
            let mut v = 0u64;
            (get(pool as CUmemoryPool, attr, (&raw mut v).cast()) == CUDA_SUCCESS).then_some(v)
        };
        let reserved = read(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        let used = read(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?;
        Some(reserved.saturating_sub(used))
    }
}

/// After a call that may have made pools release memory.
fn settle_all() {
    if limits::active() {
        boundary((), || memory::settle_pools(idle));
    }
}

/// The synchronizations: the pools release what lies above their thresholds.
macro_rules! synchronize {
    ($name:ident, $id:expr $(, $arg:ident: $t:ty)*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            let r = real($($arg),*);
            settle_all();
            r
        }
    };
}

synchronize!(cuCtxSynchronize, Cu::CtxSynchronize);
synchronize!(cuStreamSynchronize, Cu::StreamSynchronize, stream: CUstream);
synchronize!(cuStreamSynchronize_ptsz, Cu::StreamSynchronizePtsz, stream: CUstream);
synchronize!(cuEventSynchronize, Cu::EventSynchronize, event: CUevent);

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, minBytesToKeep: usize) -> CuResult {
    type F = unsafe extern "C" fn(CUmemoryPool, usize) -> CuResult;
    let real = real_or_return!(Cu::MemPoolTrimTo, F);
    let r = real(pool, minBytesToKeep);
    if r == CUDA_SUCCESS && limits::active() {
        boundary((), || memory::settle_pool(pool as u64, idle(pool as u64)));
    }
    r
}

/// `CU_STREAM_PER_THREAD` (cuda.h): the per-thread default stream.
const CU_STREAM_PER_THREAD: usize = 2;

/// Whether `stream` (NULL: the default stream, per thread for the `_ptsz`
/// calls) captures into a graph: an allocation there is a graph's node,
/// not its pool's (`graphs.rs`).
pub(super) fn capturing(stream: CUstream, per_thread: bool) -> bool {
    type F = unsafe extern "C" fn(CUstream, *mut c_int) -> CuResult;
    let stream = if stream.is_null() && per_thread {
        CU_STREAM_PER_THREAD as CUstream
    } else {
        stream
    };
    let mut status: c_int = 0;
    // SAFETY: cuStreamIsCapturing(CUstream, CUstreamCaptureStatus*) with
    // the caller's stream and our own status (NONE = 0).
    unsafe { CUDA.real::<F>(Cu::StreamIsCapturing as usize) }
        .is_some_and(|f| unsafe { f(stream, &mut status) } == CUDA_SUCCESS && status != 0)
}

/// The pool an allocation on `stream` takes from: `pool`, unless the
/// stream captures (0: none).
pub(super) fn source(pool: CUmemoryPool, stream: CUstream, per_thread: bool) -> u64 {
    if limits::active() && boundary(false, || capturing(stream, per_thread)) {
        0
    } else {
        pool as u64
    }
}

/// Where `cuMemAllocAsync` on `stream` allocates: the current pool of the
/// stream's device (the default streams, 0, 1 and 2: the current context's),
/// pool 0 where there is no worker, the stream captures (the graph owns the
/// memory) or the driver cannot name it.
pub(super) fn stream_pool(stream: CUstream, per_thread: bool) -> memory::Target {
    if !limits::active() {
        return memory::Target::Pool(0, None);
    }
    let dev = boundary(None, || match stream as u64 {
        s if s > 2 => Cuda.stream_device(s),
        _ => Cuda.current_device(),
    });
    if boundary(true, || capturing(stream, per_thread)) {
        return memory::Target::Pool(0, dev);
    }
    let pool = boundary(0, || {
        type F = unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CuResult;
        let Some(dev) = dev else {
            return 0;
        };
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: cuDeviceGetMemPool(CUmemoryPool*, CUdevice) into our own pointer.
        let got = unsafe { CUDA.real::<F>(Cu::DeviceGetMemPool as usize) }
            .is_some_and(|f| unsafe { f(&mut pool, dev) } == CUDA_SUCCESS);
        if !got || pool.is_null() {
            return 0;
        }
        memory::pool_at(pool as u64, memory::Place::Device(dev));
        pool as u64
    });
    memory::Target::Pool(pool, dev)
}
