//! Serializes the threads of this process on one (process slot, device).
//!
//! The shared protocol lets any process finish another's pending operation,
//! but it assumes one actor per slot and device at a time: two threads of one
//! process updating the same device at once would both build on the same
//! `held` sequence and one update would be lost from the process's books.
//! Nothing here lives in the mapping, so no other process can ever wait on
//! it: a SIGKILL takes it away with its holder.
//!
//! Most processes that call the limiter do so from one thread, so the cost
//! of a locked instruction per call is avoided with *biased ownership*: the
//! first thread to enter owns the process's bias and enters with two plain
//! stores and a load. The first time another thread enters, it revokes the
//! bias for good: it marks the revocation, makes every thread of the process
//! execute a full memory barrier with `membarrier(2)` (so the owner's side
//! needs only a compiler fence — an asymmetric Dekker handshake: either the
//! owner's "busy" store is visible to the revoker, or the owner's next load
//! sees the revocation), waits for the owner to leave the operation it may
//! be in, and from then on every thread takes a striped spin lock (one
//! compare-and-swap per call). Without `membarrier` (old kernel, a seccomp
//! filter) the process starts in locked mode.
//!
//! After `fork()` only the forking thread exists: the child starts with every
//! stripe free and a fresh bias.

use super::map;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicU8, Ordering::*};

const STRIPES: usize = 256;

const BIASED: u8 = 0;
const REVOKING: u8 = 1;
const LOCKED: u8 = 2;

static LOCKS: [AtomicBool; STRIPES] = [const { AtomicBool::new(false) }; STRIPES];
static MODE: AtomicU8 = AtomicU8::new(LOCKED);
/// The bias owner's thread id (`pthread_self`), 0 until a thread claims it.
static OWNER: AtomicU64 = AtomicU64::new(0);
/// The owner is inside an operation.
static BUSY: AtomicBool = AtomicBool::new(false);
/// `init` ran (under `owner::OPEN`; no `Once`, which a fork while it runs
/// would leave blocking the child forever).
static INIT: AtomicBool = AtomicBool::new(false);

fn start_mode() -> u8 {
    if map::membarrier_register() {
        BIASED
    } else {
        LOCKED
    }
}

extern "C" fn reset_in_child() {
    for l in &LOCKS {
        l.store(false, Relaxed);
    }
    BUSY.store(false, Relaxed);
    OWNER.store(0, Relaxed);
    MODE.store(start_mode(), Relaxed);
}

/// Decide the mode and install the fork handler; called with `owner::OPEN`
/// held when the mapping is opened, before any `enter` (which needs the
/// mapping).
pub(super) fn init() {
    if !INIT.swap(true, AcqRel) {
        MODE.store(start_mode(), Release);
        map::at_fork_child(reset_in_child);
    }
}

/// Proof that this thread may act for (slot, device) until dropped: the
/// flag it raised, `BUSY` (biased) or a stripe's lock (locked).
pub(super) struct Guard(&'static AtomicBool);

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Release);
    }
}

/// Act for (slot, device) until the guard drops.
#[inline(always)]
pub(super) fn enter(slot: usize, device: usize) -> Guard {
    if MODE.load(Relaxed) == BIASED {
        let me = map::thread_id();
        let owner = OWNER.load(Relaxed);
        if owner == me || (owner == 0 && OWNER.compare_exchange(0, me, Relaxed, Relaxed).is_ok()) {
            BUSY.store(true, Relaxed);
            // The revoker's membarrier stands in for a hardware fence here.
            compiler_fence(SeqCst);
            if MODE.load(Acquire) == BIASED {
                return Guard(&BUSY);
            }
            BUSY.store(false, Release);
        }
    }
    lock(slot, device)
}

/// The locked path: wait for (or carry out) the revocation, then take the
/// stripe of (slot, device).
#[cold]
#[inline(never)]
fn lock(slot: usize, device: usize) -> Guard {
    loop {
        match MODE.load(Acquire) {
            LOCKED => break,
            BIASED => {
                if MODE
                    .compare_exchange(BIASED, REVOKING, SeqCst, Acquire)
                    .is_ok()
                {
                    revoke();
                }
            }
            _ => std::thread::yield_now(),
        }
    }
    let l = &LOCKS[(slot.wrapping_mul(64) + device) % STRIPES];
    let mut spins = 0u32;
    while l
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // The holder may be preempted: let it run.
            std::thread::yield_now();
        }
    }
    Guard(l)
}

fn revoke() {
    map::membarrier_all_threads();
    while BUSY.load(Acquire) {
        std::thread::yield_now();
    }
    MODE.store(LOCKED, Release);
}

/// A process-local lock that a `fork()` cannot leave held in the child:
/// the lock word is the holder's pid, so a child (another pid) finds it
/// held by a process that is not itself, whose thread does not exist there,
/// and takes it over. (The fork handler also frees it, but may not be
/// installed yet when the first open races a fork.) It guards short cold
/// sections (opening, registering, reclaiming, claiming a name), so
/// waiting is a yield loop.
pub(super) struct ForkLock(AtomicU64);

pub(super) struct ForkGuard<'a>(&'a AtomicU64);

impl Drop for ForkGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Release);
    }
}

impl ForkLock {
    pub(super) const fn new() -> ForkLock {
        ForkLock(AtomicU64::new(0))
    }

    pub(super) fn lock(&self) -> ForkGuard<'_> {
        let me = u64::from(std::process::id());
        let mut held = 0;
        while let Err(h) = self.0.compare_exchange_weak(held, me, Acquire, Relaxed) {
            held = if h == me {
                // Another thread of this process: wait for it.
                std::thread::yield_now();
                0
            } else {
                // Free (0), or held by the process this one was forked from.
                h
            };
        }
        ForkGuard(&self.0)
    }

    /// In the child after `fork()` only: no other thread exists there.
    pub(super) fn reset(&self) {
        self.0.store(0, Relaxed);
    }
}
