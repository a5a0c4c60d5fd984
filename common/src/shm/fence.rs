//! THE OTHER UNSAFE PART OF THE LIMITER: running a call on another worker's
//! books so that a fault cannot kill this process.
//!
//! `AddWorkerProcess`, a check naming another worker's process and a usage
//! query of another worker map that worker's books for the one call
//! (`map::Lent`). A process of that worker can truncate them at any
//! instant: a load past the new end is a SIGBUS, which in the host side
//! (the hypervisor) would kill it. [`fenced`] runs such a call in a child
//! task that shares this process's memory and descriptors
//! (`clone(CLONE_VM | CLONE_VFORK | CLONE_FILES)`; the calling thread waits
//! until it exits) with signal handlers of its own: a fault, or any other
//! signal that would dump core, ends the child alone with an exit code,
//! and the call is refused. So is a call that keeps spinning on state the
//! tenant holds or forged (a lock byte it keeps, a usage word naming an op
//! that never settles) for [`BUDGET`]: the loops that wait on the books call
//! [`check`], which ends a fenced child past its budget.
//!
//! What the child may hold when it ends: no process-local lock of the hot
//! path (`memory_in` / `compute_in` take none on another worker's books),
//! nor `owner::PROCESS` / `KEYS` (taken for this process's own books only:
//! `owner::own_lock`). A `local::ForkLock` it took carries its pid: while
//! it runs, the parent's threads wait for it as for one of their own
//! ([`peer`]), and once it is gone a lock it left is taken over, as one
//! left by a forked-from process is.
//!
//! Fenced calls of different threads run at once, each with its own entry
//! in [`CALLS`] (its child, deadline and stack), so a call kept waiting by
//! one worker's books for its whole budget delays no call about another
//! worker's.
//!
//! Where no such child can run ([`probe`]: valgrind aborts the program on
//! this `clone`; a seccomp filter may refuse it), calls run unfenced, said
//! once on stderr.

use super::local::ForkLock;
use super::map;
use crate::{Error, Res};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

/// How long a fenced call may wait on another worker's books.
pub(super) const BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Exit codes of a fenced child that did not finish its call.
const FAULTED: libc::c_int = 99;
const TIMED_OUT: libc::c_int = 98;

/// The stack of a fenced child (a guard page at its bottom) and the
/// alternate stack its signal handlers run on (so a stack overflow still
/// reaches them).
const STACK: usize = 512 * 1024;
const ALT_STACK: usize = 64 * 1024;

/// 0 not known yet, 1 a fenced child shares the memory, 2 it cannot run.
static WORKS: AtomicU8 = AtomicU8::new(0);
/// Deciding [`WORKS`] (once per process).
static PROBE: ForkLock = ForkLock::new();

/// A running fenced call: the caller's pid and the child's, its deadline
/// (CLOCK_MONOTONIC ns) and its stack's bounds, which tell the child's code
/// from other threads'. `lo` 0: a free entry.
struct Call {
    parent: AtomicU32,
    child: AtomicU32,
    deadline: AtomicU64,
    lo: AtomicUsize,
    hi: AtomicUsize,
}

/// Fenced calls running at once in this process, at most (a caller finding
/// every entry taken waits for one).
const CALLS_AT_ONCE: usize = 16;
static CALLS: [Call; CALLS_AT_ONCE] = [const {
    Call {
        parent: AtomicU32::new(0),
        child: AtomicU32::new(0),
        deadline: AtomicU64::new(0),
        lo: AtomicUsize::new(0),
        hi: AtomicUsize::new(0),
    }
}; CALLS_AT_ONCE];
/// Calls running ([`CALLS`] entries taken): `check` costs one load without.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Whether a `ForkLock` held by `holder` is held by the other side of a
/// running fenced call (a child, or the process that runs it), a task
/// sharing this memory that will let it go: wait, do not take it over.
pub(super) fn peer(holder: u64) -> bool {
    holder != 0
        && CALLS.iter().any(|c| {
            holder == u64::from(c.child.load(Acquire))
                || holder == u64::from(c.parent.load(Acquire))
        })
}

/// In a loop that waits on another worker's books: end the fenced child
/// running it once its budget is spent (nothing for any other caller).
#[inline]
pub(super) fn check() {
    if RUNNING.load(Relaxed) == 0 {
        return;
    }
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    for c in &CALLS {
        if here >= c.lo.load(Relaxed) && here < c.hi.load(Relaxed) {
            let deadline = c.deadline.load(Relaxed);
            if deadline != 0 && map::monotonic_ns() > deadline {
                // SAFETY: ends the fenced child only (its own task); it
                // holds no lock of this process's the parent would wait on
                // (module docs).
                unsafe { libc::_exit(TIMED_OUT) }
            }
            return;
        }
    }
}

extern "C" fn reset_in_child() {
    for c in &CALLS {
        c.parent.store(0, Relaxed);
        c.child.store(0, Relaxed);
        c.deadline.store(0, Relaxed);
        c.hi.store(0, Relaxed);
        c.lo.store(0, Relaxed);
    }
    RUNNING.store(0, Relaxed);
}

/// Take a free [`CALLS`] entry for a call on the stack `lo..hi` (waiting
/// while all are taken).
fn enter(lo: usize, hi: usize) -> &'static Call {
    loop {
        for c in &CALLS {
            if c.lo.compare_exchange(0, lo, AcqRel, Relaxed).is_ok() {
                c.hi.store(hi, Relaxed);
                c.parent.store(std::process::id(), Release);
                c.deadline
                    .store(map::monotonic_ns() + BUDGET.as_nanos() as u64, Release);
                RUNNING.fetch_add(1, AcqRel);
                return c;
            }
        }
        std::thread::yield_now();
    }
}

fn leave(c: &Call) {
    c.deadline.store(0, Relaxed);
    c.child.store(0, Release);
    c.parent.store(0, Release);
    c.hi.store(0, Relaxed);
    RUNNING.fetch_sub(1, AcqRel);
    c.lo.store(0, Release);
}

struct Job<F, T> {
    f: Option<F>,
    out: Option<std::thread::Result<T>>,
    alt: *mut libc::c_void,
    call: Option<&'static Call>,
}

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe and ends only the fenced child.
    unsafe { libc::_exit(FAULTED) }
}

/// Signals that end a process with a core dump: before Linux 5.16 a core
/// dump also kills every process sharing the memory (the caller), so the
/// child turns each into an exit of its own.
const CORE_SIGNALS: [libc::c_int; 9] = [
    libc::SIGBUS,
    libc::SIGSEGV,
    libc::SIGABRT,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGQUIT,
    libc::SIGXCPU,
];

extern "C" fn run_job<F: FnOnce() -> T, T>(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Job` on the stack of the thread that cloned
    // this child, which waits (CLONE_VFORK) until the child exits.
    let job = unsafe { &mut *arg.cast::<Job<F, T>>() };
    if let Some(c) = job.call {
        c.child.store(std::process::id(), Release);
    }
    // SAFETY: the child's signal handlers are its own (no CLONE_SIGHAND),
    // run on an alternate stack of its own, and each ends the child; the
    // signals are unblocked so they reach the handlers.
    unsafe {
        let ss = libc::stack_t {
            ss_sp: job.alt,
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        libc::sigaltstack(&ss, std::ptr::null_mut());
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in CORE_SIGNALS {
            libc::sigaction(s, &sa, std::ptr::null_mut());
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    if let Some(f) = job.f.take() {
        job.out = Some(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    }
    0
}

/// How a fenced child ended.
enum Ended {
    Done,
    Faulted,
    TimedOut,
}

/// Run `job` in a fenced child (see the module docs); Err: it could not start.
fn clone_job<F: FnOnce() -> T, T>(job: &mut Job<F, T>) -> Res<Ended> {
    // SAFETY: a fresh private anonymous mapping for both stacks (the
    // alternate one at its bottom, above a guard page); unmapped below
    // once the child has exited.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Error::OperationFailed(format!(
            "cannot map a stack: {}",
            std::io::Error::last_os_error()
        )));
    }
    let page = 4096;
    // SAFETY: offsets inside the mapping above.
    let (alt, lo, hi) = unsafe {
        libc::mprotect(base, page, libc::PROT_NONE);
        let alt = base.cast::<u8>().add(page);
        (alt, alt.add(ALT_STACK), base.cast::<u8>().add(STACK))
    };
    job.alt = alt.cast();
    let call = enter(lo as usize, hi as usize);
    job.call = Some(call);
    // SAFETY: the child runs `run_job` on the stack above `lo`, sharing
    // this memory, while this thread waits (CLONE_VFORK).
    let pid = unsafe {
        libc::clone(
            run_job::<F, T>,
            hi.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES,
            (job as *mut Job<F, T>).cast(),
        )
    };
    let started = std::io::Error::last_os_error();
    let mut status = 0;
    if pid > 0 {
        // The child has exited (CLONE_VFORK): reap it. Its exit signal is
        // none, so only a wait with __WALL sees it, never the host
        // program's SIGCHLD handling.
        // SAFETY: waits for our own child, writing one int we own.
        while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
    leave(call);
    // SAFETY: the mapping above; the child no longer runs on it.
    unsafe { libc::munmap(base, STACK) };
    if pid <= 0 {
        return Err(Error::OperationFailed(format!(
            "cannot start a fenced call: {started}"
        )));
    }
    Ok(match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ended::Done,
        (true, TIMED_OUT) => Ended::TimedOut,
        _ => Ended::Faulted,
    })
}

/// Whether a fenced child can run here and shares this process's memory:
/// it sets a value in the caller's memory, which only a shared one can.
/// Valgrind (its preload library named in `LD_PRELOAD`) aborts the whole
/// program on such a `clone`, so none is tried under it.
fn probe() -> bool {
    let valgrind = std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("/vgpreload_"));
    let shared = !valgrind && {
        let mut job = Job {
            f: Some(|| ()),
            out: None,
            alt: std::ptr::null_mut(),
            call: None,
        };
        matches!(clone_job(&mut job), Ok(Ended::Done)) && job.out.is_some()
    };
    if !shared {
        eprintln!(
            "accelerator: calls into other workers' limiter books run unfenced in this process ({}): a truncation in that instant would be a SIGBUS here",
            if valgrind { "under valgrind" } else { "clone(CLONE_VM) refused" }
        );
    }
    shared
}

/// Run `f` (a call on another worker's books) fenced: see the module docs.
pub(super) fn fenced<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    if WORKS.load(Acquire) == 0 {
        let _one = PROBE.lock();
        if WORKS.load(Acquire) == 0 {
            map::at_fork_child(reset_in_child);
            WORKS.store(if probe() { 1 } else { 2 }, Release);
        }
    }
    if WORKS.load(Acquire) != 1 {
        return f();
    }
    let mut job = Job {
        f: Some(f),
        out: None,
        alt: std::ptr::null_mut(),
        call: None,
    };
    let ended = clone_job(&mut job);
    match (ended?, job.out) {
        (Ended::Done, Some(Ok(r))) => r,
        (Ended::Done, Some(Err(_))) => Err(Error::Internal("a fenced call panicked".into())),
        (Ended::TimedOut, _) => Err(Error::OperationFailed(format!(
            "another worker's limiter books stayed locked or inconsistent for {} s under this call; refused",
            BUDGET.as_secs()
        ))),
        _ => Err(Error::OperationFailed(
            "another worker's limiter books changed size under this call (truncated by one of its processes); refused".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fault_ends_the_child_and_refuses_the_call() {
        let r: Res<()> = fenced(|| {
            // SAFETY: test: stands for a load past a truncated mapping's end.
            unsafe { libc::raise(libc::SIGBUS) };
            Ok(())
        });
        let e = r.expect_err("refused").to_string();
        assert!(e.contains("changed size") || e.contains("unfenced"), "{e}");
        // This process lives on, and the next call works.
        assert_eq!(fenced(|| Ok(7)).unwrap(), 7);
    }

    #[test]
    fn a_call_that_keeps_waiting_is_ended_after_its_budget() {
        if WORKS.load(Relaxed) == 2 {
            return; // no fenced child here (valgrind): nothing to bound
        }
        let t0 = Instant::now();
        let r: Res<()> = fenced(|| loop {
            check();
            std::thread::yield_now();
        });
        assert!(r.unwrap_err().to_string().contains("stayed locked"));
        assert!(t0.elapsed() >= BUDGET && t0.elapsed() < BUDGET * 3);
    }

    #[test]
    fn a_fork_lock_held_by_a_thread_holds_against_the_fenced_child() {
        static L: ForkLock = ForkLock::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _g = L.lock();
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        });
        rx.recv().unwrap();
        let t0 = Instant::now();
        fenced(|| {
            let _g = L.lock();
            Ok(())
        })
        .unwrap();
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
        t.join().unwrap();
        // And a lock the child left (it ended holding it) is taken over.
        let _ = fenced(|| {
            std::mem::forget(L.lock());
            // SAFETY: test: the child faults holding the lock.
            unsafe { libc::raise(libc::SIGSEGV) };
            Ok(())
        });
        let t1 = Instant::now();
        drop(L.lock());
        assert!(t1.elapsed() < Duration::from_millis(100));
    }
}
