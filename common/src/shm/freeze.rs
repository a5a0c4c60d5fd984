//! Freeze
//!
//! A worker's freeze word is 0 (running) or 1 + the time it was frozen (ms
//! since boot); resuming adds the frozen span to `frozen_ms`. While frozen,
//! every check of the worker's processes says "block" (frees included: a
//! frozen worker makes no progress). AutoFreeze/AutoResume set and clear a
//! per-worker-and-device word for one resource ("memory" or "compute"):
//! only that resource's checks on that device block. Freeze time counts
//! FreezeWorker spans only. The words live in the host-owned limits file
//! (`limits.rs`), which clients cannot write.

use super::limits::LimitWorker;
use super::*;

/// A worker's freeze state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreezeState {
    pub frozen: bool,
    pub freeze_time_ms: u64,
}

pub(super) fn now_ms() -> u64 {
    map::monotonic_ns() / 1_000_000
}

fn freeze_state(wk: &LimitWorker) -> FreezeState {
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

/// Whether the worker is known: named by the host (limits file), or it has
/// books (a client of it created them).
fn known(worker: &str) -> Res<bool> {
    key_words(worker)?;
    Ok(limits::host_worker(worker)?.is_some() || workers::exists(worker))
}

fn unknown(worker: &str) -> Error {
    Error::NotFound(format!("worker {worker:?} is not known to the limiter"))
}

/// `FreezeWorker`: idempotent; NOT_FOUND for a worker the limiter never saw.
pub fn freeze_worker(worker: &str) -> Res<FreezeState> {
    if !known(worker)? {
        return Err(unknown(worker));
    }
    Ok(freeze_state(limits::set_frozen(worker, now_ms())?))
}

/// `ResumeWorker`: idempotent; adds the frozen span to the freeze time.
pub fn resume_worker(worker: &str) -> Res<FreezeState> {
    match limits::set_running(worker, now_ms())? {
        Some(wk) => Ok(freeze_state(wk)),
        None if known(worker)? => Ok(FreezeState {
            frozen: false,
            freeze_time_ms: 0,
        }),
        None => Err(unknown(worker)),
    }
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
    key_words(uuid)?;
    if !known(worker)? {
        return Err(unknown(worker));
    }
    let bit = match resource {
        Resource::Memory => limits::MEM_BIT,
        Resource::Compute => limits::CU_BIT,
    };
    limits::set_auto(worker, uuid, frozen, bit)
}
