//! THE THIRD UNSAFE PART OF THE LIMITER: mappings of state files that a
//! truncation cannot turn into a SIGBUS.
//!
//! Every process that checks limits maps `limits.shm` for good (the
//! hypervisor read-write, each client read-only: `limits.rs`), and a host
//! keeps the books of the workers it reports on or registers processes in
//! mapped (`kept.rs`). Should a file be cut short under them (`limits.shm`
//! by a host-side mistake or a tool; a worker's books by any process of
//! that worker, whose tenant writes them), a load past the new end is a
//! SIGBUS, which would kill the process. So this process's SIGBUS handler
//! (installed once) looks at the faulting address: inside a guarded range
//! ([`guard`]), it puts fresh zero pages (anonymous, private) over the range
//! from the faulting page to its end and returns, so the access runs again
//! on zeros, and marks the range [`cut`]. Only the kernel's own report of
//! such a fault (`BUS_ADRERR`) is looked at: a SIGBUS sent by a process
//! (`kill`, `tgkill`, `sigqueue`) is never one of ours, whatever it says.
//! A fault elsewhere may be in a range of another copy of this code
//! (liblimiter and libaccelerator each carry one): the limits ranges whose
//! file is now shorter (`fstat` on the descriptor kept for them) get their
//! zero pages at once. Anything not ours gets exactly what it would have
//! got without us, from the action this handler replaced: a handler
//! (another copy's, a runtime's) is called as the kernel would have called
//! it; an ignored SIGBUS that was sent stays ignored; otherwise (the
//! default action, or a fault, which the kernel never lets a process
//! ignore) the process ends by SIGBUS: a fault recurs on return, a sent
//! signal is raised again. Whatever arrives, this handler stays installed
//! for the next fault in its own ranges.
//!
//! What zero means is documented with each file: for the limits, no limit
//! and not frozen (a client fails open, and says so once; the host refuses
//! its limit calls); for a worker's books, a call on them is refused and
//! they are mapped afresh at the next (`kept.rs`).
//!
//! The library is pinned in memory once its handler is installed
//! (`RTLD_NODELETE`): a `dlclose` must not leave the handler pointing at
//! unmapped code.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::*};

/// Guarded ranges: (start, length, cut): the two limits mappings and the
/// books `kept.rs` keeps mapped (at most `kept::KEPT_MAX` at once).
pub(super) const RANGES: usize = super::kept::KEPT_MAX + 4;
static START: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static LEN: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static WRITABLE: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];
static FD: [AtomicI32; RANGES] = [const { AtomicI32::new(-1) }; RANGES];
static CUT: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];
/// A range another copy of this code maps too (the limits file): a fault
/// in its copy tells this one to look at its own.
static SHARED: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];
/// Guarded ranges now cut: [`cut`] is one load while none is.
static CUTS: AtomicUsize = AtomicUsize::new(0);
/// Ranges claimed (a slot with LEN 0 may be being filled).
static CLAIMED: [AtomicBool; RANGES] = [const { AtomicBool::new(false) }; RANGES];

/// The handler this one replaced (a `libc::sigaction`, written once before
/// ours is installed and read only by ours).
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
/// 0 not installed, 1 being installed, 2 installed, 3 cannot be.
static INSTALLED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

const PAGE: usize = 4096;

/// Guard `len` bytes at `start`, a mapping of the file open as `fd`
/// (`shared`: a limits mapping, whose descriptor is kept for good; else -1
/// is fine): a truncation of the file behind them reads as zero pages from
/// then on. False: no handler could be installed, or every range is taken
/// (the range is not guarded).
pub(super) fn guard(start: *const u8, len: usize, writable: bool, fd: i32, shared: bool) -> bool {
    if !install() {
        return false;
    }
    for i in 0..RANGES {
        if CLAIMED[i]
            .compare_exchange(false, true, AcqRel, Relaxed)
            .is_ok()
        {
            START[i].store(start as usize, Relaxed);
            WRITABLE[i].store(writable, Relaxed);
            FD[i].store(fd, Relaxed);
            SHARED[i].store(shared, Relaxed);
            CUT[i].store(false, Relaxed);
            LEN[i].store(len, Release);
            return true;
        }
    }
    false
}

/// Stop guarding the range at `start` (before it is unmapped; nothing
/// accesses it any more).
pub(super) fn unguard(start: *const u8) {
    for i in 0..RANGES {
        if LEN[i].load(Acquire) != 0 && START[i].load(Relaxed) == start as usize {
            LEN[i].store(0, Release);
            START[i].store(0, Relaxed);
            if CUT[i].swap(false, AcqRel) {
                CUTS.fetch_sub(1, AcqRel);
            }
            CLAIMED[i].store(false, Release);
            return;
        }
    }
}

/// Whether the guarded range at `start` was cut (a fault there was
/// turned into zero pages).
pub(super) fn cut(start: *const u8) -> bool {
    CUTS.load(Acquire) != 0
        && (0..RANGES).any(|i| START[i].load(Relaxed) == start as usize && CUT[i].load(Acquire))
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
    if !CUT[i].swap(true, AcqRel) {
        CUTS.fetch_add(1, AcqRel);
    }
    true
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // Only the kernel's report of a load past the end of a mapped file is
    // one of ours: a sent SIGBUS (kill, tgkill, sigqueue: si_code 0 or
    // negative) names no fault, whatever address it carries.
    if code == libc::BUS_ADRERR && fault_in_ranges(addr) {
        return;
    }
    // SAFETY: PREVIOUS was written before this handler was installed and
    // is never written again.
    let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init() };
    // The faults the kernel forces on the process (an ignored or blocked
    // one ends it); any other SIGBUS was sent, or reports an error the
    // process may ignore (BUS_MCEERR_AO).
    let fault = matches!(
        code,
        libc::BUS_ADRALN | libc::BUS_ADRERR | libc::BUS_OBJERR | libc::BUS_MCEERR_AR
    );
    previous_action(&prev, fault, sig, info, ctx);
}

/// Whether `addr` is in a guarded range (now zero pages from its page on).
/// Also gives their zero pages to the shared ranges whose file is now
/// shorter: a fault elsewhere may be another copy's on the limits file.
fn fault_in_ranges(addr: usize) -> bool {
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
        // SAFETY: fstat writes one struct we own; async-signal-safe.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if SHARED[i].load(Relaxed)
            && !CUT[i].load(Acquire)
            && unsafe { libc::fstat(FD[i].load(Relaxed), &mut st) } == 0
            && (st.st_size as usize) < len
        {
            zero_from(i, start + (st.st_size as usize & !(PAGE - 1)));
        }
    }
    ours
}

/// The previous handler had `SA_RESETHAND` and ran once: the kernel would
/// have put the default action back.
static PREVIOUS_RESET: AtomicBool = AtomicBool::new(false);

/// What the kernel would have done with this SIGBUS without us (`prev`
/// the action we replaced; `fault`: the kernel raised it for a fault).
/// This handler stays installed for the next fault in its own ranges.
fn previous_action(
    prev: &libc::sigaction,
    fault: bool,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    let reset = PREVIOUS_RESET.load(Acquire);
    match prev.sa_sigaction {
        // An ignored SIGBUS stays ignored when sent; a fault is never
        // ignored (the kernel forces the default action on it).
        libc::SIG_IGN if !fault && !reset => {}
        libc::SIG_DFL | libc::SIG_IGN => die_by(sig, fault),
        _ if reset => die_by(sig, fault),
        h => {
            if prev.sa_flags & libc::SA_RESETHAND != 0 {
                PREVIOUS_RESET.store(true, Release);
            }
            // SAFETY: called as the kernel would have called it: with its
            // own mask added for the call (sigprocmask is
            // async-signal-safe), and the arguments the kernel gave us.
            unsafe {
                let mut old: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, &prev.sa_mask, &mut old);
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(h);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                    f(sig);
                }
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            }
        }
    }
}

/// The default action of SIGBUS: the process ends (with a core where the
/// system takes one), as it would have without us. A fault recurs on
/// return and ends it at the faulting instruction; a sent signal is sent
/// again to this thread, unblocked. Only then is our handler let go, and
/// the process is ending.
fn die_by(sig: libc::c_int, fault: bool) {
    // SAFETY: signal, sigprocmask, raise: async-signal-safe calls on
    // structs we own.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if !fault {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::raise(sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

/// Whether the handler is installed (a range [`guard`] refused was for
/// want of a free one).
pub(super) fn installed() -> bool {
    INSTALLED.load(Acquire) == 2
}

/// Install the handler (once) and pin this library. False: not possible.
fn install() -> bool {
    loop {
        match INSTALLED.compare_exchange(0, 1, AcqRel, Acquire) {
            Ok(_) => break,
            Err(2) => return true,
            Err(3) => return false,
            Err(_) => std::thread::yield_now(), // another thread installs it
        }
    }
    let ok = install_once();
    INSTALLED.store(if ok { 2 } else { 3 }, Release);
    ok
}

fn install_once() -> bool {
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
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) == 0
    }
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
