//! Module and library loading: the image's `__device__` globals
//! (`crate::modules`) charged to the current context before the driver
//! loads it, given back at the unload or with the context.

use super::*;
use crate::modules;

type CUmodule = *mut c_void;
type CUlibrary = *mut c_void;

/// nvcc's `__fatBinC_Wrapper_t` magic: the wrapper points at the fat binary.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;

/// The globals of an image in memory: PTX text (NUL-terminated), a fat
/// binary (its header says its size) or nvcc's wrapper around one.
unsafe fn image_globals(image: *const c_void) -> u64 {
    if image.is_null() {
        return 0;
    }
    let magic = (image as *const u32).read_unaligned();
    if magic == FATBIN_WRAPPER_MAGIC {
        // { int magic, version; const fatBinaryHeader *data; ... }
        let data = (image as *const u8).add(8) as *const *const c_void;
        return image_globals(data.read_unaligned());
    }
    if magic == modules::FATBIN_MAGIC {
        let header = (image as *const u8).add(6) as *const u16;
        let size = (image as *const u8).add(8) as *const u64;
        let len = (header.read_unaligned() as u64).saturating_add(size.read_unaligned());
        let bytes = std::slice::from_raw_parts(image as *const u8, len as usize);
        return modules::globals(bytes);
    }
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        return 0;
    }
    modules::globals(CStr::from_ptr(image as *const c_char).to_bytes())
}

/// The globals of an image file (a file that cannot be read: the driver
/// will say so).
unsafe fn file_globals(path: *const c_char) -> u64 {
    if path.is_null() {
        return 0;
    }
    let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
        CStr::from_ptr(path).to_bytes(),
    );
    let Ok(mut bytes) = std::fs::read(path) else {
        return 0;
    };
    bytes.push(0);
    image_globals(bytes.as_ptr() as *const c_void)
}

/// A load that writes its module or library to `*out`, charged `bytes`.
unsafe fn load(
    kind: Kind,
    bytes: u64,
    out: *mut *mut c_void,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    if out.is_null() {
        return call();
    }
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
