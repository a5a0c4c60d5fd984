//! Virtual memory management and multicast entry points: `cuMemCreate`
//! charged like any allocation, and every call that starts or ends a
//! reference to its memory reported to `crate::vmm`, which gives the bytes
//! back with the last one.

use super::*;
use crate::vmm::{self as books, Bound, Shared};
use std::os::fd::{AsRawFd, BorrowedFd};

/// `CUmemAllocationHandleType` (cuda.h).
const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: c_int = 1;
const CU_MEM_HANDLE_TYPE_FABRIC: c_int = 8;

/// `CUmulticastObjectProp` (cuda.h): passed through, never read.
type MulticastProp = *const c_void;

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> CuResult {
    type F = unsafe extern "C" fn(
        *mut CUmemGenericAllocationHandle,
        usize,
        *const MemAllocationProp,
        u64,
    ) -> CuResult;
    let real = real_or_return!(Cu::MemCreate, F);
    if handle.is_null() || prop.is_null() {
        return real(handle, size, prop, flags);
    }
    let target = match place_of(&(*prop).location) {
        Some(memory::Place::Device(o)) => Target::Ordinal(o),
        // Host memory (pinned, NUMA): no device's bytes.
        Some(memory::Place::Host) => return real(handle, size, prop, flags),
        None => Target::Current,
    };
    boundary(CUDA_ERROR_UNKNOWN, || {
        memory::allocate_with(
            &Cuda,
            target,
            size as u64,
            || Allocated {
                result: real(handle, size, prop, flags),
                key: Some((*handle, None)),
            },
            |key, device, bytes, _| books::created(key, device.slot, device.ordinal as i32, bytes),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CuResult {
    type F = unsafe extern "C" fn(CUmemGenericAllocationHandle) -> CuResult;
    let real = real_or_return!(Cu::MemRelease, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        books::release(handle, || real(handle))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CuResult {
    type F = unsafe extern "C" fn(
        CUdeviceptr,
        usize,
        usize,
        CUmemGenericAllocationHandle,
        u64,
    ) -> CuResult;
    let real = real_or_return!(Cu::MemMap, F);
    let r = real(ptr, size, offset, handle, flags);
    if r == CUDA_SUCCESS {
        boundary((), || books::mapped(ptr, size as u64, handle));
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CuResult {
    type F = unsafe extern "C" fn(CUdeviceptr, usize) -> CuResult;
    let real = real_or_return!(Cu::MemUnmap, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        books::unmap(ptr, size as u64, || real(ptr, size))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmemGenericAllocationHandle, *mut c_void) -> CuResult;
    let real = real_or_return!(Cu::MemRetainAllocationHandle, F);
    let r = real(handle, addr);
    if r == CUDA_SUCCESS && !handle.is_null() {
        boundary((), || books::retained(*handle, addr as u64));
    }
    r
}

/// What an export handed out, or an import was given, of `kind`.
unsafe fn shared(kind: c_int, at: *const c_void) -> Option<Shared> {
    match kind {
        CU_MEM_HANDLE_TYPE_FABRIC if !at.is_null() => {
            Some(Shared::Fabric(*(at as *const [u8; 64])))
        }
        _ => None,
    }
}

/// An exported descriptor's mark: an open-file-description lock (Linux's
/// `F_OFD_*`: owned by the description, shared by every duplicate of it)
/// on a byte of its own, far past any data. `cmd` places it
/// (`F_OFD_SETLK`) or asks what would conflict with it (`F_OFD_GETLK`).
unsafe fn mark(fd: c_int, cmd: c_int, token: u64) -> Option<libc::flock> {
    let mut l: libc::flock = std::mem::zeroed();
    l.l_type = libc::F_WRLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    l.l_start = (1i64 << 62).checked_add(i64::try_from(token).ok()?)?;
    l.l_len = 1;
    (libc::fcntl(fd, cmd, &mut l) == 0).then_some(l)
}

/// A descriptor's file: its device and inode.
unsafe fn file_of(fd: c_int) -> Option<(u64, u64)> {
    let mut st: libc::stat = std::mem::zeroed();
    (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether `fd` is `export`'s open file description: the same file, and
/// the export's mark does not conflict with it (a description's own lock
/// never does; another description's on the same file does).
unsafe fn names(fd: c_int, export: &books::ExportFd) -> bool {
    file_of(fd) == Some(export.file)
        && mark(fd, libc::F_OFD_GETLK, export.token)
            .is_some_and(|l| l.l_type == libc::F_UNLCK as libc::c_short)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: CUmemGenericAllocationHandle,
    kind: c_int,
    flags: u64,
) -> CuResult {
    type F =
        unsafe extern "C" fn(*mut c_void, CUmemGenericAllocationHandle, c_int, u64) -> CuResult;
    let real = real_or_return!(Cu::MemExportToShareableHandle, F);
    let r = real(shareable, handle, kind, flags);
    if r != CUDA_SUCCESS || shareable.is_null() {
        return r;
    }
    if kind == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
        let fd = *(shareable as *const c_int);
        boundary((), || {
            books::exported_fd(handle, |token| {
                if fd < 0 {
                    return None;
                }
                // F_DUPFD_CLOEXEC: the same description, closed with the
                // allocation's last reference (`books`).
                let kept = BorrowedFd::borrow_raw(fd).try_clone_to_owned().ok()?;
                let file = file_of(kept.as_raw_fd())?;
                mark(kept.as_raw_fd(), libc::F_OFD_SETLK, token)?;
                Some((kept, file))
            })
        });
    } else if let Some(s) = shared(kind, shareable) {
        boundary((), || books::exported(handle, s));
    }
    r
}

/// The POSIX descriptor comes by value (cast to a pointer), a FABRIC
/// handle by address.
#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    kind: c_int,
) -> CuResult {
    type F =
        unsafe extern "C" fn(*mut CUmemGenericAllocationHandle, *mut c_void, c_int) -> CuResult;
    let real = real_or_return!(Cu::MemImportFromShareableHandle, F);
    // Read before the call: the driver may close or reuse what it was given.
    let s = if kind == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
        let fd = os_handle as usize as c_int;
        boundary(None, || books::export_named(|e| names(fd, e)))
    } else {
        shared(kind, os_handle)
    };
    let r = real(handle, os_handle, kind);
    if let (CUDA_SUCCESS, Some(s), false) = (r, s, handle.is_null()) {
        boundary((), || books::imported(*handle, s));
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMulticastCreate(
    handle: *mut CUmemGenericAllocationHandle,
    prop: MulticastProp,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmemGenericAllocationHandle, MulticastProp) -> CuResult;
    let real = real_or_return!(Cu::MulticastCreate, F);
    let r = real(handle, prop);
    if r == CUDA_SUCCESS && !handle.is_null() {
        boundary((), || books::multicast_created(*handle));
    }
    r
}

/// A multicast binding: the driver's call, then `$record` on success.
macro_rules! bind {
    ($name:ident, $id:expr, ($($arg:ident: $t:ty),*) => $record:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            type F = unsafe extern "C" fn($($t),*) -> CuResult;
            let real = real_or_return!($id, F);
            let r = real($($arg),*);
            if r == CUDA_SUCCESS {
                boundary((), || $record);
            }
            r
        }
    };
}

// The v1 calls bind memory on its own device; the _v2 ones name it.
bind!(cuMulticastBindMem, Cu::MulticastBindMem,
      (mc: u64, mc_offset: usize, mem: u64, mem_offset: usize, size: usize, flags: u64)
      => books::bound(mc, None, mc_offset as u64, size as u64, Bound::Handle(mem)));
bind!(cuMulticastBindMem_v2, Cu::MulticastBindMemV2,
      (mc: u64, dev: CUdevice, mc_offset: usize, mem: u64, mem_offset: usize, size: usize,
       flags: u64)
      => books::bound(mc, Some(dev), mc_offset as u64, size as u64, Bound::Handle(mem)));
bind!(cuMulticastBindAddr, Cu::MulticastBindAddr,
      (mc: u64, mc_offset: usize, ptr: CUdeviceptr, size: usize, flags: u64)
      => books::bound(mc, None, mc_offset as u64, size as u64, Bound::Address(ptr)));
bind!(cuMulticastBindAddr_v2, Cu::MulticastBindAddrV2,
      (mc: u64, dev: CUdevice, mc_offset: usize, ptr: CUdeviceptr, size: usize, flags: u64)
      => books::bound(mc, Some(dev), mc_offset as u64, size as u64, Bound::Address(ptr)));

#[no_mangle]
pub unsafe extern "C" fn cuMulticastUnbind(
    mc: CUmemGenericAllocationHandle,
    dev: CUdevice,
    mc_offset: usize,
    size: usize,
) -> CuResult {
    type F = unsafe extern "C" fn(u64, CUdevice, usize, usize) -> CuResult;
    let real = real_or_return!(Cu::MulticastUnbind, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        books::unbind(mc, dev, mc_offset as u64, size as u64, || {
            real(mc, dev, mc_offset, size)
        })
    })
}
