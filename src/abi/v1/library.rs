//! Exports in the library-allocated style (C test suites use these): the
//! library allocates the outputs and each has a matching free function that
//! accepts NULL, a zeroed struct and a count of 0. On failure the output
//! pointers are set to NULL and counts to 0, so freeing is always safe.

use super::caller;
use super::convert;
use super::types::*;
use crate::abi::boundary::*;
use crate::api::{self, MAX_DEVICES, MAX_PROCESSES, MAX_PROCESS_ID, MAX_UUID};
use crate::vendor::{ProcessQuery, Vendor};
use accel_common::Res;
use libc::c_char;

/// # Safety
/// `deviceCount` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getDeviceCount(deviceCount: *mut usize) -> ResultCode {
    caller::GetDeviceCount(deviceCount)
}

/// Fills `info`, including a library-allocated `relatedDevices` array;
/// release it with `freeExtendedDeviceInfo`.
///
/// # Safety
/// `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getDeviceInfo(
    deviceIndex: i32,
    info: *mut ExtendedDeviceInfo,
) -> ResultCode {
    call("getDeviceInfo", || {
        let info = out(info, "info")?;
        info.relatedDevices = std::ptr::null_mut();
        info.relatedDeviceCount = 0;
        let (index, d) = api::device_at(deviceIndex)?;
        let links = api::active()?.related_devices(index)?;
        let related: Vec<RelatedDevice> = links.iter().map(convert::link).collect();
        let n = related.len();
        *info = convert::device(&d);
        info.relatedDevices = alloc_array(related)?;
        info.relatedDeviceCount = n;
        Ok(())
    })
}

/// # Safety
/// `info` is NULL or a struct filled by `getDeviceInfo` (or zeroed).
#[no_mangle]
pub unsafe extern "C" fn freeExtendedDeviceInfo(info: *mut ExtendedDeviceInfo) {
    call_void("freeExtendedDeviceInfo", || {
        if let Some(info) = info.as_mut() {
            free_array(info.relatedDevices);
            info.relatedDevices = std::ptr::null_mut();
            info.relatedDeviceCount = 0;
        }
    })
}

/// Write a library-allocated array and its length to the caller's outputs.
unsafe fn hand_over<T>(items: Vec<T>, dst: &mut *mut T, count: &mut usize) -> Res<()> {
    let n = items.len();
    *dst = alloc_array(items)?;
    *count = n;
    Ok(())
}

/// Validate and reset a `(T**, size_t*)` output pair: each non-NULL one is
/// reset (NULL, 0) even when the other is NULL and the call fails.
unsafe fn out_pair<'a, T>(
    p: *mut *mut T,
    n: *mut usize,
    what: &str,
) -> Res<(&'a mut *mut T, &'a mut usize)> {
    let (mut p, mut n) = (out(p, what), out(n, &format!("{what} count")));
    if let Ok(p) = &mut p {
        **p = std::ptr::null_mut();
    }
    if let Ok(n) = &mut n {
        **n = 0;
    }
    Ok((p?, n?))
}

/// # Safety
/// `templates` and `templateCount` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getPartitionTemplates(
    deviceIndex: i32,
    templates: *mut *mut PartitionTemplate,
    templateCount: *mut usize,
) -> ResultCode {
    call("getPartitionTemplates", || {
        let (dst, count) = out_pair(templates, templateCount, "templates")?;
        let (index, _) = api::device_at(deviceIndex)?;
        let all = api::active()?.partition_templates(index)?;
        hand_over(all.iter().map(convert::template).collect(), dst, count)
    })
}

/// # Safety
/// `templates` is NULL or came from `getPartitionTemplates`.
#[no_mangle]
pub unsafe extern "C" fn freePartitionTemplates(templates: *mut PartitionTemplate, count: usize) {
    let _ = count;
    call_void("freePartitionTemplates", || free_array(templates))
}

/// Allocates `topology->devices` and each entry's `connections`; release
/// with `freeExtendedDeviceTopology`.
///
/// # Safety
/// `deviceIndexArray` is NULL or holds `deviceCount` entries; `topology` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getDeviceTopology(
    deviceIndexArray: *mut i32,
    deviceCount: usize,
    topology: *mut ExtendedDeviceTopology,
) -> ResultCode {
    call("getDeviceTopology", || {
        let topo = out(topology, "topology")?;
        topo.devices = std::ptr::null_mut();
        topo.deviceCount = 0;
        let raw = input(
            deviceIndexArray,
            deviceCount,
            MAX_DEVICES,
            "deviceIndexArray",
        )?;
        let indices = api::indices(raw)?;
        let t = api::active()?.topology(&indices)?;
        let mut entries = Vec::with_capacity(t.devices.len());
        for d in &t.devices {
            let conns: Vec<RelatedDevice> = d.connections.iter().map(convert::link).collect();
            let n = conns.len();
            let ptr = match alloc_array(conns) {
                Ok(p) => p,
                Err(e) => {
                    release_topology_entries(&mut entries);
                    return Err(e);
                }
            };
            entries.push(DeviceTopology {
                deviceUUID: fixed_from(&d.uuid),
                numaNode: d.numa_node,
                connections: ptr,
                connectionCount: n,
            });
        }
        let n = entries.len();
        // alloc_array drops the entries it fails to place; their
        // connection arrays are ours to free.
        let connections: Vec<*mut RelatedDevice> = entries.iter().map(|e| e.connections).collect();
        topo.devices = match alloc_array(entries) {
            Ok(p) => p,
            Err(e) => {
                for c in connections {
                    free_array(c);
                }
                return Err(e);
            }
        };
        topo.deviceCount = n;
        topo.nvlinkBandwidthMBps = t.nvlink_bandwidth_mbps;
        topo.ibNicCount = t.ib_nic_count;
        write_fixed(&mut topo.topologyType, &t.topology_type);
        Ok(())
    })
}

unsafe fn release_topology_entries(entries: &mut [DeviceTopology]) {
    for e in entries {
        free_array(e.connections);
        e.connections = std::ptr::null_mut();
        e.connectionCount = 0;
    }
}

/// # Safety
/// `topology` is NULL or filled by `getDeviceTopology` (or zeroed).
#[no_mangle]
pub unsafe extern "C" fn freeExtendedDeviceTopology(topology: *mut ExtendedDeviceTopology) {
    call_void("freeExtendedDeviceTopology", || {
        if let Some(t) = topology.as_mut() {
            release_topology_entries(owned_slice(t.devices, t.deviceCount));
            free_array(t.devices);
            t.devices = std::ptr::null_mut();
            t.deviceCount = 0;
        }
    })
}

/// # Safety
/// As `AssignPartition`.
#[no_mangle]
pub unsafe extern "C" fn assignPartition(assignment: *mut PartitionAssignment) -> bool {
    caller::AssignPartition(assignment)
}

/// # Safety
/// As `RemovePartition`.
#[no_mangle]
pub unsafe extern "C" fn removePartition(
    templateId: *const c_char,
    deviceUUID: *const c_char,
) -> bool {
    caller::RemovePartition(templateId, deviceUUID)
}

/// # Safety
/// As `SetMemHardLimit`.
#[no_mangle]
pub unsafe extern "C" fn setMemHardLimit(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    memoryLimitBytes: u64,
) -> ResultCode {
    caller::SetMemHardLimit(workerId, deviceUUID, memoryLimitBytes)
}

/// # Safety
/// As `SetComputeUnitHardLimit`.
#[no_mangle]
pub unsafe extern "C" fn setComputeUnitHardLimit(
    workerId: *const c_char,
    deviceUUID: *const c_char,
    computeUnitLimit: u32,
) -> ResultCode {
    caller::SetComputeUnitHardLimit(workerId, deviceUUID, computeUnitLimit)
}

/// # Safety
/// As `Snapshot`.
#[no_mangle]
pub unsafe extern "C" fn snapshot(processes: *mut ProcessArray) -> ResultCode {
    caller::Snapshot(processes)
}

/// # Safety
/// As `Resume`.
#[no_mangle]
pub unsafe extern "C" fn resume(processes: *mut ProcessArray) -> ResultCode {
    caller::Resume(processes)
}

/// The devices and named processes of a per-process query.
unsafe fn query_args(
    uuids: *const *const c_char,
    device_count: usize,
    pids: *const *const c_char,
    process_count: usize,
) -> Res<(Vec<String>, Vec<String>)> {
    let devices = cstr_array(uuids, device_count, MAX_DEVICES, MAX_UUID, "deviceUUIDs")?;
    let named = cstr_array(
        pids,
        process_count,
        MAX_PROCESSES,
        MAX_PROCESS_ID,
        "processIds",
    )?;
    api::check_uuids(&devices)?;
    Ok((devices, named))
}

/// Both per-process queries: validate, ask the vendor, hand over the list.
unsafe fn process_usage<V, C>(
    name: &str,
    (uuids, device_count, pids, process_count): (
        *mut *const c_char,
        usize,
        *mut *const c_char,
        usize,
    ),
    (utilizations, utilization_count): (*mut *mut C, *mut usize),
    fetch: impl FnOnce(&dyn Vendor, &ProcessQuery) -> Res<Vec<V>>,
    conv: fn(&V) -> C,
) -> ResultCode {
    call(name, || {
        let (dst, count) = out_pair(utilizations, utilization_count, "utilizations")?;
        let (devices, named) = query_args(uuids, device_count, pids, process_count)?;
        let query = ProcessQuery {
            devices: Some(&devices),
            named: &named,
        };
        let all = fetch(api::active()?, &query)?;
        hand_over(all.iter().map(conv).collect(), dst, count)
    })
}

/// Utilization of the processes named in `processIds` and of every process
/// the library knows of, on the given devices.
///
/// # Safety
/// Arrays are NULL or hold their counts of strings; outputs NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getProcessComputeUtilization(
    deviceUUIDs: *mut *const c_char,
    deviceCount: usize,
    processIds: *mut *const c_char,
    processCount: usize,
    utilizations: *mut *mut ComputeUtilization,
    utilizationCount: *mut usize,
) -> ResultCode {
    process_usage(
        "getProcessComputeUtilization",
        (deviceUUIDs, deviceCount, processIds, processCount),
        (utilizations, utilizationCount),
        |v, q| v.process_compute(q),
        convert::compute,
    )
}

/// # Safety
/// `p` is NULL or came from `getProcessComputeUtilization`.
#[no_mangle]
pub unsafe extern "C" fn freeComputeUtilizations(p: *mut ComputeUtilization, count: usize) {
    let _ = count;
    call_void("freeComputeUtilizations", || free_array(p))
}

/// # Safety
/// As `getProcessComputeUtilization`.
#[no_mangle]
pub unsafe extern "C" fn getProcessMemoryUtilization(
    deviceUUIDs: *mut *const c_char,
    deviceCount: usize,
    processIds: *mut *const c_char,
    processCount: usize,
    utilizations: *mut *mut MemoryUtilization,
    utilizationCount: *mut usize,
) -> ResultCode {
    process_usage(
        "getProcessMemoryUtilization",
        (deviceUUIDs, deviceCount, processIds, processCount),
        (utilizations, utilizationCount),
        |v, q| v.process_memory(q),
        convert::memory,
    )
}

/// # Safety
/// `p` is NULL or came from `getProcessMemoryUtilization`.
#[no_mangle]
pub unsafe extern "C" fn freeMemoryUtilizations(p: *mut MemoryUtilization, count: usize) {
    let _ = count;
    call_void("freeMemoryUtilizations", || free_array(p))
}

/// # Safety
/// `deviceUUIDs` is NULL or holds `deviceCount` strings; `metrics` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getDeviceMetrics(
    deviceUUIDs: *mut *const c_char,
    deviceCount: usize,
    metrics: *mut *mut DeviceMetrics,
) -> ResultCode {
    call("getDeviceMetrics", || {
        let dst = out(metrics, "metrics")?;
        *dst = std::ptr::null_mut();
        let uuids = cstr_array(
            deviceUUIDs,
            deviceCount,
            MAX_DEVICES,
            MAX_UUID,
            "deviceUUIDs",
        )?;
        let vendor = api::active()?;
        let all = uuids
            .iter()
            .map(|u| vendor.metrics(u))
            .collect::<Res<Vec<_>>>()?;
        *dst = alloc_array(all.iter().map(convert::metrics).collect())?;
        Ok(())
    })
}

/// # Safety
/// `p` is NULL or came from `getDeviceMetrics`.
#[no_mangle]
pub unsafe extern "C" fn freeDeviceMetrics(p: *mut DeviceMetrics, count: usize) {
    let _ = count;
    call_void("freeDeviceMetrics", || free_array(p))
}

/// # Safety
/// `deviceUUIDs` is NULL or holds `deviceCount` strings; `metrics` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn getExtendedDeviceMetrics(
    deviceUUIDs: *mut *const c_char,
    deviceCount: usize,
    metrics: *mut *mut ExtendedDeviceMetrics,
) -> ResultCode {
    call("getExtendedDeviceMetrics", || {
        let dst = out(metrics, "metrics")?;
        *dst = std::ptr::null_mut();
        let uuids = cstr_array(
            deviceUUIDs,
            deviceCount,
            MAX_DEVICES,
            MAX_UUID,
            "deviceUUIDs",
        )?;
        let vendor = api::active()?;
        let all = uuids
            .iter()
            .map(|u| vendor.extended_metrics(u))
            .collect::<Res<Vec<_>>>()?;
        // The outer array first, so a failed inner allocation can release
        // everything through the same path as freeExtendedDeviceMetrics.
        let n = all.len();
        let array = alloc_array(all.iter().map(|m| empty_entry(&m.device_uuid)).collect())?;
        for (slot, m) in owned_slice(array, n).iter_mut().zip(all) {
            if let Err(e) = fill_entry(slot, m) {
                freeExtendedDeviceMetrics(array, n);
                return Err(e);
            }
        }
        *dst = array;
        Ok(())
    })
}

fn empty_entry(uuid: &str) -> ExtendedDeviceMetrics {
    ExtendedDeviceMetrics {
        deviceUUID: fixed_from(uuid),
        nvlinkBandwidthMBps: std::ptr::null_mut(),
        nvlinkCount: 0,
        ibNicBandwidthMBps: std::ptr::null_mut(),
        ibNicCount: 0,
        pcieBandwidthMBps: std::ptr::null_mut(),
        pcieLinkCount: 0,
    }
}

fn fill_entry(e: &mut ExtendedDeviceMetrics, m: crate::vendor::ExtendedMetrics) -> Res<()> {
    let (n, i, p) = (m.nvlink_mbps.len(), m.ib_nic_mbps.len(), m.pcie_mbps.len());
    e.nvlinkBandwidthMBps = alloc_array(m.nvlink_mbps)?;
    e.nvlinkCount = n;
    e.ibNicBandwidthMBps = alloc_array(m.ib_nic_mbps)?;
    e.ibNicCount = i;
    e.pcieBandwidthMBps = alloc_array(m.pcie_mbps)?;
    e.pcieLinkCount = p;
    Ok(())
}

unsafe fn release_metric_arrays(m: &mut ExtendedDeviceMetrics) {
    free_array(m.nvlinkBandwidthMBps);
    free_array(m.ibNicBandwidthMBps);
    free_array(m.pcieBandwidthMBps);
    m.nvlinkBandwidthMBps = std::ptr::null_mut();
    m.ibNicBandwidthMBps = std::ptr::null_mut();
    m.pcieBandwidthMBps = std::ptr::null_mut();
    m.nvlinkCount = 0;
    m.ibNicCount = 0;
    m.pcieLinkCount = 0;
}

/// Frees the inner arrays of the `count` entries, then the array.
///
/// # Safety
/// `p` is NULL or came from `getExtendedDeviceMetrics` with this count.
#[no_mangle]
pub unsafe extern "C" fn freeExtendedDeviceMetrics(p: *mut ExtendedDeviceMetrics, count: usize) {
    call_void("freeExtendedDeviceMetrics", || {
        owned_slice(p, count)
            .iter_mut()
            .for_each(|m| release_metric_arrays(m));
        free_array(p);
    })
}
