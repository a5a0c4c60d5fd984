//! The limiter's node-wide shared state and its lock-free algorithms.
//!
//! Every limiter client on the node maps the books,
//! `$ACCELERATOR_STATE_DIR/limiter.shm`, and coordinates through atomics in
//! it alone: there is no mutex a process can die holding. `liblimiter.so`
//! calls the check functions on every allocation and kernel launch. Hard
//! limits and freeze state live apart, in `limits.shm`, which only the host
//! side writes and clients map read-only (`limits`); the host side never
//! maps the books: it reads usage back for its per-process utilization
//! functions from a `pread` copy (`snapshot`), so nothing a client does to
//! the books can kill a host program.
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
//! - `layout`: the file's layout (version [`VERSION`]) and the packing of its words;
//! - `file`: creating, checking and mapping the file (`map` holds the `unsafe`);
//! - `owner`: who owns a slot and whether it is alive (OFD locks), fork handling;
//! - `keys`: names, and the worker table;
//! - `devices`: the device table, bounded;
//! - `process`: process slots and registration;
//! - `memory`: the usage protocol and memory checks;
//! - `reclaim`: freeing what a dead process held;
//! - `compute`: the token bucket;
//! - `limits`: the host-owned limits file (limits, freezing), read-only to clients;
//! - `freeze`: FreezeWorker, AutoFreeze;
//! - `steer`: the measured correction of the compute refill rate (in the limits
//!   file), its controller, the host sampler's lease;
//! - `reports`: hard limits and per-process usage for libaccelerator;
//! - `snapshot`: the host's reads, from a `pread` copy (never a mapping).
//!
//! Bounds (memory): the 16-bit per-device sequence wraps after 65,536 ops; a helper
//! preempted across exactly that many ops of one process on one device
//! between two loads is the only case the sequence check cannot tell apart.

mod backoff;
mod clock;
mod compute;
mod devices;
mod file;
mod freeze;
mod keys;
mod layout;
mod limits;
mod local;
mod map;
mod memory;
mod owner;
mod process;
mod reclaim;
mod reports;
mod snapshot;
mod steer;

pub use compute::{check_compute, check_compute_on, ComputeOutcome};
pub use devices::CLIENT_ENTRIES;
pub use freeze::{auto_freeze, freeze_worker, resume_worker, FreezeState, Resource};
pub use layout::{Layout, SIZE};
pub use memory::{check_memory, check_memory_on, worker_usage, MemOutcome};
pub use process::add_process;
pub use reports::{
    limits, processes, set_compute_limit, set_compute_limit_for_caller, set_memory_limit,
    set_memory_limit_for_caller, LimitEntry, ProcessUsage,
};
pub use steer::{
    drop_sampler_lease, gain_of, next_gain, set_gain, steady_utilization, steer_of,
    take_sampler_lease, Steer, GAIN_MAX, GAIN_MIN, GAIN_ONE,
};

use crate::{Error, Res};
use backoff::Backoff;
use file::open_shared;
use keys::*;
use layout::*;
use memory::{apply, unname};
use process::*;
use reclaim::*;
use std::sync::atomic::{AtomicU64, Ordering::*};

pub const MAGIC: u64 = u64::from_le_bytes(*b"ACCLIMIT");
pub const VERSION: u64 = 4;
pub const FILE_NAME: &str = "limiter.shm";
pub const ENV_WORKER_ID: &str = "ACCELERATOR_WORKER_ID";

pub const MAX_DEVICES: usize = 64;
pub const MAX_WORKERS: usize = 1024;
pub const MAX_PROCS: usize = 4096;
/// Longest device UUID and worker id (the ABI's `char[64]` fields).
pub const MAX_KEY: usize = 63;
/// Offset and size of the scratch page (benchmark baselines live there).
pub const SCRATCH_OFFSET: usize = 4096;
pub const SCRATCH_SIZE: usize = 4096;

/// Largest usage a worker may have on one device, and largest single op.
pub const MAX_BYTES: u64 = (1 << 43) - 1;
/// Token-bucket window: the burst is this much time at the worker's rate.
pub const BURST_NS: u64 = 100_000_000;

/// The mapping, opened (and created if missing) on first use. A failure is
/// not remembered: the next call tries again.
#[inline]
pub fn shared() -> Res<&'static Layout> {
    match map::published() {
        Some(l) => Ok(l),
        None => open_shared(),
    }
}

/// [`shared`] for the cold entry points: the file checked for truncation
/// first (`owner::check_size`).
fn checked() -> Res<&'static Layout> {
    let l = shared()?;
    owner::check_size()?;
    Ok(l)
}

/// The device slot of `uuid` for process `pid` (registering the process
/// and naming the device if new): the index stays this device's for as
/// long as that process lives, so the process may keep it and pass it to
/// [`check_memory_on`] / [`check_compute_on`]. A forked child is another
/// process: it asks again (`devices.rs` retires entries nobody uses).
pub fn device_slot_for(pid: i32, uuid: &str) -> Res<usize> {
    devices::slot_for(checked()?, pid, uuid)
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
