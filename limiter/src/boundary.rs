//! The C boundary of liblimiter.so: the only module that touches raw
//! pointers (the pattern of libaccelerator's `src/abi/boundary.rs`).
//!
//! - `call` / `call_hot`: the one panic-catching wrapper every export runs
//!   in. A panic becomes RESULT_ERROR_INTERNAL; every failure leaves its
//!   message for `limiterGetLastError` on this thread (and on stderr when
//!   `ACCELERATOR_LIMITER_DEBUG=1`). Success clears it with one flag check,
//!   so the hot path never touches the heap.
//! - `cstr`: the one bounded, UTF-8-checked way to read strings.
//! - `write_fixed`: the one way to write a `char[N]`, always NUL-terminated.
//! - `pid_arg` / `device_arg`: the hot path's two strings, with a per-thread
//!   memory of the last text seen and what it resolved to (pid, device slot),
//!   so a repeated text skips validation, parsing and the device lookup.
//!
//! Everything per-thread that the hot path needs is in one `const`
//! thread-local, [`Hot`], reached once per call (`call_hot`) and passed
//! down by reference: in a dlopen'ed library every thread-local access is a
//! `__tls_get_addr` call.

use accel_common::cabi::panic_error;
pub use accel_common::cabi::{cstr, out, write_fixed};
use accel_common::{Error, Res, ResultCode};
use libc::c_char;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Everything the hot path touches per call, in one thread-local (one
    /// TLS address lookup in a dlopen'ed library). `const`-initialised and
    /// without Drop: no lazy-init check, no destructor registration.
    static HOT: Hot = const { Hot::new() };
}

/// A caller string seen before on this thread, NUL-terminated and
/// NUL-padded, with what it resolved to. A string equal to one that was
/// validated (bounded, non-empty, UTF-8) and resolved is valid and resolves
/// the same. `text[0] == 0`: nothing remembered.
#[derive(Clone, Copy)]
struct Seen<const N: usize> {
    text: [c_char; N],
    value: u64,
}

impl<const N: usize> Seen<N> {
    const EMPTY: Seen<N> = Seen {
        text: [0; N],
        value: 0,
    };
}

/// This thread's hot-path state (see the module comment).
pub struct Hot {
    has_error: Cell<bool>,
    /// processId text → pid. A pure function of the text (no process slot
    /// is cached here: shm revalidates its own slot on every call), so it
    /// stays right across fork.
    pid: UnsafeCell<Seen<32>>,
    /// deviceUUID text → device slot. Device slots are never released or
    /// renamed and the mapping never changes within a process (fork
    /// included), so the index stays right for the life of the process.
    device: UnsafeCell<Seen<64>>,
}

impl Hot {
    const fn new() -> Hot {
        Hot {
            has_error: Cell::new(false),
            pid: UnsafeCell::new(Seen::EMPTY),
            device: UnsafeCell::new(Seen::EMPTY),
        }
    }
}

#[cold]
fn set_last_error(h: &Hot, message: &str) {
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
    h.has_error.set(true);
}

#[cold]
fn clear_last_error(h: &Hot) {
    h.has_error.set(false);
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = CString::default());
}

/// Whether `p`'s text equals the remembered one (false when none is).
///
/// # Safety
/// `p` is non-NULL and readable up to its NUL or `N` bytes.
unsafe fn same<const N: usize>(p: *const c_char, seen: &Seen<N>) -> bool {
    // strcmp stops at the first difference or at the remembered text's NUL
    // (within N bytes): a caller string that is shorter differs at its own
    // NUL and one that is longer (or unterminated) differs at ours, so no
    // more than the caller's NUL or N bytes is compared.
    seen.text[0] != 0 && libc::strcmp(p, seen.text.as_ptr()) == 0
}

/// Remember `s` (validated, at most N-1 bytes) as resolving to `value`.
fn remember<const N: usize>(cell: &UnsafeCell<Seen<N>>, s: &str, value: u64) {
    if s.is_empty() || s.len() >= N || s.as_bytes().contains(&0) {
        return;
    }
    let mut seen = Seen::<N>::EMPTY;
    for (dst, &b) in seen.text.iter_mut().zip(s.as_bytes()) {
        *dst = b as c_char;
    }
    seen.value = value;
    // SAFETY: this thread's own cell; no reference into it is alive (the
    // readers copy out or borrow only within one export, which reaches
    // here only on the path that holds no such borrow).
    unsafe { *cell.get() = seen };
}

/// `processId` as a pid: decimal digits only, positive, at most `max`
/// (< 32) bytes. A text equal to this thread's last one is not parsed again.
///
/// # Safety
/// As `cstr`.
#[inline]
pub unsafe fn pid_arg(h: &Hot, p: *const c_char, max: usize) -> Res<i32> {
    debug_assert!(max < 32);
    // SAFETY: this thread's own cell, not written during this borrow.
    let seen = &*h.pid.get();
    if !p.is_null() && same(p, seen) {
        return Ok(seen.value as i32);
    }
    pid_slow(h, p, max)
}

#[cold]
unsafe fn pid_slow(h: &Hot, p: *const c_char, max: usize) -> Res<i32> {
    let s = cstr(p, max, "processId")?;
    let pid = s
        .parse::<i32>()
        .ok()
        .filter(|&pid| pid > 0 && s.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            Error::InvalidParam(format!("processId {s:?} is not a positive decimal pid"))
        })?;
    remember(&h.pid, s, pid as u32 as u64);
    Ok(pid)
}

/// A validated `deviceUUID`: either this thread's last one (slot known) or
/// a new one to resolve with `resolve`.
pub enum DeviceArg<'a> {
    /// The slot and the UUID, NUL-terminated and NUL-padded.
    Known(usize, &'a [c_char; 64]),
    New(&'a Hot, &'a str),
}

/// Read `deviceUUID` (as `cstr` with `max` ≤ 63).
///
/// # Safety
/// As `cstr`.
#[inline]
pub unsafe fn device_arg<'a>(h: &'a Hot, p: *const c_char, max: usize) -> Res<DeviceArg<'a>> {
    debug_assert!(max < 64);
    // SAFETY: this thread's own cell; only `resolve` of a `New` argument
    // writes it, and a `New` holds no borrow of it.
    let seen = &*h.device.get();
    if !p.is_null() && same(p, seen) {
        return Ok(DeviceArg::Known(seen.value as usize, &seen.text));
    }
    cstr(p, max, "deviceUUID").map(|s| DeviceArg::New(h, s))
}

impl DeviceArg<'_> {
    /// The device slot, resolving (and remembering) a new UUID with `find`.
    #[inline]
    pub fn resolve(&self, find: impl FnOnce(&str) -> Res<usize>) -> Res<usize> {
        match *self {
            DeviceArg::Known(d, _) => Ok(d),
            DeviceArg::New(h, uuid) => {
                let d = find(uuid)?;
                remember(&h.device, uuid, d as u64);
                Ok(d)
            }
        }
    }
}

/// Write the device UUID of `arg` into a `char[64]` (as `write_fixed`).
#[inline]
pub fn write_device(field: &mut [c_char; 64], arg: &DeviceArg<'_>) {
    match arg {
        DeviceArg::New(_, uuid) => write_fixed(field, uuid),
        DeviceArg::Known(_, text) => *field = **text,
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
    call_hot(name, |_| f())
}

/// `call` for an export that uses this thread's [`Hot`] state.
#[inline]
pub fn call_hot(name: &str, f: impl FnOnce(&Hot) -> Res<()>) -> ResultCode {
    // `with` cannot fail here: a const thread-local without Drop is never
    // destroyed.
    HOT.with(|h| match catch_unwind(AssertUnwindSafe(|| f(h))) {
        Ok(Ok(())) => {
            if h.has_error.get() {
                clear_last_error(h);
            }
            ResultCode::Success
        }
        Ok(Err(e)) => fail(h, name, e),
        Err(panic) => fail(h, name, panic_error(panic)),
    })
}

#[cold]
#[inline(never)]
fn fail(h: &Hot, name: &str, e: Error) -> ResultCode {
    let message = format!("{name}: {e}");
    if std::env::var_os("ACCELERATOR_LIMITER_DEBUG").is_some_and(|v| v == "1") {
        eprintln!("liblimiter: {message}");
    }
    set_last_error(h, &message);
    e.code()
}
