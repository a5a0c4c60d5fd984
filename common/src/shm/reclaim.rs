//! Reclaiming a dead process
//!
//! A process slot's state word is `FREE`, `CLAIMING`, `LIVE(pid)` or
//! `RECLAIMING`. Whoever takes a slot's lock byte (`owner.rs`) while the
//! slot is not `FREE` has found its owner dead (a proxy slot: its process
//! gone from `/proc`), and is the only one acting on it until it lets go.
//! It marks the slot `RECLAIMING`. For each device it touched, the
//! reclaimer settles any op of the dead slot that W names, then frees the
//! slot's `held` bytes through the same protocol on behalf of the dead slot
//! (intent `-held`, sequence + 1), so a reclaimer killed midway leaves
//! either nothing done or an op the next one completes; never a double
//! subtraction. Before the slot is zeroed and set `FREE`, every W that
//! names it is settled and un-named, and a `settled` word naming it cleared
//! (a new process in the slot restarts its sequences). A `RECLAIMING`
//! (or `CLAIMING`) slot whose lock is free is taken over the same way.
//! Reclamation runs: when a memory check would block (sweeping the worker's
//! processes, at most once per millisecond per device), when a process
//! registers and finds its pid stale or no free slot or a device table full,
//! and on a usage query (`worker_usage`); never in a host report, which
//! leaves dead processes out (`reports.rs`); a usage query on another
//! worker's books reclaims only the slots whose process the host saw exit
//! (`kept::Kept::sweep_exited`).

use super::*;

/// Reclaim slot `i` if its process is dead (or its reclaimer died), with
/// [`owner::PROCESS`] held. Returns whether this call reclaimed it.
pub(super) fn reclaim(l: &Layout, i: usize) -> bool {
    let p = &l.procs[i];
    if p.state.load(Acquire) & 3 == PROC_FREE || own_index(l) == Some(i) {
        return false;
    }
    // Held: its owner (or a reclaimer, or a claimer) is alive.
    if !owner::try_lock(l, owner::proc_lock(i)).unwrap_or(false) {
        return false;
    }
    let st = p.state.load(Acquire);
    let dead = match st & 3 {
        PROC_FREE => false,
        PROC_LIVE if p.owned.load(Acquire) == 0 => proxy_gone(p, st),
        // An owned, claimed or half-reclaimed slot whose lock was free.
        _ => true,
    };
    if dead {
        free_books(l, i);
    }
    owner::unlock(l, owner::proc_lock(i));
    dead
}

/// Whether the process of a proxy slot is gone: judged only in the pid
/// namespace it was registered from (elsewhere its pid means nothing).
fn proxy_gone(p: &Proc, st: u64) -> bool {
    p.ns.load(Relaxed) == owner::pid_ns() && !alive(word_pid(st), Some(p.start.load(Relaxed)))
}

/// This process's own slot in the books `l`, if registered there.
fn own_index(l: &Layout) -> Option<usize> {
    let cached = OWN_SLOT.load(Relaxed);
    (cached >> 32 == my_pid() as u32 as u64 && map::is_published(l))
        .then(|| (cached as u32 as usize).wrapping_sub(1))
}

/// Free what the dead slot `i` (its lock held) recorded, and the slot.
fn free_books(l: &Layout, i: usize) {
    let p = &l.procs[i];
    p.state.store(proc_word(my_pid(), PROC_RECLAIMING), Release);
    let mask = p.devmask.load(Acquire);
    for d in (0..MAX_DEVICES).filter(|d| mask & 1 << d != 0) {
        let wd = &l.wd[d];
        unname(l, i, d, wd);
        let held = low48(p.held[d].load(Acquire));
        if held > 0 {
            // held ≤ MAX_BYTES: it is part of the usage word's total.
            // A free: no limit applies.
            let _ = apply(l, i, d, wd, -(held.min(MAX_BYTES) as i64), 0, false);
            unname(l, i, d, wd);
        }
        p.tokens[d].store(0, Relaxed);
        p.share[d].store(0, Relaxed);
    }
    p.devmask.store(0, Relaxed);
    p.owned.store(0, Relaxed);
    p.state.store(proc_word(0, PROC_FREE), Release);
}

/// Reclaim every dead process of the books `l`. Returns how many.
pub(super) fn sweep(l: &Layout) -> usize {
    let _g = owner::own_lock(&owner::PROCESS, l);
    sweep_locked(l)
}

/// [`sweep`] with [`owner::PROCESS`] held.
pub(super) fn sweep_locked(l: &Layout) -> usize {
    let mut n = 0;
    for (i, p) in l.claimed().iter().enumerate() {
        if p.state.load(Acquire) & 3 == PROC_FREE {
            continue;
        }
        if reclaim(l, i) {
            n += 1;
        }
    }
    n
}
