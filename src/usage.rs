//! Per-process usage recorded by liblimiter.so, merged into what a vendor's
//! driver reports. The limiter sees every allocation its hooks intercept;
//! the driver sees real device memory but not the worker structure. A
//! process both know keeps the driver's figures (they include what no hook
//! saw); a process only the limiter knows is added with the bytes it
//! recorded. The limiter counts compute in tokens, not in utilization, so
//! such a process is listed with 0 % (unmeasured) rather than a made-up
//! figure.

#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
use crate::vendor::{DeviceInfo, ProcessCompute, ProcessMemory, ProcessQuery};
use accel_common::{shm, Res};
#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    /// Inside [`one_scan`]: the limiter's records, read at the first need.
    static SCAN: std::cell::RefCell<Option<Option<Rc<Vec<shm::ProcessUsage>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` (a call that asks the vendor for both process lists) reading the
/// limiter's records once for both merges.
pub fn one_scan<T>(f: impl FnOnce() -> T) -> T {
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            let _ = SCAN.try_with(|s| s.borrow_mut().take());
        }
    }
    let _ = SCAN.try_with(|s| *s.borrow_mut() = Some(None));
    let _end = End;
    f()
}

/// Every record of the limiter (once per [`one_scan`]).
pub fn records() -> Res<Rc<Vec<shm::ProcessUsage>>> {
    let scope = SCAN.try_with(|s| s.borrow().clone()).ok().flatten();
    match scope {
        Some(Some(r)) => Ok(r),
        Some(None) => {
            let r = Rc::new(shm::processes()?);
            let _ = SCAN.try_with(|s| *s.borrow_mut() = Some(Some(r.clone())));
            Ok(r)
        }
        None => Ok(Rc::new(shm::processes()?)),
    }
}

#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
/// The limiter's records on the covered devices of this vendor that the
/// driver's list (`known`: pid, device) lacks, each with its device.
fn unknown<'a>(
    devices: &'a [DeviceInfo],
    query: &ProcessQuery,
    known: impl Iterator<Item = (&'a str, &'a str)>,
    mut add: impl FnMut(&shm::ProcessUsage, String, &'a DeviceInfo),
) -> Res<()> {
    let records = records()?;
    let mut by_pid: HashMap<&str, Vec<&str>> = HashMap::new();
    for (pid, uuid) in known {
        by_pid.entry(pid).or_default().push(uuid);
    }
    for u in records
        .iter()
        .filter(|u| query.covers_device(&u.device_uuid))
    {
        let Some(dev) = devices.iter().find(|d| d.uuid == u.device_uuid) else {
            continue;
        };
        let id = u.pid.to_string();
        if by_pid
            .get(id.as_str())
            .is_some_and(|uuids| uuids.contains(&dev.uuid.as_str()))
        {
            continue;
        }
        add(u, id, dev);
    }
    Ok(())
}

#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
pub fn merge_memory(
    driver: Vec<ProcessMemory>,
    devices: &[DeviceInfo],
    query: &ProcessQuery,
) -> Res<Vec<ProcessMemory>> {
    let mut more = Vec::new();
    unknown(
        devices,
        query,
        driver
            .iter()
            .map(|m| (m.process_id.as_str(), m.device_uuid.as_str())),
        |u, id, dev| {
            let total = dev.total_memory_bytes;
            more.push(ProcessMemory {
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
        },
    )?;
    Ok(driver.into_iter().chain(more).collect())
}

#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
pub fn merge_compute(
    driver: Vec<ProcessCompute>,
    devices: &[DeviceInfo],
    query: &ProcessQuery,
) -> Res<Vec<ProcessCompute>> {
    let mut more = Vec::new();
    unknown(
        devices,
        query,
        driver
            .iter()
            .map(|c| (c.process_id.as_str(), c.device_uuid.as_str())),
        |_, id, dev| {
            more.push(ProcessCompute {
                process_id: id,
                device_uuid: dev.uuid.clone(),
                utilization_percent: 0.0,
                active_sms: 0,
                total_sms: dev.total_compute_units,
                tflops_used: 0.0,
            });
        },
    )?;
    Ok(driver.into_iter().chain(more).collect())
}
