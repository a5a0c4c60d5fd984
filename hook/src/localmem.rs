//! The local memory a launch grows its context to: before a kernel runs,
//! the driver makes the context's local memory large enough for the
//! function's per-thread local size (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`)
//! times the device's resident threads (SMs x maximum threads per SM),
//! and fails the launch with `CUDA_ERROR_OUT_OF_MEMORY` when the device has
//! no room (cuda.h, `cuLaunchKernel`). With `CU_CTX_LMEM_RESIZE_TO_MAX` it
//! keeps that memory until the context ends.
//!
//! The hook charges the context's largest need so far (a record of the
//! context, `memory::Kind::LocalMemory`, given back with it) before the
//! launch reaches the driver; a launch the limit has no room for returns
//! `CUDA_ERROR_OUT_OF_MEMORY` without running. Approximate: the charge is
//! kept until the context ends even where the driver reduces the memory
//! again after the launch (no `CU_CTX_LMEM_RESIZE_TO_MAX`): ahead of the
//! driver, never behind it.
//!
//! The launch path stays flat: each thread remembers the (function,
//! context) pairs it has seen charged, so a launch costs the current
//! context, a comparison with the last pair launched (else one lookup in
//! the thread's table) and of a generation that moves only when a context
//! ends or a module is unloaded (a handle may then name something else);
//! the driver is asked for the function's size only on first sight.

use crate::devices;
use crate::limits::{self, Verdict};
use crate::memory::{
    self, AddrHasher, CuResult, Driver, Kind, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Moves when what a (function, context) pair names may change.
static GENERATION: AtomicU64 = AtomicU64::new(0);

type Seen = HashSet<(u64, u64), BuildHasherDefault<AddrHasher>>;

thread_local! {
    /// The pairs this thread has seen charged, and their generation.
    static SEEN: RefCell<(u64, Seen)> = RefCell::new((0, Seen::default()));
    /// The last of them launched (a loop launching one kernel stops here).
    static LAST: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, u64::MAX)) };
}

/// A context ended or a module was unloaded: every thread checks again.
pub fn forget() {
    GENERATION.fetch_add(1, Relaxed);
}

/// Before a launch of `function` in the current context: `need(ordinal)`
/// is the local memory it takes on that device (None: unknown).
#[inline]
pub fn admit(drv: &impl Driver, function: u64, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    if !limits::active() || limits::passes_through() {
        return CUDA_SUCCESS;
    }
    let ctx = drv.current_context();
    let generation = GENERATION.load(Relaxed);
    if LAST.get() == (function, ctx, generation) {
        return CUDA_SUCCESS;
    }
    let seen = SEEN.with(|s| {
        let s = s.borrow();
        s.0 == generation && s.1.contains(&(function, ctx))
    });
    if seen {
        LAST.set((function, ctx, generation));
    }
    if seen || ctx == 0 {
        return CUDA_SUCCESS;
    }
    let result = charge(drv, ctx, need);
    if result == CUDA_SUCCESS {
        SEEN.with(|s| {
            let mut s = s.borrow_mut();
            if s.0 != generation {
                *s = (generation, Seen::default());
            }
            s.1.insert((function, ctx));
        });
        LAST.set((function, ctx, generation));
    }
    result
}

/// Before a graph is instantiated in the current context: its kernel
/// nodes take `need(ordinal)` at most when it launches (graph launches say
/// nothing of their functions and stay off this path), so the context's
/// charge grows now as their first launches would grow it; refused:
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub fn reserve(drv: &impl Driver, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    if !limits::active() || limits::passes_through() {
        return CUDA_SUCCESS;
    }
    match drv.current_context() {
        0 => CUDA_SUCCESS,
        ctx => charge(drv, ctx, need),
    }
}

/// First sight of a (function, context): grow the context's charge to
/// what the function needs.
#[cold]
fn charge(drv: &impl Driver, ctx: u64, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    let Some(ordinal) = drv.current_device() else {
        return CUDA_SUCCESS;
    };
    let (Some(bytes), Ok(Some(device))) =
        (need(ordinal), devices::resolve(ordinal, |o| drv.uuid(o)))
    else {
        return CUDA_SUCCESS;
    };
    let held = memory::take(Kind::LocalMemory, ctx).map_or(0, |r| r.bytes());
    let keep = |bytes: u64| {
        if bytes > 0 {
            memory::remember(Kind::LocalMemory, ctx, device.slot, bytes, ctx);
        }
    };
    if bytes <= held {
        keep(held);
        return CUDA_SUCCESS;
    }
    match limits::charge(device.slot, bytes - held) {
        Verdict::Charged => keep(bytes),
        Verdict::Refused => {
            keep(held);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        Verdict::Unaccounted => keep(held),
    }
    CUDA_SUCCESS
}
