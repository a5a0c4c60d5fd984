//! A worker's lifetime: when it ends, its limits entry and its books come
//! back, so neither the limits file's 1,024 entries nor the state
//! directory fill over a node's life (docs/scale.md).
//!
//! A worker ends in one of two ways:
//! - the host removes it (`LimiterRemoveWorker`, [`remove_worker`]) when its
//!   pod ends: its directory and books go, and its limits entry is freed,
//!   at once when no live process uses its books, else as soon as none
//!   does (marked `ending` in its entry; the next reclamation pass);
//! - it has had no live process for [`reclaim_after`] (10 minutes unless
//!   `ACCELERATOR_WORKER_RECLAIM_S` says otherwise): a node whose host never
//!   removes a worker still runs forever. Workers the host never limited or
//!   froze (no entry: books only) lose nothing to removal, and go as soon as
//!   a pass finds them unused, as private workers do (`workers::each`).
//!
//! "No live process uses the books" is what the host can check itself: no
//! process holds their users lock (each client holds it from opening its
//! books until it dies, forked children included) and no slot is live (a
//! proxy slot's process in `/proc`, a slot lock byte held)
//! (`workers::remove_unused`). The rule against a tenant: an entry whose
//! books are no longer the file the host created or first saw (its identity,
//! recorded in the entry the tenant cannot write) — removed, replaced,
//! renamed — is never taken for unused by the timer: a tenant that empties
//! or swaps its own books keeps its limit (and a second `SetMemHardLimit`
//! with a larger value still fails) until the host removes the worker.
//! Nothing in a tenant's books is trusted to say a worker ended.
//!
//! Passes run in the host process, under the state directory's lock: at
//! most every [`reclaim_after`] / 2 (and at least every 10 s) on a host's
//! limit or freeze call ([`tick`]), and at once when a new worker finds the
//! limits table full ([`reclaim_now`]). A pass reads each named worker's
//! books header and slots' words (`pread`) and takes one lock probe: about
//! 20 µs a worker.

use super::limits::{self, LimitWorker, Limits};
use super::workers::{self, Unused};
use super::*;
use crate::statedir;

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

/// On a host's limit or freeze call (before the directory lock): a
/// reclamation pass if none ran for a while in this process.
pub(super) fn tick() {
    let now = now_ms().max(1);
    let every = (reclaim_after() / 2).min(10_000);
    let last = LAST_PASS.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < every {
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
}

/// A pass with the directory lock already held (a new worker found the
/// table full). Returns how many entries were freed.
pub(super) fn reclaim_now(lim: &Limits) -> usize {
    LAST_PASS.store(now_ms().max(1), Relaxed);
    pass(lim)
}

/// One reclamation pass, the directory lock held: every named worker's
/// entry (removed when ending or unused for [`reclaim_after`]), then the
/// books of workers without an entry (removed when unused). Returns how
/// many entries were freed.
fn pass(lim: &Limits) -> usize {
    let now = now_ms();
    let after = reclaim_after();
    let mut freed = 0;
    let named = limits::named_workers(lim);
    for (worker, wk) in &named {
        let dir = workers::worker_dir(worker);
        if wk.books_ino.load(Acquire) == 0 {
            // An entry of an older library: the books as first seen.
            limits::record_books(wk, worker);
        }
        let recorded = match wk.books_ino.load(Acquire) {
            0 => None,
            ino => Some([wk.books_dev.load(Relaxed), ino, wk.books_born.load(Relaxed)]),
        };
        let ending = wk.ending.load(Acquire) == 1;
        let due = || ending || idle_for(wk, now) >= after;
        // The timer trusts only the books the host recorded.
        let expect = if ending { None } else { recorded };
        let unused = match workers::remove_unused_if(&dir, expect, due) {
            Unused::Removed => true,
            Unused::Kept => false,
            // Gone: the host's never existed, or the tenant removed them.
            Unused::Missing if ending || recorded.is_none() => due(),
            Unused::Missing | Unused::Live | Unused::Replaced => {
                if wk.idle_since_ms.load(Relaxed) != 0 {
                    wk.idle_since_ms.store(0, Relaxed);
                }
                continue;
            }
        };
        if unused {
            if limits::forget_locked(lim, worker) {
                freed += 1;
            }
        } else if wk.idle_since_ms.load(Relaxed) == 0 {
            wk.idle_since_ms.store(now + 1, Relaxed);
        }
    }
    // Books of workers the host never limited: nothing of the host's to keep.
    let root = statedir::path().join(workers::WORKERS_DIR);
    if let Ok(entries) = std::fs::read_dir(&root) {
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
    freed
}

/// How long `wk` has been seen unused (0: not seen unused).
fn idle_for(wk: &LimitWorker, now: u64) -> u64 {
    match wk.idle_since_ms.load(Relaxed) {
        0 => 0,
        since => now.saturating_sub(since - 1),
    }
}
