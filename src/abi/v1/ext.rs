//! Extensions beyond ABI.md (new functions and types only, declared in the
//! same header): last error, log callback, ABI version, active vendor, the
//! vendor's status and the PCI view beside the vendor's.

use super::types::{AcceleratorPciDevice, ResultCode};
use crate::abi::boundary::{
    call, call_void, fixed_from, last_error_code, last_error_ptr, out, out_slice,
};
use crate::log::{self, AcceleratorLogCallback};
use crate::pci::report::Row;
use libc::c_char;
use std::ffi::CString;
use std::sync::OnceLock;

/// Version of this ABI: bumped only by additions (major stays 1).
pub const ACCELERATOR_ABI_VERSION: u32 = 1;

/// The reason for the last failed call on this thread ("" after a success),
/// in the style of dlerror. Valid until this thread's next call.
#[no_mangle]
pub extern "C" fn acceleratorGetLastError() -> *const c_char {
    last_error_ptr()
}

/// The Result code of the last call on this thread (RESULT_SUCCESS after a
/// success): the reason's code for the functions that return bool.
#[no_mangle]
pub extern "C" fn acceleratorGetLastErrorCode() -> ResultCode {
    last_error_code()
}

/// Route the library's log to `callback` instead of stderr (NULL restores
/// stderr). The threshold still comes from `ACCELERATOR_LOG`.
#[no_mangle]
pub extern "C" fn acceleratorSetLogCallback(callback: AcceleratorLogCallback) {
    call_void("acceleratorSetLogCallback", || log::set_callback(callback))
}

#[no_mangle]
pub extern "C" fn acceleratorAbiVersion() -> u32 {
    ACCELERATOR_ABI_VERSION
}

/// The active vendor's name ("stub", "nvidia", "ascend", "amd", "habana"), or "" when the
/// configuration names no usable vendor (the last error says why).
#[no_mangle]
pub extern "C" fn acceleratorVendorName() -> *const c_char {
    let mut name: &'static std::ffi::CStr = c"";
    let _: ResultCode = call("acceleratorVendorName", || {
        let v = crate::select::vendor()?;
        name = match v.name() {
            "stub" => c"stub",
            "nvidia" => c"nvidia",
            "ascend" => c"ascend",
            "amd" => c"amd",
            "habana" => c"habana",
            _ => c"unknown",
        };
        Ok(())
    });
    name.as_ptr()
}

/// One line on the active vendor: its devices, what PCI shows of the
/// machine's accelerators, and, for a vendor whose library could not be
/// loaded or initialized, why and what is missing. "" when the
/// configuration names no usable vendor (the last error says why). The
/// string lives as long as the library.
#[no_mangle]
pub extern "C" fn acceleratorVendorStatus() -> *const c_char {
    static STATUS: OnceLock<CString> = OnceLock::new();
    let mut status: *const c_char = c"".as_ptr();
    let _: ResultCode = call("acceleratorVendorStatus", || {
        let text = crate::select::status()?;
        status = STATUS
            .get_or_init(|| CString::new(text.replace('\0', " ")).unwrap_or_default())
            .as_ptr();
        Ok(())
    });
    status
}

/// The accelerators PCI shows (sysfs under `ACCELERATOR_SYSFS_ROOT`, default
/// /sys) joined with the active vendor's devices by bus id: a row per PCI
/// accelerator in address order, then one per vendor device PCI does not
/// show. Fills up to `maxCount` rows; `*deviceCount` is the number written
/// (a caller whose buffer was filled asks again with a larger one).
///
/// # Safety
/// `devices` is NULL or writable for `maxCount` entries; `deviceCount` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn acceleratorGetPciDevices(
    devices: *mut AcceleratorPciDevice,
    maxCount: usize,
    deviceCount: *mut usize,
) -> ResultCode {
    call("acceleratorGetPciDevices", || {
        let count = out(deviceCount, "deviceCount")?;
        let rows = crate::select::pci_rows()?;
        let dst = out_slice(devices, maxCount, rows.len(), false, "devices")?;
        for (slot, r) in dst.iter_mut().zip(&rows) {
            *slot = pci_row(r);
        }
        *count = dst.len();
        Ok(())
    })
}

fn pci_row(r: &Row) -> AcceleratorPciDevice {
    let p = r.pci.as_ref();
    let (index, uuid) = r.device.clone().unwrap_or((-1, String::new()));
    AcceleratorPciDevice {
        address: fixed_from(p.map_or("", |p| &p.address)),
        vendorId: p.map_or(0, |p| p.vendor_id),
        deviceId: p.map_or(0, |p| p.device_id),
        classCode: p.map_or(0, |p| p.class),
        vendorName: fixed_from(p.map_or("", |p| p.vendor.name)),
        numaNode: p.map_or(-1, |p| p.numa_node),
        iommuGroup: p
            .and_then(|p| p.iommu_group)
            .and_then(|g| i32::try_from(g).ok())
            .unwrap_or(-1),
        currentLinkSpeedGTs: p.map_or(0.0, |p| p.current_link.speed_gts),
        currentLinkWidth: p.map_or(0, |p| p.current_link.width),
        maxLinkSpeedGTs: p.map_or(0.0, |p| p.max_link.speed_gts),
        maxLinkWidth: p.map_or(0, |p| p.max_link.width),
        driver: fixed_from(p.map_or("", |p| p.driver_name())),
        sriovTotalVfs: p.map_or(0, |p| p.sriov_total_vfs),
        sriovNumVfs: p.map_or(0, |p| p.sriov_num_vfs),
        physfn: fixed_from(p.and_then(|p| p.physfn.as_deref()).unwrap_or("")),
        deviceIndex: index,
        deviceUUID: fixed_from(&uuid),
        state: fixed_from(r.state.as_str()),
        mismatch: r.state.mismatch(),
        note: fixed_from(&r.note),
        fix: fixed_from(&r.fix),
    }
}
