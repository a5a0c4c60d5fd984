//! Serializes the threads of this process on one (process slot, device).
//!
//! The shared protocol lets any process finish another's pending operation,
//! but it assumes one owner thread per slot and device: two threads of one
//! process updating the same device at once would both build on the same
//! `held` sequence and one update would be lost from the process's books.
//! This lock lives in process memory, not in the mapping, so no other
//! process can ever wait on it: a SIGKILL takes it away with its holder.
//! Stripes keep it small; two pairs sharing a stripe only wait for each
//! other. After `fork()` only the forking thread exists, so the child
//! starts with every stripe free.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

const STRIPES: usize = 256;

static LOCKS: [AtomicBool; STRIPES] = [const { AtomicBool::new(false) }; STRIPES];
static FORK_HANDLER: Once = Once::new();

extern "C" fn reset_in_child() {
    for l in &LOCKS {
        l.store(false, Ordering::Relaxed);
    }
}

pub(super) struct Guard(&'static AtomicBool);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Install the fork handler; called once when the mapping is opened, before
/// any `lock` (which needs the mapping).
pub(super) fn init() {
    FORK_HANDLER.call_once(|| super::map::at_fork_child(reset_in_child));
}

/// Hold the stripe of (slot, device) until the guard drops.
#[inline]
pub(super) fn lock(slot: usize, device: usize) -> Guard {
    let l = &LOCKS[(slot.wrapping_mul(64) + device) % STRIPES];
    if l.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        wait(l);
    }
    Guard(l)
}

#[cold]
#[inline(never)]
fn wait(l: &AtomicBool) {
    let mut spins = 0u32;
    while l
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
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
}
