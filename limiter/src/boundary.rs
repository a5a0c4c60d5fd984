//! The C boundary of liblimiter.so: the only module that touches raw
//! pointers (the pattern of libaccelerator's `src/abi/boundary.rs`).
//!
//! - `call`: the one panic-catching wrapper every export runs in. A panic
//!   becomes RESULT_ERROR_INTERNAL; every failure leaves its message for
//!   `limiterGetLastError` on this thread (and on stderr when
//!   `ACCELERATOR_LIMITER_DEBUG=1`). Success clears it without allocating,
//!   so the hot path never touches the heap.
//! - `cstr`: the one bounded, UTF-8-checked way to read strings.
//! - `write_fixed`: the one way to write a `char[N]`, always NUL-terminated.

use accel_common::{Error, Res, ResultCode};
use libc::c_char;
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Longest `const char*` read; anything longer is INVALID_PARAM.
const MAX_CSTR: usize = 4096;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static HAS_ERROR: Cell<bool> = const { Cell::new(false) };
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
    let _ = HAS_ERROR.try_with(|h| h.set(true));
}

fn clear_last_error() {
    if HAS_ERROR.try_with(|h| h.replace(false)).unwrap_or(false) {
        let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = CString::default());
    }
}

/// This thread's last error message, valid until its next limiter call.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Run an export: catch panics, record failures, map to the Result code.
pub fn call(name: &str, f: impl FnOnce() -> Res<()>) -> ResultCode {
    let outcome = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::Internal(format!(
                "panic caught at the ABI boundary: {what}"
            )))
        }
    };
    match outcome {
        Ok(()) => {
            clear_last_error();
            ResultCode::Success
        }
        Err(e) => {
            let message = format!("{name}: {e}");
            if std::env::var_os("ACCELERATOR_LIMITER_DEBUG").is_some_and(|v| v == "1") {
                eprintln!("liblimiter: {message}");
            }
            set_last_error(&message);
            e.code()
        }
    }
}

/// Read a caller's `const char*`: non-NULL, NUL-terminated within
/// `MAX_CSTR` bytes, non-empty, at most `max` bytes, UTF-8.
///
/// # Safety
/// `p` is NULL or points to readable memory up to its NUL or `MAX_CSTR` bytes.
pub unsafe fn cstr<'a>(p: *const c_char, max: usize, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(Error::InvalidParam(format!("{what} is NULL")));
    }
    let len = libc::strnlen(p, MAX_CSTR + 1);
    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
    if bytes.is_empty() {
        return Err(Error::InvalidParam(format!("{what} is empty")));
    }
    if len > max {
        return Err(Error::InvalidParam(format!(
            "{what} is longer than {max} bytes"
        )));
    }
    std::str::from_utf8(bytes)
        .map_err(|_| Error::InvalidParam(format!("{what} is not valid UTF-8")))
}

/// A required pointer to one value the caller owns.
///
/// # Safety
/// `p` is NULL or valid for reads and writes of a `T`.
pub unsafe fn out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    p.as_mut()
        .ok_or_else(|| Error::InvalidParam(format!("{what} is NULL")))
}

/// Write `s` into a `char[N]`, truncated on a character boundary to N-1
/// bytes, NUL-terminated and zero-padded.
pub fn write_fixed<const N: usize>(field: &mut [c_char; N], s: &str) {
    let mut end = s.len().min(N - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, &b) in field.iter_mut().zip(&s.as_bytes()[..end]) {
        *dst = b as c_char;
    }
    field[end..].fill(0);
}
