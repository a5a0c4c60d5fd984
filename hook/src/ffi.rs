//! THE UNSAFE PART OF THE HOOK: every exported symbol, every call into the
//! driver through a raw function pointer, and the interposed `dlsym`.
//! Nothing else in the crate is `unsafe`.
//!
//! # Finding the real functions
//! The driver (`libcuda.so.1`) and NVML (`libnvidia-ml.so.1`) are each a
//! [`Lib`]: a table of the functions the hook wraps (and a few it only
//! calls), resolved once, by the real `dlsym` on the library's own handle,
//! when first needed. The handle is the already-loaded library
//! (`dlopen(soname, RTLD_NOLOAD)`), else the object that holds a pointer
//! the program was just handed (`dladdr`), else whatever `RTLD_NEXT`
//! finds: the hook never loads a driver the program did not load (NVML is
//! the one exception: [`nvml_ready`] loads it to measure contexts). A failed
//! resolution is not remembered (the program may load the driver later).
//!
//! # The ways in
//! - Direct links: the exported `cu*`/`nvml*` symbols below.
//! - `dlsym`: exported here as a trampoline (x86-64 and AArch64 assembly)
//!   that asks [`intercept`] first and otherwise *jumps* to the real
//!   `dlsym`, so the real one sees the program's own return address and
//!   `RTLD_NEXT` keeps meaning "after the caller". `intercept` looks up
//!   driver and NVML names (`cu` + an upper-case letter, `nvml…`) itself
//!   and swaps a returned real function for its wrapper by identity; a
//!   thread-local guard sends any `dlsym` made while it runs (by the
//!   hook's own dependencies) straight through. For those names a caller's
//!   `RTLD_NEXT` is resolved from the hook's place in the search order,
//!   which for a preloaded hook is the program's view of the driver.
//! - `cuGetProcAddress` / `cuGetProcAddress_v2` (and so the runtime's
//!   `cudaGetDriverEntryPoint[ByVersion]`, which ends there): the real one
//!   picks the version (`_v2`, `_v3`) and stream variant (`_ptsz`); the
//!   hook swaps the returned pointer by identity (real function → its
//!   wrapper), never by name. Unknown functions come back untouched.
//!
//! NULL out-pointers go to the driver as they came (it reports
//! CUDA_ERROR_INVALID_VALUE); nothing is charged for them.

#![allow(non_snake_case)]

use crate::context::{self, Contexts};
use crate::limits;
use crate::memory::{self, Allocated, CuResult, Driver, Kind, Target, CUDA_SUCCESS};
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering::*};
use std::sync::{Once, OnceLock};

type CUdeviceptr = u64;
type CUdevice = c_int;
type CUcontext = *mut c_void;
type CUstream = *mut c_void;
type CUmemoryPool = *mut c_void;
type CUarray = *mut c_void;
type CUmipmappedArray = *mut c_void;
type CUmemGenericAllocationHandle = u64;
type NvmlReturn = c_int;

/// The driver cannot be found: `cu*` was called without a driver loaded.
const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
/// A panic inside the hook (never expected).
const CUDA_ERROR_UNKNOWN: CuResult = 999;
const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
const NVML_SUCCESS: NvmlReturn = 0;
/// `CUmemLocationType` (cuda.h): DEVICE = 1; HOST = 2, HOST_NUMA = 3 and
/// HOST_NUMA_CURRENT = 4 are host memory.
const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
const CU_MEM_LOCATION_TYPE_HOST: c_uint = 2;
const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: c_uint = 4;
/// CUDA 13.4's DEVICE_LOCALITY_DOMAIN = 6: a part of a device, `id` read as
/// `localized { unsigned char deviceId, localityDomainId, reserved[2]; }`.
const CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN: c_uint = 6;

/// `CUDA_ARRAY_DESCRIPTOR` (cuda.h).
#[repr(C)]
pub struct ArrayDescriptor {
    width: usize,
    height: usize,
    format: c_uint,
    channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (cuda.h).
#[repr(C)]
pub struct Array3dDescriptor {
    width: usize,
    height: usize,
    depth: usize,
    format: c_uint,
    channels: c_uint,
    flags: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1` (cuda.h, CUDA < 3.2: 32-bit sizes).
#[repr(C)]
pub struct ArrayDescriptorV1 {
    width: c_uint,
    height: c_uint,
    format: c_uint,
    channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1` (cuda.h, CUDA < 3.2).
#[repr(C)]
pub struct Array3dDescriptorV1 {
    width: c_uint,
    height: c_uint,
    depth: c_uint,
    format: c_uint,
    channels: c_uint,
    flags: c_uint,
}

/// `CUmemLocation` (cuda.h).
#[repr(C)]
pub struct MemLocation {
    kind: c_uint,
    id: c_int,
}

/// `CUmemAllocationProp` (cuda.h), up to the fields the hook reads.
#[repr(C)]
pub struct MemAllocationProp {
    kind: c_uint,
    requested_handle_types: c_uint,
    location: MemLocation,
}

/// `CUmemPoolProps` (cuda.h: allocType, handleTypes, location, ...), up to
/// the fields the hook reads.
#[repr(C)]
pub struct MemPoolProps {
    alloc_type: c_uint,
    handle_types: c_uint,
    location: MemLocation,
}

/// `nvmlMemory_t` (nvml.h).
#[repr(C)]
pub struct NvmlMemory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t` (nvml.h).
#[repr(C)]
pub struct NvmlMemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

// ---- the panic boundary ------------------------------------------------------

/// The one panic-catching wrapper: no panic unwinds into the host program.
fn boundary<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

// ---- the real dlsym -------------------------------------------------------------

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

unsafe extern "C" fn no_dlsym(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// The real `dlsym` (the trampoline jumps through it).
static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(no_dlsym as *mut c_void);
static DLSYM_FOUND: Once = Once::new();

/// glibc's versions of `dlsym`: the current one first.
#[cfg(target_arch = "x86_64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];
#[cfg(target_arch = "aarch64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const DLSYM_VERSIONS: [&CStr; 1] = [c"GLIBC_2.34"];

fn real_dlsym() -> DlsymFn {
    DLSYM_FOUND.call_once(|| {
        for v in DLSYM_VERSIONS {
            // SAFETY: dlvsym with constant NUL-terminated strings; it is not
            // interposed, so this cannot recurse.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !p.is_null() {
                REAL_DLSYM.store(p, Release);
                return;
            }
        }
    });
    // SAFETY: REAL_DLSYM holds `no_dlsym` or glibc's dlsym, both DlsymFn.
    unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(REAL_DLSYM.load(Acquire)) }
}

thread_local! {
    /// This thread is inside `intercept`.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Names the hook may wrap: the driver's (`cu` + upper case) and NVML's.
fn lib_of(name: &[u8]) -> Option<&'static Lib> {
    match name {
        [b'c', b'u', c, ..] if c.is_ascii_uppercase() => Some(&CUDA),
        [b'n', b'v', b'm', b'l', ..] => Some(&NVML),
        _ => None,
    }
}

/// The `dlsym` trampoline's question: the answer for `name` if it is a
/// function the hook wraps, else NULL (the trampoline then jumps to the
/// real `dlsym`, which `real_dlsym` has resolved by now).
extern "C" fn intercept(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let real = real_dlsym();
    if name.is_null() || INSIDE.try_with(Cell::get).unwrap_or(true) {
        return std::ptr::null_mut();
    }
    // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    let Some(lib) = lib_of(bytes) else {
        return std::ptr::null_mut();
    };
    INSIDE.set(true);
    let found = boundary(std::ptr::null_mut(), || {
        // SAFETY: the real dlsym with the caller's own arguments.
        let p = unsafe { real(handle, name) };
        if p.is_null() {
            p
        } else {
            lib.swap(p)
        }
    });
    INSIDE.set(false);
    found
}

#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {intercept}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        intercept = sym intercept,
        real = sym REAL_DLSYM,
    )
}

#[cfg(target_arch = "aarch64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {intercept}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x9, 2f",
        "mov x0, x9",
        "ret",
        "2:",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        intercept = sym intercept,
        real = sym REAL_DLSYM,
    )
}

/// Elsewhere the real `dlsym` sees the hook as its caller (RTLD_NEXT is
/// resolved from the hook's place in the search order).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match intercept(handle, name) {
        p if p.is_null() => real_dlsym()(handle, name),
        p => p,
    }
}

// ---- the wrapped libraries --------------------------------------------------------

/// One function of a wrapped library: its name and the hook's wrapper
/// (NULL for functions the hook only calls).
struct Hook {
    name: &'static CStr,
    wrapper: *const c_void,
}

// SAFETY: the pointers are addresses of functions, never written.
unsafe impl Sync for Hook {}

/// A wrapped library and its real functions, resolved once.
pub struct Lib {
    soname: &'static CStr,
    /// A function every version of the library exports.
    marker: &'static CStr,
    hooks: &'static [Hook],
    reals: OnceLock<Vec<usize>>,
}

macro_rules! table {
    ($E:ident, $ARR:ident { $($v:ident = $name:literal => $w:expr,)* }) => {
        #[derive(Clone, Copy)]
        #[repr(usize)]
        enum $E { $($v),* }
        static $ARR: [Hook; [$($name),*].len()] = [$(Hook { name: $name, wrapper: $w }),*];
    };
}

const NONE: *const c_void = std::ptr::null();

table!(Cu, CUDA_HOOKS {
    GetProcAddress = c"cuGetProcAddress" => cuGetProcAddress as *const c_void,
    GetProcAddressV2 = c"cuGetProcAddress_v2" => cuGetProcAddress_v2 as *const c_void,
    MemAllocV2 = c"cuMemAlloc_v2" => cuMemAlloc_v2 as *const c_void,
    MemAlloc = c"cuMemAlloc" => cuMemAlloc as *const c_void,
    MemAllocPitchV2 = c"cuMemAllocPitch_v2" => cuMemAllocPitch_v2 as *const c_void,
    MemAllocPitch = c"cuMemAllocPitch" => cuMemAllocPitch as *const c_void,
    MemAllocManaged = c"cuMemAllocManaged" => cuMemAllocManaged as *const c_void,
    MemAllocAsync = c"cuMemAllocAsync" => cuMemAllocAsync as *const c_void,
    MemAllocAsyncPtsz = c"cuMemAllocAsync_ptsz" => cuMemAllocAsync_ptsz as *const c_void,
    MemAllocFromPoolAsync = c"cuMemAllocFromPoolAsync" => cuMemAllocFromPoolAsync as *const c_void,
    MemAllocFromPoolAsyncPtsz = c"cuMemAllocFromPoolAsync_ptsz"
        => cuMemAllocFromPoolAsync_ptsz as *const c_void,
    MemCreate = c"cuMemCreate" => vmm::cuMemCreate as *const c_void,
    ArrayCreateV2 = c"cuArrayCreate_v2" => cuArrayCreate_v2 as *const c_void,
    Array3DCreateV2 = c"cuArray3DCreate_v2" => cuArray3DCreate_v2 as *const c_void,
    ArrayCreate = c"cuArrayCreate" => cuArrayCreate as *const c_void,
    Array3DCreate = c"cuArray3DCreate" => cuArray3DCreate as *const c_void,
    MipmappedArrayCreate = c"cuMipmappedArrayCreate" => cuMipmappedArrayCreate as *const c_void,
    MemFreeV2 = c"cuMemFree_v2" => cuMemFree_v2 as *const c_void,
    MemFree = c"cuMemFree" => cuMemFree as *const c_void,
    MemFreeAsync = c"cuMemFreeAsync" => cuMemFreeAsync as *const c_void,
    MemFreeAsyncPtsz = c"cuMemFreeAsync_ptsz" => cuMemFreeAsync_ptsz as *const c_void,
    MemRelease = c"cuMemRelease" => vmm::cuMemRelease as *const c_void,
    MemMap = c"cuMemMap" => vmm::cuMemMap as *const c_void,
    MemUnmap = c"cuMemUnmap" => vmm::cuMemUnmap as *const c_void,
    MemRetainAllocationHandle = c"cuMemRetainAllocationHandle"
        => vmm::cuMemRetainAllocationHandle as *const c_void,
    MemExportToShareableHandle = c"cuMemExportToShareableHandle"
        => vmm::cuMemExportToShareableHandle as *const c_void,
    MemImportFromShareableHandle = c"cuMemImportFromShareableHandle"
        => vmm::cuMemImportFromShareableHandle as *const c_void,
    MulticastCreate = c"cuMulticastCreate" => vmm::cuMulticastCreate as *const c_void,
    MulticastBindMem = c"cuMulticastBindMem" => vmm::cuMulticastBindMem as *const c_void,
    MulticastBindMemV2 = c"cuMulticastBindMem_v2" => vmm::cuMulticastBindMem_v2 as *const c_void,
    MulticastBindAddr = c"cuMulticastBindAddr" => vmm::cuMulticastBindAddr as *const c_void,
    MulticastBindAddrV2 = c"cuMulticastBindAddr_v2"
        => vmm::cuMulticastBindAddr_v2 as *const c_void,
    MulticastUnbind = c"cuMulticastUnbind" => vmm::cuMulticastUnbind as *const c_void,
    GraphInstantiateV2 = c"cuGraphInstantiate_v2" => graphs::cuGraphInstantiate_v2 as *const c_void,
    GraphInstantiateWithFlags = c"cuGraphInstantiateWithFlags"
        => graphs::cuGraphInstantiateWithFlags as *const c_void,
    GraphInstantiateWithParams = c"cuGraphInstantiateWithParams"
        => graphs::cuGraphInstantiateWithParams as *const c_void,
    GraphInstantiateWithParamsPtsz = c"cuGraphInstantiateWithParams_ptsz"
        => graphs::cuGraphInstantiateWithParams_ptsz as *const c_void,
    GraphExecDestroy = c"cuGraphExecDestroy" => graphs::cuGraphExecDestroy as *const c_void,
    GraphExecKernelNodeSetParams = c"cuGraphExecKernelNodeSetParams"
        => graphs::cuGraphExecKernelNodeSetParams as *const c_void,
    GraphExecKernelNodeSetParamsV2 = c"cuGraphExecKernelNodeSetParams_v2"
        => graphs::cuGraphExecKernelNodeSetParams_v2 as *const c_void,
    GraphExecUpdate = c"cuGraphExecUpdate" => graphs::cuGraphExecUpdate as *const c_void,
    GraphExecUpdateV2 = c"cuGraphExecUpdate_v2" => graphs::cuGraphExecUpdate_v2 as *const c_void,
    StreamEndCapture = c"cuStreamEndCapture" => graphs::cuStreamEndCapture as *const c_void,
    StreamEndCapturePtsz = c"cuStreamEndCapture_ptsz"
        => graphs::cuStreamEndCapture_ptsz as *const c_void,
    DeviceGraphMemTrim = c"cuDeviceGraphMemTrim" => graphs::cuDeviceGraphMemTrim as *const c_void,
    CtxSetLimit = c"cuCtxSetLimit" => cuCtxSetLimit as *const c_void,
    GreenCtxCreate = c"cuGreenCtxCreate" => cuGreenCtxCreate as *const c_void,
    GreenCtxDestroy = c"cuGreenCtxDestroy" => cuGreenCtxDestroy as *const c_void,
    ArrayDestroy = c"cuArrayDestroy" => cuArrayDestroy as *const c_void,
    MipmappedArrayDestroy = c"cuMipmappedArrayDestroy" => cuMipmappedArrayDestroy as *const c_void,
    MemGetInfoV2 = c"cuMemGetInfo_v2" => cuMemGetInfo_v2 as *const c_void,
    DeviceTotalMemV2 = c"cuDeviceTotalMem_v2" => cuDeviceTotalMem_v2 as *const c_void,
    MemGetInfo = c"cuMemGetInfo" => cuMemGetInfo as *const c_void,
    DeviceTotalMem = c"cuDeviceTotalMem" => cuDeviceTotalMem as *const c_void,
    LaunchKernel = c"cuLaunchKernel" => launch::cuLaunchKernel as *const c_void,
    LaunchKernelPtsz = c"cuLaunchKernel_ptsz" => launch::cuLaunchKernel_ptsz as *const c_void,
    LaunchKernelEx = c"cuLaunchKernelEx" => launch::cuLaunchKernelEx as *const c_void,
    LaunchKernelExPtsz = c"cuLaunchKernelEx_ptsz" => launch::cuLaunchKernelEx_ptsz as *const c_void,
    LaunchCooperativeKernel = c"cuLaunchCooperativeKernel"
        => launch::cuLaunchCooperativeKernel as *const c_void,
    LaunchCooperativeKernelPtsz = c"cuLaunchCooperativeKernel_ptsz"
        => launch::cuLaunchCooperativeKernel_ptsz as *const c_void,
    GraphLaunch = c"cuGraphLaunch" => launch::cuGraphLaunch as *const c_void,
    GraphLaunchPtsz = c"cuGraphLaunch_ptsz" => launch::cuGraphLaunch_ptsz as *const c_void,
    CtxCreateV2 = c"cuCtxCreate_v2" => cuCtxCreate_v2 as *const c_void,
    CtxCreateV3 = c"cuCtxCreate_v3" => cuCtxCreate_v3 as *const c_void,
    CtxCreateV4 = c"cuCtxCreate_v4" => cuCtxCreate_v4 as *const c_void,
    CtxCreate = c"cuCtxCreate" => cuCtxCreate as *const c_void,
    CtxDestroyV2 = c"cuCtxDestroy_v2" => cuCtxDestroy_v2 as *const c_void,
    CtxDestroy = c"cuCtxDestroy" => cuCtxDestroy as *const c_void,
    PrimaryCtxRetain = c"cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *const c_void,
    PrimaryCtxReleaseV2 = c"cuDevicePrimaryCtxRelease_v2"
        => cuDevicePrimaryCtxRelease_v2 as *const c_void,
    PrimaryCtxResetV2 = c"cuDevicePrimaryCtxReset_v2"
        => cuDevicePrimaryCtxReset_v2 as *const c_void,
    PrimaryCtxRelease = c"cuDevicePrimaryCtxRelease" => cuDevicePrimaryCtxRelease as *const c_void,
    PrimaryCtxReset = c"cuDevicePrimaryCtxReset" => cuDevicePrimaryCtxReset as *const c_void,
    ModuleLoad = c"cuModuleLoad" => modules::cuModuleLoad as *const c_void,
    ModuleLoadData = c"cuModuleLoadData" => modules::cuModuleLoadData as *const c_void,
    ModuleLoadDataEx = c"cuModuleLoadDataEx" => modules::cuModuleLoadDataEx as *const c_void,
    ModuleLoadFatBinary = c"cuModuleLoadFatBinary"
        => modules::cuModuleLoadFatBinary as *const c_void,
    ModuleUnload = c"cuModuleUnload" => modules::cuModuleUnload as *const c_void,
    LibraryLoadData = c"cuLibraryLoadData" => modules::cuLibraryLoadData as *const c_void,
    LibraryLoadFromFile = c"cuLibraryLoadFromFile"
        => modules::cuLibraryLoadFromFile as *const c_void,
    LibraryUnload = c"cuLibraryUnload" => modules::cuLibraryUnload as *const c_void,
    MemPoolCreate = c"cuMemPoolCreate" => cuMemPoolCreate as *const c_void,
    MemPoolDestroy = c"cuMemPoolDestroy" => cuMemPoolDestroy as *const c_void,
    DeviceGetDefaultMemPool = c"cuDeviceGetDefaultMemPool"
        => cuDeviceGetDefaultMemPool as *const c_void,
    DeviceGetMemPool = c"cuDeviceGetMemPool" => cuDeviceGetMemPool as *const c_void,
    DeviceSetMemPool = c"cuDeviceSetMemPool" => cuDeviceSetMemPool as *const c_void,
    MemGetDefaultMemPool = c"cuMemGetDefaultMemPool" => cuMemGetDefaultMemPool as *const c_void,
    MemGetMemPool = c"cuMemGetMemPool" => cuMemGetMemPool as *const c_void,
    MemSetMemPool = c"cuMemSetMemPool" => cuMemSetMemPool as *const c_void,
    MemPoolTrimTo = c"cuMemPoolTrimTo" => pools::cuMemPoolTrimTo as *const c_void,
    CtxSynchronize = c"cuCtxSynchronize" => pools::cuCtxSynchronize as *const c_void,
    StreamSynchronize = c"cuStreamSynchronize" => pools::cuStreamSynchronize as *const c_void,
    StreamSynchronizePtsz = c"cuStreamSynchronize_ptsz"
        => pools::cuStreamSynchronize_ptsz as *const c_void,
    EventSynchronize = c"cuEventSynchronize" => pools::cuEventSynchronize as *const c_void,
    MemPoolGetAttribute = c"cuMemPoolGetAttribute" => NONE,
    StreamIsCapturing = c"cuStreamIsCapturing" => NONE,
    EventCreate = c"cuEventCreate" => NONE,
    EventRecord = c"cuEventRecord" => NONE,
    EventQuery = c"cuEventQuery" => NONE,
    EventDestroyV2 = c"cuEventDestroy_v2" => NONE,
    CtxGetDevice = c"cuCtxGetDevice" => NONE,
    CtxGetCurrent = c"cuCtxGetCurrent" => NONE,
    DeviceGetUuidV2 = c"cuDeviceGetUuid_v2" => NONE,
    DeviceGetUuid = c"cuDeviceGetUuid" => NONE,
    CtxGetLimit = c"cuCtxGetLimit" => NONE,
    StreamGetDevice = c"cuStreamGetDevice" => NONE,
    DeviceGetAttribute = c"cuDeviceGetAttribute" => NONE,
    GraphGetNodes = c"cuGraphGetNodes" => NONE,
    FuncGetAttribute = c"cuFuncGetAttribute" => NONE,
    GraphNodeGetType = c"cuGraphNodeGetType" => NONE,
    GraphMemAllocNodeGetParams = c"cuGraphMemAllocNodeGetParams" => NONE,
    GraphKernelNodeGetParams = c"cuGraphKernelNodeGetParams" => NONE,
    GraphKernelNodeGetParamsV2 = c"cuGraphKernelNodeGetParams_v2" => NONE,
    GraphChildGraphNodeGetGraph = c"cuGraphChildGraphNodeGetGraph" => NONE,
    DeviceGetGraphMemAttribute = c"cuDeviceGetGraphMemAttribute" => NONE,
});

table!(Nv, NVML_HOOKS {
    MemoryInfo = c"nvmlDeviceGetMemoryInfo" => nvmlDeviceGetMemoryInfo as *const c_void,
    MemoryInfoV2 = c"nvmlDeviceGetMemoryInfo_v2" => nvmlDeviceGetMemoryInfo_v2 as *const c_void,
    GetUuid = c"nvmlDeviceGetUUID" => NONE,
    Init = c"nvmlInit_v2" => NONE,
    GetHandleByUuid = c"nvmlDeviceGetHandleByUUID" => NONE,
    ComputeProcesses = c"nvmlDeviceGetComputeRunningProcesses"
        => processes::nvmlDeviceGetComputeRunningProcesses as *const c_void,
    ComputeProcessesV2 = c"nvmlDeviceGetComputeRunningProcesses_v2"
        => processes::nvmlDeviceGetComputeRunningProcesses_v2 as *const c_void,
    ComputeProcessesV3 = c"nvmlDeviceGetComputeRunningProcesses_v3"
        => processes::nvmlDeviceGetComputeRunningProcesses_v3 as *const c_void,
    GraphicsProcesses = c"nvmlDeviceGetGraphicsRunningProcesses"
        => processes::nvmlDeviceGetGraphicsRunningProcesses as *const c_void,
    GraphicsProcessesV2 = c"nvmlDeviceGetGraphicsRunningProcesses_v2"
        => processes::nvmlDeviceGetGraphicsRunningProcesses_v2 as *const c_void,
    GraphicsProcessesV3 = c"nvmlDeviceGetGraphicsRunningProcesses_v3"
        => processes::nvmlDeviceGetGraphicsRunningProcesses_v3 as *const c_void,
    MpsProcesses = c"nvmlDeviceGetMPSComputeRunningProcesses"
        => processes::nvmlDeviceGetMPSComputeRunningProcesses as *const c_void,
    MpsProcessesV2 = c"nvmlDeviceGetMPSComputeRunningProcesses_v2"
        => processes::nvmlDeviceGetMPSComputeRunningProcesses_v2 as *const c_void,
    MpsProcessesV3 = c"nvmlDeviceGetMPSComputeRunningProcesses_v3"
        => processes::nvmlDeviceGetMPSComputeRunningProcesses_v3 as *const c_void,
});

static CUDA: Lib = Lib {
    soname: c"libcuda.so.1",
    marker: c"cuInit",
    hooks: &CUDA_HOOKS,
    reals: OnceLock::new(),
};

static NVML: Lib = Lib {
    soname: c"libnvidia-ml.so.1",
    marker: c"nvmlInit_v2",
    hooks: &NVML_HOOKS,
    reals: OnceLock::new(),
};

impl Lib {
    /// The library's handle, if the program has loaded it (see the module doc).
    fn handle(&self, hint: *mut c_void) -> Option<*mut c_void> {
        let noload = |name: *const c_char| {
            // SAFETY: RTLD_NOLOAD never loads anything (no constructors
            // run); `name` is NUL-terminated. The reference it takes is
            // kept for the life of the process.
            let h = unsafe { libc::dlopen(name, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
            (!h.is_null()).then_some(h)
        };
        let holder = |p: *mut c_void| {
            if p.is_null() {
                return None;
            }
            // SAFETY: dladdr fills `info` for any address; dli_fname is a
            // NUL-terminated path owned by the loader.
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            if unsafe { libc::dladdr(p, &mut info) } == 0 || info.dli_fname.is_null() {
                return None;
            }
            noload(info.dli_fname)
        };
        let real = real_dlsym();
        let h = noload(self.soname.as_ptr())
            .or_else(|| holder(hint))
            // SAFETY: the real dlsym on a constant name.
            .or_else(|| holder(unsafe { real(libc::RTLD_NEXT, self.marker.as_ptr()) }))?;
        // SAFETY: as above; the marker tells the library from another
        // object that happened to hold the hint.
        (!unsafe { real(h, self.marker.as_ptr()) }.is_null()).then_some(h)
    }

    /// The real functions, resolved on first success.
    ///
    /// Inlined: every wrapped call asks, and after the first it is a load
    /// (the resolution is [`Lib::resolve`], out of line).
    #[inline(always)]
    fn reals(&self, hint: *mut c_void) -> Option<&[usize]> {
        match self.reals.get() {
            Some(r) => Some(r),
            None => self.resolve(hint),
        }
    }

    /// The first resolution of [`Lib::reals`].
    #[cold]
    #[inline(never)]
    fn resolve(&self, hint: *mut c_void) -> Option<&[usize]> {
        let h = self.handle(hint)?;
        let real = real_dlsym();
        let reals = self
            .hooks
            .iter()
            // SAFETY: the real dlsym on the library's handle and a constant name.
            .map(|hook| unsafe { real(h, hook.name.as_ptr()) } as usize)
            .collect();
        FORK_HANDLERS.call_once(install_fork_handlers);
        Some(self.reals.get_or_init(|| reals))
    }

    /// The real function number `i` as a `F` (a function pointer type).
    ///
    /// # Safety
    /// `F` is the C signature of function `i`.
    #[inline]
    unsafe fn real<F: Copy>(&self, i: usize) -> Option<F> {
        debug_assert_eq!(size_of::<F>(), size_of::<usize>());
        let p = *self.reals(std::ptr::null_mut())?.get(i)?;
        (p != 0).then(|| std::mem::transmute_copy::<usize, F>(&p))
    }

    /// The hook's wrapper for `p` if `p` is one of the real functions it wraps.
    fn swap(&self, p: *mut c_void) -> *mut c_void {
        let Some(reals) = self.reals(p) else {
            return p;
        };
        reals
            .iter()
            .zip(self.hooks)
            .find(|(r, h)| **r == p as usize && !h.wrapper.is_null())
            .map_or(p, |(_, h)| h.wrapper as *mut c_void)
    }
}

// ---- fork ------------------------------------------------------------------------

static FORK_HANDLERS: Once = Once::new();

extern "C" fn before_fork() {
    context::lock_all_for_fork();
    memory::lock_all_for_fork();
    crate::vmm::BOOKS.lock_for_fork();
    crate::graphs::BOOKS.lock_for_fork();
    crate::ctxlimits::BASELINES.lock_for_fork();
    context::GREEN.lock_for_fork();
    crate::depth::BOOKS.lock_for_fork();
}

extern "C" fn after_fork_parent() {
    // SAFETY (all of them): `before_fork` locked them on this thread and
    // forgot the guards; nothing else can hold them.
    let (shards, pools) = memory::fork_locks();
    for s in shards {
        unsafe { s.force_unlock() };
    }
    unsafe { pools.force_unlock() };
    unsafe { crate::vmm::BOOKS.mutex().force_unlock() };
    unsafe { crate::graphs::BOOKS.mutex().force_unlock() };
    unsafe { crate::ctxlimits::BASELINES.mutex().force_unlock() };
    unsafe { context::GREEN.mutex().force_unlock() };
    unsafe { crate::depth::BOOKS.mutex().force_unlock() };
    let (primary, creating) = context::locks();
    unsafe {
        creating.force_unlock();
        primary.force_unlock();
    }
}

extern "C" fn after_fork_child() {
    after_fork_parent();
    memory::forget_after_fork();
    crate::vmm::BOOKS.forget();
    crate::graphs::BOOKS.forget();
    crate::ctxlimits::BASELINES.forget();
    context::GREEN.forget();
    crate::depth::BOOKS.forget();
    crate::refresh::forget_after_fork();
    context::forget_after_fork();
}

fn install_fork_handlers() {
    // SAFETY: three plain functions; registered once.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    }
}

// ---- what memory needs from the driver -------------------------------------------

struct Cuda;

impl Driver for Cuda {
    fn current_device(&self) -> Option<i32> {
        type F = unsafe extern "C" fn(*mut CUdevice) -> CuResult;
        let mut d: CUdevice = 0;
        // SAFETY: cuCtxGetDevice(CUdevice*) with a valid out-pointer.
        let r = unsafe { CUDA.real::<F>(Cu::CtxGetDevice as usize)?(&mut d) };
        (r == CUDA_SUCCESS).then_some(d)
    }

    fn current_context(&self) -> u64 {
        type F = unsafe extern "C" fn(*mut CUcontext) -> CuResult;
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: cuCtxGetCurrent(CUcontext*) with a valid out-pointer.
        let r = unsafe {
            CUDA.real::<F>(Cu::CtxGetCurrent as usize)
                .map(|f| f(&mut c))
        };
        if r == Some(CUDA_SUCCESS) {
            c as u64
        } else {
            0
        }
    }

    fn stream_device(&self, stream: u64) -> Option<i32> {
        type F = unsafe extern "C" fn(CUstream, *mut CUdevice) -> CuResult;
        let mut d: CUdevice = 0;
        // SAFETY: cuStreamGetDevice(CUstream, CUdevice*) with the program's
        // stream and a valid out-pointer.
        let r =
            unsafe { CUDA.real::<F>(Cu::StreamGetDevice as usize)?(stream as CUstream, &mut d) };
        (r == CUDA_SUCCESS).then_some(d)
    }

    fn uuid(&self, ordinal: i32) -> Option<[u8; 16]> {
        type F = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CuResult;
        let mut u = [0u8; 16];
        // SAFETY: cuDeviceGetUuid[_v2](CUuuid*, CUdevice); CUuuid is 16 bytes.
        let f = unsafe {
            CUDA.real::<F>(Cu::DeviceGetUuidV2 as usize)
                .or_else(|| CUDA.real::<F>(Cu::DeviceGetUuid as usize))?
        };
        (unsafe { f(&mut u, ordinal) } == CUDA_SUCCESS).then_some(u)
    }
}

impl Contexts for Cuda {
    fn device_free(&self, ordinal: i32) -> Option<u64> {
        let uuid = CString::new(memory::uuid_of(self, ordinal)?).ok()?;
        type ByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> NvmlReturn;
        // SAFETY: NVML's own functions with their C signatures, after its
        // nvmlInit_v2; `uuid` is NUL-terminated, the out-pointers ours.
        unsafe {
            if !nvml_ready() {
                return None;
            }
            let by_uuid = NVML.real::<ByUuid>(Nv::GetHandleByUuid as usize)?;
            let info = NVML.real::<NvmlInfoFn<NvmlMemory>>(Nv::MemoryInfo as usize)?;
            let mut device = std::ptr::null_mut();
            let mut m = NvmlMemory {
                total: 0,
                free: 0,
                used: 0,
            };
            (by_uuid(uuid.as_ptr(), &mut device) == NVML_SUCCESS
                && info(device, &mut m) == NVML_SUCCESS)
                .then_some(m.free)
        }
    }
}

/// NVML loaded and initialised for [`Contexts::device_free`]: the one
/// library the hook loads itself (a program that never touches NVML still
/// has its contexts measured), once, when a worker's process creates its
/// first context; never shut down.
fn nvml_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        // SAFETY: dlopen of NVML's soname; the reference is kept for the
        // life of the process.
        let h = unsafe { libc::dlopen(NVML.soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        type Init = unsafe extern "C" fn() -> NvmlReturn;
        // SAFETY: nvmlInit_v2(void).
        !h.is_null()
            && unsafe { NVML.real::<Init>(Nv::Init as usize) }
                .is_some_and(|f| unsafe { f() } == NVML_SUCCESS)
    })
}

/// The real driver function `$id` with C signature `$ty`, or return
/// CUDA_ERROR_NOT_INITIALIZED (no driver loaded).
macro_rules! real_or_return {
    ($id:expr, $ty:ty) => {
        match CUDA.real::<$ty>($id as usize) {
            Some(f) => f,
            None => return CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

// Launches (`launch.rs`), pool releases (`pools.rs`), NVML's process lists
// inside a worker (`processes.rs`), virtual memory management (`vmm.rs`) and
// graph memory (`graphs.rs`), module globals (`modules.rs`): after the macro above.
mod events;
mod graphs;
mod launch;
mod modules;
mod pools;
mod processes;
mod vmm;

// ---- cuGetProcAddress --------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
) -> CuResult {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
    let real = real_or_return!(Cu::GetProcAddress, F);
    let r = real(symbol, pfn, cudaVersion, flags);
    if r == CUDA_SUCCESS && !pfn.is_null() {
        *pfn = boundary(*pfn, || CUDA.swap(*pfn));
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
    symbolStatus: *mut c_int,
) -> CuResult {
    type F =
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
    let real = real_or_return!(Cu::GetProcAddressV2, F);
    let r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if r == CUDA_SUCCESS && !pfn.is_null() {
        *pfn = boundary(*pfn, || CUDA.swap(*pfn));
    }
    r
}

// ---- allocations -----------------------------------------------------------------

/// Charge `bytes` on `target`, then run the driver's `call`, which writes
/// what it allocated to `*out` (non-NULL) on success.
unsafe fn allocate_into<K: Copy>(
    target: Target,
    kind: Kind,
    bytes: u64,
    out: *mut K,
    key: fn(K) -> u64,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    boundary(CUDA_ERROR_UNKNOWN, || {
        memory::allocate(&Cuda, target, kind, bytes, || {
            let result = call();
            Allocated {
                result,
                key: Some((key(*out), None)),
            }
        })
    })
}

fn handle_key(h: *mut c_void) -> u64 {
    h as u64
}

/// The allocations that return a device pointer and take its size second.
macro_rules! pointer_alloc {
    ($name:ident, $id:expr, $target:expr $(, $arg:ident: $t:ty)*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dptr: *mut CUdeviceptr, bytesize: usize $(, $arg: $t)*)
            -> CuResult {
            type F = unsafe extern "C" fn(*mut CUdeviceptr, usize $(, $t)*) -> CuResult;
            let real = real_or_return!($id, F);
            if dptr.is_null() {
                return real(dptr, bytesize $(, $arg)*);
            }
            allocate_into($target, Kind::Pointer, bytesize as u64, dptr, |p| p, || {
                real(dptr, bytesize $(, $arg)*)
            })
        }
    };
}

pointer_alloc!(cuMemAlloc_v2, Cu::MemAllocV2, Target::Context);

/// The 32-bit v1 (CUDA < 3.2): 32-bit size and address.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut c_uint, bytesize: c_uint) -> CuResult {
    type F = unsafe extern "C" fn(*mut c_uint, c_uint) -> CuResult;
    let real = real_or_return!(Cu::MemAlloc, F);
    if dptr.is_null() {
        return real(dptr, bytesize);
    }
    allocate_into(
        Target::Context,
        Kind::Pointer,
        bytesize as u64,
        dptr,
        |p| p as u64,
        || real(dptr, bytesize),
    )
}
pointer_alloc!(cuMemAllocManaged, Cu::MemAllocManaged, Target::Context, flags: c_uint);
// Stream-ordered: from the current pool of the stream's device.
pointer_alloc!(cuMemAllocAsync, Cu::MemAllocAsync, pools::stream_pool(stream, false),
               stream: CUstream);
pointer_alloc!(cuMemAllocAsync_ptsz, Cu::MemAllocAsyncPtsz, pools::stream_pool(stream, true),
               stream: CUstream);

/// The allocations from a pool: charged to the pool's device; a pool in
/// host memory takes no device memory (see `memory.rs`, pools).
macro_rules! pool_alloc {
    ($name:ident, $id:expr, $per_thread:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dptr: *mut CUdeviceptr,
            bytesize: usize,
            pool: CUmemoryPool,
            stream: CUstream,
        ) -> CuResult {
            type F =
                unsafe extern "C" fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CuResult;
            let real = real_or_return!($id, F);
            let place = boundary(None, || memory::pool_place(pool as u64));
            let target = match place {
                Some(memory::Place::Device(o)) => {
                    Target::Pool(pools::source(pool, stream, $per_thread), Some(o))
                }
                Some(memory::Place::Host) => return real(dptr, bytesize, pool, stream),
                None => Target::Pool(pools::source(pool, stream, $per_thread), None),
            };
            if dptr.is_null() {
                return real(dptr, bytesize, pool, stream);
            }
            allocate_into(
                target,
                Kind::Pointer,
                bytesize as u64,
                dptr,
                |p| p,
                || real(dptr, bytesize, pool, stream),
            )
        }
    };
}

pool_alloc!(cuMemAllocFromPoolAsync, Cu::MemAllocFromPoolAsync, false);
pool_alloc!(
    cuMemAllocFromPoolAsync_ptsz,
    Cu::MemAllocFromPoolAsyncPtsz,
    true
);

/// A pitched allocation of `height` rows of `width` bytes by the driver's
/// `call`, after which `got` reads (address, pitch): charged first at the
/// widest pitch, then settled at the driver's.
unsafe fn pitched(
    width: u64,
    height: u64,
    call: impl FnOnce() -> CuResult,
    got: impl FnOnce() -> (u64, u64),
) -> CuResult {
    let bound = memory::pitch_bound(width, height);
    boundary(CUDA_ERROR_UNKNOWN, || {
        memory::allocate(&Cuda, Target::Context, Kind::Pointer, bound, || {
            let result = call();
            let (ptr, pitch) = got();
            Allocated {
                result,
                key: Some((ptr, Some(pitch.saturating_mul(height)))),
            }
        })
    })
}

/// `cuMemAllocPitch_v2` and the 32-bit v1 (CUDA < 3.2): pointer and size types.
macro_rules! pitch_alloc {
    ($name:ident, $id:expr, $ptr:ty, $size:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dptr: *mut $ptr,
            pPitch: *mut $size,
            WidthInBytes: $size,
            Height: $size,
            ElementSizeBytes: c_uint,
        ) -> CuResult {
            type F = unsafe extern "C" fn(*mut $ptr, *mut $size, $size, $size, c_uint) -> CuResult;
            let real = real_or_return!($id, F);
            if dptr.is_null() || pPitch.is_null() {
                return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
            }
            pitched(
                WidthInBytes as u64,
                Height as u64,
                || real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
                || (*dptr as u64, *pPitch as u64),
            )
        }
    };
}

pitch_alloc!(cuMemAllocPitch_v2, Cu::MemAllocPitchV2, CUdeviceptr, usize);
pitch_alloc!(cuMemAllocPitch, Cu::MemAllocPitch, c_uint, c_uint);

trait ArrayShape {
    fn bytes(&self) -> u64;
}

macro_rules! array_shape {
    ($desc:ty, |$d:ident| $depth:expr) => {
        impl ArrayShape for $desc {
            fn bytes(&self) -> u64 {
                let $d = self;
                memory::array_bytes(
                    $d.width as u64,
                    $d.height as u64,
                    $depth,
                    $d.format,
                    $d.channels,
                )
            }
        }
    };
}

array_shape!(ArrayDescriptor, |d| 0);
array_shape!(Array3dDescriptor, |d| d.depth as u64);
array_shape!(ArrayDescriptorV1, |d| 0);
array_shape!(Array3dDescriptorV1, |d| d.depth as u64);

/// The array creations: `_v2` and the v1 of CUDA < 3.2 (descriptors of
/// 32-bit sizes).
macro_rules! array_create {
    ($name:ident, $id:expr, $desc:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pHandle: *mut CUarray,
            pAllocateArray: *const $desc,
        ) -> CuResult {
            type F = unsafe extern "C" fn(*mut CUarray, *const $desc) -> CuResult;
            let real = real_or_return!($id, F);
            if pHandle.is_null() || pAllocateArray.is_null() {
                return real(pHandle, pAllocateArray);
            }
            let bytes = (*pAllocateArray).bytes();
            allocate_into(
                Target::Context,
                Kind::Array,
                bytes,
                pHandle,
                handle_key,
                || real(pHandle, pAllocateArray),
            )
        }
    };
}

array_create!(cuArrayCreate_v2, Cu::ArrayCreateV2, ArrayDescriptor);
array_create!(cuArray3DCreate_v2, Cu::Array3DCreateV2, Array3dDescriptor);
array_create!(cuArrayCreate, Cu::ArrayCreate, ArrayDescriptorV1);
array_create!(cuArray3DCreate, Cu::Array3DCreate, Array3dDescriptorV1);

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    pHandle: *mut CUmipmappedArray,
    pMipmappedArrayDesc: *const Array3dDescriptor,
    numMipmapLevels: c_uint,
) -> CuResult {
    type F =
        unsafe extern "C" fn(*mut CUmipmappedArray, *const Array3dDescriptor, c_uint) -> CuResult;
    let real = real_or_return!(Cu::MipmappedArrayCreate, F);
    if pHandle.is_null() || pMipmappedArrayDesc.is_null() {
        return real(pHandle, pMipmappedArrayDesc, numMipmapLevels);
    }
    let d = &*pMipmappedArrayDesc;
    let bytes = memory::mipmapped_bytes(
        d.width as u64,
        d.height as u64,
        d.depth as u64,
        d.format,
        d.channels,
        numMipmapLevels,
    );
    allocate_into(
        Target::Context,
        Kind::Mipmapped,
        bytes,
        pHandle,
        handle_key,
        || real(pHandle, pMipmappedArrayDesc, numMipmapLevels),
    )
}

// ---- frees --------------------------------------------------------------------------

/// The frees: the first argument names what its allocation returned.
macro_rules! release {
    ($name:ident, $id:expr, $kind:expr, $key:ident: $kt:ty $(, $arg:ident: $t:ty)*) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($key: $kt $(, $arg: $t)*) -> CuResult {
            type F = unsafe extern "C" fn($kt $(, $t)*) -> CuResult;
            let real = real_or_return!($id, F);
            boundary(CUDA_ERROR_UNKNOWN, || {
                memory::free($kind, $key as u64, || real($key $(, $arg)*))
            })
        }
    };
}

release!(cuMemFree_v2, Cu::MemFreeV2, Kind::Pointer, dptr: CUdeviceptr);
release!(cuMemFree, Cu::MemFree, Kind::Pointer, dptr: c_uint);
release!(cuMemFreeAsync, Cu::MemFreeAsync, Kind::Pointer, dptr: CUdeviceptr, stream: CUstream);
release!(cuMemFreeAsync_ptsz, Cu::MemFreeAsyncPtsz, Kind::Pointer, dptr: CUdeviceptr,
         stream: CUstream);
release!(cuArrayDestroy, Cu::ArrayDestroy, Kind::Array, hArray: CUarray);
release!(cuMipmappedArrayDestroy, Cu::MipmappedArrayDestroy, Kind::Mipmapped,
         hMipmappedArray: CUmipmappedArray);

// ---- contexts ------------------------------------------------------------------------

/// A new context on `dev` by the driver's `call`, which writes it to
/// `*pctx` (non-NULL): its reservation charged, or the context destroyed
/// again when the worker's limit has no room for it (`context.rs`).
unsafe fn new_context(
    pctx: *mut CUcontext,
    dev: CUdevice,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    type Destroy = unsafe extern "C" fn(CUcontext) -> CuResult;
    boundary(CUDA_ERROR_UNKNOWN, || {
        context::create(
            &Cuda,
            dev,
            Kind::Context,
            call,
            || *pctx as u64,
            || {
                if let Some(destroy) = CUDA.real::<Destroy>(Cu::CtxDestroyV2 as usize) {
                    destroy(*pctx);
                }
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUcontext, c_uint, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::CtxCreateV2, F);
    if pctx.is_null() {
        return real(pctx, flags, dev);
    }
    new_context(pctx, dev, || real(pctx, flags, dev))
}

/// v1: the same arguments as `_v2` (CUDA < 3.2).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUcontext, c_uint, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::CtxCreate, F);
    if pctx.is_null() {
        return real(pctx, flags, dev);
    }
    new_context(pctx, dev, || real(pctx, flags, dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    paramsArray: *mut c_void,
    numParams: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUcontext, *mut c_void, c_int, c_uint, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::CtxCreateV3, F);
    if pctx.is_null() {
        return real(pctx, paramsArray, numParams, flags, dev);
    }
    new_context(pctx, dev, || real(pctx, paramsArray, numParams, flags, dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    ctxCreateParams: *mut c_void,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUcontext, *mut c_void, c_uint, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::CtxCreateV4, F);
    if pctx.is_null() {
        return real(pctx, ctxCreateParams, flags, dev);
    }
    new_context(pctx, dev, || real(pctx, ctxCreateParams, flags, dev))
}

/// `cuCtxDestroy_v2` and its v1 (CUDA < 4.0), which takes the same argument.
macro_rules! ctx_destroy {
    ($name:ident, $id:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ctx: CUcontext) -> CuResult {
            type F = unsafe extern "C" fn(CUcontext) -> CuResult;
            let real = real_or_return!($id, F);
            boundary(CUDA_ERROR_UNKNOWN, || {
                crate::depth::forget_context(ctx as u64);
                context::destroy(ctx as u64, || real(ctx))
            })
        }
    };
}

ctx_destroy!(cuCtxDestroy_v2, Cu::CtxDestroyV2);
ctx_destroy!(cuCtxDestroy, Cu::CtxDestroy);

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CuResult;
    type Release = unsafe extern "C" fn(CUdevice) -> CuResult;
    let real = real_or_return!(Cu::PrimaryCtxRetain, F);
    if pctx.is_null() {
        return real(pctx, dev);
    }
    boundary(CUDA_ERROR_UNKNOWN, || {
        context::retain(
            &Cuda,
            dev,
            || real(pctx, dev),
            || *pctx as u64,
            || {
                if let Some(release) = CUDA.real::<Release>(Cu::PrimaryCtxReleaseV2 as usize) {
                    release(dev);
                }
            },
        )
    })
}

/// `cuDevicePrimaryCtxRelease[_v2]` and `cuDevicePrimaryCtxReset[_v2]`: the
/// v1 functions (what the CUDA runtime asks for, at version 7000, through
/// 13.x) and the `_v2` ones (11.0) end a primary context alike.
macro_rules! primary_end {
    ($name:ident, $id:expr, $all:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: CUdevice) -> CuResult {
            type F = unsafe extern "C" fn(CUdevice) -> CuResult;
            let real = real_or_return!($id, F);
            boundary(CUDA_ERROR_UNKNOWN, || {
                context::release(dev, $all, || real(dev))
            })
        }
    };
}

primary_end!(cuDevicePrimaryCtxRelease_v2, Cu::PrimaryCtxReleaseV2, false);
primary_end!(cuDevicePrimaryCtxReset_v2, Cu::PrimaryCtxResetV2, true);
primary_end!(cuDevicePrimaryCtxRelease, Cu::PrimaryCtxRelease, false);
primary_end!(cuDevicePrimaryCtxReset, Cu::PrimaryCtxReset, true);

// ---- green contexts: each retains its device's primary context ------------------------

#[no_mangle]
pub unsafe extern "C" fn cuGreenCtxCreate(
    green: *mut *mut c_void,
    desc: *mut c_void,
    dev: CUdevice,
    flags: c_uint,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, CUdevice, c_uint) -> CuResult;
    type Destroy = unsafe extern "C" fn(*mut c_void) -> CuResult;
    let real = real_or_return!(Cu::GreenCtxCreate, F);
    if green.is_null() {
        return real(green, desc, dev, flags);
    }
    boundary(CUDA_ERROR_UNKNOWN, || {
        context::green_created(
            &Cuda,
            dev,
            || real(green, desc, dev, flags),
            || *green as u64,
            || {
                if let Some(destroy) = CUDA.real::<Destroy>(Cu::GreenCtxDestroy as usize) {
                    destroy(*green);
                }
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGreenCtxDestroy(green: *mut c_void) -> CuResult {
    type F = unsafe extern "C" fn(*mut c_void) -> CuResult;
    let real = real_or_return!(Cu::GreenCtxDestroy, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        context::green_destroyed(green as u64, || real(green))
    })
}

// ---- context limits ---------------------------------------------------------------------

/// `CUdevice_attribute` (cuda.h): MULTIPROCESSOR_COUNT, MAX_THREADS_PER_MULTIPROCESSOR.
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;

/// A device's resident threads: SMs x maximum threads per SM (what the
/// stack size and local memory are sized by).
fn resident_threads(dev: CUdevice) -> Option<u64> {
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, CUdevice) -> CuResult;
    // SAFETY: the driver's own function, on out-pointers of this frame.
    unsafe {
        let attr = CUDA.real::<Attr>(Cu::DeviceGetAttribute as usize)?;
        let (mut sms, mut per_sm) = (0, 0);
        let ok = attr(&mut sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS
            && attr(
                &mut per_sm,
                CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                dev,
            ) == CUDA_SUCCESS;
        ok.then(|| sms.max(0) as u64 * per_sm.max(0) as u64)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CuResult {
    type F = unsafe extern "C" fn(c_int, usize) -> CuResult;
    type Get = unsafe extern "C" fn(*mut usize, c_int) -> CuResult;
    let real = real_or_return!(Cu::CtxSetLimit, F);
    let current = || {
        let get = CUDA.real::<Get>(Cu::CtxGetLimit as usize)?;
        let mut v = 0usize;
        (get(&mut v, limit) == CUDA_SUCCESS).then_some(v as u64)
    };
    boundary(CUDA_ERROR_UNKNOWN, || {
        crate::ctxlimits::set(
            &Cuda,
            limit,
            value as u64,
            current,
            resident_threads,
            || real(limit, value),
        )
    })
}

// ---- memory pools: where each allocates -------------------------------------------------

/// Where `location` puts memory, if it says.
fn place_of(location: &MemLocation) -> Option<memory::Place> {
    match location.kind {
        CU_MEM_LOCATION_TYPE_DEVICE => Some(memory::Place::Device(location.id)),
        // The memory is its device's: charged there.
        CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN => {
            Some(memory::Place::Device(location.id & 0xff))
        }
        CU_MEM_LOCATION_TYPE_HOST..=CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => {
            Some(memory::Place::Host)
        }
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    poolProps: *const MemPoolProps,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmemoryPool, *const MemPoolProps) -> CuResult;
    let real = real_or_return!(Cu::MemPoolCreate, F);
    let r = real(pool, poolProps);
    if r == CUDA_SUCCESS && !pool.is_null() && !poolProps.is_null() {
        if let Some(place) = place_of(&(*poolProps).location) {
            boundary((), || memory::pool_at(*pool as u64, place));
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CuResult {
    type F = unsafe extern "C" fn(CUmemoryPool) -> CuResult;
    let real = real_or_return!(Cu::MemPoolDestroy, F);
    let r = real(pool);
    if r == CUDA_SUCCESS {
        boundary((), || memory::pool_gone(pool as u64));
    }
    r
}

/// `cuDeviceGetDefaultMemPool` and `cuDeviceGetMemPool`: a pool of `dev`.
macro_rules! device_pool {
    ($name:ident, $id:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(pool: *mut CUmemoryPool, dev: CUdevice) -> CuResult {
            type F = unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CuResult;
            let real = real_or_return!($id, F);
            let r = real(pool, dev);
            if r == CUDA_SUCCESS && !pool.is_null() {
                boundary((), || {
                    memory::pool_at(*pool as u64, memory::Place::Device(dev))
                });
            }
            r
        }
    };
}

device_pool!(cuDeviceGetDefaultMemPool, Cu::DeviceGetDefaultMemPool);
device_pool!(cuDeviceGetMemPool, Cu::DeviceGetMemPool);

/// The driver accepts only a pool of `dev` itself.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CuResult {
    type F = unsafe extern "C" fn(CUdevice, CUmemoryPool) -> CuResult;
    let real = real_or_return!(Cu::DeviceSetMemPool, F);
    let r = real(dev, pool);
    if r == CUDA_SUCCESS {
        boundary((), || {
            memory::pool_at(pool as u64, memory::Place::Device(dev))
        });
    }
    r
}

/// CUDA 13's `cuMemGetDefaultMemPool` and `cuMemGetMemPool`: a pool of the
/// location named (a device's, whatever the current context; host memory
/// costs no device's).
macro_rules! location_pool {
    ($name:ident, $id:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pool: *mut CUmemoryPool,
            location: *mut MemLocation,
            kind: c_uint,
        ) -> CuResult {
            type F = unsafe extern "C" fn(*mut CUmemoryPool, *mut MemLocation, c_uint) -> CuResult;
            let real = real_or_return!($id, F);
            let r = real(pool, location, kind);
            if r == CUDA_SUCCESS && !pool.is_null() && !location.is_null() {
                if let Some(place) = place_of(&*location) {
                    boundary((), || memory::pool_at(*pool as u64, place));
                }
            }
            r
        }
    };
}

location_pool!(cuMemGetDefaultMemPool, Cu::MemGetDefaultMemPool);
location_pool!(cuMemGetMemPool, Cu::MemGetMemPool);

#[no_mangle]
pub unsafe extern "C" fn cuMemSetMemPool(
    location: *mut MemLocation,
    kind: c_uint,
    pool: CUmemoryPool,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut MemLocation, c_uint, CUmemoryPool) -> CuResult;
    let real = real_or_return!(Cu::MemSetMemPool, F);
    let r = real(location, kind, pool);
    if r == CUDA_SUCCESS && !location.is_null() {
        if let Some(place) = place_of(&*location) {
            boundary((), || memory::pool_at(pool as u64, place));
        }
    }
    r
}

// ---- the virtualized view -------------------------------------------------------------
//
// Inert (no worker): the driver's answer and nothing else, no call the
// program did not make; so with the limiter's state unusable. Under a
// worker: the device named once (then cached), the worker's usage read from
// its books (`shm::own_usage_on`).

/// The partition (free, total) of the current context's device, given the
/// driver's free memory; None: report the driver's figures.
fn current_partition(driver_free: u64) -> Option<(u64, u64)> {
    if !limits::active() || limits::broken() {
        return None;
    }
    boundary(None, || {
        let o = Cuda.current_device()?;
        memory::partition(memory::view_device(&Cuda, o), driver_free)
    })
}

/// The partition of device `dev` (its total), given the driver's total.
fn device_partition(dev: CUdevice, driver_total: u64) -> Option<(u64, u64)> {
    if !limits::active() || limits::broken() {
        return None;
    }
    boundary(None, || {
        memory::partition(memory::view_device(&Cuda, dev), driver_total)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    type F = unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult;
    let real = real_or_return!(Cu::MemGetInfoV2, F);
    let r = real(free, total);
    if r == CUDA_SUCCESS && !free.is_null() && !total.is_null() {
        if let Some((f, t)) = current_partition(*free as u64) {
            (*free, *total) = (f as usize, t as usize);
        }
    }
    r
}

/// The 32-bit v1 (CUDA < 3.2; the driver clamps its figures to 4 GiB − 1).
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CuResult {
    type F = unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> CuResult;
    let real = real_or_return!(Cu::MemGetInfo, F);
    let r = real(free, total);
    if r == CUDA_SUCCESS && !free.is_null() && !total.is_null() {
        if let Some((f, t)) = current_partition(*free as u64) {
            (*free, *total) = (clamp32(f), clamp32(t));
        }
    }
    r
}

fn clamp32(v: u64) -> c_uint {
    v.min(c_uint::MAX as u64) as c_uint
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CuResult {
    type F = unsafe extern "C" fn(*mut usize, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::DeviceTotalMemV2, F);
    let r = real(bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some((_, t)) = device_partition(dev, *bytes as u64) {
            *bytes = t as usize;
        }
    }
    r
}

/// The 32-bit v1 (CUDA < 3.2).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> CuResult {
    type F = unsafe extern "C" fn(*mut c_uint, CUdevice) -> CuResult;
    let real = real_or_return!(Cu::DeviceTotalMem, F);
    let r = real(bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some((_, t)) = device_partition(dev, *bytes as u64) {
            *bytes = clamp32(t);
        }
    }
    r
}

/// The NVML device's UUID text.
unsafe fn nvml_uuid(device: *mut c_void) -> Option<String> {
    type F = unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> NvmlReturn;
    let f = NVML.real::<F>(Nv::GetUuid as usize)?;
    let mut buf = [0 as c_char; 96];
    if f(device, buf.as_mut_ptr(), buf.len() as c_uint) != NVML_SUCCESS {
        return None;
    }
    buf[95] = 0;
    Some(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
}

type NvmlInfoFn<M> = unsafe extern "C" fn(*mut c_void, *mut M) -> NvmlReturn;

/// `nvmlDeviceGetMemoryInfo[_v2]`: the real call, then the partition (free,
/// total) written into its struct by `set`.
unsafe fn nvml_memory<M>(
    id: Nv,
    device: *mut c_void,
    out: *mut M,
    free: fn(&M) -> u64,
    set: fn(&mut M, u64, u64),
) -> NvmlReturn {
    let Some(real) = NVML.real::<NvmlInfoFn<M>>(id as usize) else {
        return NVML_ERROR_UNINITIALIZED;
    };
    let r = real(device, out);
    if r == NVML_SUCCESS && !out.is_null() && limits::active() && !limits::broken() {
        let m = &mut *out;
        let view = boundary(None, || {
            // SAFETY: the handle the program passed, which NVML just accepted.
            let d = crate::devices::nvml_device(device as usize, || unsafe { nvml_uuid(device) });
            memory::partition(d, free(m))
        });
        if let Some((f, t)) = view {
            set(m, f, t);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: *mut c_void,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    nvml_memory(
        Nv::MemoryInfo,
        device,
        memory,
        |m| m.free,
        |m, f, t| (m.total, m.free, m.used) = (t, f, t - f),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: *mut c_void,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    nvml_memory(
        Nv::MemoryInfoV2,
        device,
        memory,
        |m| m.free,
        |m, f, t| {
            m.reserved = m.reserved.min(t - f);
            (m.total, m.free, m.used) = (t, f, t - f - m.reserved);
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_choose_their_library() {
        assert!(std::ptr::eq(lib_of(b"cuMemAlloc_v2").unwrap(), &CUDA));
        assert!(std::ptr::eq(lib_of(b"nvmlInit_v2").unwrap(), &NVML));
        assert!(lib_of(b"cudnnCreate").is_none());
        assert!(lib_of(b"cudaMalloc").is_none());
        assert!(lib_of(b"malloc").is_none());
    }

    #[test]
    fn tables_match_their_enums() {
        assert_eq!(CUDA_HOOKS[Cu::MemFreeV2 as usize].name, c"cuMemFree_v2");
        assert_eq!(
            CUDA_HOOKS[Cu::DeviceGetUuid as usize].name,
            c"cuDeviceGetUuid"
        );
        assert_eq!(NVML_HOOKS[Nv::GetUuid as usize].name, c"nvmlDeviceGetUUID");
    }
}
