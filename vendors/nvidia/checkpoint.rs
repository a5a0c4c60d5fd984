//! Snapshot/resume through the CUDA driver's process checkpoint API:
//! snapshot = lock + checkpoint (device memory moves to the host), resume =
//! restore + unlock. All or nothing over the array: a failure undoes the
//! processes already done, in reverse order.

use super::error::{cuda_meaning, CUDA_ERROR_ILLEGAL_STATE};
use super::ffi::{Cuda, ProcessState, CUDA_SUCCESS};
use super::{Driver, NvError};
use accel_common::{Error, Res};

/// How long cuCheckpointProcessLock waits for running work (ms);
/// `ACCELERATOR_CUDA_LOCK_TIMEOUT_MS` overrides (0 = no timeout).
const LOCK_TIMEOUT_MS: u32 = 10_000;

fn lock_timeout() -> u32 {
    std::env::var("ACCELERATOR_CUDA_LOCK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LOCK_TIMEOUT_MS)
}

fn cuda(drv: &Driver) -> Res<&Cuda> {
    match &drv.cuda {
        Some(c) if c.has_checkpoint => Ok(c),
        Some(c) => Err(Error::NotSupported(format!(
            "CUDA driver {} has no checkpoint API (needs CUDA 12.8+ driver, r570+)",
            c.driver_version
        ))),
        None => Err(Error::NotSupported(
            "the CUDA driver (libcuda.so.1) is not loaded".into(),
        )),
    }
}

fn check(c: &Cuda, call: &'static str, pid: i32, r: i32) -> Res<()> {
    if r == CUDA_SUCCESS {
        return Ok(());
    }
    Err(NvError::Cuda {
        call,
        pid,
        code: r,
        name: c.error_name(r),
        what: cuda_meaning(r),
    }
    .into())
}

fn wrong_state(c: &Cuda, call: &'static str, pid: i32, state: ProcessState) -> Error {
    let mut e: Error = NvError::Cuda {
        call,
        pid,
        code: CUDA_ERROR_ILLEGAL_STATE,
        name: c.error_name(CUDA_ERROR_ILLEGAL_STATE),
        what: cuda_meaning(CUDA_ERROR_ILLEGAL_STATE),
    }
    .into();
    if let Error::OperationFailed(m) = &mut e {
        m.push_str(&format!("; it is {state:?}"));
    }
    e
}

fn state(c: &Cuda, pid: i32) -> Res<ProcessState> {
    c.state(pid)
        .map_err(|r| check(c, "cuCheckpointProcessGetState", pid, r).unwrap_err())
}

fn snapshot_one(c: &Cuda, pid: i32, timeout: u32) -> Res<()> {
    match state(c, pid)? {
        ProcessState::Running => {}
        s => return Err(wrong_state(c, "snapshot", pid, s)),
    }
    check(c, "cuCheckpointProcessLock", pid, c.lock(pid, timeout))?;
    if let Err(e) = check(c, "cuCheckpointProcessCheckpoint", pid, c.checkpoint(pid)) {
        let _ = c.unlock(pid);
        return Err(e);
    }
    Ok(())
}

fn resume_one(c: &Cuda, pid: i32) -> Res<()> {
    match state(c, pid)? {
        ProcessState::Checkpointed => {}
        s => return Err(wrong_state(c, "resume", pid, s)),
    }
    check(c, "cuCheckpointProcessRestore", pid, c.restore(pid))?;
    if let Err(e) = check(c, "cuCheckpointProcessUnlock", pid, c.unlock(pid)) {
        // Back to checkpointed, as it was.
        let _ = c.checkpoint(pid);
        return Err(e);
    }
    Ok(())
}

pub(crate) fn snapshot(drv: &Driver, pids: &[i32]) -> Res<()> {
    let c = cuda(drv)?;
    let timeout = lock_timeout();
    for (k, &pid) in pids.iter().enumerate() {
        if let Err(e) = snapshot_one(c, pid, timeout) {
            for &done in pids[..k].iter().rev() {
                if let Err(r) = resume_one(c, done) {
                    crate::log::log_at!(
                        Error,
                        "nvidia: rolling back snapshot of process {done}: {r}"
                    );
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

pub(crate) fn resume(drv: &Driver, pids: &[i32]) -> Res<()> {
    let c = cuda(drv)?;
    let timeout = lock_timeout();
    for (k, &pid) in pids.iter().enumerate() {
        if let Err(e) = resume_one(c, pid) {
            for &done in pids[..k].iter().rev() {
                if let Err(r) = snapshot_one(c, done, timeout) {
                    crate::log::log_at!(
                        Error,
                        "nvidia: rolling back resume of process {done}: {r}"
                    );
                }
            }
            return Err(e);
        }
    }
    Ok(())
}
