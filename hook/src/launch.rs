//! Kernel launches: a limited worker's launch takes its place in the
//! worker's order of launches before the driver sees it.
//!
//! Each launch (a kernel, a cooperative kernel or a whole graph) costs the
//! worker's **launch charge** on the device: its device time per launch,
//! which the host's compute sampler measures and stores in the worker's
//! row of the limits file (`LAUNCH_ESTIMATE`, 50 µs, until it has). The
//! limiter reserves it in the worker's bucket (`shm::launch_on`): the
//! launch goes at once while the bucket holds its charge, and otherwise
//! waits until the refill reaches its place, behind the launches of the
//! worker's processes that asked before it (so no process of a worker
//! starves another). A charge larger than the burst puts the bucket in
//! debt, which the next launch waits out: a 100 ms graph at 10 % goes once
//! a second. A reservation is a turn worth the worker's charge; a process
//! whose kernels are longer than its worker's mean waits for several
//! turns before its launch goes (`Gate::Again`), one whose kernels are
//! shorter makes several launches a turn, so a worker's processes share
//! it by device time.
//!
//! A launch waits in sleeps of at most [`WAIT_MAX`], so that a freeze
//! (`FreezeWorker`, `AutoFreeze` of "compute") is seen within 2 ms, and a
//! limit lifted ends the wait. It never fails and never spins; it holds no
//! lock while it sleeps, so the process's other threads and its exit go on.
//!
//! An unlimited worker pays one check of the limiter (no lock, no system
//! call), which also reads its queue's depth cap (`depth.rs`).

use crate::current::{self, Here};
use crate::depth::Capped;
use crate::limits::{self, Gate};
use crate::localmem;
use crate::memory::{CuResult, Driver, CUDA_SUCCESS};
use crate::refresh;
use accel_common::shm::MAX_DEVICES;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

pub const WAIT_MAX: Duration = Duration::from_millis(2);

/// Per device slot: launches wait for a measurement (fail-closed, `refresh.rs`).
static HOLD: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];

/// Before a graph's launch on the calling thread's current device: return
/// when the launch may go to the driver, with its cap when the worker's
/// queue there is capped (`depth.rs`, which the caller asks next).
#[inline]
pub fn admit(drv: &impl Driver) -> Option<Capped> {
    if !limits::active() || limits::broken() {
        return None;
    }
    let here = current::here(drv)?;
    capped(here, take_place(here.device.slot))
}

/// Before a kernel's launch of `function`: charge the local memory it
/// grows the context to (`localmem.rs`, `need` as there), then wait for
/// its place. A refused charge is the launch's result (`Err`), before the
/// driver; else its cap when the worker's queue there is capped.
#[inline]
pub fn admit_kernel(
    drv: &impl Driver,
    function: u64,
    need: impl FnOnce(i32) -> Option<u64>,
) -> Result<Option<Capped>, CuResult> {
    // A broken state under fail-closed still refuses the charge (as it
    // refuses allocations) but takes no place: launches never fail closed.
    if !limits::active() || limits::passes_through() {
        return Ok(None);
    }
    let Some(here) = current::here(drv) else {
        return Ok(None);
    };
    let grown = localmem::admit(here, function, need);
    if grown != CUDA_SUCCESS {
        return Err(grown);
    }
    if limits::broken() {
        return Ok(None);
    }
    Ok(capped(here, take_place(here.device.slot)))
}

/// A launch in `here` under a queue cap of `cap` (0: none).
#[inline(always)]
fn capped(here: Here, cap: u32) -> Option<Capped> {
    (cap > 0).then_some(Capped {
        slot: here.device.slot,
        cap,
        ctx: here.ctx,
    })
}

/// The launch's place in its worker's order on device slot `slot`; the
/// cap on the worker's queue there (0: none), from the same check
/// (inlined: every wait is out of line, and reads the cap again after it).
#[inline(always)]
fn take_place(slot: usize) -> u32 {
    if HOLD[slot].load(Relaxed) {
        hold(slot);
    }
    let (gate, cap) = limits::launch(slot);
    match gate {
        Gate::Unlimited => return cap,
        Gate::After(0) => {
            refresh::ensure_started();
            return cap;
        }
        Gate::After(ns) => wait(slot, Duration::from_nanos(ns)),
        Gate::Again(ns) => turns(slot, ns),
        Gate::Held => frozen(slot),
    }
    limits::depth_cap(slot)
}

/// The launch's turn did not pay for it (its process's kernels are longer
/// than its worker's mean): wait for the turn, then take the next, until
/// one pays.
#[cold]
#[inline(never)]
fn turns(slot: usize, mut ns: u64) {
    loop {
        wait(slot, Duration::from_nanos(ns));
        match limits::launch(slot).0 {
            Gate::Again(next) => ns = next,
            Gate::Unlimited | Gate::After(0) => return,
            Gate::After(ns) => return wait(slot, Duration::from_nanos(ns)),
            Gate::Held => return frozen(slot),
        }
    }
}

#[cold]
fn hold(slot: usize) {
    refresh::ensure_started();
    while HOLD[slot].load(Relaxed) {
        std::thread::sleep(WAIT_MAX);
    }
}

/// The worker is frozen: ask again every [`WAIT_MAX`] until it is not.
#[cold]
#[inline(never)]
fn frozen(slot: usize) {
    refresh::ensure_started();
    loop {
        std::thread::sleep(WAIT_MAX);
        match limits::launch(slot).0 {
            Gate::Held => continue,
            Gate::Unlimited | Gate::After(0) => return,
            Gate::After(ns) => return wait(slot, Duration::from_nanos(ns)),
            Gate::Again(ns) => return turns(slot, ns),
        }
    }
}

/// The launch has its place, `left` from now: sleep until then (and while
/// the worker is frozen), unless its limit is lifted.
#[cold]
#[inline(never)]
fn wait(slot: usize, left: Duration) {
    refresh::ensure_started();
    let end = Instant::now() + left;
    loop {
        let s = limits::steer(slot);
        if s.is_some_and(|s| s.percent == 0 && !s.held) {
            return;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() && !s.is_some_and(|s| s.held) {
            return;
        }
        std::thread::sleep(if left.is_zero() {
            WAIT_MAX
        } else {
            left.min(WAIT_MAX)
        });
    }
}

/// The refresh thread's update of a device's fail-closed hold.
pub fn refresh(slot: usize, hold: bool) {
    HOLD[slot].store(hold, Relaxed);
}
