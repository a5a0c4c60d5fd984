//! NVML's running-process lists inside a worker: the compute, graphics
//! and MPS lists, every version (`nvmlProcessInfo_v1_t` for the
//! unsuffixed functions, `nvmlProcessInfo_v2_t` for `_v2`,
//! `nvmlProcessInfo_t`, of the same layout, for `_v3`), show the worker's
//! own processes of this pid namespace (pids as it sees them) with the
//! bytes the limiter charged to each on that device, and nothing of other
//! tenants. The real call runs first (an error of NVML's, e.g. a bad
//! handle, is the answer); its list is then replaced. Without a worker,
//! or with the limiter's state unusable, NVML's list passes through.

use super::*;

/// `nvmlProcessInfo_v1_t` (nvml.h).
#[repr(C)]
pub struct ProcessInfoV1 {
    pid: c_uint,
    used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t` and `nvmlProcessInfo_t` (nvml.h).
#[repr(C)]
pub struct ProcessInfoV2 {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// An entry of a list: a process and its bytes.
trait Entry {
    fn set(&mut self, pid: i32, bytes: u64);
}

impl Entry for ProcessInfoV1 {
    fn set(&mut self, pid: i32, bytes: u64) {
        (self.pid, self.used_gpu_memory) = (pid as c_uint, bytes);
    }
}

impl Entry for ProcessInfoV2 {
    fn set(&mut self, pid: i32, bytes: u64) {
        (self.pid, self.used_gpu_memory) = (pid as c_uint, bytes);
        // Not a MIG device's (nvml.h: 0xFFFFFFFF otherwise).
        (self.gpu_instance_id, self.compute_instance_id) = (c_uint::MAX, c_uint::MAX);
    }
}

const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;

/// The worker's processes on NVML device `device`; None: let NVML's list
/// through (no worker, the state unusable).
fn own_list(device: *mut c_void) -> Option<Vec<(i32, u64)>> {
    if !limits::active() || limits::broken() {
        return None;
    }
    boundary(None, || {
        // SAFETY: the handle the program passed, which NVML just accepted.
        match crate::devices::nvml_device(device as usize, || unsafe { nvml_uuid(device) }) {
            Some((slot, _)) => limits::processes_on(slot),
            // A device the limiter has no slot for: none of the worker's.
            None => Some(Vec::new()),
        }
    })
}

/// The real list call `id`, then the worker's own list in its place: as
/// NVML, a buffer too small (or NULL) gets the count and
/// NVML_ERROR_INSUFFICIENT_SIZE (NVML_SUCCESS when the list is empty).
unsafe fn process_list<T: Entry>(
    id: Nv,
    device: *mut c_void,
    count: *mut c_uint,
    infos: *mut T,
) -> NvmlReturn {
    type F<T> = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut T) -> NvmlReturn;
    let Some(real) = NVML.real::<F<T>>(id as usize) else {
        return NVML_ERROR_UNINITIALIZED;
    };
    if count.is_null() {
        return real(device, count, infos);
    }
    let room = *count;
    let r = real(device, count, infos);
    if r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE {
        return r;
    }
    let Some(list) = own_list(device) else {
        return r;
    };
    *count = list.len() as c_uint;
    if infos.is_null() || (room as usize) < list.len() {
        return if list.is_empty() {
            NVML_SUCCESS
        } else {
            NVML_ERROR_INSUFFICIENT_SIZE
        };
    }
    for (i, (pid, bytes)) in list.into_iter().enumerate() {
        (*infos.add(i)).set(pid, bytes);
    }
    NVML_SUCCESS
}

macro_rules! process_list {
    ($name:ident, $id:expr, $t:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: *mut c_void,
            infoCount: *mut c_uint,
            infos: *mut $t,
        ) -> NvmlReturn {
            process_list($id, device, infoCount, infos)
        }
    };
}

process_list!(
    nvmlDeviceGetComputeRunningProcesses,
    Nv::ComputeProcesses,
    ProcessInfoV1
);
process_list!(
    nvmlDeviceGetComputeRunningProcesses_v2,
    Nv::ComputeProcessesV2,
    ProcessInfoV2
);
process_list!(
    nvmlDeviceGetComputeRunningProcesses_v3,
    Nv::ComputeProcessesV3,
    ProcessInfoV2
);
process_list!(
    nvmlDeviceGetGraphicsRunningProcesses,
    Nv::GraphicsProcesses,
    ProcessInfoV1
);
process_list!(
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    Nv::GraphicsProcessesV2,
    ProcessInfoV2
);
process_list!(
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    Nv::GraphicsProcessesV3,
    ProcessInfoV2
);
process_list!(
    nvmlDeviceGetMPSComputeRunningProcesses,
    Nv::MpsProcesses,
    ProcessInfoV1
);
process_list!(
    nvmlDeviceGetMPSComputeRunningProcesses_v2,
    Nv::MpsProcessesV2,
    ProcessInfoV2
);
process_list!(
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    Nv::MpsProcessesV3,
    ProcessInfoV2
);
