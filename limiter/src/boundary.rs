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
//! - `pid_arg` / `device_arg`: the hot path's two strings, with a per-thread
//!   memory of the last text seen and what it resolved to (pid, device slot),
//!   so a repeated text skips validation, parsing and the device lookup.

use accel_common::cabi::panic_error;
pub use accel_common::cabi::{cstr, out, write_fixed};
use accel_common::{Error, Res, ResultCode};
use libc::c_char;
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Everything the hot path touches per call, in one thread-local (one
    /// TLS address lookup in a dlopen'ed library). `const`-initialised and
    /// without Drop: no lazy-init check, no destructor registration.
    static HOT: Hot = const { Hot::new() };
}

/// A caller string seen before on this thread, NUL-padded, with its length
/// and what it resolved to. A string byte-equal to one that was validated
/// (bounded, non-empty, UTF-8) and resolved is valid and resolves the same.
#[derive(Clone, Copy)]
struct Seen<const N: usize> {
    len: usize,
    text: [u8; N],
    value: u64,
}

impl<const N: usize> Seen<N> {
    const EMPTY: Seen<N> = Seen {
        len: 0,
        text: [0; N],
        value: 0,
    };
}

struct Hot {
    has_error: Cell<bool>,
    /// processId text → pid. A pure function of the text (no process slot
    /// is cached here: shm revalidates its own slot on every call), so it
    /// stays right across fork.
    pid: Cell<Seen<32>>,
    /// deviceUUID text → device slot. Device slots are never released or
    /// renamed and the mapping never changes within a process (fork
    /// included), so the index stays right for the life of the process.
    device: Cell<Seen<64>>,
}

impl Hot {
    const fn new() -> Hot {
        Hot {
            has_error: Cell::new(false),
            pid: Cell::new(Seen::EMPTY),
            device: Cell::new(Seen::EMPTY),
        }
    }
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
    let _ = HOT.try_with(|h| h.has_error.set(true));
}

fn clear_last_error() {
    if HOT
        .try_with(|h| h.has_error.replace(false))
        .unwrap_or(false)
    {
        let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = CString::default());
    }
}

/// The cached entry when `p`'s text (NUL-terminated within N-1 bytes)
/// equals the cached text.
///
/// # Safety
/// `p` is non-NULL and readable up to its NUL or N bytes.
unsafe fn lookup<const N: usize>(
    p: *const c_char,
    field: impl Fn(&Hot) -> &Cell<Seen<N>>,
) -> Option<Seen<N>> {
    HOT.try_with(|h| {
        // SAFETY (the borrow): this thread's own cell, not written while
        // borrowed (nothing in here calls back into the limiter).
        let seen = &*field(h).as_ptr();
        if seen.len == 0 {
            return None;
        }
        // Compare byte by byte up to and including the cached NUL, stopping
        // at the first difference: a shorter caller string differs at its
        // own NUL, so nothing past the caller's NUL is ever read.
        for (k, &want) in seen.text[..=seen.len].iter().enumerate() {
            if *p.add(k).cast::<u8>() != want {
                return None;
            }
        }
        Some(*seen)
    })
    .ok()
    .flatten()
}

fn remember<const N: usize>(s: &str, value: u64, field: impl Fn(&Hot) -> &Cell<Seen<N>>) {
    if s.is_empty() || s.len() >= N || s.as_bytes().contains(&0) {
        return;
    }
    let mut seen = Seen::<N> {
        len: s.len(),
        text: [0; N],
        value,
    };
    seen.text[..s.len()].copy_from_slice(s.as_bytes());
    let _ = HOT.try_with(|h| field(h).set(seen));
}

/// `processId` as a pid: decimal digits only, positive, at most `max`
/// bytes. A text equal to this thread's last one is not parsed again.
///
/// # Safety
/// As `cstr`.
pub unsafe fn pid_arg(p: *const c_char, max: usize) -> Res<i32> {
    if !p.is_null() && max < 32 {
        if let Some(pid) = lookup::<32>(p, |h| &h.pid) {
            return Ok(pid.value as i32);
        }
    }
    let s = cstr(p, max, "processId")?;
    let pid = s
        .parse::<i32>()
        .ok()
        .filter(|&pid| pid > 0 && s.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            Error::InvalidParam(format!("processId {s:?} is not a positive decimal pid"))
        })?;
    remember::<32>(s, pid as u32 as u64, |h| &h.pid);
    Ok(pid)
}

/// A validated `deviceUUID`: either this thread's last one (slot known) or
/// a new one to resolve with `resolve`.
pub enum DeviceArg<'a> {
    /// The slot and the UUID, NUL-padded.
    Known(usize, [u8; 64]),
    New(&'a str),
}

/// Read `deviceUUID` (as `cstr` with `max` ≤ 63).
///
/// # Safety
/// As `cstr`.
pub unsafe fn device_arg<'a>(p: *const c_char, max: usize) -> Res<DeviceArg<'a>> {
    if !p.is_null() && max < 64 {
        if let Some(d) = lookup::<64>(p, |h| &h.device) {
            return Ok(DeviceArg::Known(d.value as usize, d.text));
        }
    }
    cstr(p, max, "deviceUUID").map(DeviceArg::New)
}

impl DeviceArg<'_> {
    /// The device slot, resolving (and remembering) a new UUID with `find`.
    pub fn resolve(&self, find: impl FnOnce(&str) -> Res<usize>) -> Res<usize> {
        match *self {
            DeviceArg::Known(d, _) => Ok(d),
            DeviceArg::New(uuid) => {
                let d = find(uuid)?;
                remember::<64>(uuid, d as u64, |h| &h.device);
                Ok(d)
            }
        }
    }
}

/// Write the device UUID of `arg` into a `char[64]` (as `write_fixed`).
pub fn write_device(field: &mut [c_char; 64], arg: &DeviceArg<'_>) {
    match arg {
        DeviceArg::New(uuid) => write_fixed(field, uuid),
        DeviceArg::Known(_, text) => {
            for (dst, &b) in field.iter_mut().zip(text) {
                *dst = b as c_char;
            }
        }
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
        Err(panic) => Err(panic_error(panic)),
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
