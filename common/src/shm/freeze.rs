//! Freeze
//!
//! A worker's freeze word is 0 (running) or 1 + the time it was frozen (ms
//! since boot); resuming adds the frozen span to `frozen_ms`. While frozen,
//! every check of the worker's processes says "block" (frees included: a
//! frozen worker makes no progress). AutoFreeze/AutoResume set and clear a
//! per-worker-and-device word for one resource ("memory" or "compute"):
//! only that resource's checks on that device block. Freeze time counts
//! FreezeWorker spans only.

use super::*;

/// Whether a check must block: the worker is frozen, or `auto` (the
/// resource's AutoFreeze word on the device) is set.
pub(super) fn frozen(l: &Layout, w: usize, auto: &AtomicU64) -> bool {
    (w != 0 && l.workers[w].freeze.load(Acquire) != 0) || auto.load(Acquire) != 0
}

/// A worker's freeze state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreezeState {
    pub frozen: bool,
    pub freeze_time_ms: u64,
}

pub(super) fn now_ms() -> u64 {
    map::monotonic_ns() / 1_000_000
}

pub(super) fn freeze_state(wk: &Worker) -> FreezeState {
    let f = wk.freeze.load(Acquire);
    let total = wk.frozen_ms.load(Acquire);
    FreezeState {
        frozen: f != 0,
        freeze_time_ms: if f == 0 {
            total
        } else {
            total + now_ms().saturating_sub(f - 1)
        },
    }
}

/// `FreezeWorker`: idempotent; NOT_FOUND for a worker the limiter never saw.
pub fn freeze_worker(worker: &str) -> Res<FreezeState> {
    let l = shared()?;
    let wk = &l.workers[known_worker(l, worker)?];
    let _ = wk.freeze.compare_exchange(0, now_ms() + 1, AcqRel, Acquire);
    Ok(freeze_state(wk))
}

/// `ResumeWorker`: idempotent; adds the frozen span to the freeze time.
pub fn resume_worker(worker: &str) -> Res<FreezeState> {
    let l = shared()?;
    let wk = &l.workers[known_worker(l, worker)?];
    let since = wk.freeze.swap(0, AcqRel);
    if since != 0 {
        wk.frozen_ms
            .fetch_add(now_ms().saturating_sub(since - 1), AcqRel);
    }
    Ok(freeze_state(wk))
}

/// The resource of `AutoFreeze`/`AutoResume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    Compute,
}

impl std::str::FromStr for Resource {
    type Err = Error;
    fn from_str(s: &str) -> Res<Resource> {
        match s {
            "memory" => Ok(Resource::Memory),
            "compute" => Ok(Resource::Compute),
            _ => Err(Error::InvalidParam(format!(
                "resource type {s:?} is neither \"memory\" nor \"compute\""
            ))),
        }
    }
}

/// `AutoFreeze` (`frozen`) / `AutoResume` of one resource of a worker on a device.
pub fn auto_freeze(worker: &str, uuid: &str, resource: Resource, frozen: bool) -> Res<()> {
    let l = shared()?;
    let w = known_worker(l, worker)?;
    if !frozen && devices::lookup(l, uuid)?.is_none() {
        return Ok(()); // nothing frozen there; naming the device would be all
    }
    // Under the device table's lock: a freeze word keeps the entry in use.
    devices::with_entry(l, uuid, devices::Origin::Client, |d| {
        let wd = &l.wd[w][d];
        let word = match resource {
            Resource::Memory => &wd.mem_frozen,
            Resource::Compute => &wd.bucket.frozen,
        };
        word.store(frozen.into(), Release);
        Ok(())
    })
}
