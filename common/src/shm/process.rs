//! Workers and processes: registration of a process in its slot.
//!
//! A process's worker is `ACCELERATOR_WORKER_ID` from its environment, read
//! once, when the process first opens its books (its first limiter call);
//! a forked child opens its own and reads it then. For a process id that is
//! not the caller's own, `/proc/<pid>/environ` is read. Without the variable
//! the process is a private worker of its own (`workers.rs`). A slot is in
//! the books of its process's worker, so it names no worker.
//! A process is named by its pid namespace (`/proc/self/ns/pid`), its pid
//! there and its start time (field 22 of `/proc/<pid>/stat`): the same pid in
//! two containers, or a pid reused by a new process, is another process. A
//! process registering itself owns its slot through a lock the kernel drops
//! when it dies (`owner.rs`); nothing is judged by a pid of another
//! namespace. A forked child is a new process: its first call registers it
//! in a slot of its own (with the worker of its environment at that time).

use super::*;

/// (pid << 32) | (slot + 1) of the calling process's own slot (reset in a
/// forked child, whose pid may even be its parent's in another namespace).
pub(super) static OWN_SLOT: AtomicU64 = AtomicU64::new(0);

// ---- liveness ---------------------------------------------------------------

/// (state letter, start time) of a process from `/proc/<pid>/stat`; the
/// caller's own from `/proc/self/stat`, which is right even where /proc
/// was mounted from another pid namespace than the caller's.
pub(super) fn proc_stat(pid: i32) -> Option<(u8, u64)> {
    if pid <= 0 {
        return None;
    }
    let stat = if pid == my_pid() {
        std::fs::read("/proc/self/stat")
    } else {
        std::fs::read(format!("/proc/{pid}/stat"))
    }
    .ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the process can still make limiter calls: it exists, is not a
/// zombie, and (when given) has this start time.
pub(super) fn alive(pid: i32, start: Option<u64>) -> bool {
    match proc_stat(pid) {
        None => false,
        Some((b'Z' | b'X' | b'x', _)) => false,
        Some((_, s)) => start.is_none_or(|want| want == s),
    }
}

pub(super) fn my_pid() -> i32 {
    std::process::id() as i32
}

// ---- process slots ------------------------------------------------------------

/// The slot of process `pid`, registering it on first use. The fast path
/// (the caller's own, registered pid) is one load of the remembered slot
/// and one of that slot's state word: a slot reclaimed or reused since is
/// no longer `LIVE(pid)` and falls to the slow path.
#[inline]
pub(super) fn proc_slot(l: &Layout, pid: i32) -> Res<usize> {
    match own_slot(l, pid) {
        Some(i) => Ok(i),
        None => register(l, pid),
    }
}

/// The remembered slot of the calling process if `pid` is its pid and the
/// slot is still `LIVE(pid)`.
#[inline(always)]
pub(super) fn own_slot(l: &Layout, pid: i32) -> Option<usize> {
    let cached = OWN_SLOT.load(Relaxed);
    if cached >> 32 != pid as u32 as u64 {
        return None;
    }
    let i = (cached as u32 as usize).wrapping_sub(1);
    let p = l.procs.get(i)?;
    (p.state.load(Acquire) == proc_word(pid, PROC_LIVE)).then_some(i)
}

#[cold]
#[inline(never)]
pub(super) fn register(l: &Layout, pid: i32) -> Res<usize> {
    let _g = owner::own_lock(&owner::PROCESS, l);
    let own = pid == my_pid();
    let start = proc_stat(pid)
        .filter(|(st, _)| !matches!(st, b'Z' | b'X' | b'x'))
        .map(|(_, s)| s)
        .ok_or_else(|| Error::NotFound(format!("process {pid} does not exist")))?;
    let ns = owner::pid_ns();
    let live = proc_word(pid, PROC_LIVE);
    for (i, p) in l.claimed().iter().enumerate() {
        if p.state.load(Acquire) != live || p.ns.load(Relaxed) != ns {
            continue;
        }
        if p.start.load(Relaxed) == start {
            if own {
                // A proxy slot of this process becomes its own. The lock is
                // already held when another copy of this library in the
                // process registered it.
                if owner::try_lock(l, owner::proc_lock(i))? {
                    p.owned.store(1, Release);
                }
                remember(pid, i);
            }
            return Ok(i);
        }
        reclaim(l, i); // an earlier process with this pid, if it is gone
    }
    for attempt in 0..2 {
        if let Some(i) = claim_proc(l)? {
            let p = &l.procs[i];
            p.start.store(start, Relaxed);
            p.ns.store(ns, Relaxed);
            p.owned.store(own.into(), Relaxed);
            p.devmask.store(0, Relaxed);
            for d in 0..MAX_DEVICES {
                p.held[d].store(0, Relaxed);
                p.intent[d].store(0, Relaxed);
                p.tokens[d].store(0, Relaxed);
                p.share[d].store(0, Relaxed);
            }
            p.state.store(live, Release);
            if own {
                remember(pid, i);
            } else {
                owner::unlock(l, owner::proc_lock(i));
            }
            return Ok(i);
        }
        if attempt == 0 {
            sweep_locked(l);
        }
    }
    Err(Error::ResourceExhausted(format!(
        "all {MAX_PROCS} process slots of this worker's books are in use by live processes"
    )))
}

/// The worker of a process without `ACCELERATOR_WORKER_ID`: named for its
/// pid namespace, pid and start time, so its limits bind that process
/// alone (not a child, not a later process that reuses the pid).
/// Whether process `pid` (a pid here) holds the file `(dev, ino)` open: one
/// of its `/proc/<pid>/fd` links is that file. A process that registered
/// itself in a worker's books holds them open for as long as it lives (its
/// slot's lock byte is taken on that descriptor).
pub(super) fn holds_open(pid: i32, file: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::metadata(e.path()).is_ok_and(|m| (m.dev(), m.ino()) == file))
}

pub(super) fn private_worker(ns: u64, pid: i32, start: u64) -> String {
    format!("process-{ns}-{pid}-{start}")
}

fn remember(pid: i32, i: usize) {
    OWN_SLOT.store((pid as u32 as u64) << 32 | (i as u64 + 1), Relaxed);
}

/// A free slot, marked CLAIMING with its lock byte held. The lock comes
/// first: every claimer and reclaimer takes it before changing the slot.
fn claim_proc(l: &Layout) -> Res<Option<usize>> {
    for (i, p) in l.procs.iter().enumerate() {
        if p.state.load(Acquire) & 3 != PROC_FREE || !owner::try_lock(l, owner::proc_lock(i))? {
            continue;
        }
        if p.state.load(Acquire) & 3 == PROC_FREE {
            p.state.store(proc_word(my_pid(), PROC_CLAIMING), Release);
            // SeqCst: before the device marks of `devices::in_use`'s scan.
            l.header.slots.fetch_max(i as u64 + 1, SeqCst);
            return Ok(Some(i));
        }
        owner::unlock(l, owner::proc_lock(i));
    }
    Ok(None)
}

pub(super) fn mark_device(p: &Proc, d: usize) {
    let bit = 1u64 << d;
    if p.devmask.load(Relaxed) & bit == 0 {
        p.devmask.fetch_or(bit, AcqRel);
    }
}

/// `AddWorkerProcess`: register `pid` on a device, in its worker's books
/// (created if new).
/// Another worker's process the caller registered before, still alive and
/// in its slot, costs a few loads (`kept::added`).
pub fn add_process(uuid: &str, pid: i32) -> Res<()> {
    // Never this process itself (`remember_added` records only others').
    if super::kept::added(pid, uuid) {
        return Ok(());
    }
    if workers::is_own(pid) {
        return device_slot_for(pid, uuid).map(|_| ());
    }
    let (b, d) = workers::with_books_of_pid(pid, true, |l| devices::slot_for(l, pid, uuid))?;
    if let Books::Kept(k) = &b {
        super::kept::remember_added(k, pid, d);
    }
    Ok(())
}
