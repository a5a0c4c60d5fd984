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

/// The current device's current pool, which `cuMemAllocAsync` takes from
/// (0: no worker, or the driver cannot say).
pub(super) fn current_pool() -> u64 {
    if !limits::active() {
        return 0;
    }
    boundary(0, || {
        type F = unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CuResult;
        let Some(dev) = Cuda.current_device() else {
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
    })
}
