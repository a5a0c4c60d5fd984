//! What a context's raised limits take (`cuCtxSetLimit`): the stack size
//! (per thread, times the device's resident threads: SMs x maximum threads
//! per SM), the printf FIFO and the malloc heap.
//!
//! The driver's defaults are part of what a context reserves (`context.rs`
//! measures it at creation), so the hook charges what a limit takes beyond
//! the value the context had before its first `cuCtxSetLimit` of that limit,
//! before the driver is asked (refused: `CUDA_ERROR_OUT_OF_MEMORY`, the
//! driver's own answer when it lacks the memory, and the limit unchanged);
//! lowering a limit gives the difference back. The charge is a record of the
//! context (`memory::Kind::Limit`): the context's destruction gives it back
//! with the rest of what the driver frees with it.
//!
//! Approximate: the heap is charged at the call, the driver takes it when a
//! module that uses `malloc` loads (up front, never late); the pending launch
//! count and the other limits are not charged (their buffers' sizes are not
//! documented).

use crate::devices;
use crate::forksafe::{books, ForkSafe};
use crate::limits::{self, Verdict};
use crate::memory::{self, CuResult, Driver, Kind, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use std::collections::HashMap;

/// `CUlimit` (cuda.h).
const CU_LIMIT_STACK_SIZE: i32 = 0;
const CU_LIMIT_PRINTF_FIFO_SIZE: i32 = 1;
const CU_LIMIT_MALLOC_HEAP_SIZE: i32 = 2;

/// Each (context, limit)'s value before its first change.
pub static BASELINES: ForkSafe<HashMap<(u64, i32), u64>> = ForkSafe::new();

/// `cuCtxSetLimit(limit, value)` in the current context: `current()` reads
/// the limit's value now, `threads(ordinal)` a device's resident threads.
pub fn set(
    drv: &impl Driver,
    limit: i32,
    value: u64,
    current: impl FnOnce() -> Option<u64>,
    threads: impl FnOnce(i32) -> Option<u64>,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    if !limits::active() || limits::passes_through() {
        return call();
    }
    let ctx = drv.current_context();
    let Some(ordinal) = drv.current_device().filter(|_| ctx != 0) else {
        return call();
    };
    let unit = match limit {
        CU_LIMIT_STACK_SIZE => threads(ordinal),
        CU_LIMIT_PRINTF_FIFO_SIZE | CU_LIMIT_MALLOC_HEAP_SIZE => Some(1),
        _ => None,
    };
    let (Some(unit), Ok(Some(device))) = (unit, devices::resolve(ordinal, |o| drv.uuid(o))) else {
        return call();
    };
    let mut guard = BASELINES.lock();
    let baselines = books(&mut guard);
    let base = *baselines
        .entry((ctx, limit))
        .or_insert_with(|| current().unwrap_or(value));
    let target = value.saturating_sub(base).saturating_mul(unit);
    let key = ctx.wrapping_mul(8).wrapping_add(limit as u64);
    let held = memory::take(Kind::Limit, key).map_or(0, |r| r.bytes());
    let keep = |bytes: u64| {
        if bytes > 0 {
            memory::remember(Kind::Limit, key, device.slot, bytes, ctx);
        }
    };
    let extra = target.saturating_sub(held);
    let verdict = if extra > 0 {
        limits::charge(device.slot, extra)
    } else {
        Verdict::Unaccounted
    };
    if verdict == Verdict::Refused {
        keep(held);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let charged = verdict == Verdict::Charged;
    let result = call();
    if result != CUDA_SUCCESS {
        if charged {
            limits::give_back(device.slot, extra);
        }
        keep(held);
        return result;
    }
    if target < held {
        limits::give_back(device.slot, held - target);
    }
    // Fail-open let a raise through uncharged: keep what was charged.
    keep(if charged || target <= held {
        target
    } else {
        held
    });
    result
}
