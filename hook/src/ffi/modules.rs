//! Module and library loading: the image's `__device__` globals
//! (`crate::modules`) charged to the current context before the driver
//! loads it, given back at the unload or with the context.

use super::*;
use crate::modules;

type CUmodule = *mut c_void;
type CUlibrary = *mut c_void;

/// nvcc's `__fatBinC_Wrapper_t` magic: the wrapper points at the fat binary.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// cuda.h: what the driver answers an image it cannot load.
const CUDA_ERROR_INVALID_IMAGE: CuResult = 200;

/// An image in the program's memory, its length unknown: read through
/// `process_vm_readv` on this process, which fails on an address that is
/// not mapped instead of faulting (a crafted image may declare parts far
/// past its buffer). Where the call is not allowed (a seccomp filter), the
/// bytes are read directly, as the driver itself will read them.
struct Memory(*const u8);

impl modules::Image for Memory {
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let start = (self.0 as u64).checked_add(offset)?;
        start.checked_add(len)?;
        if len > modules::MAX_READ {
            return None;
        }
        // A failed reservation is an unreadable image, never an abort.
        let mut buf = Vec::new();
        buf.try_reserve_exact(len as usize).ok()?;
        buf.resize(len as usize, 0);
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut c_void,
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: start as *mut c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `buf` is `len` writable bytes; the remote range is only
        // read by the kernel, which reports a hole instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n == len as isize {
            return Some(buf);
        }
        let blocked = n < 0
            && matches!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::ENOSYS | libc::EPERM)
            );
        // SAFETY: the driver is handed these same bytes to read.
        blocked
            .then(|| unsafe { std::slice::from_raw_parts(start as *const u8, buf.len()) }.to_vec())
    }
}

/// The globals of an image in memory: PTX text (NUL-terminated), a cubin,
/// a fat binary or nvcc's wrapper around one (None: refused, unreadable).
unsafe fn image_globals(image: *const c_void) -> Option<u64> {
    let memory = Memory(image as *const u8);
    if !image.is_null()
        && modules::Image::read(&memory, 0, 4)? == FATBIN_WRAPPER_MAGIC.to_le_bytes()
    {
        // { int magic, version; const fatBinaryHeader *data; ... }: one
        // level (a wrapper naming a wrapper is not followed again).
        let data = modules::Image::read(&memory, 8, 8)?;
        return unwrapped_globals(u64::from_le_bytes(data.try_into().ok()?) as *const c_void);
    }
    unwrapped_globals(image)
}

/// [`image_globals`] of an image that is not nvcc's wrapper.
unsafe fn unwrapped_globals(image: *const c_void) -> Option<u64> {
    if image.is_null() {
        return Some(0);
    }
    let memory = Memory(image as *const u8);
    modules::globals(&memory, || {
        Some(CStr::from_ptr(image as *const c_char).to_bytes().to_vec())
    })
}

/// The globals of an image file (a file that cannot be opened: the driver
/// will say so; one larger than the hook reads: refused).
unsafe fn file_globals(path: *const c_char) -> Option<u64> {
    use std::io::Read;
    if path.is_null() {
        return Some(0);
    }
    let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
        CStr::from_ptr(path).to_bytes(),
    );
    let Ok(file) = std::fs::File::open(path) else {
        return Some(0);
    };
    let mut bytes = Vec::new();
    file.take(modules::MAX_READ + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > modules::MAX_READ {
        return None;
    }
    let text = bytes.split(|&b| b == 0).next().unwrap_or_default().to_vec();
    modules::globals(&bytes[..], || Some(text))
}

/// A load that writes its module or library to `*out`, charged `bytes`
/// (None: the image is unreadable).
unsafe fn load(
    kind: Kind,
    bytes: Option<u64>,
    out: *mut *mut c_void,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    if out.is_null() || !limits::active() || limits::passes_through() {
        return call();
    }
    // An image whose declared parts the hook cannot read would load
    // uncharged: refused, as the driver refuses an image it cannot load.
    let Some(bytes) = bytes else {
        return CUDA_ERROR_INVALID_IMAGE;
    };
    allocate_into(Target::Context, kind, bytes, out, handle_key, call)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmodule, *const c_char) -> CuResult;
    let real = real_or_return!(Cu::ModuleLoad, F);
    load(Kind::Module, file_globals(fname), module, || {
        real(module, fname)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CuResult;
    let real = real_or_return!(Cu::ModuleLoadData, F);
    load(Kind::Module, image_globals(image), module, || {
        real(module, image)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut CUmodule,
    image: *const c_void,
    numOptions: c_uint,
    options: *mut c_int,
    optionValues: *mut *mut c_void,
) -> CuResult {
    type F = unsafe extern "C" fn(
        *mut CUmodule,
        *const c_void,
        c_uint,
        *mut c_int,
        *mut *mut c_void,
    ) -> CuResult;
    let real = real_or_return!(Cu::ModuleLoadDataEx, F);
    load(Kind::Module, image_globals(image), module, || {
        real(module, image, numOptions, options, optionValues)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut CUmodule,
    fatCubin: *const c_void,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CuResult;
    let real = real_or_return!(Cu::ModuleLoadFatBinary, F);
    load(Kind::Module, image_globals(fatCubin), module, || {
        real(module, fatCubin)
    })
}

/// `cuLibraryLoadData` and `cuLibraryLoadFromFile`: the code (or its
/// file) second, the JIT and library options passed through.
macro_rules! library_load {
    ($name:ident, $id:expr, $code:ident: $ct:ty, $globals:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            library: *mut CUlibrary,
            $code: $ct,
            jitOptions: *mut c_int,
            jitOptionsValues: *mut *mut c_void,
            numJitOptions: c_uint,
            libraryOptions: *mut c_int,
            libraryOptionValues: *mut *mut c_void,
            numLibraryOptions: c_uint,
        ) -> CuResult {
            type F = unsafe extern "C" fn(
                *mut CUlibrary,
                $ct,
                *mut c_int,
                *mut *mut c_void,
                c_uint,
                *mut c_int,
                *mut *mut c_void,
                c_uint,
            ) -> CuResult;
            let real = real_or_return!($id, F);
            load(Kind::Library, $globals($code), library, || {
                real(
                    library,
                    $code,
                    jitOptions,
                    jitOptionsValues,
                    numJitOptions,
                    libraryOptions,
                    libraryOptionValues,
                    numLibraryOptions,
                )
            })
        }
    };
}

library_load!(cuLibraryLoadData, Cu::LibraryLoadData, code: *const c_void, image_globals);
library_load!(cuLibraryLoadFromFile, Cu::LibraryLoadFromFile, fileName: *const c_char,
              file_globals);

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CuResult {
    type F = unsafe extern "C" fn(CUmodule) -> CuResult;
    let real = real_or_return!(Cu::ModuleUnload, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        crate::current::forget();
        memory::free(Kind::Module, hmod as u64, || {
            let result = real(hmod);
            // Again once it is gone: see `memory::free_context`.
            crate::current::forget();
            result
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(library: CUlibrary) -> CuResult {
    type F = unsafe extern "C" fn(CUlibrary) -> CuResult;
    let real = real_or_return!(Cu::LibraryUnload, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        crate::current::forget();
        memory::free(Kind::Library, library as u64, || {
            let result = real(library);
            // Again once it is gone: see `memory::free_context`.
            crate::current::forget();
            result
        })
    })
}
