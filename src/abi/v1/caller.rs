//! Exports in the caller-allocated style (the Go hypervisor links these):
//! the caller owns every buffer and the library allocates nothing it frees.

use super::convert;
use super::types::*;
use crate::abi::boundary::*;
use crate::api::{self, MAX_DEVICES, MAX_PROCESSES, MAX_TEMPLATE_ID, MAX_UUID, MAX_WORKER_ID};
use crate::vendor::{ProcessQuery, Vendor};
use accel_common::Error;
use libc::{c_char, pid_t};

/// # Safety
/// `deviceCount` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn GetDeviceCount(deviceCount: *mut usize) -> ResultCode {
    call("GetDeviceCount", || {
        let out = out(deviceCount, "deviceCount")?;
        *out = api::devices()?.len();
        Ok(())
    })
}

/// Fills up to `maxCount` devices; `relatedDevices` is NULL/0 in this style.
///
/// # Safety
/// `devices` is NULL or writable for `maxCount` entries; `deviceCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn GetAllDevices(
    devices: *mut ExtendedDeviceInfo,
    maxCount: usize,
    deviceCount: *mut usize,
) -> ResultCode {
    call("GetAllDevices", || {
        let count = out(deviceCount, "deviceCount")?;
        let all = api::devices()?;
        let dst = out_slice(devices, maxCount, all.len(), false, "devices")?;
        for (slot, d) in dst.iter_mut().zip(&all) {
            *slot = convert::device(d);
        }
        *count = dst.len();
        Ok(())
    })
}

/// # Safety
/// `templates` is NULL or writable for `maxCount` entries; `templateCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn GetPartitionTemplates(
    deviceIndex: i32,
    templates: *mut PartitionTemplate,
    maxCount: usize,
    templateCount: *mut usize,
) -> ResultCode {
    call("GetPartitionTemplates", || {
        let count = out(templateCount, "templateCount")?;
        let (index, _) = api::device_at(deviceIndex)?;
        let all = api::active()?.partition_templates(index)?;
        let dst = out_slice(templates, maxCount, all.len(), false, "templates")?;
        for (slot, t) in dst.iter_mut().zip(&all) {
            *slot = convert::template(t);
        }
        *count = dst.len();
        Ok(())
    })
}

/// The caller pre-allocates `topology->devices` (≥ deviceCount entries) and
/// each `devices[i].connections` (≥ maxConnectionsPerDevice; may be NULL
/// when that is 0). Connections beyond the capacity are dropped.
///
/// # Safety
/// Pointers are NULL or valid for the sizes above.
#[no_mangle]
pub unsafe extern "C" fn GetDeviceTopology(
    deviceIndexArray: *mut i32,
    deviceCount: usize,
    topology: *mut ExtendedDeviceTopology,
    maxConnectionsPerDevice: usize,
) -> ResultCode {
    call("GetDeviceTopology", || {
        let raw = input(
            deviceIndexArray,
            deviceCount,
            MAX_DEVICES,
            "deviceIndexArray",
        )?;
        let topo = out(topology, "topology")?;
        let indices = api::indices(raw)?;
        let t = api::active()?.topology(&indices)?;
        let entries = out_slice(
            topo.devices,
            deviceCount,
            t.devices.len(),
            false,
            "topology->devices",
        )?;
        // Check every connection buffer before writing anything.
        for (i, e) in entries.iter().enumerate() {
            out_slice(
                e.connections,
                maxConnectionsPerDevice,
                0,
                true,
                &format!("topology->devices[{i}].connections"),
            )?;
        }
        for (e, d) in entries.iter_mut().zip(&t.devices) {
            let conns = out_slice(
                e.connections,
                maxConnectionsPerDevice,
                d.connections.len(),
                true,
                "connections",
            )?;
            for (slot, l) in conns.iter_mut().zip(&d.connections) {
                *slot = convert::link(l);
            }
            e.deviceUUID = fixed_from(&d.uuid);
            e.numaNode = d.numa_node;
            e.connectionCount = conns.len();
        }
        topo.deviceCount = entries.len();
        topo.nvlinkBandwidthMBps = t.nvlink_bandwidth_mbps;
        topo.ibNicCount = t.ib_nic_count;
        write_fixed(&mut topo.topologyType, &t.topology_type);
        Ok(())
    })
}

/// # Safety
/// `assignment` is NULL or valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn AssignPartition(assignment: *mut PartitionAssignment) -> bool {
    call_bool("AssignPartition", || {
        let a = out(assignment, "assignment")?;
        let template = fixed(&a.templateId, "assignment->templateId")?;
        let uuid = fixed(&a.deviceUUID, "assignment->deviceUUID")?;
        api::device_by_uuid(uuid)?;
        let p = api::active()?.assign_partition(template, uuid)?;
        write_fixed(&mut a.partitionUUID, &p.uuid);
        a.partitionOverheadBytes = p.overhead_bytes;
        Ok(())
    })
}

/// `templateId` names a template (its newest partition is removed) or a
/// partition UUID.
///
/// # Safety
/// Both strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn RemovePartition(
    templateId: *const c_char,
    deviceUUID: *const c_char,
) -> bool {
    call_bool("RemovePartition", || {
        let template = cstr(templateId, MAX_TEMPLATE_ID, "templateId")?;
        let uuid = cstr(deviceUUID, MAX_UUID, "deviceUUID")?;
        api::device_by_uuid(uuid)?;
        api::active()?.remove_partition(template, uuid)
    })
}

/// # Safety
/// Both strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn SetMemHardLimit(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    memoryLimitBytes: u64,
) -> ResultCode {
    call("SetMemHardLimit", || {
        let worker = cstr(workerId, MAX_WORKER_ID, "workerId")?;
        let uuid = cstr(deviceUUID, MAX_UUID, "deviceUUID")?;
        api::set_mem_limit(worker, uuid, memoryLimitBytes)
    })
}

/// # Safety
/// Both strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn SetComputeUnitHardLimit(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    computeUnitLimit: u32,
) -> ResultCode {
    call("SetComputeUnitHardLimit", || {
        let worker = cstr(workerId, MAX_WORKER_ID, "workerId")?;
        let uuid = cstr(deviceUUID, MAX_UUID, "deviceUUID")?;
        api::set_compute_limit(worker, uuid, computeUnitLimit)
    })
}

/// The share of the device the worker is to be guaranteed whenever it
/// wants it (percent, 0..=100; 0 = best-effort), never above its hard limit
/// there. It may be set again. INVALID_PARAM, with nothing changed, for a
/// request out of range or above the hard limit, or an unknown device.
/// Kept in the host's limits file; the host's sampler schedules the
/// device's launches by it (docs/compute.md, "Soft mode").
///
/// # Safety
/// Both strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn SetComputeUnitRequest(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    requestPercent: u32,
) -> ResultCode {
    call("SetComputeUnitRequest", || {
        let worker = cstr(workerId, MAX_WORKER_ID, "workerId")?;
        let uuid = cstr(deviceUUID, MAX_UUID, "deviceUUID")?;
        api::set_compute_request(worker, uuid, requestPercent)
    })
}

/// The worker's priority, 1..=100, higher first; a worker never given one
/// is 50. It may be set again. INVALID_PARAM, with nothing changed, out of
/// range. Kept in the host's limits file; the host's sampler schedules
/// launches by it where the worker shares a device (docs/compute.md,
/// "Soft mode").
///
/// # Safety
/// `workerId` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn SetWorkerPriority(workerId: *const c_char, priority: u32) -> ResultCode {
    call("SetWorkerPriority", || {
        let worker = cstr(workerId, MAX_WORKER_ID, "workerId")?;
        api::set_worker_priority(worker, priority)
    })
}

/// Validated contents of a ProcessArray.
unsafe fn process_array<'a>(p: *mut ProcessArray) -> Result<(&'a [pid_t], &'a str), Error> {
    let a = out(p, "processes")?;
    let pids = input(
        a.processIds,
        a.processCount,
        MAX_PROCESSES,
        "processes->processIds",
    )?;
    let uuid = fixed_opt(&a.deviceUUID, "processes->deviceUUID")?;
    api::check_processes(pids, uuid)?;
    Ok((pids, uuid))
}

/// # Safety
/// `processes` is NULL or valid, its `processIds` valid for `processCount`.
#[no_mangle]
pub unsafe extern "C" fn Snapshot(processes: *mut ProcessArray) -> ResultCode {
    call("Snapshot", || {
        let (pids, uuid) = process_array(processes)?;
        api::active()?.snapshot(pids, uuid)
    })
}

/// # Safety
/// As `Snapshot`.
#[no_mangle]
pub unsafe extern "C" fn Resume(processes: *mut ProcessArray) -> ResultCode {
    call("Resume", || {
        let (pids, uuid) = process_array(processes)?;
        api::active()?.resume(pids, uuid)
    })
}

/// Both per-process lists into the caller's buffer.
unsafe fn fill_usage<V, C>(
    name: &str,
    (buffer, max_count, count): (*mut C, usize, *mut usize),
    fetch: impl FnOnce(&dyn Vendor) -> Result<Vec<V>, Error>,
    conv: fn(&V) -> C,
) -> ResultCode {
    call(name, || {
        let count = out(count, "utilizationCount")?;
        let all = fetch(api::active()?)?;
        let dst = out_slice(buffer, max_count, all.len(), false, "utilizations")?;
        for (slot, u) in dst.iter_mut().zip(&all) {
            *slot = conv(u);
        }
        *count = dst.len();
        Ok(())
    })
}

/// Every worker with a compute request, hard limit or granted share on a
/// device of the node, up to `maxCount`: its request, limit, priority, the
/// share the host's scheduler grants it, and the device time its live
/// processes took so far (two readings give its measured share;
/// docs/compute.md, "Soft mode"). `shareCount` gets the entries written;
/// with `maxCount` 0 (and `shares` NULL), how many there are.
///
/// # Safety
/// `shares` is NULL or writable for `maxCount`; `shareCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn GetWorkerShares(
    shares: *mut WorkerShare,
    maxCount: usize,
    shareCount: *mut usize,
) -> ResultCode {
    call("GetWorkerShares", || {
        let count = out(shareCount, "shareCount")?;
        let all = api::worker_shares()?;
        let dst = out_slice(shares, maxCount, all.len(), true, "shares")?;
        for (slot, w) in dst.iter_mut().zip(&all) {
            *slot = convert::share(w);
        }
        *count = if maxCount == 0 { all.len() } else { dst.len() };
        Ok(())
    })
}

/// Every tracked process on every device, up to `maxCount`.
///
/// # Safety
/// `utilizations` is NULL or writable for `maxCount`; `utilizationCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn GetProcessComputeUtilization(
    utilizations: *mut ComputeUtilization,
    maxCount: usize,
    utilizationCount: *mut usize,
) -> ResultCode {
    fill_usage(
        "GetProcessComputeUtilization",
        (utilizations, maxCount, utilizationCount),
        |v| v.process_compute(&ProcessQuery::default()),
        convert::compute,
    )
}

/// # Safety
/// As `GetProcessComputeUtilization`.
#[no_mangle]
pub unsafe extern "C" fn GetProcessMemoryUtilization(
    utilizations: *mut MemoryUtilization,
    maxCount: usize,
    utilizationCount: *mut usize,
) -> ResultCode {
    fill_usage(
        "GetProcessMemoryUtilization",
        (utilizations, maxCount, utilizationCount),
        |v| v.process_memory(&ProcessQuery::default()),
        convert::memory,
    )
}

/// # Safety
/// `deviceUUIDArray` is NULL or holds `deviceCount` strings; `metrics` NULL
/// or writable for `deviceCount` entries.
#[no_mangle]
pub unsafe extern "C" fn GetDeviceMetrics(
    deviceUUIDArray: *mut *const c_char,
    deviceCount: usize,
    metrics: *mut DeviceMetrics,
) -> ResultCode {
    call("GetDeviceMetrics", || {
        let uuids = cstr_array(
            deviceUUIDArray,
            deviceCount,
            MAX_DEVICES,
            MAX_UUID,
            "deviceUUIDArray",
        )?;
        let dst = out_slice(metrics, deviceCount, deviceCount, false, "metrics")?;
        let vendor = api::active()?;
        let all = uuids
            .iter()
            .map(|u| vendor.metrics(u))
            .collect::<Result<Vec<_>, _>>()?;
        for (slot, m) in dst.iter_mut().zip(&all) {
            *slot = convert::metrics(m);
        }
        Ok(())
    })
}

/// The caller pre-allocates each entry's three arrays; values beyond their
/// capacities are dropped and the counts say how many were written.
///
/// # Safety
/// `deviceUUIDArray` is NULL or holds `deviceCount` strings; `metrics` NULL
/// or valid for `deviceCount` entries whose arrays hold the given maxima.
#[no_mangle]
pub unsafe extern "C" fn GetExtendedDeviceMetrics(
    deviceUUIDArray: *mut *const c_char,
    deviceCount: usize,
    metrics: *mut ExtendedDeviceMetrics,
    maxNvlinkPerDevice: usize,
    maxIbNicPerDevice: usize,
    maxPciePerDevice: usize,
) -> ResultCode {
    call("GetExtendedDeviceMetrics", || {
        let uuids = cstr_array(
            deviceUUIDArray,
            deviceCount,
            MAX_DEVICES,
            MAX_UUID,
            "deviceUUIDArray",
        )?;
        let dst = out_slice(metrics, deviceCount, deviceCount, false, "metrics")?;
        for (i, e) in dst.iter().enumerate() {
            out_slice(
                e.nvlinkBandwidthMBps,
                maxNvlinkPerDevice,
                0,
                true,
                &format!("metrics[{i}].nvlinkBandwidthMBps"),
            )?;
            out_slice(
                e.ibNicBandwidthMBps,
                maxIbNicPerDevice,
                0,
                true,
                &format!("metrics[{i}].ibNicBandwidthMBps"),
            )?;
            out_slice(
                e.pcieBandwidthMBps,
                maxPciePerDevice,
                0,
                true,
                &format!("metrics[{i}].pcieBandwidthMBps"),
            )?;
        }
        let vendor = api::active()?;
        let all = uuids
            .iter()
            .map(|u| vendor.extended_metrics(u))
            .collect::<Result<Vec<_>, _>>()?;
        for (e, m) in dst.iter_mut().zip(&all) {
            e.deviceUUID = fixed_from(&m.device_uuid);
            e.nvlinkCount = copy_into(e.nvlinkBandwidthMBps, maxNvlinkPerDevice, &m.nvlink_mbps)?;
            e.ibNicCount = copy_into(e.ibNicBandwidthMBps, maxIbNicPerDevice, &m.ib_nic_mbps)?;
            e.pcieLinkCount = copy_into(e.pcieBandwidthMBps, maxPciePerDevice, &m.pcie_mbps)?;
        }
        Ok(())
    })
}

unsafe fn copy_into<T: Copy>(p: *mut T, capacity: usize, values: &[T]) -> Result<usize, Error> {
    let dst = out_slice(p, capacity, values.len(), true, "metrics array")?;
    let n = dst.len();
    dst.copy_from_slice(&values[..n]);
    Ok(n)
}

/// Routes a host message into the library's log sink. `level` is one of
/// error, warn, info, debug, trace.
///
/// # Safety
/// Both strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn Log(level: *const c_char, message: *const c_char) -> ResultCode {
    call("Log", || {
        let level_name = cstr(level, 16, "level")?;
        let level = crate::log::AcceleratorLogLevel::parse(level_name)
            .ok_or_else(|| Error::InvalidParam(format!("unknown log level {level_name:?}")))?;
        let text = cstr(message, MAX_CSTR, "message")?;
        crate::log::emit(level, text);
        Ok(())
    })
}
