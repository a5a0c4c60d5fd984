//! THE THIRD UNSAFE PART OF THE LIMITER: a mapping of the limits file that a
//! truncation cannot turn into a SIGBUS.
//!
//! Every process that checks limits maps `limits.shm` for good (the
//! hypervisor read-write, each client read-only: `limits.rs`). Should the
//! file be cut short under them (a host-side mistake, a tool; a tenant
//! cannot with the documented read-only mount), a load past the new end is
//! a SIGBUS, which would kill each of them. So this process's SIGBUS
//! handler (installed once, chaining to the one it replaced) looks at the
//! faulting address: inside a guarded range ([`guard`]), it puts fresh
//! zero pages (anonymous, private) over the range from the faulting page to
//! its end and returns, so the load runs again and reads zero, and marks the
//! range [`cut`]; anywhere else it hands the signal on to the previous
//! handler (or, if that was the default, restores the default and returns
//! so the fault recurs and ends the process as it would have).
//!
//! What zero means is documented with the file: no limit, not frozen (a
//! client fails open, and says so once); the host refuses its calls on the
//! limits with an error saying the file was cut under it.
//!
//! The library is pinned in memory once its handler is installed
//! (`RTLD_NODELETE`): a `dlclose` must not leave the handler pointing at
//! unmapped code.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

/// Guarded ranges: (start, length, cut). A process guards its two limits
/// mappings at most.
const RANGES: usize = 4;
static START: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static LEN: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static WRITABLE: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];
static CUT: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];

/// The handler this one replaced (a `libc::sigaction`, written once before
/// ours is installed and read only by ours).
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static INSTALLED: AtomicBool = AtomicBool::new(false);

const PAGE: usize = 4096;

/// Guard `len` bytes at `start` (a mapping that stays for good): a
/// truncation of the file behind them reads as zero pages from then on.
/// Ok(false): no handler could be installed (the range is not guarded).
pub(super) fn guard(start: *const u8, len: usize, writable: bool) -> bool {
    if !install() {
        return false;
    }
    for i in 0..RANGES {
        if LEN[i].load(Acquire) == 0 {
            START[i].store(start as usize, Relaxed);
            WRITABLE[i].store(writable, Relaxed);
            LEN[i].store(len, Release);
            return true;
        }
    }
    false
}

/// Whether the guarded range at `start` was cut (a fault there was
/// turned into zero pages).
pub(super) fn cut(start: *const u8) -> bool {
    (0..RANGES).any(|i| START[i].load(Relaxed) == start as usize && CUT[i].load(Acquire))
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for i in 0..RANGES {
        let (start, len) = (START[i].load(Acquire), LEN[i].load(Acquire));
        if len == 0 || addr < start || addr >= start + len {
            continue;
        }
        let from = addr & !(PAGE - 1);
        let prot = if WRITABLE[i].load(Relaxed) {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: replaces pages of our own guarded mapping (never
        // unmapped) with fresh anonymous zero pages, in place; mmap is a
        // plain system call, fine in a handler.
        let p = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                start + len - from,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            CUT[i].store(true, Release);
            return;
        }
    }
    // Not ours: as the previous handler would have.
    // SAFETY: PREVIOUS was written before this handler was installed.
    let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init() };
    if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
        // SAFETY: restores the default action; the fault recurs on return
        // and ends the process as it would have without us.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler, called as the kernel would have.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: as above, a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    }
}

/// Install the handler (once) and pin this library. False: not possible.
fn install() -> bool {
    if INSTALLED.load(Acquire) {
        return true;
    }
    // Guarded mappings are made under `owner::OPEN`: one installer at a time.
    pin_library();
    // SAFETY: reads the current action into PREVIOUS (before ours can run),
    // then installs ours; both structs are ours and zero-initialised.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return false;
        }
        (*std::ptr::addr_of_mut!(PREVIOUS)).write(old);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        // SA_ONSTACK: a host runtime (Go) runs handlers on its own stacks.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
            return false;
        }
    }
    INSTALLED.store(true, Release);
    true
}

/// Keep the library holding [`on_sigbus`] loaded for good.
fn pin_library() {
    // SAFETY: dladdr fills a struct we own for an address in this library;
    // dlopen with RTLD_NOLOAD only adds a reference to a loaded library
    // (its name string is valid while the library is loaded).
    unsafe {
        let mut dl: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(on_sigbus as *const libc::c_void, &mut dl) != 0 && !dl.dli_fname.is_null() {
            libc::dlopen(
                dl.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            );
        }
    }
}
