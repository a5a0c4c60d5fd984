//! Workers and processes: registration of a process in its slot.
//!
//! A process's worker is `ACCELERATOR_WORKER_ID` from its environment, read
//! once, when the process is first registered (its first limiter call or
//! `AddWorkerProcess`); a forked child registers anew and reads it then. For
//! a process id that is not the caller's own, `/proc/<pid>/environ` is read.
//! Without the variable the process is a worker of its own: it joins the
//! anonymous pool (worker slot 0), which is never limited nor frozen.
//! Processes are named by pid and start time (field 22 of `/proc/<pid>/stat`):
//! a pid reused by a new process is never mistaken for the dead one. Pids are
//! those of the limiter's pid namespace (hooks and hypervisor must share it).

use super::*;
use std::sync::Mutex;

/// (pid << 32) | (slot + 1) of the calling process's own slot.
pub(super) static OWN_SLOT: AtomicU64 = AtomicU64::new(0);
/// Registration within one process is serialised (a process-local lock dies
/// with its process, so it strands nobody else).
pub(super) static REGISTER: Mutex<()> = Mutex::new(());

// ---- liveness ---------------------------------------------------------------

/// (state letter, start time) of a process from `/proc/<pid>/stat`.
pub(super) fn proc_stat(pid: i32) -> Option<(u8, u64)> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
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

/// The worker a process belongs to, from its environment.
pub(super) fn worker_of(l: &Layout, pid: i32) -> Res<usize> {
    let value = if pid == my_pid() {
        std::env::var_os(ENV_WORKER_ID).map(|v| v.into_encoded_bytes())
    } else {
        std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(b"ACCELERATOR_WORKER_ID="))
                    .map(<[u8]>::to_vec)
            })
    };
    match value.filter(|v| !v.is_empty()) {
        None => Ok(0),
        Some(v) => {
            let name = String::from_utf8(v).map_err(|_| {
                Error::InvalidParam(format!("{ENV_WORKER_ID} of process {pid} is not UTF-8"))
            })?;
            worker_index(l, &name, true)?.ok_or_else(|| Error::Internal("worker claim".into()))
        }
    }
}

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
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let me = my_pid();
    let start = proc_stat(pid)
        .filter(|(st, _)| !matches!(st, b'Z' | b'X' | b'x'))
        .map(|(_, s)| s)
        .ok_or_else(|| Error::NotFound(format!("process {pid} does not exist")))?;
    let live = proc_word(pid, PROC_LIVE);
    for (i, p) in l.procs.iter().enumerate() {
        if p.state.load(Acquire) == live {
            if p.start.load(Relaxed) == start {
                if pid == me {
                    OWN_SLOT.store((pid as u32 as u64) << 32 | (i as u64 + 1), Relaxed);
                }
                return Ok(i);
            }
            reclaim(l, i); // an earlier process with the same pid
        }
    }
    let worker = worker_of(l, pid)?;
    for attempt in 0..2 {
        if let Some(i) = claim_proc(l, me) {
            let p = &l.procs[i];
            p.start.store(start, Relaxed);
            p.worker.store(worker as u64, Relaxed);
            p.devmask.store(0, Relaxed);
            for d in 0..MAX_DEVICES {
                p.held[d].store(0, Relaxed);
                p.intent[d].store(0, Relaxed);
                p.tokens[d].store(0, Relaxed);
            }
            p.state.store(live, Release);
            if pid == me {
                OWN_SLOT.store((pid as u32 as u64) << 32 | (i as u64 + 1), Relaxed);
            }
            return Ok(i);
        }
        if attempt == 0 {
            sweep(l, None);
        }
    }
    Err(Error::ResourceExhausted(format!(
        "all {MAX_PROCS} limiter process slots are in use by live processes"
    )))
}

pub(super) fn claim_proc(l: &Layout, me: i32) -> Option<usize> {
    for (i, p) in l.procs.iter().enumerate() {
        let st = p.state.load(Acquire);
        let free = st & 3 == PROC_FREE
            || (st & 3 == PROC_CLAIMING && (word_pid(st) == me || !alive(word_pid(st), None)));
        if free
            && p.state
                .compare_exchange(st, proc_word(me, PROC_CLAIMING), AcqRel, Acquire)
                .is_ok()
        {
            return Some(i);
        }
    }
    None
}

pub(super) fn mark_device(p: &Proc, d: usize) {
    let bit = 1u64 << d;
    if p.devmask.load(Relaxed) & bit == 0 {
        p.devmask.fetch_or(bit, AcqRel);
    }
}

/// `AddWorkerProcess`: register `pid` (and its worker) on a device.
pub fn add_process(uuid: &str, pid: i32) -> Res<()> {
    let l = shared()?;
    let d = device(l, uuid)?;
    let i = proc_slot(l, pid)?;
    mark_device(&l.procs[i], d);
    Ok(())
}
