//! What a launch needs to know about the calling thread's current context,
//! kept in one block per thread so that a launch in the same context as
//! the thread's last one costs one driver call (`cuCtxGetCurrent`), one
//! load of a generation and a few loads of the block:
//! - the context handle and its device (ordinal and limiter slot): a
//!   context's device never changes while it lives, so `cuCtxGetDevice`
//!   and the slot lookup are asked only when the context is new to the
//!   thread;
//! - the last function launched there whose local memory is charged
//!   (`localmem.rs`: a loop launching one kernel checks nothing more).
//!
//! The blocks are a process-wide table found by the thread's id (the
//! thread pointer, `shm::thread_id`: one instruction), not thread-locals:
//! a preloaded library reaches its thread-locals through `__tls_get_addr`,
//! a call that was ~3 ns of a launch. The first thread whose id falls on a
//! block claims it for good, and only a thread with that id ever reads or
//! writes it, so a block needs no lock; a thread whose block another id
//! holds keeps its own in a thread-local instead. Two live threads never
//! share an id. A thread that starts where an exited one was (its thread
//! pointer reused) finds the exited one's block: what it says stays true
//! of the process under its generation (a context's device; a function
//! whose local memory is charged in a context, on the context's books),
//! and the context itself is asked on every launch.
//!
//! A handle may name something else once its context ended or its module
//! was unloaded: [`forget`] moves a process-wide generation, and every
//! thread asks again on its next launch. So does a child after `fork()`
//! (its device slots are its own, `devices::forget_slots`).

use crate::devices::{self, Device};
use crate::memory::Driver;
use accel_common::shm;
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

/// A thread's [`Here`], in the table (see the module's comment): atomics
/// only because the table is shared; one thread reads and writes each.
#[repr(align(64))]
struct Block {
    /// The id of the thread it belongs to (0: free).
    owner: AtomicU64,
    ctx: AtomicU64,
    generation: AtomicU64,
    ordinal: AtomicU64,
    slot: AtomicU64,
    function: AtomicU64,
}

impl Block {
    const fn free() -> Block {
        Block {
            owner: AtomicU64::new(0),
            ctx: AtomicU64::new(Here::NONE.ctx),
            generation: AtomicU64::new(Here::NONE.generation),
            ordinal: AtomicU64::new(0),
            slot: AtomicU64::new(0),
            function: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn get(&self) -> Here {
        Here {
            ctx: self.ctx.load(Relaxed),
            generation: self.generation.load(Relaxed),
            device: Device {
                ordinal: self.ordinal.load(Relaxed) as usize,
                slot: self.slot.load(Relaxed) as usize,
            },
            function: self.function.load(Relaxed),
        }
    }

    fn set(&self, h: Here) {
        self.ctx.store(h.ctx, Relaxed);
        self.generation.store(h.generation, Relaxed);
        self.ordinal.store(h.device.ordinal as u64, Relaxed);
        self.slot.store(h.device.slot as u64, Relaxed);
        self.function.store(h.function, Relaxed);
    }
}

/// More than the threads a process launches from, as a rule (16 KiB).
const BLOCKS: usize = 256;
static TABLE: [Block; BLOCKS] = [const { Block::free() }; BLOCKS];

thread_local! {
    /// The block of a thread whose place in the table another id holds.
    static OWN: Cell<Here> = const { Cell::new(Here::NONE) };
}

/// The calling thread's block in the table, claimed on first use; None:
/// another thread's id holds its place.
#[inline(always)]
fn block() -> Option<&'static Block> {
    let id = shm::thread_id();
    // Thread pointers are aligned and megabytes apart: mix the bits above
    // the page offset.
    let b = &TABLE[((id >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % BLOCKS];
    match b.owner.load(Relaxed) {
        owner if owner == id => Some(b),
        0 => claim(b, id),
        _ => None,
    }
}

#[cold]
#[inline(never)]
fn claim(b: &'static Block, id: u64) -> Option<&'static Block> {
    b.owner
        .compare_exchange(0, id, Relaxed, Relaxed)
        .is_ok()
        .then_some(b)
}

/// What the calling thread's last launch found.
#[inline(always)]
fn last() -> Here {
    match block() {
        Some(b) => b.get(),
        None => OWN.get(),
    }
}

fn remember(h: Here) {
    match block() {
        Some(b) => b.set(h),
        None => OWN.set(h),
    }
}

/// The calling thread's current context and its device; `None` without a
/// current context (the driver refuses the launch) or on a device the
/// limiter cannot name (the launch goes unaccounted, as allocations do).
/// Inlined into the launch (a call returning the block through memory
/// cost what the table saves).
#[inline(always)]
pub fn here(drv: &impl Driver) -> Option<Here> {
    let ctx = drv.current_context();
    // Read before any lookup below: one that races with a `forget` is
    // stored under the older generation, and asked again.
    let generation = GENERATION.load(Relaxed);
    let last = last();
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
    crate::limits::announce();
    let here = Here {
        ctx,
        generation,
        device,
        function: 0,
    };
    remember(here);
    Some(here)
}

/// `function`'s local memory is charged in `here`'s context.
#[inline]
pub fn charged(here: Here, function: u64) {
    remember(Here { function, ..here });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_finds_its_own_block() {
        let mine = |c| Here {
            ctx: c,
            generation: 3,
            device: Device {
                ordinal: 1,
                slot: 2,
            },
            function: c + 1,
        };
        // More threads than blocks: some keep theirs in a thread-local.
        let threads: Vec<_> = (1..=2 * BLOCKS as u64)
            .map(|c| {
                std::thread::spawn(move || {
                    remember(mine(c));
                    std::thread::yield_now();
                    last() == mine(c)
                })
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));
    }
}
