//! The safe middle layer both calling styles share: argument rules that do
//! not depend on the vendor (index and UUID lookup, limits), then the call.

use crate::select::vendor;
use crate::vendor::{DeviceInfo, Vendor};
use accel_common::{shm, Error, Res};

/// Most entries an input array may have (device lists, process lists).
pub(crate) const MAX_DEVICES: usize = 1024;
pub(crate) const MAX_PROCESSES: usize = 65536;
/// Longest identifiers, as bounded by the ABI's char fields.
pub(crate) const MAX_UUID: usize = 63;
pub(crate) const MAX_PROCESS_ID: usize = 31;
pub(crate) const MAX_TEMPLATE_ID: usize = 63;
pub(crate) const MAX_WORKER_ID: usize = 63;

pub fn active() -> Res<&'static dyn Vendor> {
    vendor()
}

/// The vendor's devices, with what it left unknown filled from PCI.
pub fn devices() -> Res<Vec<DeviceInfo>> {
    let mut all = vendor()?.devices()?;
    crate::pci::report::enrich(&mut all, crate::pci::devices());
    Ok(all)
}

/// A device index from C: negative is INVALID_PARAM, past the end NOT_FOUND.
pub fn device_at(index: i32) -> Res<(usize, DeviceInfo)> {
    let i = usize::try_from(index)
        .map_err(|_| Error::InvalidParam(format!("device index {index} is negative")))?;
    let mut all = devices()?;
    if i >= all.len() {
        return Err(not_found(
            format!("device index {index} (there are {} devices)", all.len()),
            &all,
        ));
    }
    Ok((i, all.swap_remove(i)))
}

pub fn device_by_uuid(uuid: &str) -> Res<DeviceInfo> {
    let all = devices()?;
    match all.iter().position(|d| d.uuid == uuid) {
        Some(i) => Ok(all[i].clone()),
        None => Err(not_found(format!("device {uuid:?}"), &all)),
    }
}

/// NOT_FOUND; with no devices at all, the vendor's status says why (what
/// PCI shows, what is missing).
fn not_found(what: String, all: &[DeviceInfo]) -> Error {
    match crate::select::status() {
        Ok(status) if all.is_empty() => Error::NotFound(format!("{what}: {status}")),
        _ => Error::NotFound(what),
    }
}

pub fn indices(raw: &[i32]) -> Res<Vec<usize>> {
    raw.iter().map(|&i| device_at(i).map(|(i, _)| i)).collect()
}

pub fn set_mem_limit(worker: &str, uuid: &str, bytes: u64) -> Res<()> {
    check_mem_limit(uuid, bytes)?;
    // One-time semantics and persistence live in the limiter's shared
    // state, where liblimiter.so enforces the limit.
    shm::set_memory_limit(worker, uuid, bytes)
}

/// A memory limit must name a device and fit in its memory.
fn check_mem_limit(uuid: &str, bytes: u64) -> Res<()> {
    let dev = device_by_uuid(uuid)?;
    if bytes == 0 || bytes > dev.total_memory_bytes {
        return Err(Error::InvalidParam(format!(
            "memory limit {bytes} bytes is outside 1..={} for device {uuid:?}",
            dev.total_memory_bytes
        )));
    }
    Ok(())
}

pub fn set_compute_limit(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    check_compute_limit(uuid, percent)?;
    shm::set_compute_limit(worker, uuid, percent)?;
    // A v1 consumer never calls AccelInit: its first limit starts the
    // sampler that makes the limit hold (this process wrote the host's
    // limits file, so it is a host process).
    crate::sampler::start_for_limit();
    Ok(())
}

/// The share of a device a worker is guaranteed (0..=100, 0 =
/// best-effort): on a device the vendor has, never above the worker's hard
/// limit there; it may be set again.
pub fn set_compute_request(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    known_device(uuid)?;
    shm::set_compute_request(worker, uuid, percent)?;
    // The host's sampler schedules by it (as a hard limit, above).
    crate::sampler::start_for_limit();
    Ok(())
}

/// Every worker's soft-mode words and device time (`GetWorkerShares`).
pub fn worker_shares() -> Res<Vec<shm::WorkerShare>> {
    shm::worker_shares()
}

/// A request must name a device of the vendor: an unknown one is a bad
/// argument (INVALID_PARAM, issue 34), not a missing object.
fn known_device(uuid: &str) -> Res<()> {
    device_by_uuid(uuid).map_err(unknown_is_invalid)?;
    Ok(())
}

/// An unknown device named to a soft-mode call is INVALID_PARAM.
pub fn unknown_is_invalid(e: Error) -> Error {
    match e {
        Error::NotFound(why) => Error::InvalidParam(why),
        e => e,
    }
}

/// A worker's priority, 1..=100 (higher first; 50 when never set).
pub fn set_worker_priority(worker: &str, priority: u32) -> Res<()> {
    shm::set_worker_priority(worker, priority)?;
    crate::sampler::start_for_limit();
    Ok(())
}

/// A compute limit must name a device and be a percentage of 1..=100.
fn check_compute_limit(uuid: &str, percent: u32) -> Res<()> {
    device_by_uuid(uuid)?;
    if !(1..=100).contains(&percent) {
        return Err(Error::InvalidParam(format!(
            "compute limit {percent}% is outside 1..=100"
        )));
    }
    Ok(())
}

/// The processes of a snapshot/resume call: every pid must be positive and
/// exist; `uuid` empty means whichever devices the processes use.
pub fn check_processes(pids: &[i32], uuid: &str) -> Res<()> {
    if !uuid.is_empty() {
        device_by_uuid(uuid)?;
    }
    for &pid in pids {
        if pid <= 0 {
            return Err(Error::InvalidParam(format!(
                "process id {pid} is not positive"
            )));
        }
        if !accel_common::statedir::pid_alive(pid) {
            return Err(Error::NotFound(format!("process {pid} does not exist")));
        }
    }
    Ok(())
}

/// Check that every device UUID of a metrics or utilization call exists.
pub fn check_uuids(uuids: &[String]) -> Res<()> {
    let all = devices()?;
    for u in uuids {
        if !all.iter().any(|d| &d.uuid == u) {
            return Err(Error::NotFound(format!("device {u:?}")));
        }
    }
    Ok(())
}

/// v2 `AccelSetMemHardLimit`: the limit of the calling process's worker
/// (`ACCELERATOR_WORKER_ID`, or else a worker of its own that binds this
/// process alone; the limiter's shared state decides which).
pub fn set_mem_limit_for_caller(uuid: &str, bytes: u64) -> Res<()> {
    check_mem_limit(uuid, bytes)?;
    shm::set_memory_limit_for_caller(uuid, bytes)
}

/// v2 `AccelSetComputeUnitRequest`: as [`set_mem_limit_for_caller`].
pub fn set_compute_request_for_caller(uuid: &str, percent: u32) -> Res<()> {
    known_device(uuid)?;
    shm::set_compute_request_for_caller(uuid, percent)?;
    crate::sampler::start_for_limit();
    Ok(())
}

/// v2 `AccelSetWorkerPriority`: as [`set_mem_limit_for_caller`].
pub fn set_worker_priority_for_caller(priority: u32) -> Res<()> {
    shm::set_worker_priority_for_caller(priority)?;
    crate::sampler::start_for_limit();
    Ok(())
}

/// v2 `AccelSetComputeUnitHardLimit`: as [`set_mem_limit_for_caller`].
pub fn set_compute_limit_for_caller(uuid: &str, percent: u32) -> Res<()> {
    check_compute_limit(uuid, percent)?;
    shm::set_compute_limit_for_caller(uuid, percent)?;
    crate::sampler::start_for_limit();
    Ok(())
}
