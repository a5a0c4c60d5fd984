//! The C boundary: the only module that touches raw pointers.
//!
//! - `call`/`call_bool`: the one panic-catching wrapper every export runs in.
//!   A panic becomes RESULT_ERROR_INTERNAL (false); every failure leaves its
//!   message for `acceleratorGetLastError` on this thread and is logged at
//!   debug level.
//! - `cstr`, `fixed`, `write_fixed` (from `accel_common::cabi`, shared with
//!   liblimiter): the one bounded, UTF-8-checked way to read strings and the
//!   one way to write a `char[N]`, always NUL-terminated.
//! - pointer and array checks (NULL, zero and huge counts) in one place.
//! - `alloc_array`/`free_array`: the allocator of the library-allocated style.
//! - `pin_library`: keep this library loaded for the life of the process.
//! - `at_fork`: fork handlers (the sampler holds its lock across `fork()`).

use crate::log::log_at;
use accel_common::cabi::panic_error;
pub use accel_common::cabi::{cstr, fixed, fixed_from, fixed_opt, out, write_fixed, MAX_CSTR};
use accel_common::{Error, Res, ResultCode};
use libc::c_char;
use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// This thread's last outcome: its Result code and message.
    static LAST_ERROR: RefCell<(ResultCode, CString)> =
        RefCell::new((ResultCode::Success, CString::default()));
}

fn set_last_error(code: ResultCode, message: &str) {
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; losing the
    // message then is better than aborting.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = (code, text));
}

/// The Result code of this thread's last call (the bool functions report
/// their reason's code here).
pub fn last_error_code() -> ResultCode {
    LAST_ERROR
        .try_with(|slot| slot.borrow().0)
        .unwrap_or(ResultCode::Success)
}

/// Pointer to this thread's last error message, valid until the next call
/// into the library on this thread.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().1.as_ptr())
        .unwrap_or(c"".as_ptr())
}

fn catch(name: &str, f: impl FnOnce() -> Res<()>) -> Res<()> {
    let outcome = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => Err(panic_error(panic)),
    };
    match &outcome {
        Ok(()) => set_last_error(ResultCode::Success, ""),
        Err(e) => {
            let message = format!("{name}: {e}");
            log_at!(Debug, "{message}");
            set_last_error(e.code(), &message);
        }
    }
    outcome
}

/// Run an export that returns `Result`.
pub fn call(name: &str, f: impl FnOnce() -> Res<()>) -> ResultCode {
    match catch(name, f) {
        Ok(()) => ResultCode::Success,
        Err(e) => e.code(),
    }
}

/// Run an export that returns `bool` (true on success).
pub fn call_bool(name: &str, f: impl FnOnce() -> Res<()>) -> bool {
    catch(name, f).is_ok()
}

/// Run an export that returns nothing (the free functions).
pub fn call_void(name: &str, f: impl FnOnce()) {
    let _ = catch(name, || {
        f();
        Ok(())
    });
}

/// A caller's input array of `n` elements: non-NULL, 1 ≤ n ≤ max.
///
/// # Safety
/// `p` is NULL or valid for reads of `n` elements.
pub unsafe fn input<'a, T>(p: *const T, n: usize, max: usize, what: &str) -> Res<&'a [T]> {
    if p.is_null() {
        return Err(Error::InvalidParam(format!("{what} is NULL")));
    }
    check_count(n, max, what)?;
    Ok(std::slice::from_raw_parts(p, n))
}

/// The count of an input array: 1 ≤ n ≤ max.
pub fn check_count(n: usize, max: usize, what: &str) -> Res<()> {
    if n == 0 {
        return Err(Error::InvalidParam(format!("{what}: count is 0")));
    }
    if n > max {
        return Err(Error::InvalidParam(format!(
            "{what}: count {n} exceeds the limit of {max}"
        )));
    }
    Ok(())
}

/// A caller's output buffer of `capacity` elements, of which the first
/// `min(capacity, needed)` are returned for writing. A capacity of 0 is
/// INVALID_PARAM unless `optional`, in which case `p` may also be NULL.
///
/// # Safety
/// `p` is NULL or valid for writes of `capacity` elements.
pub unsafe fn out_slice<'a, T>(
    p: *mut T,
    capacity: usize,
    needed: usize,
    optional: bool,
    what: &str,
) -> Res<&'a mut [T]> {
    let len = capacity.min(needed);
    if optional && capacity == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::InvalidParam(format!("{what} is NULL")));
    }
    if capacity == 0 {
        return Err(Error::InvalidParam(format!("{what}: capacity is 0")));
    }
    Ok(std::slice::from_raw_parts_mut(p, len))
}

/// Read an array of `n` C strings, each checked as by `cstr`.
///
/// # Safety
/// As `input` for the array and `cstr` for each element.
pub unsafe fn cstr_array(
    p: *const *const c_char,
    n: usize,
    max_count: usize,
    max_len: usize,
    what: &str,
) -> Res<Vec<String>> {
    input(p, n, max_count, what)?
        .iter()
        .enumerate()
        .map(|(i, &s)| cstr(s, max_len, &format!("{what}[{i}]")).map(str::to_owned))
        .collect()
}

/// Read a caller's `const char*` that is echoed rather than checked (v2
/// metrics UUIDs): non-NULL; read up to its NUL or `MAX_CSTR` bytes, empty
/// allowed, invalid UTF-8 replaced.
///
/// # Safety
/// `p` is NULL or points to readable memory up to its NUL or `MAX_CSTR` bytes.
pub unsafe fn cstr_lossy(p: *const c_char, what: &str) -> Res<String> {
    if p.is_null() {
        return Err(Error::InvalidParam(format!("{what} is NULL")));
    }
    let len = libc::strnlen(p, MAX_CSTR);
    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Move `items` into a `malloc`ed array the caller releases through one of
/// the library's free functions (NULL for an empty list).
pub fn alloc_array<T>(items: Vec<T>) -> Res<*mut T> {
    if items.is_empty() {
        return Ok(std::ptr::null_mut());
    }
    // SAFETY: calloc returns NULL or memory for `len` elements of T aligned
    // for any fundamental type; every element is then initialised by write.
    unsafe {
        let p = libc::calloc(items.len(), std::mem::size_of::<T>()).cast::<T>();
        if p.is_null() {
            return Err(Error::ResourceExhausted(format!(
                "cannot allocate {} result entries",
                items.len()
            )));
        }
        for (i, item) in items.into_iter().enumerate() {
            p.add(i).write(item);
        }
        Ok(p)
    }
}

/// Release an array from `alloc_array` (NULL is fine). Our arrays hold only
/// plain data or pointers the caller's free function releases first.
///
/// # Safety
/// `p` is NULL or came from `alloc_array` and was not released before.
pub unsafe fn free_array<T>(p: *mut T) {
    libc::free(p.cast());
}

/// A mutable view of a library-allocated array for the free functions.
///
/// # Safety
/// `p` is NULL or points to `n` initialised elements.
pub unsafe fn owned_slice<'a, T>(p: *mut T, n: usize) -> &'a mut [T] {
    if p.is_null() || n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p, n)
    }
}

/// Keep this library mapped for the life of the process: a second
/// reference to itself, opened `RTLD_NODELETE` (found through `dladdr` of
/// one of its own functions), so a `dlclose` by the host while a thread of
/// ours runs (the compute sampler) never unmaps running code. Once per
/// process; a failure is logged and leaves the library as it was.
pub fn pin_library() {
    use std::sync::atomic::{AtomicBool, Ordering::AcqRel};
    static PINNED: AtomicBool = AtomicBool::new(false);
    if PINNED.swap(true, AcqRel) {
        return;
    }
    // SAFETY: dladdr fills `info` for any address (here, a function of
    // this library); dli_fname is a NUL-terminated path owned by the
    // loader, valid while the library is loaded, which it is (we run in
    // it). dlopen of that path with RTLD_NOLOAD-free flags only adds a
    // reference to the already-loaded object (no constructors run again).
    let pinned = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(pin_library as *const libc::c_void, &mut info) != 0
            && !info.dli_fname.is_null()
            && !libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NODELETE).is_null()
    };
    if !pinned {
        log_at!(
            Warn,
            "cannot pin the library in memory: a dlclose while its sampler runs is unsafe"
        );
    }
}

/// Run `prepare` before every `fork()` of this process (in the forking
/// thread) and `after` after it, in the parent and in the child. glibc
/// drops the handlers when this library is unloaded.
pub fn at_fork(prepare: extern "C" fn(), after: extern "C" fn()) {
    // SAFETY: registers plain functions that take no arguments.
    unsafe {
        libc::pthread_atfork(Some(prepare), Some(after), Some(after));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buffers_are_checked() {
        assert!(check_count(0, 4, "a").is_err());
        assert!(check_count(5, 4, "a").is_err());
        assert!(check_count(4, 4, "a").is_ok());
        let mut buf = [0u32; 4];
        unsafe {
            assert_eq!(
                out_slice(buf.as_mut_ptr(), 4, 2, false, "b").unwrap().len(),
                2
            );
            assert_eq!(
                out_slice(buf.as_mut_ptr(), usize::MAX, 3, false, "b")
                    .unwrap()
                    .len(),
                3
            );
            assert!(out_slice(buf.as_mut_ptr(), 0, 3, false, "b").is_err());
            assert!(out_slice::<u32>(std::ptr::null_mut(), 0, 3, true, "b")
                .unwrap()
                .is_empty());
            assert!(out_slice::<u32>(std::ptr::null_mut(), 2, 3, true, "b").is_err());
        }
    }

    #[test]
    fn a_panic_becomes_internal_with_a_message() {
        let code = call("t", || panic!("boom"));
        assert_eq!(code, ResultCode::ErrorInternal);
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) };
        assert!(msg.to_str().unwrap().contains("boom"));
        assert_eq!(last_error_code(), ResultCode::ErrorInternal);
        assert_eq!(call("t", || Ok(())), ResultCode::Success);
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) };
        assert!(msg.to_bytes().is_empty());
        assert_eq!(last_error_code(), ResultCode::Success);
        assert!(!call_bool("t", || Err(Error::NotFound("x".into()))));
        assert_eq!(last_error_code(), ResultCode::ErrorNotFound);
    }

    #[test]
    fn library_arrays_round_trip() {
        let p = alloc_array(vec![1u64, 2, 3]).unwrap();
        unsafe {
            assert_eq!(owned_slice(p, 3), &[1, 2, 3]);
            free_array(p);
        }
        assert!(alloc_array::<u64>(Vec::new()).unwrap().is_null());
    }
}
