//! Reclaiming a dead process
//!
//! A process slot's state word is `FREE`, `CLAIMING(pid)`, `LIVE(pid)` or
//! `RECLAIMING(pid of the reclaimer)`. A process that finds a `LIVE` slot
//! whose pid is gone, a zombie, or has another start time CASes it to
//! `RECLAIMING(self)` — exactly one wins. For each device it touched, the
//! reclaimer settles any op of the dead slot that W names, then frees the
//! slot's `held` bytes through the same protocol on behalf of the dead slot
//! (intent `-held`, sequence + 1), so a reclaimer killed midway leaves
//! either nothing done or an op the next one completes; never a double
//! subtraction. Before the slot is zeroed and set `FREE`, every W that
//! names it is settled and un-named, and a `settled` word naming it cleared
//! (a new process in the slot restarts its sequences). A `RECLAIMING`
//! (or `CLAIMING`) slot whose owner is dead is taken over the same way.
//! Reclamation runs: when a memory check would block (sweeping that
//! worker's processes, at most once per millisecond per worker and device),
//! when a process registers and finds its pid stale or no free slot, and
//! before every usage report (`processes`).

use super::*;

/// Reclaim slot `i` if its process is dead (or its reclaimer died).
/// Returns whether this call reclaimed it.
pub(super) fn reclaim(l: &Layout, i: usize) -> bool {
    let p = &l.procs[i];
    let me = my_pid();
    loop {
        let st = p.state.load(Acquire);
        let pid = word_pid(st);
        let ours = match st & 3 {
            PROC_LIVE => !alive(pid, Some(p.start.load(Relaxed))),
            PROC_RECLAIMING => pid != me && !alive(pid, None),
            _ => return false,
        };
        if !ours {
            return false;
        }
        if p.state
            .compare_exchange(st, proc_word(me, PROC_RECLAIMING), AcqRel, Acquire)
            .is_ok()
        {
            break;
        }
    }
    let w = (p.worker.load(Relaxed) as usize).min(MAX_WORKERS - 1);
    let mask = p.devmask.load(Acquire);
    for d in (0..MAX_DEVICES).filter(|d| mask & 1 << d != 0) {
        let wd = &l.wd[w][d];
        unname(l, i, d, wd);
        let held = low48(p.held[d].load(Acquire));
        if held > 0 {
            // held ≤ MAX_BYTES: it is part of the usage word's total.
            let _ = apply(l, i, d, wd, -(held.min(MAX_BYTES) as i64), false);
            unname(l, i, d, wd);
        }
        p.tokens[d].store(0, Relaxed);
    }
    p.devmask.store(0, Relaxed);
    p.state.store(proc_word(0, PROC_FREE), Release);
    true
}

/// Reclaim every dead process (of one worker, when given). Returns how many.
pub(super) fn sweep(l: &Layout, worker: Option<usize>) -> usize {
    let me = my_pid();
    let mut n = 0;
    for (i, p) in l.procs.iter().enumerate() {
        let st = p.state.load(Acquire);
        let kind = st & 3;
        if kind != PROC_LIVE && kind != PROC_RECLAIMING {
            continue;
        }
        if kind == PROC_LIVE && word_pid(st) == me {
            continue;
        }
        if worker.is_some_and(|w| p.worker.load(Relaxed) as usize != w) {
            continue;
        }
        if reclaim(l, i) {
            n += 1;
        }
    }
    n
}
