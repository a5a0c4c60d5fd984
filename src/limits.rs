//! Hard limits per worker and device: one-time (the same value again is
//! fine, a different one is OPERATION_FAILED) and kept in the node's state
//! directory so a restarted hypervisor finds them again.

use accel_common::store::Store;
use accel_common::{Error, Res};

const STORE: &str = "limits";
const MAGIC: &str = "accelerator-limits";

fn store() -> Store {
    Store::new(STORE, MAGIC)
}

fn set(kind: &'static str, worker: &str, uuid: &str, value: u64) -> Res<()> {
    store().update(|records| {
        let existing = records
            .iter()
            .find(|r| r.len() == 4 && r[0] == kind && r[1] == worker && r[2] == uuid);
        match existing {
            Some(r) if r[3] == value.to_string() => Ok(()),
            Some(r) => Err(Error::OperationFailed(format!(
                "{kind} limit of worker {worker:?} on {uuid:?} is already {} (hard limits are one-time)",
                r[3]
            ))),
            None => {
                records.push(vec![kind.into(), worker.into(), uuid.into(), value.to_string()]);
                Ok(())
            }
        }
    })
}

pub fn set_memory(worker: &str, uuid: &str, bytes: u64) -> Res<()> {
    set("memory", worker, uuid, bytes)
}

pub fn set_compute(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    set("compute", worker, uuid, u64::from(percent))
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
pub fn all() -> Res<Vec<Limit>> {
    let mut out: Vec<Limit> = Vec::new();
    for r in store().read()? {
        if r.len() != 4 {
            continue;
        }
        let value: u64 = r[3].parse().map_err(|_| {
            Error::OperationFailed(format!("limits store holds a bad value {:?}", r[3]))
        })?;
        let idx = match out
            .iter()
            .position(|l| l.worker == r[1] && l.device_uuid == r[2])
        {
            Some(i) => i,
            None => {
                out.push(Limit {
                    worker: r[1].clone(),
                    device_uuid: r[2].clone(),
                    memory_bytes: None,
                    compute_percent: None,
                });
                out.len() - 1
            }
        };
        match r[0].as_str() {
            "memory" => out[idx].memory_bytes = Some(value),
            "compute" => out[idx].compute_percent = u32::try_from(value).ok(),
            _ => {}
        }
    }
    Ok(out)
}
