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
//! context) pairs it has seen charged, and the last of them launched
//! (`current.rs`), so a launch costs a comparison with that one (else one
//! lookup in the thread's table); the driver is asked for the function's
//! size only on first sight. Both are forgotten when a context ends or a
//! module is unloaded (a handle may then name something else).

use crate::current::{self, Here};
use crate::limits::{self, Verdict};
use crate::memory::{
    self, AddrHasher, CuResult, Driver, Kind, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::BuildHasherDefault;

type Seen = HashSet<(u64, u64), BuildHasherDefault<AddrHasher>>;

thread_local! {
    /// The pairs this thread has seen charged, and their generation.
    static SEEN: RefCell<(u64, Seen)> = RefCell::new((0, Seen::default()));
}

/// Before a launch of `function` in the current context `here`: `need(ordinal)`
/// is the local memory it takes on that device (None: unknown).
#[inline]
pub fn admit(here: Here, function: u64, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    if here.function == function {
        return CUDA_SUCCESS;
    }
    first_launch(here, function, need)
}

/// Another function than the thread's last launch: charged before (in the
/// thread's table), or charge it now.
#[inline(never)]
fn first_launch(here: Here, function: u64, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    let key = (function, here.ctx);
    let seen = SEEN.with(|s| {
        let s = s.borrow();
        s.0 == here.generation && s.1.contains(&key)
    });
    if !seen {
        let result = charge(here, need);
        if result != CUDA_SUCCESS {
            return result;
        }
        SEEN.with(|s| {
            let mut s = s.borrow_mut();
            if s.0 != here.generation {
                *s = (here.generation, Seen::default());
            }
            s.1.insert(key);
        });
    }
    current::charged(here, function);
    CUDA_SUCCESS
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
    current::here(drv).map_or(CUDA_SUCCESS, |here| charge(here, need))
}

/// First sight of a (function, context): grow the context's charge to
/// what the function needs.
#[cold]
fn charge(here: Here, need: impl FnOnce(i32) -> Option<u64>) -> CuResult {
    let Some(bytes) = need(here.device.ordinal as i32) else {
        return CUDA_SUCCESS;
    };
    let (ctx, slot) = (here.ctx, here.device.slot);
    let held = memory::take(Kind::LocalMemory, ctx).map_or(0, |r| r.bytes());
    let keep = |bytes: u64| {
        if bytes > 0 {
            memory::remember(Kind::LocalMemory, ctx, slot, bytes, ctx);
        }
    };
    if bytes <= held {
        keep(held);
        return CUDA_SUCCESS;
    }
    match limits::charge(slot, bytes - held) {
        Verdict::Charged => keep(bytes),
        Verdict::Refused => {
            keep(held);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        Verdict::Unaccounted => keep(held),
    }
    CUDA_SUCCESS
}
