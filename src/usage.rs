//! Per-process usage recorded by liblimiter.so, merged into what a vendor's
//! driver reports. The limiter sees every allocation its hooks intercept;
//! the driver sees real device memory but not the worker structure. A
//! process both know keeps the driver's figures (they include what no hook
//! saw); a process only the limiter knows is added with the bytes it
//! recorded. The limiter counts compute in tokens, not in utilization, so
//! such a process is listed with 0 % (unmeasured) rather than a made-up
//! figure.

use crate::vendor::{DeviceInfo, ProcessCompute, ProcessMemory, ProcessQuery};
use accel_common::{shm, Res};

/// The limiter's records on the covered devices of this vendor.
fn recorded<'a>(
    devices: &'a [DeviceInfo],
    query: &ProcessQuery,
) -> Res<Vec<(shm::ProcessUsage, &'a DeviceInfo)>> {
    Ok(shm::processes()?
        .into_iter()
        .filter(|u| query.covers_device(&u.device_uuid))
        .filter_map(|u| {
            let dev = devices.iter().find(|d| d.uuid == u.device_uuid)?;
            Some((u, dev))
        })
        .collect())
}

pub fn merge_memory(
    mut driver: Vec<ProcessMemory>,
    devices: &[DeviceInfo],
    query: &ProcessQuery,
) -> Res<Vec<ProcessMemory>> {
    for (u, dev) in recorded(devices, query)? {
        let id = u.pid.to_string();
        if driver
            .iter()
            .any(|m| m.process_id == id && m.device_uuid == dev.uuid)
        {
            continue;
        }
        let total = dev.total_memory_bytes;
        driver.push(ProcessMemory {
            process_id: id,
            device_uuid: dev.uuid.clone(),
            used_bytes: u.memory_bytes,
            reserved_bytes: u.memory_bytes,
            utilization_percent: if total > 0 {
                u.memory_bytes as f64 * 100.0 / total as f64
            } else {
                0.0
            },
        });
    }
    Ok(driver)
}

pub fn merge_compute(
    mut driver: Vec<ProcessCompute>,
    devices: &[DeviceInfo],
    query: &ProcessQuery,
) -> Res<Vec<ProcessCompute>> {
    for (u, dev) in recorded(devices, query)? {
        let id = u.pid.to_string();
        if driver
            .iter()
            .any(|c| c.process_id == id && c.device_uuid == dev.uuid)
        {
            continue;
        }
        driver.push(ProcessCompute {
            process_id: id,
            device_uuid: dev.uuid.clone(),
            utilization_percent: 0.0,
            active_sms: 0,
            total_sms: dev.total_compute_units,
            tflops_used: 0.0,
        });
    }
    Ok(driver)
}
