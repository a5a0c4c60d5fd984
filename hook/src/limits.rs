//! The hook's one door to the limiter's shared state (`accel_common::shm`).
//!
//! Everything the hook asks the limiter goes through the functions here,
//! so a change of the limiter's API touches this module only:
//! - [`device`]: a device UUID ("GPU-…") to the limiter's device slot;
//! - [`charge`] / [`give_back`]: record an allocation (checked against the
//!   worker's limit) or a free of this process on a device slot;
//! - [`view`]: the worker's recorded usage and limit on a device;
//! - [`processes_on`]: the worker's processes and their usage on a device.
//!
//! The process's worker is `ACCELERATOR_WORKER_ID`, read once. Without it
//! the hook is inert: every call goes straight to the driver.
//!
//! The hook never creates the limiter's state: a worker's process finds its
//! worker's books (`workers/<worker>/limiter.shm` in `ACCELERATOR_STATE_DIR`),
//! which the hypervisor made when it set the worker's limits.
//!
//! Failure policy: when the limiter's state cannot be used (a missing,
//! corrupt, truncated or unreadable state file, one of another layout, one
//! replaced since its identity was recorded in `limiter.shm.id`, a full
//! table), the hook warns once on stderr, saying which, and from then on
//! lets every allocation through unrecorded (fail-open), or, with
//! `ACCELERATOR_HOOK_FAIL_CLOSED=1`, refuses every allocation with
//! CUDA_ERROR_OUT_OF_MEMORY (fail-closed). The limiter refuses such files
//! (`accel_common::shm`); the hook only maps its refusal to the policy. A
//! file truncated while this process has it mapped is not caught here (a
//! SIGBUS on the hot path; the limiter's open problem).

use accel_common::{shm, Error};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};
use std::sync::OnceLock;

pub const ENV_FAIL_CLOSED: &str = "ACCELERATOR_HOOK_FAIL_CLOSED";

/// What the limiter said about an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Recorded: the caller owes a `give_back` if the driver fails.
    Charged,
    /// Over the worker's limit (or fail-closed): nothing recorded.
    Refused,
    /// Fail-open: let it through, nothing recorded.
    Unaccounted,
}

static WORKER: OnceLock<Option<String>> = OnceLock::new();
/// Set after the first failure of the shared state: the policy decides from then on.
static BROKEN: AtomicBool = AtomicBool::new(false);
/// This process's pid (glibc's getpid is a system call); 0 = not read yet.
static PID: AtomicI32 = AtomicI32::new(0);

fn worker() -> Option<&'static str> {
    WORKER
        .get_or_init(|| {
            std::env::var(shm::ENV_WORKER_ID)
                .ok()
                .filter(|w| !w.is_empty())
        })
        .as_deref()
}

/// Whether this process is a worker the hook accounts for.
#[inline]
pub fn active() -> bool {
    worker().is_some()
}

/// Whether the shared state has failed (the policy decides from then on).
/// Launches then go straight to the driver; so do allocations under
/// fail-open ([`passes_through`]), which skips resolving their device.
#[inline]
pub fn broken() -> bool {
    BROKEN.load(Relaxed)
}

/// Whether an allocation goes to the driver unaccounted without asking:
/// the state failed and the policy is fail-open.
#[inline]
pub fn passes_through() -> bool {
    broken() && !fail_closed()
}

fn fail_closed() -> bool {
    static CLOSED: OnceLock<bool> = OnceLock::new();
    *CLOSED.get_or_init(|| std::env::var(ENV_FAIL_CLOSED).is_ok_and(|v| v == "1"))
}

/// The verdict while the shared state is unusable.
fn policy() -> Verdict {
    if fail_closed() {
        Verdict::Refused
    } else {
        Verdict::Unaccounted
    }
}

#[cold]
fn failed(e: &Error) -> Verdict {
    if !BROKEN.swap(true, AcqRel) {
        let what = if fail_closed() {
            "refusing every allocation (ACCELERATOR_HOOK_FAIL_CLOSED=1)"
        } else {
            "running without memory limits (fail-open; ACCELERATOR_HOOK_FAIL_CLOSED=1 refuses instead)"
        };
        eprintln!("libcuda_limiter: the limiter's state is unusable ({e}); {what}");
    }
    policy()
}

/// Tell the host's sampler that a thread of this process works in a
/// context it had not (`current::here`: a launch, a charge): opening the worker's books is a notice on its
/// directory (inotify `IN_OPEN`), on which the sampler reads the books of
/// a worker it had stopped reading every period (a quiet one: a process
/// that registered and set up for a while before its first kernel), so
/// that the launches are seen within a period, not at the driver's next
/// utilization sample. Cold: once per thread and context.
pub fn announce() {
    // The path made once: no allocation here, where a fork() from another
    // thread would leave it lost in the child.
    static BOOKS: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    if let Some(books) = BOOKS.get_or_init(|| worker().map(shm::books_path)) {
        drop(std::fs::File::open(books));
    }
}

/// Whether the shared state may be used: it has not failed, and its file
/// exists (checked once; the hook never creates it).
#[inline]
fn usable() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    let present = *PRESENT.get_or_init(|| {
        let file = shm::books_path(worker().unwrap_or_default());
        file.is_file() || {
            failed(&Error::NotFound(format!(
                "limiter state file {} does not exist",
                file.display()
            )));
            false
        }
    });
    present && !BROKEN.load(Relaxed)
}

fn pid() -> i32 {
    match PID.load(Relaxed) {
        0 => {
            let p = std::process::id() as i32;
            PID.store(p, Relaxed);
            p
        }
        p => p,
    }
}

/// After `fork()`, in the child: it is a process of its own.
pub fn forget_pid() {
    PID.store(0, Relaxed);
}

/// The limiter's slot for a device UUID; `Err` carries the policy's verdict.
pub fn device(uuid: &str) -> Result<usize, Verdict> {
    if !usable() {
        return Err(policy());
    }
    shm::device_slot_for(pid(), uuid).map_err(|e| failed(&e))
}

/// Record `bytes` more for this process on device slot `slot`, unless that
/// takes its worker past its limit.
#[inline]
pub fn charge(slot: usize, bytes: u64) -> Verdict {
    if BROKEN.load(Relaxed) {
        return policy();
    }
    let Ok(delta) = i64::try_from(bytes) else {
        return Verdict::Refused;
    };
    match shm::check_memory_on(pid(), slot, delta) {
        Ok(o) if o.should_block => Verdict::Refused,
        Ok(_) => Verdict::Charged,
        // A single request larger than the limiter can count is refused.
        Err(Error::InvalidParam(_)) => Verdict::Refused,
        Err(e) => failed(&e),
    }
}

/// Give back `bytes` charged earlier on device slot `slot`.
#[inline]
pub fn give_back(slot: usize, bytes: u64) {
    if let Ok(delta) = i64::try_from(bytes) {
        // An error here means the books disagree (the state was replaced
        // underneath): nothing the caller can do, the free has happened.
        let _ = shm::check_memory_on(pid(), slot, -delta);
    }
}

/// The worker's usage and limit on a device (its slot and UUID text);
/// `None` when it has no limit there (or the hook is inert or the state
/// unusable). The own books' O(1) view when this process has them mapped,
/// else the limiter's full lookup.
#[inline]
pub fn view(slot: usize, uuid: &str) -> Option<(u64, u64)> {
    if !usable() {
        return None;
    }
    let (used, limit) = match shm::own_usage_on(slot) {
        Some(v) => v,
        None => shm::worker_usage(worker()?, uuid).ok()?,
    };
    Some((used, limit?))
}

/// This worker's processes of this pid namespace that have used device
/// slot `slot`, with the bytes charged to each (the hook's NVML process
/// lists); `None` when the state is unusable or not mapped yet.
pub fn processes_on(slot: usize) -> Option<Vec<(i32, u64)>> {
    if !usable() {
        return None;
    }
    shm::own_processes_on(slot)
}

// ---- compute (launch.rs, refresh.rs) ----------------------------------------------

/// What the limiter said about a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The worker has no compute limit on the device (or the state is unusable).
    Unlimited,
    /// Tokens taken: go after this many ns (0: at once).
    After(u64),
    /// A turn taken that does not pay for the launch yet: ask again after
    /// this many ns (`shm::Launch::Again`).
    Again(u64),
    /// The worker is frozen: nothing taken.
    Held,
}

/// Take this process's worker's launch charge for a launch on device slot
/// `slot`: its place in the worker's order of launches, and the cap on the
/// worker's queue there (0: none; `depth.rs`), read with its rate. Inlined
/// into the launch (the limiter's fast path is, too): the error is out of
/// line.
#[inline(always)]
pub fn launch(slot: usize) -> (Gate, u32) {
    if BROKEN.load(Relaxed) {
        return (Gate::Unlimited, 0);
    }
    match shm::launch_on(pid(), slot) {
        Ok(l) => (
            match l.launch {
                shm::Launch::Unlimited => Gate::Unlimited,
                shm::Launch::After(ns) => Gate::After(ns),
                shm::Launch::Again(ns) => Gate::Again(ns),
                shm::Launch::Held => Gate::Held,
            },
            l.depth_cap,
        ),
        Err(e) => (launch_failed(&e), 0),
    }
}

/// Launches never fail: an unusable state lets them through.
#[cold]
#[inline(never)]
fn launch_failed(e: &Error) -> Gate {
    failed(e);
    Gate::Unlimited
}

/// This process's worker's compute limit and launch charge on a device slot.
pub fn steer(slot: usize) -> Option<shm::Steer> {
    shm::steer_of(pid(), slot)
}

/// The queue depth cap of the worker on device slot `slot` (0: none), for
/// a launch that waited (`launch` carries it otherwise).
pub fn depth_cap(slot: usize) -> u32 {
    shm::depth_cap(slot)
}
