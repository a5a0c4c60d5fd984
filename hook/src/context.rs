//! Context memory: what the driver reserves for a context (its local
//! memory, device heap, printf buffer, loaded modules; hundreds of MiB on a
//! large GPU) is charged to the process like an allocation of its own,
//! from the context's creation to its destruction (`cuCtxDestroy_v2`) or,
//! for a device's primary context, from this process's first
//! `cuDevicePrimaryCtxRetain` to its last `cuDevicePrimaryCtxRelease_v2`
//! (or a `cuDevicePrimaryCtxReset_v2`). A process that dies gives it back
//! with the rest of its bytes (the limiter reclaims them).
//!
//! A destroyed context takes its live allocations with it (the driver
//! frees them): [`destroy`] and a primary context's last [`release`] give
//! those back too (`memory::free_context`, which takes their records out
//! before the driver call: a context created meanwhile may reuse the handle). Primary contexts are counted
//! the driver's way: each retain takes a reference, each release drops
//! one, a reset drops them all; the reservation and the allocations go
//! with the last.
//!
//! No driver API reports what a context reserved, and `cuMemGetInfo` needs
//! a current context, which before a process's first context on a device
//! does not exist. So the hook reads the device's free memory device-wide
//! ([`Contexts::device_free`]: NVML, which needs no context) just before
//! and just after the driver creates the context, and charges the drop
//! (never below 0). Creations are serialised in the process, so its own
//! threads do not blur the figure; another process allocating or freeing on
//! the device between the two readings does, by what it did meanwhile: the
//! figure is approximate on a busy device. Where NVML cannot be read the
//! context is not counted.
//!
//! A reservation the worker's limit has no room for: the context is
//! destroyed again (a primary context released) and the creation fails
//! with CUDA_ERROR_OUT_OF_MEMORY, as it would on a device that is full; a
//! process never runs holding more than its worker's limit.
//!
//! With the limiter's state unusable the context is created uncounted
//! (fail-closed refuses allocations, `limits.rs`).

use crate::devices;
use crate::forksafe::ForkSafe;
use crate::limits::{self, Verdict};
use crate::memory::{self, CuResult, Driver, Kind, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use parking_lot::Mutex;
use std::collections::HashMap;

/// What context accounting needs from the driver beyond [`Driver`].
pub trait Contexts: Driver {
    /// The device's free memory, device-wide, without a context.
    fn device_free(&self, ordinal: i32) -> Option<u64>;
}

/// One context creation at a time in this process.
static CREATING: Mutex<()> = Mutex::new(());

/// Primary contexts: this process's references on each device (retains
/// minus releases, as the hook saw them) and the context's handle.
const MAX_ORDINALS: usize = 64;
#[derive(Clone, Copy)]
pub struct Primary {
    refs: u32,
    ctx: u64,
}
const NO_PRIMARY: Primary = Primary { refs: 0, ctx: 0 };
type Primaries = Mutex<[Primary; MAX_ORDINALS]>;
static PRIMARY: Primaries = Mutex::new([NO_PRIMARY; MAX_ORDINALS]);

/// Run the driver's context creation `create` on device `ordinal`, charge
/// what it reserved under (`kind`, `key()`), or, when the worker's limit
/// has no room for it, `undo` it and return CUDA_ERROR_OUT_OF_MEMORY.
pub fn create(
    drv: &impl Contexts,
    ordinal: i32,
    kind: Kind,
    create: impl FnOnce() -> CuResult,
    key: impl FnOnce() -> u64,
    undo: impl FnOnce(),
) -> CuResult {
    if !limits::active() {
        return create();
    }
    let Ok(Some(device)) = devices::resolve(ordinal, |o| drv.uuid(o)) else {
        return create();
    };
    let bytes = {
        let _one = CREATING.lock();
        let before = drv.device_free(ordinal);
        let r = create();
        if r != CUDA_SUCCESS {
            return r;
        }
        match (before, drv.device_free(ordinal)) {
            (Some(b), Some(a)) => b.saturating_sub(a),
            _ => 0,
        }
    };
    if bytes == 0 {
        return CUDA_SUCCESS;
    }
    match limits::charge(device.slot, bytes) {
        Verdict::Charged => {
            memory::remember(kind, key(), device.slot, bytes, 0);
            CUDA_SUCCESS
        }
        Verdict::Refused => {
            undo();
            CUDA_ERROR_OUT_OF_MEMORY
        }
        Verdict::Unaccounted => CUDA_SUCCESS,
    }
}

fn primary_index(ordinal: i32) -> Option<usize> {
    usize::try_from(ordinal).ok().filter(|&i| i < MAX_ORDINALS)
}

/// `cuCtxDestroy_v2`: the reservation and the context's live allocations
/// given back once the driver has destroyed it (`memory::free_context`).
pub fn destroy(ctx: u64, call: impl FnOnce() -> CuResult) -> CuResult {
    memory::free_context(Kind::Context, ctx, ctx, call)
}

/// `cuDevicePrimaryCtxRetain` (and `cuGreenCtxCreate`, which retains the
/// device's primary context): the process's first reference is charged
/// ([`create`]); `handle` reads the context the driver returned (0: none
/// named); `release` undoes a refused one.
pub fn retain(
    drv: &impl Contexts,
    ordinal: i32,
    call: impl FnOnce() -> CuResult,
    handle: impl FnOnce() -> u64,
    release: impl FnOnce(),
) -> CuResult {
    let Some(i) = primary_index(ordinal).filter(|_| limits::active()) else {
        return call();
    };
    let mut primary = PRIMARY.lock();
    let p = &mut primary[i];
    let r = if p.refs == 0 {
        create(drv, ordinal, Kind::Primary, call, || i as u64, release)
    } else {
        call()
    };
    if r == CUDA_SUCCESS {
        p.refs += 1;
        // 0: a reference that does not name the context (a green context's).
        let h = handle();
        if h != 0 {
            p.ctx = h;
        }
    }
    r
}

/// `cuDevicePrimaryCtxRelease_v2` (`all`: `cuDevicePrimaryCtxReset_v2`):
/// the last reference gives the reservation and the context's live
/// allocations back.
pub fn release(ordinal: i32, all: bool, call: impl FnOnce() -> CuResult) -> CuResult {
    let Some(i) = primary_index(ordinal).filter(|_| limits::active()) else {
        return call();
    };
    let mut primary = PRIMARY.lock();
    let p = &mut primary[i];
    let last = all || p.refs <= 1;
    let r = if last {
        memory::free_context(Kind::Primary, i as u64, p.ctx, call)
    } else {
        call()
    };
    if r == CUDA_SUCCESS {
        if last {
            *p = NO_PRIMARY;
        } else {
            p.refs -= 1;
        }
    }
    r
}

/// Each live green context's device: its destruction releases that
/// device's primary context.
pub static GREEN: ForkSafe<HashMap<u64, i32>> = ForkSafe::new();

/// `cuGreenCtxCreate` on `ordinal`: a reference to its primary context.
pub fn green_created(
    drv: &impl Contexts,
    ordinal: i32,
    call: impl FnOnce() -> CuResult,
    handle: impl FnOnce() -> u64,
    destroy: impl FnOnce(),
) -> CuResult {
    let r = retain(drv, ordinal, call, || 0, destroy);
    if r == CUDA_SUCCESS && limits::active() {
        let green = handle();
        GREEN.with(|g| g.insert(green, ordinal));
    }
    r
}

/// `cuGreenCtxDestroy(green)`: its primary context's reference ends.
pub fn green_destroyed(green: u64, call: impl FnOnce() -> CuResult) -> CuResult {
    // Its context (`cuCtxFromGreenCtx`) ends with it, whichever way below:
    // that handle may name another from now on (`current.rs`).
    let call = || {
        let r = call();
        crate::current::forget();
        r
    };
    match GREEN.with(|g| g.get(&green).copied()) {
        Some(ordinal) => {
            let r = release(ordinal, false, call);
            if r == CUDA_SUCCESS {
                GREEN.with(|g| g.remove(&green));
            }
            r
        }
        None => call(),
    }
}

/// Before `fork()`: hold both locks so the child copies neither mid-update.
pub fn lock_all_for_fork() {
    std::mem::forget(PRIMARY.lock());
    std::mem::forget(CREATING.lock());
}

/// The locks, for the fork handlers to release after `fork()`.
pub fn locks() -> (&'static Primaries, &'static Mutex<()>) {
    (&PRIMARY, &CREATING)
}

/// In the child after `fork()` (locks released): it holds no context of
/// its parent's (a CUDA context does not survive `fork()`).
pub fn forget_after_fork() {
    *PRIMARY.lock() = [NO_PRIMARY; MAX_ORDINALS];
}
