//! A worker's lifetime: when it ends, its limits entry and its books come
//! back, so neither the limits file's 1,024 entries nor the state
//! directory fill over a node's life (docs/scale.md).
//!
//! A worker ends in one of three ways:
//! - the host removes it (`LimiterRemoveWorker`, [`remove_worker`]) when its
//!   pod ends: its directory and books go, and its limits entry is freed,
//!   at once when no live process uses its books, else as soon as none
//!   does (marked `ending` in its entry; the next reclamation pass). A
//!   limit or freeze of the name before then starts a new worker on the
//!   entry, cleared (`limits::claim_worker`): the old process's end no
//!   longer ends it;
//! - it has had no live process for [`reclaim_after`] (10 minutes unless
//!   `ACCELERATOR_WORKER_RECLAIM_S` says otherwise): a node whose host never
//!   removes a worker still runs forever. Workers the host never limited or
//!   froze (no entry: books only) lose nothing to removal, and go as soon as
//!   a pass finds them unused, as private workers do (`workers::each`);
//! - a new worker finds the table full ([`make_room`]): the worker without
//!   a live process the longest gives its entry up at once, whatever the
//!   time. So the table caps workers with a live process, not workers per
//!   10 minutes: only when every entry's worker has a live process (or
//!   books the host cannot verify, below) is a new worker refused.
//!
//! "No live process uses the books" is what the host can check itself: no
//! process holds their users lock (each client holds it from opening its
//! books until it dies, forked children included) and no slot is live (a
//! proxy slot's process in `/proc`, a slot lock byte held)
//! (`workers::remove_unused`). The rule against a tenant: an entry whose
//! books are no longer the file the host created or first saw (its identity,
//! recorded in the entry the tenant cannot write) — removed, replaced,
//! renamed, cut short — is never taken for unused, by the timer or under
//! pressure: a tenant that empties or swaps its own books keeps its limit
//! (and a second `SetMemHardLimit` with a larger value still fails) until
//! the host removes the worker.
//! Nothing in a tenant's books is trusted to say a worker ended.
//!
//! Passes run in the host process, under the state directory's lock: at
//! most every [`reclaim_after`] / 2 (and at least every 10 s) on a host's
//! limit or freeze call ([`tick`]), and when a new worker finds the limits
//! table full and the last pass's candidates are used up or older than
//! that ([`make_room`]). A pass reads each named worker's books header and
//! slots' words (`pread`) and takes one lock probe: about 20 µs a worker.
//! A limit call that finds a free entry does none of this.

use super::limits::{self, LimitWorker, Limits};
use super::workers::{self, Unused};
use super::*;
use crate::statedir;
use std::sync::{Mutex, MutexGuard, TryLockError};

pub(super) const ENV_RECLAIM_S: &str = "ACCELERATOR_WORKER_RECLAIM_S";
const DEFAULT_RECLAIM_S: u64 = 600;

/// How long a worker the host limited may go without a live process before
/// its entry and books are reclaimed: `ACCELERATOR_WORKER_RECLAIM_S` seconds
/// (0 reclaims at the first pass that finds it unused), 10 minutes by
/// default: longer than Kubernetes' longest restart back-off (5 minutes), so
/// a crash-looping pod's restarts find their limits.
pub(super) fn reclaim_after() -> u64 {
    std::env::var(ENV_RECLAIM_S)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_RECLAIM_S)
        .saturating_mul(1000)
}

fn now_ms() -> u64 {
    map::monotonic_ns() / 1_000_000
}

/// What [`remove_worker`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// Its books and limits entry are gone.
    Now,
    /// A live process still uses its books: they and its entry go as soon
    /// as none does (the next reclamation pass).
    WhenUnused,
}

/// `LimiterRemoveWorker`: end `worker` (see the module docs). NOT_FOUND
/// when it has neither books nor a limits entry.
pub fn remove_worker(worker: &str) -> Res<Removed> {
    key_words(worker)?;
    let lim = limits::host_limits()?;
    let _lock = statedir::lock_dir(&statedir::path())?;
    let entry = entry_of(lim, worker);
    match workers::remove_unused(&workers::worker_dir(worker), None) {
        Unused::Live | Unused::Replaced | Unused::Kept => {
            if let Some(wk) = entry {
                wk.ending.store(1, Release);
            }
            Ok(Removed::WhenUnused)
        }
        Unused::Removed => {
            limits::forget_locked(lim, worker);
            // This process's view lets the removed books go now (their
            // memory with them), not at its next call (`kept.rs`).
            drop(super::kept::view());
            Ok(Removed::Now)
        }
        Unused::Missing if entry.is_some() => {
            limits::forget_locked(lim, worker);
            Ok(Removed::Now)
        }
        Unused::Missing => Err(Error::NotFound(format!(
            "worker {worker:?} has no books and no limits"
        ))),
    }
}

fn entry_of<'a>(lim: &'a Limits, worker: &str) -> Option<&'a LimitWorker> {
    limits::named_workers(lim)
        .into_iter()
        .find_map(|(w, wk)| (w == worker).then_some(wk))
}

/// The identity of `worker`'s books (`workers::identity`), if they exist.
pub(super) fn books_identity(worker: &str) -> Option<workers::Identity> {
    std::fs::symlink_metadata(workers::books_path(worker))
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| workers::identity(&m))
}

/// When the last pass began (ms), 0: none yet in this process.
static LAST_PASS: AtomicU64 = AtomicU64::new(0);

/// How often a host's calls run a pass (ms), and how long the unused
/// workers a pass found stay its candidates for eviction ([`make_room`]).
fn period() -> u64 {
    (reclaim_after() / 2).min(10_000)
}

/// On a host's limit or freeze call (before the directory lock): a
/// reclamation pass if none ran for a while in this process.
pub(super) fn tick() {
    let now = now_ms().max(1);
    let last = LAST_PASS.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < period() {
        return;
    }
    if LAST_PASS
        .compare_exchange(last, now, AcqRel, Relaxed)
        .is_err()
    {
        return; // another thread runs it
    }
    let Ok(lim) = limits::host_limits() else {
        return;
    };
    let Ok(_lock) = statedir::lock_dir(&statedir::path()) else {
        return;
    };
    pass(lim);
    sweep_unnamed(lim);
}

/// A worker the last pass found unused but not yet due: an eviction
/// candidate when the table is full.
struct Candidate {
    worker: String,
    /// Its entry's `idle_since_ms` then (1 + when first seen unused).
    since: u64,
    /// Its books' identity then (None: it had none): a candidate whose
    /// entry now records other books is another life of the name.
    books: Option<workers::Identity>,
}

/// The last pass's candidates, longest unused last (popped first), and when
/// that pass ran (ms). Only touched under the directory lock.
static CANDIDATES: Mutex<(u64, Vec<Candidate>)> = Mutex::new((0, Vec::new()));

/// [`CANDIDATES`], unless held: only by another thread at a fork, in a
/// child that then sees none.
fn candidates() -> Option<MutexGuard<'static, (u64, Vec<Candidate>)>> {
    match CANDIDATES.try_lock() {
        Ok(c) => Some(c),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// What a pass found in the limits table.
#[derive(Default)]
struct Survey {
    /// Entries given back (ended, or unused for [`reclaim_after`]).
    freed: usize,
    /// Workers with a live process.
    live: usize,
    /// Workers whose books are not the host's (removed, replaced or cut
    /// short by the tenant): kept until the host removes them.
    unverified: usize,
}

/// The limits table is full and a new worker needs an entry (the directory
/// lock held): give back the entry of the worker that has been without a
/// live process the longest, even before [`reclaim_after`] — a worker the
/// host removed while it was live (`ending`) first, then the oldest of the
/// last pass's candidates (`since`, to within a pass period), checked again
/// now, then a new pass. The same test as the timer's: the books the host
/// recorded, unchanged, and no live process; a worker with a live process
/// or books the host cannot verify is never taken. Err when every entry is
/// such a worker. Costs one worker's check while the last pass's
/// candidates last (at most a [`period`]), else a pass over the table
/// (about 20 µs an entry), as each refusal does.
pub(super) fn make_room(lim: &Limits, new: &str) -> Res<()> {
    let now = now_ms();
    let after = reclaim_after();
    let ending = lim
        .workers
        .iter()
        .filter(|wk| wk.key.state.load(Acquire) == KEY_READY && wk.ending.load(Acquire) == 1);
    for wk in ending {
        if let Look::Freed = look(lim, &key_name(&wk.key), wk, now, after, false) {
            return Ok(());
        }
    }
    if evict_candidate(lim, now, false) {
        return Ok(());
    }
    let survey = pass(lim);
    if survey.freed > 0 || evict_candidate(lim, now, true) {
        return Ok(());
    }
    Err(Error::ResourceExhausted(format!(
        "cannot add worker {new:?}: the limits table holds {MAX_WORKERS} workers and every one is in use: \
         {} with a live process, {} whose books their tenant removed, replaced or cut short (kept until \
         LimiterRemoveWorker); an entry comes back as soon as its worker's last process exits",
        survey.live, survey.unverified
    )))
}

/// Evict the longest unused of the last pass's candidates that is still
/// unused (the directory lock held); `fresh`: the pass just ran, else only
/// candidates of a pass at most a [`period`] old.
fn evict_candidate(lim: &Limits, now: u64, fresh: bool) -> bool {
    let Some(mut cands) = candidates() else {
        return false;
    };
    if !fresh && now.saturating_sub(cands.0) > period() {
        cands.1.clear();
        return false;
    }
    while let Some(c) = cands.1.pop() {
        let Some(w) = find_ready(&lim.workers, |k| &k.key, &c.worker) else {
            continue; // given back meanwhile
        };
        let wk = &lim.workers[w];
        if recorded(wk).is_some_and(|r| Some(r) != c.books) {
            continue; // another life of the name
        }
        if let Look::Freed = look(lim, &c.worker, wk, now, reclaim_after(), true) {
            return true;
        }
    }
    false
}

/// What [`look`] found of a named worker.
enum Look {
    /// Its entry was given back.
    Freed,
    /// No live process uses its books; kept.
    Unused,
    /// A live process uses them.
    Live,
    /// Its books are not the host's: never taken for unused.
    Unverified,
}

/// The identity of the books recorded in `wk`, if any.
fn recorded(wk: &LimitWorker) -> Option<workers::Identity> {
    match wk.books_ino.load(Acquire) {
        0 => None,
        ino => Some([wk.books_dev.load(Relaxed), ino, wk.books_born.load(Relaxed)]),
    }
}

/// Look at the named `worker`'s entry `wk` (the directory lock held): give
/// it back, with its books, when no live process uses them and it is
/// ending, unused for `after` ms, or `evict`ed.
fn look(lim: &Limits, worker: &str, wk: &LimitWorker, now: u64, after: u64, evict: bool) -> Look {
    if wk.books_ino.load(Acquire) == 0 {
        // An entry of an older library: the books as first seen.
        limits::record_books(wk, worker);
    }
    let recorded = recorded(wk);
    let ending = wk.ending.load(Acquire) == 1;
    let due = || evict || ending || idle_for(wk, now) >= after;
    // Only the books the host recorded are taken for unused (removal by
    // the host trusts the host).
    let expect = if ending { None } else { recorded };
    let unused = match workers::remove_unused_if(&workers::worker_dir(worker), expect, due) {
        Unused::Removed => true,
        Unused::Kept => false,
        // Gone: the host's never existed, or the tenant removed them.
        Unused::Missing if ending || recorded.is_none() => due(),
        found => {
            if wk.idle_since_ms.load(Relaxed) != 0 {
                wk.idle_since_ms.store(0, Relaxed);
            }
            return match found {
                Unused::Live => Look::Live,
                _ => Look::Unverified,
            };
        }
    };
    if unused {
        limits::forget_locked(lim, worker);
        return Look::Freed;
    }
    if wk.idle_since_ms.load(Relaxed) == 0 {
        wk.idle_since_ms.store(now + 1, Relaxed);
    }
    Look::Unused
}

/// One reclamation pass over the limits table, the directory lock held:
/// every named worker's entry is given back when ending or unused for
/// [`reclaim_after`]; the others unused become [`make_room`]'s candidates.
fn pass(lim: &Limits) -> Survey {
    let now = now_ms();
    let after = reclaim_after();
    let mut survey = Survey::default();
    let mut cands = Vec::new();
    for (worker, wk) in limits::named_workers(lim) {
        match look(lim, &worker, wk, now, after, false) {
            Look::Freed => survey.freed += 1,
            Look::Live => survey.live += 1,
            Look::Unverified => survey.unverified += 1,
            Look::Unused => cands.push(Candidate {
                since: wk.idle_since_ms.load(Relaxed),
                books: recorded(wk),
                worker,
            }),
        }
    }
    // Longest unused last; among those first seen unused by the same pass,
    // the oldest books (the worker limited first).
    cands.sort_unstable_by_key(|c| {
        std::cmp::Reverse((c.since, c.books.map_or(0, |[_, _, born]| born)))
    });
    if let Some(mut c) = candidates() {
        *c = (now, cands);
    }
    survey
}

/// The books of workers the host never limited, removed when unused (the
/// directory lock held): nothing of the host's to keep.
fn sweep_unnamed(lim: &Limits) {
    let named = limits::named_workers(lim);
    let root = statedir::path().join(workers::WORKERS_DIR);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(worker) = entry.file_name().to_str().and_then(workers::worker_of_dir) else {
            continue;
        };
        if workers::is_private(&worker) || named.iter().any(|(w, _)| *w == worker) {
            continue; // private ones: `workers::each`
        }
        workers::remove_unused(&entry.path(), None);
    }
}

/// How long `wk` has been seen unused (0: not seen unused).
fn idle_for(wk: &LimitWorker, now: u64) -> u64 {
    match wk.idle_since_ms.load(Relaxed) {
        0 => 0,
        since => now.saturating_sub(since - 1),
    }
}
