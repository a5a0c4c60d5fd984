//! The exported `Accel*` functions. Every one runs inside the shared
//! boundary (`super::call`): a panic or error never crosses into the host;
//! every pointer and string is checked there before safe code sees it.

use super::call;
use super::convert;
use super::types::*;
use crate::abi::boundary::{cstr, cstr_lossy, input, out, out_slice, write_fixed};
use crate::api::{self, MAX_DEVICES, MAX_TEMPLATE_ID, MAX_UUID};
use crate::hypervisor;
use crate::log::{self, log_at};
use crate::vendor::Vendor;
use libc::{c_char, pid_t};

/// Idempotent; fails only when the configuration names no usable vendor
/// (the reason is logged). A vendor with no devices is fine. Starts the
/// host's compute sampler where the vendor measures per-process
/// utilization (docs/compute.md).
#[no_mangle]
pub extern "C" fn AccelInit() -> AccelResult {
    call("AccelInit", || {
        hypervisor::init().inspect_err(|e| log_at!(Error, "AccelInit: {e}"))
    })
}

/// Idempotent: stops and joins the compute sampler. The vendor stays
/// loaded (the driver is released at process exit): calls after shutdown
/// keep working, as ABI-v2.md requires.
#[no_mangle]
pub extern "C" fn AccelShutdown() -> AccelResult {
    call("AccelShutdown", || {
        hypervisor::shutdown();
        Ok(())
    })
}

/// # Safety
/// `deviceCount` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn AccelGetDeviceCount(deviceCount: *mut usize) -> AccelResult {
    call("AccelGetDeviceCount", || {
        let count = out(deviceCount, "deviceCount")?;
        *count = api::devices()?.len();
        Ok(())
    })
}

/// # Safety
/// `devices` is NULL or writable for `maxCount` entries; `deviceCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn AccelGetAllDevices(
    devices: *mut ExtendedDeviceInfo,
    maxCount: usize,
    deviceCount: *mut usize,
) -> AccelResult {
    call("AccelGetAllDevices", || {
        let count = out(deviceCount, "deviceCount")?;
        let all = api::devices()?;
        let dst = out_slice(devices, maxCount, all.len(), false, "devices")?;
        for (slot, d) in dst.iter_mut().zip(&all) {
            *slot = convert::device(d, &hypervisor::properties(d));
        }
        *count = dst.len();
        Ok(())
    })
}

/// Writes the hypervisor's Go layout (332,808 bytes; see the header note).
///
/// # Safety
/// `topology` is NULL or writable for one `ExtendedDeviceTopology`.
#[no_mangle]
pub unsafe extern "C" fn AccelGetAllDevicesTopology(
    topology: *mut ExtendedDeviceTopology,
) -> AccelResult {
    call("AccelGetAllDevicesTopology", || {
        if topology.is_null() {
            return out(topology, "topology").map(|_| ());
        }
        // All-zero is a valid value of every field (enums included: 0 is
        // TOPO_LEVEL_INTERNAL), and the struct is too big for the stack.
        std::ptr::write_bytes(topology, 0, 1);
        let topo = out(topology, "topology")?;
        let rows = hypervisor::topology(MAX_TOPOLOGY_DEVICES)?;
        for (slot, r) in topo.devices.iter_mut().zip(&rows) {
            convert::row(slot, r);
        }
        topo.deviceCount = rows.len().min(MAX_TOPOLOGY_DEVICES);
        Ok(())
    })
}

/// # Safety
/// Strings are NULL or NUL-terminated; `result` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn AccelAssignPartition(
    templateId: *const c_char,
    deviceUUID: *const c_char,
    result: *mut PartitionResult,
) -> AccelResult {
    call("AccelAssignPartition", || {
        let res = out(result, "result")?;
        std::ptr::write_bytes(res as *mut PartitionResult, 0, 1);
        let template = cstr(templateId, MAX_TEMPLATE_ID, "templateId")?;
        let uuid = hypervisor::device_uuid(cstr(deviceUUID, MAX_UUID, "deviceUUID")?)?;
        let p = api::active()?.assign_partition(template, &uuid)?;
        write_fixed(&mut res.deviceUUID, &p.uuid);
        for (slot, e) in res.envVars.iter_mut().zip(&p.env) {
            write_fixed(slot, e);
        }
        for (slot, n) in res.deviceNodes.iter_mut().zip(&p.device_nodes) {
            write_fixed(slot, n);
        }
        res.kind = if p.device_nodes.is_empty() {
            PartitionResultType::PartitionTypeEnvironmentVariable
        } else {
            PartitionResultType::PartitionTypeDeviceNode
        };
        Ok(())
    })
}

/// `templateId` is a template (its newest partition) or, as the
/// hypervisor passes it, the partition's UUID.
///
/// # Safety
/// Strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn AccelRemovePartition(
    templateId: *const c_char,
    deviceUUID: *const c_char,
) -> AccelResult {
    call("AccelRemovePartition", || {
        let id = cstr(templateId, MAX_UUID.max(MAX_TEMPLATE_ID), "templateId")?;
        let uuid = hypervisor::device_uuid(cstr(deviceUUID, MAX_UUID, "deviceUUID")?)?;
        api::active()?.remove_partition(id, &uuid)
    })
}

/// The limit of the calling process's worker (`ACCELERATOR_WORKER_ID`).
///
/// # Safety
/// `deviceUUID` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn AccelSetMemHardLimit(
    deviceUUID: *const c_char,
    memoryLimitBytes: u64,
) -> AccelResult {
    call("AccelSetMemHardLimit", || {
        let uuid = hypervisor::device_uuid(cstr(deviceUUID, MAX_UUID, "deviceUUID")?)?;
        api::set_mem_limit_for_caller(&uuid, memoryLimitBytes)
    })
}

/// The limit of the calling process's worker (`ACCELERATOR_WORKER_ID`).
///
/// # Safety
/// `deviceUUID` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn AccelSetComputeUnitHardLimit(
    deviceUUID: *const c_char,
    computeUnitLimit: u32,
) -> AccelResult {
    call("AccelSetComputeUnitHardLimit", || {
        let uuid = hypervisor::device_uuid(cstr(deviceUUID, MAX_UUID, "deviceUUID")?)?;
        api::set_compute_limit_for_caller(&uuid, computeUnitLimit)
    })
}

/// The compute request of the calling process's worker
/// (`ACCELERATOR_WORKER_ID`): the share of the device it is to be
/// guaranteed whenever it wants it (0..=100; 0 = best-effort), never above
/// its hard limit there; it may be set again. An unknown device is
/// INVALID_PARAM. The host's sampler schedules the device's launches by it
/// (docs/compute.md, "Soft mode").
///
/// # Safety
/// `deviceUUID` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn AccelSetComputeUnitRequest(
    deviceUUID: *const c_char,
    requestPercent: u32,
) -> AccelResult {
    call("AccelSetComputeUnitRequest", || {
        let uuid = hypervisor::device_uuid(cstr(deviceUUID, MAX_UUID, "deviceUUID")?)
            .map_err(api::unknown_is_invalid)?;
        api::set_compute_request_for_caller(&uuid, requestPercent)
    })
}

/// The priority of the calling process's worker (`ACCELERATOR_WORKER_ID`):
/// 1..=100, higher first; 50 when never set. It may be set again.
/// The host's sampler schedules launches by it where the worker shares a
/// device (docs/compute.md, "Soft mode").
#[no_mangle]
pub extern "C" fn AccelSetWorkerPriority(priority: u32) -> AccelResult {
    call("AccelSetWorkerPriority", || {
        api::set_worker_priority_for_caller(priority)
    })
}

/// Snapshot or resume the targets of a context: its processes, or every
/// process the vendor lists on its device (none: nothing to do).
unsafe fn checkpoint(
    name: &str,
    ctx: *mut SnapshotContext,
    op: fn(&dyn Vendor, &[pid_t], &str) -> accel_common::Res<()>,
) -> AccelResult {
    call(name, || {
        let ctx = out(ctx, "context")?;
        let pids = if ctx.processIds.is_null() && ctx.processCount == 0 {
            None
        } else {
            Some(input(
                ctx.processIds,
                ctx.processCount,
                api::MAX_PROCESSES,
                "processIds",
            )?)
        };
        let uuid = if ctx.deviceUUID.is_null() {
            None
        } else {
            Some(cstr(ctx.deviceUUID, MAX_UUID, "deviceUUID")?)
        };
        let (pids, uuid) = hypervisor::snapshot_targets(pids, uuid)?;
        if pids.is_empty() {
            log_at!(Info, "{name}: no process on device {uuid}");
            return Ok(());
        }
        op(api::active()?, &pids, &uuid)
    })
}

/// Process-level with `processIds`, device-level with only `deviceUUID`.
///
/// # Safety
/// `context` is NULL or readable, its pointers as its counts say.
#[no_mangle]
pub unsafe extern "C" fn AccelSnapshot(context: *mut SnapshotContext) -> AccelResult {
    checkpoint("AccelSnapshot", context, |v, pids, uuid| {
        v.snapshot(pids, uuid)
    })
}

/// # Safety
/// As `AccelSnapshot`.
#[no_mangle]
pub unsafe extern "C" fn AccelResume(context: *mut SnapshotContext) -> AccelResult {
    checkpoint("AccelResume", context, |v, pids, uuid| v.resume(pids, uuid))
}

/// Every process that uses a device (up to `maxCount`).
///
/// # Safety
/// `processInfos` is NULL or writable for `maxCount` entries; `processCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn AccelGetProcessInformation(
    processInfos: *mut ProcessInformation,
    maxCount: usize,
    processCount: *mut usize,
) -> AccelResult {
    call("AccelGetProcessInformation", || {
        let count = out(processCount, "processCount")?;
        *count = 0;
        let all = hypervisor::processes()?;
        let dst = out_slice(processInfos, maxCount, all.len(), false, "processInfos")?;
        for (slot, p) in dst.iter_mut().zip(&all) {
            *slot = convert::process(p);
        }
        *count = dst.len();
        Ok(())
    })
}

/// `metrics[i]` answers `deviceUUIDs[i]`; a UUID that names nothing gets
/// zeros (logged at debug), never a failed batch.
///
/// # Safety
/// `deviceUUIDs` is NULL or holds `deviceCount` pointers; `metrics` NULL or
/// writable for `deviceCount` entries.
#[no_mangle]
pub unsafe extern "C" fn AccelGetDeviceMetrics(
    deviceUUIDs: *const *const c_char,
    deviceCount: usize,
    metrics: *mut DeviceMetrics,
) -> AccelResult {
    call("AccelGetDeviceMetrics", || {
        let uuids = input(deviceUUIDs, deviceCount, MAX_DEVICES, "deviceUUIDs")?;
        let uuids: Vec<String> = uuids
            .iter()
            .enumerate()
            .map(|(i, &p)| cstr_lossy(p, &format!("deviceUUIDs[{i}]")))
            .collect::<accel_common::Res<_>>()?;
        let dst = out_slice(metrics, deviceCount, deviceCount, false, "metrics")?;
        for (slot, uuid) in dst.iter_mut().zip(&uuids) {
            let (m, extra) = hypervisor::metrics(uuid);
            convert::metrics(slot, uuid, &m, &extra);
        }
        Ok(())
    })
}

/// # Safety
/// `mounts` is NULL or writable for `maxCount` entries; `mountCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn AccelGetVendorMountLibs(
    mounts: *mut MountPath,
    maxCount: usize,
    mountCount: *mut usize,
) -> AccelResult {
    call("AccelGetVendorMountLibs", || {
        let count = out(mountCount, "mountCount")?;
        *count = 0;
        if mounts.is_null() || maxCount == 0 {
            return out_slice(mounts, maxCount, 1, false, "mounts").map(|_| ());
        }
        let all = hypervisor::mounts()?;
        let dst = out_slice(mounts, maxCount, all.len(), false, "mounts")?;
        for (slot, m) in dst.iter_mut().zip(&all) {
            *slot = convert::mount(m);
        }
        *count = dst.len();
        Ok(())
    })
}

/// NULL unregisters (messages go to stderr again).
#[no_mangle]
pub extern "C" fn AccelRegisterLogCallback(callback: LogCallbackFunc) -> AccelResult {
    call("AccelRegisterLogCallback", || {
        log::set_text_callback(callback);
        Ok(())
    })
}
