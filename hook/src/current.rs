//! What a launch needs to know about the calling thread's current context,
//! kept in one thread-local block so that a launch in the same context as
//! the thread's last one costs one driver call (`cuCtxGetCurrent`), one
//! load of a generation and one thread-local access:
//! - the context handle and its device (ordinal and limiter slot): a
//!   context's device never changes while it lives, so `cuCtxGetDevice`
//!   and the slot lookup are asked only when the context is new to the
//!   thread;
//! - the last function launched there whose local memory is charged
//!   (`localmem.rs`: a loop launching one kernel checks nothing more).
//!
//! A handle may name something else once its context ended or its module
//! was unloaded: [`forget`] moves a process-wide generation, and every
//! thread asks again on its next launch. So does a child after `fork()`
//! (its device slots are its own, `devices::forget_slots`).

use crate::devices::{self, Device};
use crate::memory::Driver;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Moves when what a context or function handle names may change.
/// Relaxed: a launch racing with the end of its own context launches in a
/// context that is gone (the driver refuses it); the generation only has
/// to move before a handle is reused, which the ending call itself orders.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A context ended, a module was unloaded, or the process forked: every
/// thread looks its context up again.
pub fn forget() {
    GENERATION.fetch_add(1, Relaxed);
}

/// The calling thread's current context as its last launch found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Here {
    pub ctx: u64,
    pub generation: u64,
    pub device: Device,
    /// The last function launched in `ctx` whose local memory is charged
    /// (0: none yet).
    pub function: u64,
}

impl Here {
    /// Matches no context (a context handle is never 0).
    const NONE: Here = Here {
        ctx: 0,
        generation: u64::MAX,
        device: Device {
            ordinal: 0,
            slot: 0,
        },
        function: 0,
    };
}

thread_local! {
    /// Plain data, no destructor: an access is the thread-local address
    /// and a load, with no lazy initialization to check.
    static LAST: Cell<Here> = const { Cell::new(Here::NONE) };
}

/// The calling thread's current context and its device; `None` without a
/// current context (the driver refuses the launch) or on a device the
/// limiter cannot name (the launch goes unaccounted, as allocations do).
#[inline]
pub fn here(drv: &impl Driver) -> Option<Here> {
    let ctx = drv.current_context();
    // Read before any lookup below: one that races with a `forget` is
    // stored under the older generation, and asked again.
    let generation = GENERATION.load(Relaxed);
    let last = LAST.get();
    if last.ctx == ctx && last.generation == generation {
        return Some(last);
    }
    learn(drv, ctx, generation)
}

/// A context the thread has not launched in (under this generation).
#[cold]
#[inline(never)]
fn learn(drv: &impl Driver, ctx: u64, generation: u64) -> Option<Here> {
    if ctx == 0 {
        return None;
    }
    let ordinal = drv.current_device()?;
    let device = devices::resolve(ordinal, |o| drv.uuid(o)).ok()??;
    let here = Here {
        ctx,
        generation,
        device,
        function: 0,
    };
    LAST.set(here);
    Some(here)
}

/// `function`'s local memory is charged in `here`'s context.
#[inline]
pub fn charged(here: Here, function: u64) {
    LAST.set(Here { function, ..here });
}
