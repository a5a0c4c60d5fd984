//! Memory: no overshoot, and exact after any SIGKILL
//!
//! Each worker × device has one 64-bit usage word W: 43 bits of bytes, a
//! "named" bit, the 12-bit slot of the process whose operation last changed
//! it and the low 8 bits of that operation's sequence number. Each process
//! slot keeps, per device, `held` (48 bits of bytes, 16-bit sequence) and
//! `intent` (the signed byte delta and the sequence of its current op).
//!
//! An operation of process P on device d, sequence s = held.seq + 1:
//! 1. P reads W. If W names another slot's operation that is not yet in that
//!    slot's `held`, P first *settles* it (below) — it never waits. If the
//!    worker has a limit and `used + delta > limit`, the op is blocked:
//!    nothing is written.
//! 2. P writes `intent = (delta, s)` (only P ever writes its intents, except
//!    a reclaimer after P is dead) and CASes W from what it read to
//!    `(used + delta, named P, s)`. This CAS is the linearisation point: the
//!    limit check and the add are one atomic step, so no number of racing
//!    processes can overshoot.
//! 3. P stores `held = (bytes + delta, s)`. W keeps naming P's op: the next
//!    operation replaces the name in its own CAS, so an uncontended
//!    operation is one locked instruction.
//!
//! *Settling*: whoever finds W naming (slot j, s) with j's `held` still at
//! s − 1 reads j's intent, re-reads W (unchanged, so the intent belongs to
//! the named op) and CASes j's `held` from s − 1 to s, so the op is applied
//! exactly once, by whoever comes first. Killed after step 2, P's operation
//! is completed by the next process that touches W; killed before it, it
//! never happened. Hence at every moment `used(W) = Σ held` over the
//! worker's process slots, plus the one named op not yet settled. A slot
//! only starts its next op once its last one is in `held`, and blocked ops
//! leave the sequence alone, so the named op's `held` is always s − 1 or s.
//!
//! Contention (`backoff.rs`): a process that loses a CAS race waits a little
//! before its next attempt, and one that finds the word naming another
//! process's op not yet `settled` gives that owner a moment to publish it
//! before reaching into its slot, so the winner finishes its operation with
//! the line still in its cache. The waits are bounded: a dead or preempted
//! owner costs the others one short wait, then they settle its op.
//!
//! Threads: the protocol needs one actor per (slot, device) at a time; the
//! threads of a process are serialised by a process-local guard
//! (`local.rs`: biased to the first thread, so a single-threaded process
//! pays no locked instruction for it).

use super::*;

// ---- the usage protocol --------------------------------------------------

/// Make sure the operation the usage word `u` names (if any) is in its
/// slot's `held`, applying it there if its owner has not. Never waits.
/// False: `wd` moved on meanwhile and the caller must reload it.
#[inline(never)]
pub(super) fn settle(l: &Layout, d: usize, wd: &WorkerDevice, u: u64) -> bool {
    if !named(u) || wd.settled.load(Acquire) == u {
        return true;
    }
    // A live owner publishes `settled` right after its CAS: give it a
    // moment rather than pull its slot's line over (and back).
    let mut b = Backoff::new();
    while !b.exhausted() {
        b.wait();
        if wd.settled.load(Acquire) == u {
            return true;
        }
        if wd.usage.load(Acquire) != u {
            return false;
        }
    }
    // A slot past the table is a forged word (`usage_word_fault`): there is
    // no op to apply, and the next CAS replaces the word.
    let Some(p) = l.procs.get(tag_slot(u)) else {
        return true;
    };
    let h = p.held[d].load(Acquire);
    if seq16(h) & 0xff == tag_seq8(u) {
        return true; // complete
    }
    // Pending: `held` is one behind, and the owner wrote the intent of the
    // named op before its CAS (its next intent waits for `held` to catch up).
    let intent = p.intent[d].load(Acquire);
    if wd.usage.load(Acquire) != u {
        return false;
    }
    let seq = seq16(intent);
    if seq & 0xff != tag_seq8(u) || seq16(h) != seq.wrapping_sub(1) & 0xffff {
        return false; // `held` moved since it was read: look again
    }
    let bytes = (low48(h) as i64).wrapping_add(delta_of(intent)) as u64;
    // Whoever comes first applies it; a failed CAS means someone did.
    let _ = p.held[d].compare_exchange(h, pack48(bytes, seq), AcqRel, Acquire);
    true
}

pub(super) enum Apply {
    Done {
        used: u64,
    },
    Blocked {
        used: u64,
    },
    /// A free larger than the `held` bytes of the slot (nothing changed).
    Overdraft {
        held: u64,
    },
}

/// Apply `delta` bytes (|delta| ≤ MAX_BYTES) of slot `i` to worker-device
/// `wd` (device `d`), refusing growth past the worker's memory limit
/// `limit` (0 = none). `owner`: the caller is slot `i`'s own process
/// (holding `local::enter`), not a reclaimer.
#[inline(always)]
pub(super) fn apply(
    l: &Layout,
    i: usize,
    d: usize,
    wd: &WorkerDevice,
    delta: i64,
    limit: u64,
    owner: bool,
) -> Apply {
    let p = &l.procs[i];
    let h = p.held[d].load(Acquire);
    let (bytes, seq) = (low48(h), (seq16(h) + 1) & 0xffff);
    // bytes < 2^48 and |delta| < 2^43: no i64 overflow here or below.
    let after = bytes as i64 + delta;
    if after < 0 {
        return Apply::Overdraft { held: bytes };
    }
    let intent = pack48(delta as u64, seq);
    let mut announced = false;
    let mut b = Backoff::new();
    let mut u = wd.usage.load(Acquire);
    let new = loop {
        // The owner's own last op is always complete: it finished it
        // before returning.
        if named(u) && !(owner && tag_slot(u) == i) && !settle(l, d, wd, u) {
            budget::check();
            u = wd.usage.load(Acquire);
            continue;
        }
        let used = used_of(u);
        let target = used as i64 + delta;
        if delta > 0 && target as u64 > cap(limit) {
            // Nothing recorded, and `held` keeps its sequence: an intent
            // left behind is never named by the usage word.
            return Apply::Blocked { used };
        }
        if !announced {
            p.intent[d].store(intent, Release);
            announced = true;
        }
        let new = named_word(target.max(0) as u64, i, seq);
        match wd.usage.compare_exchange(u, new, AcqRel, Acquire) {
            Ok(_) => break new,
            Err(_) => {
                b.wait();
                u = wd.usage.load(Acquire);
            }
        }
    };
    let applied = pack48(after as u64, seq);
    if owner {
        // Only a helper of this very op may write `held` now, and with the
        // same value.
        p.held[d].store(applied, Release);
    } else {
        let _ = p.held[d].compare_exchange(h, applied, AcqRel, Acquire);
    }
    // Tell the next process it need not look at our `held`. Only the
    // actor of an op writes this: a late write names an op of a slot that
    // cannot have moved on, so it never vouches for a later pending op.
    wd.settled.store(new, Release);
    Apply::Done { used: used_of(new) }
}

/// Settle and remove every reference of `wd`'s usage and settled words to
/// slot `i`, so the slot can be reused (a new process restarts its
/// sequences at 0, and a leftover `settled` naming the slot could vouch for
/// its first op). Only the reclaimer acts for a dead slot, so nobody writes
/// a `settled` naming it after this.
pub(super) fn unname(l: &Layout, i: usize, d: usize, wd: &WorkerDevice) {
    loop {
        let u = wd.usage.load(Acquire);
        if !named(u) || tag_slot(u) != i {
            break;
        }
        if settle(l, d, wd, u) {
            let _ = wd.usage.compare_exchange(u, used_of(u), AcqRel, Acquire);
        }
        budget::check();
    }
    let s = wd.settled.load(Acquire);
    if named(s) && tag_slot(s) == i {
        let _ = wd.settled.compare_exchange(s, 0, AcqRel, Acquire);
    }
}

/// Outcome of a memory check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemOutcome {
    pub should_block: bool,
    /// `limit − usage` after the op (`u64::MAX` when the worker has no limit).
    pub available_bytes: u64,
}

/// The most a worker with memory limit `limit` (0 = none) may use.
pub(super) fn cap(limit: u64) -> u64 {
    if limit == 0 {
        MAX_BYTES
    } else {
        limit.min(MAX_BYTES)
    }
}

pub(super) fn available(limit: u64, used: u64) -> u64 {
    if limit == 0 {
        u64::MAX
    } else {
        limit.saturating_sub(used)
    }
}

/// `CheckAndRecordMemoryOps` for process `pid` (positive delta: allocate).
pub fn check_memory(pid: i32, uuid: &str, delta: i64) -> Res<MemOutcome> {
    if !workers::is_own(pid) {
        return check_memory_of(pid, uuid, delta);
    }
    check_memory_on(pid, device_slot_for(pid, uuid)?, delta)
}

/// [`check_memory`] on device slot `d` (from [`device_slot_for`]).
#[inline]
pub fn check_memory_on(pid: i32, d: usize, delta: i64) -> Res<MemOutcome> {
    match memory_fast(pid, d, delta) {
        Some(outcome) => Ok(outcome),
        None => memory_slow(pid, d, delta),
    }
}

/// The common case of a memory check, in one pass: the caller's own
/// registered slot, a device it used before, the worker not frozen, the
/// usage word naming nothing left to settle, within the limit, and no race
/// lost. It is `apply`'s owner path with every branch that leaves that case
/// turned into `None`, which hands the op to [`memory_slow`] (which handles
/// every case, this one included). Nothing shared is written before the
/// CAS but the op's `intent`, which the slow path writes again unchanged.
#[inline(always)]
pub(super) fn memory_fast(pid: i32, d: usize, delta: i64) -> Option<MemOutcome> {
    let l = map::published()?;
    if d >= MAX_DEVICES || delta.unsigned_abs() > MAX_BYTES {
        return None;
    }
    let i = own_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = l.wd.get(d)?;
    let row = limits::row(d)?;
    if p.devmask.load(Relaxed) & 1 << d == 0 || row.mem_blocked() {
        return None;
    }
    let _owner = local::enter(i, d);
    let h = p.held[d].load(Acquire);
    let (bytes, seq) = (low48(h), (seq16(h) + 1) & 0xffff);
    let after = bytes as i64 + delta;
    let u = wd.usage.load(Acquire);
    if after < 0 || (named(u) && tag_slot(u) != i && wd.settled.load(Acquire) != u) {
        return None;
    }
    let target = used_of(u) as i64 + delta;
    let limit = row.mem_limit.load(Acquire);
    if target < 0 || (delta > 0 && target as u64 > cap(limit)) {
        return None;
    }
    p.intent[d].store(pack48(delta as u64, seq), Release);
    let new = named_word(target as u64, i, seq);
    wd.usage.compare_exchange(u, new, AcqRel, Relaxed).ok()?;
    p.held[d].store(pack48(after as u64, seq), Release);
    wd.settled.store(new, Release);
    Some(MemOutcome {
        should_block: false,
        available_bytes: available(limit, target as u64),
    })
}

/// Every case of a memory check (see [`memory_fast`]).
#[inline(never)]
pub(super) fn memory_slow(pid: i32, d: usize, delta: i64) -> Res<MemOutcome> {
    if delta.unsigned_abs() > MAX_BYTES {
        return Err(too_large(delta));
    }
    let d = checked_device(d)?;
    workers::with_books_of_pid(pid, false, |b| memory_in(b, pid, d, delta)).map(|(_, m)| m)
}

/// A memory check of process `pid` on device slot `d` of its worker's books `l`.
fn memory_in(l: &Layout, pid: i32, d: usize, delta: i64) -> Res<MemOutcome> {
    let i = proc_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = &l.wd[d];
    let row = limits::row_of(l, d)?;
    let limit = row.mem_limit.load(Acquire);
    let outcome = |should_block, used| MemOutcome {
        should_block,
        available_bytes: available(limit, used),
    };
    if row.mem_blocked() {
        return Ok(outcome(true, used_of(wd.usage.load(Acquire))));
    }
    mark_device(p, d);
    // Another worker's books take no process-local lock: their calls run
    // one at a time (`Kept::with`), and may be cut short by their budget.
    let _owner = map::is_published(l).then(|| local::enter(i, d));
    match apply(l, i, d, wd, delta, limit, true) {
        Apply::Done { used } => Ok(outcome(false, used)),
        Apply::Blocked { used } => Ok(match retry_after_sweep(l, i, d, wd, delta, limit) {
            Some(Apply::Done { used }) => outcome(false, used),
            Some(Apply::Blocked { used }) => outcome(true, used),
            _ => outcome(true, used),
        }),
        Apply::Overdraft { held } => Err(overdraft(delta, held)),
    }
}

/// A blocked allocation may fit once the worker's dead processes are
/// reclaimed: sweep them (see `try_sweep`) and try once more.
#[cold]
#[inline(never)]
pub(super) fn retry_after_sweep(
    l: &Layout,
    i: usize,
    d: usize,
    wd: &WorkerDevice,
    delta: i64,
    limit: u64,
) -> Option<Apply> {
    try_sweep(l, wd).then(|| apply(l, i, d, wd, delta, limit, true))
}

#[cold]
pub(super) fn too_large(delta: i64) -> Error {
    Error::InvalidParam(format!(
        "{delta} bytes in one operation (at most {MAX_BYTES})"
    ))
}

#[cold]
pub(super) fn overdraft(delta: i64, held: u64) -> Error {
    Error::InvalidParam(format!(
        "freeing {} bytes, but the process holds {held} on this device",
        delta.unsigned_abs()
    ))
}

/// Sweep the worker's dead processes, at most once a millisecond per
/// device; true when something was reclaimed.
pub(super) fn try_sweep(l: &Layout, wd: &WorkerDevice) -> bool {
    let now = map::monotonic_ns();
    let last = wd.last_sweep_ns.load(Relaxed);
    if now.saturating_sub(last) < 1_000_000
        || wd
            .last_sweep_ns
            .compare_exchange(last, now, AcqRel, Relaxed)
            .is_err()
    {
        return false;
    }
    sweep(l) > 0
}

/// A worker's recorded usage on a device and its memory limit (None:
/// unlimited). A worker the host set limits for on the device and whose
/// processes have not used it (no books yet, none since
/// `LimiterRemoveWorker` and a new limit, or the device not in its books)
/// uses 0 of its limit. NOT_FOUND for a worker or device neither the books
/// nor the host's limits name.
pub fn worker_usage(worker: &str, uuid: &str) -> Res<(u64, Option<u64>)> {
    let unused = || -> Res<Option<(u64, Option<u64>)>> {
        Ok(limits::named_memory_limit(worker, uuid)?.map(|l| (0, (l != 0).then_some(l))))
    };
    let Some(b) = workers::books_of(worker)? else {
        return unused()?.ok_or_else(|| {
            Error::NotFound(format!("worker {worker:?} is not known to the limiter"))
        });
    };
    if let Books::Own(_) = b {
        owner::check_size()?;
    }
    let used = b.with(|l| {
        let Some(d) = devices::lookup(l, uuid)? else {
            return Ok(None);
        };
        // The worker's dead processes are reclaimed here, so the usage is
        // that of live ones: on another worker's books, only those the host
        // saw exit or cannot watch (`Kept::sweep_exited`).
        match &b {
            Books::Own(_) => {
                sweep(l);
            }
            Books::Kept(k) => {
                k.sweep_exited(l);
            }
        }
        let u = l.wd[d].usage.load(Acquire);
        match usage_word_fault(u) {
            Some(why) => Err(Error::OperationFailed(format!(
                "worker {worker:?}'s limiter books are faulty on {uuid:?}: {why}"
            ))),
            None => Ok(Some(used_of(u))),
        }
    })?;
    let Some(used) = used else {
        return unused()?.ok_or_else(|| {
            Error::NotFound(format!("device {uuid:?} is not known to the limiter"))
        });
    };
    let limit = limits::memory_limit_of(worker, uuid)?;
    Ok((used, (limit != 0).then_some(limit)))
}

/// How often the usage view sweeps a worker's dead processes (and checks
/// its books for truncation): at most once per device in this many
/// nanoseconds, by whichever process of the worker asks first.
const VIEW_SWEEP_NS: u64 = 100_000_000;

/// [`worker_usage`] of the caller's own worker on its device slot `d` (from
/// [`device_slot_for`]), the hook's `cuMemGetInfo` view: a few loads, no
/// system call, whatever the number of the worker's processes. A process
/// killed since the last sweep still counts until the next one (at most
/// [`VIEW_SWEEP_NS`] later, or sooner when an allocation would block);
/// sweeping is the part that walks every process, so it is shared by the
/// worker's processes instead of paid per call. `None`: the books are not
/// this process's own mapping (not registered yet, a forked child before its
/// first call, another worker), or unusable: ask [`worker_usage`].
#[inline]
pub fn own_usage_on(d: usize) -> Option<(u64, Option<u64>)> {
    let l = map::published()?;
    let wd = l.wd.get(d)?;
    let row = match limits::row(d) {
        Some(r) => r,
        None => limits::row_of(l, d).ok()?,
    };
    let now = map::monotonic_ns();
    let last = wd.last_sweep_ns.load(Relaxed);
    if now.saturating_sub(last) >= VIEW_SWEEP_NS
        && wd
            .last_sweep_ns
            .compare_exchange(last, now, AcqRel, Relaxed)
            .is_ok()
    {
        owner::check_size().ok()?;
        sweep(l);
    }
    let limit = row.mem_limit.load(Acquire);
    Some((
        used_of(wd.usage.load(Acquire)),
        (limit != 0).then_some(limit),
    ))
}

/// [`check_memory`] for another process than the caller, in its worker's
/// books.
pub(super) fn check_memory_of(pid: i32, uuid: &str, delta: i64) -> Res<MemOutcome> {
    if delta.unsigned_abs() > MAX_BYTES {
        return Err(too_large(delta));
    }
    workers::on_device_of(pid, uuid, |b, d| memory_in(b, pid, d, delta))
}
