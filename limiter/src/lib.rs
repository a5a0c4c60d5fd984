//! liblimiter.so: the limiter ABI of ../shared/ABI.md ("Limiter ABI").
//!
//! CUDA (or other vendor) hooks in every worker process call
//! `CheckAndRecordMemoryOps` on each allocation and free and
//! `CheckAndRecordComputeOps` on each kernel launch; the decision comes from
//! state every process on the node shares (`accel_common::shm`, which
//! documents the layout, the lock-free protocols, reclamation of killed
//! processes and the token-bucket formula). This crate is only the C
//! boundary: argument checks and conversions, in `boundary`.
//!
//! Conventions:
//! - `processId` is the process id as decimal text ("1234"); a hook passes
//!   its own `getpid()`. The process's worker is `ACCELERATOR_WORKER_ID` of
//!   its environment, read once when it is first seen.
//! - A blocked operation is `RESULT_SUCCESS` with `shouldBlock = true`;
//!   nothing is recorded for it.
//! - `availableBytes`/`availableTokens` are `UINT64_MAX` for a worker
//!   without a limit on that device.
//! - Compute tokens: 1 token = 1 ns of the whole device's compute.

#![allow(clippy::missing_safety_doc, non_snake_case)]

mod boundary;

use accel_common::shm;
use accel_common::{Res, ResultCode};
use boundary::{call, cstr, device_arg, out, write_device, write_fixed};
use libc::c_char;

/// Longest device UUID / worker id (the `char[64]` fields).
const MAX_ID: usize = 63;
/// Longest process id text (pid as decimal).
const MAX_PROCESS_ID: usize = 31;

/// One memory operation and its verdict.
#[repr(C)]
pub struct MemoryOpRecord {
    pub deviceUUID: [c_char; 64],
    /// Positive = allocation, negative = free.
    pub bytesDiff: i64,
    /// Out: the operation must not proceed (it was not recorded).
    pub shouldBlock: bool,
    /// Out: the worker's limit minus its usage on the device, after the
    /// operation (UINT64_MAX without a limit).
    pub availableBytes: u64,
}

/// One compute operation (kernel launch) and its verdict.
#[repr(C)]
pub struct ComputeOpRecord {
    pub deviceUUID: [c_char; 64],
    /// 1 token = 1 ns of the whole device's compute.
    pub computeTokens: u64,
    /// Out: the launch must wait (no tokens were taken).
    pub shouldBlock: bool,
    /// Out: tokens left in the worker's bucket (UINT64_MAX without a limit).
    pub availableTokens: u64,
}

/// A worker's freeze state.
#[repr(C)]
pub struct WorkerFreezeState {
    pub workerId: [c_char; 64],
    pub isFrozen: bool,
    /// Total time frozen by FreezeWorker, the current span included.
    pub freezeTimeMs: u64,
}

#[inline(always)]
unsafe fn process_id(p: *const c_char) -> Res<i32> {
    boundary::pid_arg(p, MAX_PROCESS_ID)
}

/// Check one allocation (`bytesDiff` > 0) or free (< 0) of process
/// `processId` on `deviceUUID` against its worker's memory limit and record
/// it unless it must block. A free larger than what the process holds on
/// the device is INVALID_PARAM and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn CheckAndRecordMemoryOps(
    processId: *const c_char,
    deviceUUID: *const c_char,
    bytesDiff: i64,
    record: *mut MemoryOpRecord,
) -> ResultCode {
    call("CheckAndRecordMemoryOps", || {
        let pid = process_id(processId)?;
        let uuid = device_arg(deviceUUID, MAX_ID)?;
        let record = out(record, "record")?;
        let o = if shm::is_own_pid(pid) {
            let d = uuid.resolve(|u| shm::device_slot_for(pid, u))?;
            shm::check_memory_on(pid, d, bytesDiff)?
        } else {
            // Another process's slots are in its worker's books: by name.
            shm::check_memory(pid, &uuid.text(), bytesDiff)?
        };
        write_device(&mut record.deviceUUID, &uuid);
        record.bytesDiff = bytesDiff;
        record.shouldBlock = o.should_block;
        record.availableBytes = o.available_bytes;
        Ok(())
    })
}

/// Check one kernel launch costing `computeTokens` against the worker's
/// token bucket on the device, taking the tokens unless it must block.
#[no_mangle]
pub unsafe extern "C" fn CheckAndRecordComputeOps(
    processId: *const c_char,
    deviceUUID: *const c_char,
    computeTokens: u64,
    record: *mut ComputeOpRecord,
) -> ResultCode {
    call("CheckAndRecordComputeOps", || {
        let pid = process_id(processId)?;
        let uuid = device_arg(deviceUUID, MAX_ID)?;
        let record = out(record, "record")?;
        let o = if shm::is_own_pid(pid) {
            let d = uuid.resolve(|u| shm::device_slot_for(pid, u))?;
            shm::check_compute_on(pid, d, computeTokens)?
        } else {
            shm::check_compute(pid, &uuid.text(), computeTokens)?
        };
        write_device(&mut record.deviceUUID, &uuid);
        record.computeTokens = computeTokens;
        record.shouldBlock = o.should_block;
        record.availableTokens = o.available_tokens;
        Ok(())
    })
}

fn fill_state(state: &mut WorkerFreezeState, worker: &str, s: shm::FreezeState) {
    write_fixed(&mut state.workerId, worker);
    state.isFrozen = s.frozen;
    state.freezeTimeMs = s.freeze_time_ms;
}

/// Freeze a worker: every check of its processes blocks until ResumeWorker.
/// NOT_FOUND for a worker the limiter has never seen (no limit set and no
/// process registered).
#[no_mangle]
pub unsafe extern "C" fn FreezeWorker(
    workerId: *const c_char,
    state: *mut WorkerFreezeState,
) -> ResultCode {
    call("FreezeWorker", || {
        let worker = cstr(workerId, MAX_ID, "workerId")?;
        let state = out(state, "state")?;
        let s = shm::freeze_worker(worker)?;
        fill_state(state, worker, s);
        Ok(())
    })
}

/// Resume a frozen worker; its freeze time keeps the frozen span.
#[no_mangle]
pub unsafe extern "C" fn ResumeWorker(
    workerId: *const c_char,
    state: *mut WorkerFreezeState,
) -> ResultCode {
    call("ResumeWorker", || {
        let worker = cstr(workerId, MAX_ID, "workerId")?;
        let state = out(state, "state")?;
        let s = shm::resume_worker(worker)?;
        fill_state(state, worker, s);
        Ok(())
    })
}

unsafe fn auto(
    name: &str,
    workerId: *const c_char,
    deviceUUID: *const c_char,
    resourceType: *const c_char,
    frozen: bool,
) -> ResultCode {
    call(name, || {
        let worker = cstr(workerId, MAX_ID, "workerId")?;
        let uuid = cstr(deviceUUID, MAX_ID, "deviceUUID")?;
        let resource = cstr(resourceType, MAX_ID, "resourceType")?.parse()?;
        shm::auto_freeze(worker, uuid, resource, frozen)
    })
}

/// Block one resource ("memory" or "compute") of a worker on one device.
#[no_mangle]
pub unsafe extern "C" fn AutoFreeze(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    resourceType: *const c_char,
) -> ResultCode {
    auto("AutoFreeze", workerId, deviceUUID, resourceType, true)
}

/// Undo AutoFreeze for one resource of a worker on one device.
#[no_mangle]
pub unsafe extern "C" fn AutoResume(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    resourceType: *const c_char,
) -> ResultCode {
    auto("AutoResume", workerId, deviceUUID, resourceType, false)
}

/// Register process `processId` (and the worker of its environment) as a
/// user of `deviceUUID`. NOT_FOUND when no such process exists.
#[no_mangle]
pub unsafe extern "C" fn AddWorkerProcess(
    deviceUUID: *const c_char,
    processId: *const c_char,
) -> ResultCode {
    call("AddWorkerProcess", || {
        let uuid = cstr(deviceUUID, MAX_ID, "deviceUUID")?;
        let pid = process_id(processId)?;
        shm::add_process(uuid, pid)
    })
}

/// Extension: the reason for this thread's last failed limiter call ("" after
/// a success); valid until the thread's next limiter call.
#[no_mangle]
pub extern "C" fn limiterGetLastError() -> *const c_char {
    boundary::last_error_ptr()
}

/// Extension: a worker's recorded memory usage on a device and its limit
/// (0 = none). A worker the host set limits for whose processes have not
/// used the device (none yet, or none since `LimiterRemoveWorker` and a new
/// limit) uses 0. NOT_FOUND for a worker or device neither the limiter's
/// books nor the host's limits name.
#[no_mangle]
pub unsafe extern "C" fn limiterGetWorkerUsage(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    usedBytes: *mut u64,
    limitBytes: *mut u64,
) -> ResultCode {
    call("limiterGetWorkerUsage", || {
        let worker = cstr(workerId, MAX_ID, "workerId")?;
        let uuid = cstr(deviceUUID, MAX_ID, "deviceUUID")?;
        let used = out(usedBytes, "usedBytes")?;
        let limit = out(limitBytes, "limitBytes")?;
        let (u, l) = shm::worker_usage(worker, uuid)?;
        *used = u;
        *limit = l.unwrap_or(0);
        Ok(())
    })
}

/// Remove a worker whose pod ended (the upstream v2 `limiter.h`'s
/// hypervisor-side call, with its signature): its books, its directory and
/// its entry in the limits file are given back, now when no live process
/// uses its books, else as soon as none does (success either way). The
/// worker is `podName` (the id its limits were set under and its
/// processes' `ACCELERATOR_WORKER_ID`) when `namespace_` is NULL or empty,
/// else `namespace_/podName`. NOT_FOUND for a worker with neither books
/// nor limits. Workers nobody removes are reclaimed after
/// `ACCELERATOR_WORKER_RECLAIM_S` seconds (600) without a live process, or
/// sooner, longest unused first, when a new worker finds the limits
/// table's 1,024 entries full.
#[no_mangle]
pub unsafe extern "C" fn LimiterRemoveWorker(
    namespace_: *const c_char,
    podName: *const c_char,
) -> ResultCode {
    call("LimiterRemoveWorker", || {
        let pod = cstr(podName, MAX_ID, "podName")?;
        let worker = if namespace_.is_null() || *namespace_ == 0 {
            pod.to_string()
        } else {
            format!("{}/{pod}", cstr(namespace_, MAX_ID, "namespace_")?)
        };
        shm::remove_worker(&worker).map(drop)
    })
}
