//! The only `unsafe` of the nvidia vendor: the C entry points that
//! nvml-wrapper does not cover (MIG instances, GPM, NUMA node, field values,
//! NVLink version) and the CUDA driver's checkpoint API, loaded at run time
//! with libloading and wrapped here into safe functions.
//!
//! Every raw pointer stays inside this file. Device handles come from
//! nvml-wrapper's `Device::handle()`; opaque GPU/compute-instance handles are
//! wrapped in `Gi`/`Ci`, which only this module can build, and are valid
//! while NVML is initialised (the `Driver` in mod.rs outlives every call).

use crate::cbuf::{Padded, Zeroed};
use libloading::Library;
use nvml_wrapper::Device;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

pub type NvmlRet = c_uint;
pub const NVML_SUCCESS: NvmlRet = 0;
pub const NVML_ERROR_NOT_SUPPORTED: NvmlRet = 3;
pub const NVML_ERROR_NOT_FOUND: NvmlRet = 6;
pub const NVML_ERROR_INSUFFICIENT_RESOURCES: NvmlRet = 23;
/// Not an NVML code: the symbol is missing from the loaded library.
pub const MISSING_SYMBOL: NvmlRet = u32::MAX;

type Handle = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct GiProfileInfoV2 {
    version: c_uint,
    id: c_uint,
    is_p2p_supported: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    copy_engine_count: c_uint,
    decoder_count: c_uint,
    encoder_count: c_uint,
    jpeg_count: c_uint,
    ofa_count: c_uint,
    memory_size_mb: c_ulonglong,
    name: [c_char; 96],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct GiProfileInfoV1 {
    id: c_uint,
    is_p2p_supported: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    copy_engine_count: c_uint,
    decoder_count: c_uint,
    encoder_count: c_uint,
    jpeg_count: c_uint,
    ofa_count: c_uint,
    memory_size_mb: c_ulonglong,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct GiInfo {
    device: Handle,
    id: c_uint,
    profile_id: c_uint,
    placement_start: c_uint,
    placement_size: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CiProfileInfo {
    id: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    shared_copy_engine_count: c_uint,
    shared_decoder_count: c_uint,
    shared_encoder_count: c_uint,
    shared_jpeg_count: c_uint,
    shared_ofa_count: c_uint,
}

// Every structure NVML fills is handed over with headroom behind it
// (`Padded`): an NVML newer than these declarations cannot write past it.
impl Zeroed for GiProfileInfoV2 {}
impl Zeroed for GiProfileInfoV1 {}
impl Zeroed for GiInfo {}
impl Zeroed for CiProfileInfo {}

#[repr(C)]
#[derive(Clone, Copy)]
struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_usec: i64,
    value_type: c_uint,
    nvml_return: NvmlRet,
    value: u64,
}

#[repr(C)]
struct GpmSupport {
    version: c_uint,
    is_supported_device: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct GpmMetric {
    metric_id: c_uint,
    nvml_return: NvmlRet,
    value: f64,
    short_name: *mut c_char,
    long_name: *mut c_char,
    unit: *mut c_char,
}

/// NVML_GPM_METRIC_MAX of nvml.h 12.4 (r550) through 13.x: the size of
/// `nvmlGpmMetricsGet_t.metrics[]`, which the driver may use whole.
const GPM_METRIC_MAX: usize = 333;

#[repr(C)]
struct GpmMetricsGet {
    version: c_uint,
    num_metrics: c_uint,
    sample1: Handle,
    sample2: Handle,
    metrics: [GpmMetric; GPM_METRIC_MAX],
}

/// A MIG GPU profile as NVML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GiProfile {
    pub profile_id: u32,
    pub nvml_id: u32,
    /// NVIDIA's name without the "MIG " prefix, e.g. "1g.10gb".
    pub name: String,
    pub slices: u32,
    pub instance_count: u32,
    pub sms: u32,
    pub memory_mb: u64,
}

/// A GPU instance handle (valid while NVML is initialised).
pub struct Gi(Handle);
/// A compute instance handle.
pub struct Ci(Handle);
/// nvmlGpmSampleFree.
type GpmFree = unsafe extern "C" fn(Handle) -> NvmlRet;

/// A GPM sample buffer, freed on drop. It keeps the free function rather
/// than a borrow of the library so the vendor can hold the previous sample
/// between calls; libnvidia-ml stays loaded for as long as the vendor lives.
pub struct GpmSample {
    ptr: Handle,
    free: GpmFree,
}
// SAFETY: NVML handles are process-global identifiers, documented as usable
// from any thread; the sample buffer is only touched through NVML calls.
unsafe impl Send for GpmSample {}

fn handle(dev: &Device) -> Handle {
    // SAFETY: the handle is only passed back to NVML while `dev` borrows a live Nvml.
    unsafe { dev.handle() as Handle }
}

fn cstr(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Symbols of libnvidia-ml.so.1 beyond nvml-wrapper, from a second handle
/// on the same library (dlopen returns the one already loaded).
pub struct NvmlExt {
    lib: Library,
}

macro_rules! sym {
    ($lib:expr, $name:literal, $ty:ty) => {{
        // SAFETY: the type is the C prototype of the named NVML/CUDA function.
        match unsafe { $lib.get::<$ty>(concat!($name, "\0").as_bytes()) } {
            Ok(s) => s,
            Err(_) => return Err(MISSING_SYMBOL),
        }
    }};
}

/// Run an NVML instance enumerator: `fill` gets an array of `max` (at
/// least 1) null handles and a count, which NVML sets to how many it wrote.
fn instances(
    max: u32,
    fill: impl FnOnce(*mut Handle, *mut c_uint) -> NvmlRet,
) -> Result<Vec<Handle>, NvmlRet> {
    let mut v: Vec<Handle> = vec![std::ptr::null_mut(); max.max(1) as usize];
    let mut n: c_uint = 0;
    ok(fill(v.as_mut_ptr(), &mut n))?;
    v.truncate((n as usize).min(v.len()));
    Ok(v)
}

fn ok(r: NvmlRet) -> Result<(), NvmlRet> {
    if r == NVML_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

impl NvmlExt {
    pub fn open(path: &std::ffi::OsStr) -> Result<NvmlExt, String> {
        // SAFETY: loading libnvidia-ml runs no initialisers beyond its own.
        let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        Ok(NvmlExt { lib })
    }

    pub fn numa_node(&self, dev: &Device) -> Result<u32, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceGetNumaNodeId",
            unsafe extern "C" fn(Handle, *mut c_uint) -> NvmlRet
        );
        let mut node = 0;
        // SAFETY: valid handle, valid out pointer.
        ok(unsafe { f(handle(dev), &mut node) })?;
        Ok(node)
    }

    pub fn nvlink_version(&self, dev: &Device, link: u32) -> Result<u32, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceGetNvLinkVersion",
            unsafe extern "C" fn(Handle, c_uint, *mut c_uint) -> NvmlRet
        );
        let mut v = 0;
        // SAFETY: valid handle, valid out pointer.
        ok(unsafe { f(handle(dev), link, &mut v) })?;
        Ok(v)
    }

    /// Unsigned 64-bit field values `(field, scope)`; per entry its own result.
    pub fn field_values(
        &self,
        dev: &Device,
        ids: &[(u32, u32)],
    ) -> Result<Vec<Result<u64, NvmlRet>>, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceGetFieldValues",
            unsafe extern "C" fn(Handle, c_int, *mut FieldValue) -> NvmlRet
        );
        let mut vals: Vec<FieldValue> = ids
            .iter()
            .map(|&(id, scope)| FieldValue {
                field_id: id,
                scope_id: scope,
                timestamp: 0,
                latency_usec: 0,
                value_type: 0,
                nvml_return: 0,
                value: 0,
            })
            .collect();
        // SAFETY: the array has exactly `len` entries.
        ok(unsafe { f(handle(dev), vals.len() as c_int, vals.as_mut_ptr()) })?;
        Ok(vals
            .iter()
            .map(|v| {
                if v.nvml_return == NVML_SUCCESS {
                    Ok(v.value)
                } else {
                    Err(v.nvml_return)
                }
            })
            .collect())
    }

    /// A GPU-instance profile, `None` where the device does not offer it.
    pub fn gi_profile(&self, dev: &Device, profile: u32) -> Result<Option<GiProfile>, NvmlRet> {
        type V2 = unsafe extern "C" fn(Handle, c_uint, *mut GiProfileInfoV2) -> NvmlRet;
        type V1 = unsafe extern "C" fn(Handle, c_uint, *mut GiProfileInfoV1) -> NvmlRet;
        // SAFETY: prototypes from nvml.h; out structs are plain data.
        if let Ok(f) = unsafe {
            self.lib
                .get::<V2>(b"nvmlDeviceGetGpuInstanceProfileInfoV\0")
        } {
            let mut padded = Padded::<GiProfileInfoV2>::new();
            padded.value.version = std::mem::size_of::<GiProfileInfoV2>() as c_uint | (2 << 24);
            // SAFETY: valid handle and versioned out struct, with headroom.
            let r = unsafe { f(handle(dev), profile, padded.ptr()) };
            let info = padded.value;
            if r != MISSING_SYMBOL && r != NVML_ERROR_NOT_SUPPORTED && r != 2 {
                // 2 = NVML_ERROR_INVALID_ARGUMENT: profile unknown to this driver.
                ok(r)?;
                let name = cstr(&info.name);
                let name = name.strip_prefix("MIG ").unwrap_or(&name).to_string();
                return Ok(Some(GiProfile {
                    profile_id: profile,
                    nvml_id: info.id,
                    name,
                    slices: info.slice_count,
                    instance_count: info.instance_count,
                    sms: info.multiprocessor_count,
                    memory_mb: info.memory_size_mb,
                }));
            }
            if r != MISSING_SYMBOL && r != 2 {
                return Ok(None);
            }
        }
        let f = sym!(self.lib, "nvmlDeviceGetGpuInstanceProfileInfo", V1);
        let mut padded = Padded::<GiProfileInfoV1>::new();
        // SAFETY: valid handle and out struct, with headroom.
        let r = unsafe { f(handle(dev), profile, padded.ptr()) };
        let info = padded.value;
        match r {
            NVML_SUCCESS => Ok(Some(GiProfile {
                profile_id: profile,
                nvml_id: info.id,
                name: format!(
                    "{}g.{}gb",
                    info.slice_count,
                    info.memory_size_mb.div_ceil(1024)
                ),
                slices: info.slice_count,
                instance_count: info.instance_count,
                sms: info.multiprocessor_count,
                memory_mb: info.memory_size_mb,
            })),
            NVML_ERROR_NOT_SUPPORTED | 2 => Ok(None),
            r => Err(r),
        }
    }

    pub fn create_gi(&self, dev: &Device, nvml_id: u32) -> Result<Gi, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceCreateGpuInstance",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> NvmlRet
        );
        let mut gi: Handle = std::ptr::null_mut();
        // SAFETY: valid handle, out pointer.
        ok(unsafe { f(handle(dev), nvml_id, &mut gi) })?;
        Ok(Gi(gi))
    }

    /// The GPU instances of one profile.
    pub fn gis(&self, dev: &Device, nvml_id: u32, max: u32) -> Result<Vec<Gi>, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceGetGpuInstances",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle, *mut c_uint) -> NvmlRet
        );
        // SAFETY: `instances` passes an array of `max` handles, as NVML
        // requires (the profile's instance count), and a count pointer.
        let v = instances(max, |v, n| unsafe { f(handle(dev), nvml_id, v, n) })?;
        Ok(v.into_iter().map(Gi).collect())
    }

    /// (GPU instance id, NVML profile id).
    pub fn gi_info(&self, gi: &Gi) -> Result<(u32, u32), NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpuInstanceGetInfo",
            unsafe extern "C" fn(Handle, *mut GiInfo) -> NvmlRet
        );
        let mut info = Padded::<GiInfo>::new();
        // SAFETY: instance handle from NVML, out struct with headroom.
        ok(unsafe { f(gi.0, info.ptr()) })?;
        Ok((info.value.id, info.value.profile_id))
    }

    pub fn gi_by_id(&self, dev: &Device, id: u32) -> Result<Gi, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlDeviceGetGpuInstanceById",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> NvmlRet
        );
        let mut gi: Handle = std::ptr::null_mut();
        // SAFETY: valid handle, out pointer.
        ok(unsafe { f(handle(dev), id, &mut gi) })?;
        Ok(Gi(gi))
    }

    /// NVML id of a compute-instance profile (shared engines) and its instance count.
    pub fn ci_profile(&self, gi: &Gi, profile: u32) -> Result<(u32, u32), NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            unsafe extern "C" fn(Handle, c_uint, c_uint, *mut CiProfileInfo) -> NvmlRet
        );
        let mut info = Padded::<CiProfileInfo>::new();
        // SAFETY: instance handle, engine profile 0 (shared), out struct
        // with headroom.
        ok(unsafe { f(gi.0, profile, 0, info.ptr()) })?;
        Ok((info.value.id, info.value.instance_count))
    }

    pub fn create_ci(&self, gi: &Gi, ci_nvml_id: u32) -> Result<Ci, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpuInstanceCreateComputeInstance",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> NvmlRet
        );
        let mut ci: Handle = std::ptr::null_mut();
        // SAFETY: instance handle, out pointer.
        ok(unsafe { f(gi.0, ci_nvml_id, &mut ci) })?;
        Ok(Ci(ci))
    }

    pub fn cis(&self, gi: &Gi, ci_nvml_id: u32, max: u32) -> Result<Vec<Ci>, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpuInstanceGetComputeInstances",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle, *mut c_uint) -> NvmlRet
        );
        // SAFETY: as in `gis`: an array of `max` handles and a count pointer.
        let v = instances(max, |v, n| unsafe { f(gi.0, ci_nvml_id, v, n) })?;
        Ok(v.into_iter().map(Ci).collect())
    }

    pub fn destroy_ci(&self, ci: Ci) -> Result<(), NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlComputeInstanceDestroy",
            unsafe extern "C" fn(Handle) -> NvmlRet
        );
        // SAFETY: handle from NVML, consumed.
        ok(unsafe { f(ci.0) })
    }

    pub fn destroy_gi(&self, gi: Gi) -> Result<(), NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpuInstanceDestroy",
            unsafe extern "C" fn(Handle) -> NvmlRet
        );
        // SAFETY: handle from NVML, consumed.
        ok(unsafe { f(gi.0) })
    }

    /// Every MIG device of a GPU: (GPU instance id, UUID, [total, free,
    /// used] memory bytes as nvmlDeviceGetMemoryInfo gives them, 0s if not).
    pub fn mig_devices(&self, dev: &Device) -> Result<Vec<(u32, String, [u64; 3])>, NvmlRet> {
        let count_f = sym!(
            self.lib,
            "nvmlDeviceGetMaxMigDeviceCount",
            unsafe extern "C" fn(Handle, *mut c_uint) -> NvmlRet
        );
        let by_index = sym!(
            self.lib,
            "nvmlDeviceGetMigDeviceHandleByIndex",
            unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> NvmlRet
        );
        let gi_id = sym!(
            self.lib,
            "nvmlDeviceGetGpuInstanceId",
            unsafe extern "C" fn(Handle, *mut c_uint) -> NvmlRet
        );
        let uuid = sym!(
            self.lib,
            "nvmlDeviceGetUUID",
            unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> NvmlRet
        );
        let mem = sym!(
            self.lib,
            "nvmlDeviceGetMemoryInfo",
            unsafe extern "C" fn(Handle, *mut [c_ulonglong; 3]) -> NvmlRet
        );
        let mut max = 0;
        // SAFETY: valid handle, out pointer.
        ok(unsafe { count_f(handle(dev), &mut max) })?;
        let mut out = Vec::new();
        for i in 0..max {
            let mut mig: Handle = std::ptr::null_mut();
            // SAFETY: valid handle, out pointer.
            if unsafe { by_index(handle(dev), i, &mut mig) } != NVML_SUCCESS {
                continue;
            }
            let (mut id, mut buf, mut m) = (0, [0 as c_char; 96], [0 as c_ulonglong; 3]);
            // SAFETY: MIG handle from NVML; buffers sized as passed.
            unsafe {
                ok(gi_id(mig, &mut id))?;
                ok(uuid(mig, buf.as_mut_ptr(), buf.len() as c_uint))?;
                if mem(mig, &mut m) != NVML_SUCCESS {
                    m = [0; 3];
                }
            }
            out.push((id, cstr(&buf), m));
        }
        Ok(out)
    }

    pub fn gpm_supported(&self, dev: &Device) -> bool {
        type F = unsafe extern "C" fn(Handle, *mut GpmSupport) -> NvmlRet;
        // SAFETY: prototype from nvml.h.
        let Ok(f) = (unsafe { self.lib.get::<F>(b"nvmlGpmQueryDeviceSupport\0") }) else {
            return false;
        };
        let mut s = GpmSupport {
            version: 1,
            is_supported_device: 0,
        };
        // SAFETY: valid handle, versioned out struct.
        unsafe { f(handle(dev), &mut s) == NVML_SUCCESS && s.is_supported_device != 0 }
    }

    pub fn gpm_sample(&self, dev: &Device) -> Result<GpmSample, NvmlRet> {
        let alloc = sym!(
            self.lib,
            "nvmlGpmSampleAlloc",
            unsafe extern "C" fn(*mut Handle) -> NvmlRet
        );
        let get = sym!(
            self.lib,
            "nvmlGpmSampleGet",
            unsafe extern "C" fn(Handle, Handle) -> NvmlRet
        );
        let free: GpmFree = *sym!(self.lib, "nvmlGpmSampleFree", GpmFree);
        let mut p: Handle = std::ptr::null_mut();
        // SAFETY: out pointer; the sample is freed by GpmSample's Drop.
        ok(unsafe { alloc(&mut p) })?;
        let s = GpmSample { ptr: p, free };
        // SAFETY: valid device handle and sample.
        ok(unsafe { get(handle(dev), s.ptr) })?;
        Ok(s)
    }

    /// GPM metrics between two samples, each with its own result.
    pub fn gpm_metrics(
        &self,
        a: &GpmSample,
        b: &GpmSample,
        ids: &[u32],
    ) -> Result<Vec<Result<f64, NvmlRet>>, NvmlRet> {
        let f = sym!(
            self.lib,
            "nvmlGpmMetricsGet",
            unsafe extern "C" fn(*mut GpmMetricsGet) -> NvmlRet
        );
        let n = ids.len().min(GPM_METRIC_MAX);
        // SAFETY: plain C struct (null pointers, zeros).
        let mut m: Box<GpmMetricsGet> = Box::new(unsafe { std::mem::zeroed() });
        m.version = 1;
        m.num_metrics = n as c_uint;
        m.sample1 = a.ptr;
        m.sample2 = b.ptr;
        for (slot, &id) in m.metrics.iter_mut().zip(ids) {
            slot.metric_id = id;
        }
        // SAFETY: the struct is fully initialised; NVML writes only the first n metrics.
        ok(unsafe { f(&mut *m) })?;
        Ok(m.metrics[..n]
            .iter()
            .map(|x| {
                if x.nvml_return == NVML_SUCCESS {
                    Ok(x.value)
                } else {
                    Err(x.nvml_return)
                }
            })
            .collect())
    }
}

impl Drop for GpmSample {
    fn drop(&mut self) {
        // SAFETY: the sample came from nvmlGpmSampleAlloc and is freed once, here.
        unsafe { (self.free)(self.ptr) };
    }
}

// ---- CUDA driver: cuInit, cuDriverGetVersion and the checkpoint API ----

pub type CuResult = c_int;
pub const CUDA_SUCCESS: CuResult = 0;

/// CUprocessState (cuda.h, CUDA 12.8+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    Running,
    Locked,
    Checkpointed,
    Failed,
    Other(c_int),
}

#[repr(C)]
struct LockArgs {
    timeout_ms: c_uint,
    reserved0: c_uint,
    reserved1: [u64; 7],
}

/// CUcheckpointCheckpointArgs / RestoreArgs / UnlockArgs: reserved, zeroed.
#[repr(C)]
struct ReservedArgs {
    reserved: [u64; 8],
}

pub struct Cuda {
    lib: Library,
    pub driver_version: i32,
    pub has_checkpoint: bool,
}

impl Cuda {
    pub fn open(path: &std::ffi::OsStr) -> Result<Cuda, String> {
        // SAFETY: loading libcuda runs only its own initialisers.
        let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        type Init = unsafe extern "C" fn(c_uint) -> CuResult;
        type Ver = unsafe extern "C" fn(*mut c_int) -> CuResult;
        // SAFETY: prototypes from cuda.h.
        let (init, ver) = unsafe {
            (
                lib.get::<Init>(b"cuInit\0").map_err(|e| e.to_string())?,
                lib.get::<Ver>(b"cuDriverGetVersion\0")
                    .map_err(|e| e.to_string())?,
            )
        };
        // SAFETY: cuInit(0) is the documented first call.
        let r = unsafe { init(0) };
        if r != CUDA_SUCCESS {
            return Err(format!("cuInit failed with CUresult {r}"));
        }
        let mut v = 0;
        // SAFETY: out pointer.
        unsafe { ver(&mut v) };
        let names: [&[u8]; 5] = [
            b"cuCheckpointProcessGetState\0",
            b"cuCheckpointProcessLock\0",
            b"cuCheckpointProcessCheckpoint\0",
            b"cuCheckpointProcessRestore\0",
            b"cuCheckpointProcessUnlock\0",
        ];
        // SAFETY: only the presence of the symbols is checked.
        let has_checkpoint = names
            .iter()
            .all(|n| unsafe { lib.get::<unsafe extern "C" fn()>(n) }.is_ok());
        Ok(Cuda {
            lib,
            driver_version: v,
            has_checkpoint,
        })
    }

    fn cu(&self, name: &[u8], pid: i32, args: *mut c_void) -> CuResult {
        type F = unsafe extern "C" fn(c_int, *mut c_void) -> CuResult;
        // SAFETY: every cuCheckpointProcess* call takes (int pid, Args*).
        match unsafe { self.lib.get::<F>(name) } {
            // SAFETY: args points at the matching, zero-initialised struct or is null.
            Ok(f) => unsafe { f(pid, args) },
            Err(_) => 801, // CUDA_ERROR_NOT_SUPPORTED
        }
    }

    pub fn state(&self, pid: i32) -> Result<ProcessState, CuResult> {
        type F = unsafe extern "C" fn(c_int, *mut c_int) -> CuResult;
        // SAFETY: prototype from cuda.h.
        let f = unsafe { self.lib.get::<F>(b"cuCheckpointProcessGetState\0") }.map_err(|_| 801)?;
        let mut s: c_int = -1;
        // SAFETY: out pointer.
        let r = unsafe { f(pid, &mut s) };
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        Ok(match s {
            0 => ProcessState::Running,
            1 => ProcessState::Locked,
            2 => ProcessState::Checkpointed,
            3 => ProcessState::Failed,
            x => ProcessState::Other(x),
        })
    }

    pub fn lock(&self, pid: i32, timeout_ms: u32) -> CuResult {
        let mut a = LockArgs {
            timeout_ms,
            reserved0: 0,
            reserved1: [0; 7],
        };
        self.cu(
            b"cuCheckpointProcessLock\0",
            pid,
            &mut a as *mut LockArgs as *mut c_void,
        )
    }

    /// A checkpoint call whose argument struct is reserved (all zero).
    fn cu_reserved(&self, name: &[u8], pid: i32) -> CuResult {
        let mut a = ReservedArgs { reserved: [0; 8] };
        self.cu(name, pid, &mut a as *mut ReservedArgs as *mut c_void)
    }

    pub fn checkpoint(&self, pid: i32) -> CuResult {
        self.cu_reserved(b"cuCheckpointProcessCheckpoint\0", pid)
    }

    pub fn restore(&self, pid: i32) -> CuResult {
        self.cu_reserved(b"cuCheckpointProcessRestore\0", pid)
    }

    pub fn unlock(&self, pid: i32) -> CuResult {
        self.cu_reserved(b"cuCheckpointProcessUnlock\0", pid)
    }

    /// cuGetErrorName for messages.
    pub fn error_name(&self, r: CuResult) -> String {
        type F = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
        // SAFETY: prototype from cuda.h.
        if let Ok(f) = unsafe { self.lib.get::<F>(b"cuGetErrorName\0") } {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: out pointer; the driver returns a static string.
            if unsafe { f(r, &mut p) } == CUDA_SUCCESS && !p.is_null() {
                // SAFETY: NUL-terminated static string from the driver.
                return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            }
        }
        format!("CUresult {r}")
    }
}

/// `super::shut_down` runs as an ELF destructor: when this library is
/// unloaded (dlclose) or, if it is still loaded, when the process exits.
/// (A libc `atexit` handler would outlive the unloaded code after dlclose.)
#[used]
#[link_section = ".fini_array"]
static SHUT_DOWN_AT_UNLOAD: extern "C" fn() = super::shut_down;
