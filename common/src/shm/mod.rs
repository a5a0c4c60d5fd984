//! The limiter's shared state and its lock-free algorithms.
//!
//! Each worker has books of its own,
//! `$ACCELERATOR_STATE_DIR/workers/<worker>/limiter.shm` (`workers`): its
//! process slots, device entries, usage words and token buckets. A limiter
//! client maps its own worker's books alone and coordinates with the
//! worker's other processes through atomics in them: there is no mutex a
//! process can die holding, and nothing one worker's processes write can
//! reach another worker's books (a worker's containers mount only its own
//! directory). `liblimiter.so` calls the check functions on every allocation
//! and kernel launch. Hard limits and freeze state live apart, in
//! `limits.shm`, which only the host side writes and clients map read-only
//! (`limits`). The host side keeps every worker's books mapped, guarded
//! against truncation and current by the kernel's notices, each checked on
//! its own (`kept`), so nothing a client does to its books can kill or hang
//! a host program or hide another worker, and a host call costs what
//! changed rather than what exists.
//!
//! Entry points for an in-process caller (the preload hook), all taking
//! the calling process's own pid (`getpid()`; its worker is its
//! `ACCELERATOR_WORKER_ID`, [`ENV_WORKER_ID`], in the state directory named by
//! `ACCELERATOR_STATE_DIR`):
//! - [`check_memory`]`(pid, uuid, delta)` / [`check_compute`]`(pid, uuid,
//!   tokens)`: check and record; `should_block` covers the limit, a frozen
//!   worker and an AutoFreeze of that resource;
//! - faster, for a caller that keeps the device's slot: [`device_slot_for`]`(pid,
//!   uuid)` once (again after `fork()`), then [`check_memory_on`] /
//!   [`check_compute_on`] with it;
//! - [`worker_usage`]`(worker, uuid)`: the worker's recorded bytes and limit
//!   on a device (a virtualized `cuMemGetInfo`);
//! - [`set_memory_limit_for_caller`] / [`set_compute_limit_for_caller`]: the
//!   v2 ABI's limits, which name no worker.
//!
//! The parts, by concern:
//! - `layout`: the books' layout (version [`VERSION`]) and the packing of its words;
//! - `workers`: one books file per worker: paths, creation, which one a process
//!   uses, the host's node view, removal of private workers' directories;
//! - `file`: creating, checking and mapping a file (`map` holds the `unsafe`);
//! - `kept`: the host's view of other workers' books (mapped, watched with
//!   `events`, the kernel's notices: `unsafe` too; its pidfds within the
//!   process's budget, `descriptors`), `guard`: the SIGBUS
//!   guard of every mapping a truncation could fault (`unsafe`), `budget`:
//!   how long a call on another worker's books may wait on them;
//! - `owner`: who owns a slot and whether it is alive (OFD locks), fork handling;
//! - `keys`: names (device UUIDs, worker ids);
//! - `devices`: the device table, bounded;
//! - `process`: process slots and registration;
//! - `memory`: the usage protocol and memory checks;
//! - `reclaim`: freeing what a dead process held;
//! - `compute`: the token bucket;
//! - `limits`: the host-owned limits file (limits, freezing), read-only to clients;
//! - `lifetime`: a worker's end: `LimiterRemoveWorker`, reclaiming workers
//!   that have had no live process for a while (limits entries and books);
//! - `freeze`: FreezeWorker, AutoFreeze;
//! - `steer`: the measured correction of the compute refill rate (in the limits
//!   file), its controller, the host sampler's lease;
//! - `reports`: hard limits and per-process usage for libaccelerator;
//! - `logged`: the lines a tenant can cause on the host's stderr, bounded.
//!
//! Bounds (memory): the 16-bit per-device sequence wraps after 65,536 ops; a helper
//! preempted across exactly that many ops of one process on one device
//! between two loads is the only case the sequence check cannot tell apart.

mod backoff;
mod budget;
mod clock;
mod compute;
mod descriptors;
mod devices;
mod events;
mod file;
mod freeze;
mod guard;
mod kept;
mod keys;
mod layout;
mod lifetime;
mod limits;
mod local;
mod logged;
mod map;
mod memory;
mod owner;
mod process;
mod reclaim;
mod reports;
mod steer;
mod workers;

pub use compute::{check_compute, check_compute_on, launch_on, ComputeOutcome, Launch, Launched};
pub use freeze::{auto_freeze, freeze_worker, resume_worker, FreezeState, Resource};
pub use layout::{Layout, SIZE};
pub use lifetime::{remove_worker, Removed};
pub use limits::{depth_cap, DEFAULT_PRIORITY};
pub use map::thread_id;
pub use memory::{check_memory, check_memory_on, own_usage_on, worker_usage, MemOutcome};
pub use process::add_process;
pub use reports::{
    limits, own_processes_on, processes, processes_named, processes_of, set_compute_limit,
    set_compute_limit_for_caller, set_compute_request, set_compute_request_for_caller,
    set_depth_cap, set_memory_limit, set_memory_limit_for_caller, set_worker_priority,
    set_worker_priority_for_caller, worker_shares, LimitEntry, LimitsList, ProcessUsage,
    WorkerShare,
};
pub use steer::{
    charge_of, drop_sampler_lease, enlist, grant_word, mark_measured, priority_of, set_charge,
    set_granted, set_shares, shared_charge, steer_of, take_sampler_lease, ChargeEstimate,
    ProcessKey, Steer, CHARGE_MAX, CHARGE_MIN, LAUNCH_ESTIMATE, SHARE_ONE,
};
pub use workers::{books_path, worker_dir};

use crate::{Error, Res};
use backoff::Backoff;
use file::open_shared;
use keys::*;
use layout::*;
use memory::{apply, unname};
use process::*;
use reclaim::*;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use workers::Books;

pub const MAGIC: u64 = u64::from_le_bytes(*b"ACCLIMIT");
/// 6: a process's launch share per device (5: one file per worker; 4: one
/// node-wide file).
pub const VERSION: u64 = 6;
pub const FILE_NAME: &str = "limiter.shm";
pub const ENV_WORKER_ID: &str = "ACCELERATOR_WORKER_ID";

pub const MAX_DEVICES: usize = 64;
/// Workers the host-owned limits file names.
pub const MAX_WORKERS: usize = 1024;
/// Process slots in one worker's books: room for `make bench`'s 1,024
/// registered processes and the ones it measures with (and a pod's data
/// loader forks), at 1,856 bytes a slot (sparse: pages nobody touched take
/// no memory, and reports read only the slots ever claimed).
pub const MAX_PROCS: usize = 2048;
/// Longest device UUID and worker id (the ABI's `char[64]` fields).
pub const MAX_KEY: usize = 63;
/// Offset and size of the scratch page (benchmark baselines live there).
pub const SCRATCH_OFFSET: usize = 4096;
pub const SCRATCH_SIZE: usize = 4096;

/// Largest usage a worker may have on one device, and largest single op.
pub const MAX_BYTES: u64 = (1 << 43) - 1;
/// Token-bucket window: the burst is this much time at the worker's rate.
pub const BURST_NS: u64 = 100_000_000;

/// This process's own worker's books, opened (and created if missing) on
/// first use. A failure is not remembered: the next call tries again.
#[inline]
pub fn shared() -> Res<&'static Layout> {
    match map::published() {
        Some(l) => Ok(l),
        None => open_shared(),
    }
}

/// The device slot of `uuid` for process `pid` (registering the process
/// and naming the device if new): the index stays this device's for as
/// long as that process lives, so the process may keep it and pass it to
/// [`check_memory_on`] / [`check_compute_on`]. A forked child is another
/// process: it asks again (`devices.rs` retires entries nobody uses).
///
/// For another process than the caller, the slot is one in that process's
/// worker's books, not the caller's: use it with that pid only (or call
/// [`check_memory`] / [`check_compute`], which name the device).
pub fn device_slot_for(pid: i32, uuid: &str) -> Res<usize> {
    workers::on_device_of(pid, uuid, |_, d| Ok(d))
}

/// Whether `pid` is the calling process's own (device slots of
/// [`device_slot_for`] are the caller's to keep only then).
#[inline]
pub fn is_own_pid(pid: i32) -> bool {
    workers::is_own(pid)
}

fn checked_device(d: usize) -> Res<usize> {
    if d < MAX_DEVICES {
        Ok(d)
    } else {
        Err(Error::Internal(format!("device slot {d} out of range")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        assert_eq!(delta_of(pack48(-5i64 as u64, 7)), -5);
        assert_eq!(seq16(pack48(-5i64 as u64, 7)), 7);
        let u = named_word(123, 4095, 0x1ff);
        assert!(named(u));
        assert_eq!((used_of(u), tag_slot(u), tag_seq8(u)), (123, 4095, 0xff));
        assert_eq!(word_pid(proc_word(4_194_304, PROC_LIVE)), 4_194_304);
        assert_eq!(SIZE % 4096, 0);
    }
}
