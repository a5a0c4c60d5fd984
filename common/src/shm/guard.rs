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
//! range [`cut`]. A fault elsewhere may be in another copy of this code's
//! range (liblimiter and libaccelerator each carry one, and each maps the
//! file): each of its ranges whose file is now shorter (`fstat` on the
//! descriptor it keeps) gets its zero pages too, then the previous action is
//! put back and the handler returns, so the fault recurs and meets that
//! action (another copy's handler, or the default, which ends the process
//! as it would have without us). No handler is called from here.
//!
//! What zero means is documented with the file: no limit, not frozen (a
//! client fails open, and says so once); the host refuses its calls on the
//! limits with an error saying the file was cut under it.
//!
//! The library is pinned in memory once its handler is installed
//! (`RTLD_NODELETE`): a `dlclose` must not leave the handler pointing at
//! unmapped code.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::*};

/// Guarded ranges: (start, length, cut). A process guards its two limits
/// mappings at most.
const RANGES: usize = 4;
static START: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static LEN: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static WRITABLE: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];
static FD: [AtomicI32; RANGES] = [const { AtomicI32::new(-1) }; RANGES];
static CUT: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];

/// The handler this one replaced (a `libc::sigaction`, written once before
/// ours is installed and read only by ours).
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static INSTALLED: AtomicBool = AtomicBool::new(false);

const PAGE: usize = 4096;

/// Guard `len` bytes at `start` (a mapping that stays for good of the file
/// open as `fd`, which is kept): a truncation of the file behind them reads
/// as zero pages from then on. False: no handler could be installed (the
/// range is not guarded).
pub(super) fn guard(start: *const u8, len: usize, writable: bool, fd: i32) -> bool {
    if !install() {
        return false;
    }
    for i in 0..RANGES {
        if LEN[i].load(Acquire) == 0 {
            START[i].store(start as usize, Relaxed);
            WRITABLE[i].store(writable, Relaxed);
            FD[i].store(fd, Relaxed);
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

/// Put zero pages over range `i` from `from` (page-aligned) to its end.
fn zero_from(i: usize, from: usize) -> bool {
    let (start, len) = (START[i].load(Acquire), LEN[i].load(Acquire));
    if from >= start + len {
        return false;
    }
    let prot = if WRITABLE[i].load(Relaxed) {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: replaces pages of our own guarded mapping (never unmapped)
    // with fresh anonymous zero pages, in place; mmap is a plain system
    // call, fine in a handler.
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
    if p == libc::MAP_FAILED {
        return false;
    }
    CUT[i].store(true, Release);
    true
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let mut ours = false;
    for i in 0..RANGES {
        let (start, len) = (START[i].load(Acquire), LEN[i].load(Acquire));
        if len == 0 {
            continue;
        }
        if addr >= start && addr < start + len {
            ours |= zero_from(i, addr & !(PAGE - 1));
            continue;
        }
        // Not in this range: is its file cut too (another copy's fault)?
        // SAFETY: fstat writes one struct we own; async-signal-safe.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if !CUT[i].load(Acquire)
            && unsafe { libc::fstat(FD[i].load(Relaxed), &mut st) } == 0
            && (st.st_size as usize) < len
        {
            zero_from(i, start + (st.st_size as usize & !(PAGE - 1)));
        }
    }
    if ours {
        return;
    }
    // Not ours: the previous action back (the default for an ignored
    // fault, which the kernel would not ignore either); the fault recurs
    // on return and meets it.
    INSTALLED.store(false, Release);
    // SAFETY: PREVIOUS was written before this handler was installed;
    // sigaction is async-signal-safe.
    unsafe {
        let prev = (*std::ptr::addr_of!(PREVIOUS)).assume_init();
        if prev.sa_sigaction == libc::SIG_IGN {
            libc::signal(sig, libc::SIG_DFL);
        } else {
            libc::sigaction(sig, &prev, std::ptr::null_mut());
        }
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
