//! Hard limits per worker and device: one-time (the same value again is
//! fine, a different one is OPERATION_FAILED), written into the limiter's
//! shared state (`accel_common::shm`), where liblimiter.so enforces them on
//! every allocation and kernel launch of the worker's processes and where a
//! restarted hypervisor finds them again.

use accel_common::{shm, Res};

pub fn set_memory(worker: &str, uuid: &str, bytes: u64) -> Res<()> {
    shm::set_memory_limit(worker, uuid, bytes)
}

pub fn set_compute(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    shm::set_compute_limit(worker, uuid, percent)
}

/// One worker's limit on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub worker: String,
    pub device_uuid: String,
    pub memory_bytes: Option<u64>,
    pub compute_percent: Option<u32>,
}

/// Every limit set on the node.
#[allow(dead_code)] // not every vendor build reads them
pub fn all() -> Res<Vec<Limit>> {
    Ok(shm::limits()?
        .into_iter()
        .map(|l| Limit {
            worker: l.worker,
            device_uuid: l.device_uuid,
            memory_bytes: l.memory_bytes,
            compute_percent: l.compute_percent,
        })
        .collect())
}
