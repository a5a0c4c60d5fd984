//! THE UNSAFE PART OF THE LIMITER: mapping the state file and viewing it as
//! the `#[repr(C)]` layout of atomics. Nothing else in `shm` is `unsafe`.
//!
//! Soundness: the layout holds only `AtomicU64` fields (and padding), every
//! bit pattern of which is valid, so viewing any mapped bytes as `Layout` is
//! fine; all access goes through atomics, so concurrent writers in other
//! processes are not data races. This process's own books and the limits
//! file are never unmapped (a `&'static` is handed out); on `dlclose` of a
//! library they cost address space only, never heap. Another worker's books
//! are mapped for one call ([`Lent`]) and unmapped when it ends.

use super::Layout;
use crate::{Error, Res};
use std::fs::File;
use std::os::fd::AsRawFd;

/// The published mapping (null until the first open). An atomic pointer
/// rather than a `OnceLock`: a `fork()` while another thread is inside a
/// `Once` leaves the child waiting on it forever.
static PUBLISHED: std::sync::atomic::AtomicPtr<Layout> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The mapping, once [`publish`]ed.
#[inline(always)]
pub(super) fn published() -> Option<&'static Layout> {
    published_as(&PUBLISHED)
}

/// Make `l` (from [`map`]) the mapping every later call uses.
pub(super) fn publish(l: &'static Layout) {
    publish_as(&PUBLISHED, l);
}

/// The mapping of the process this one was forked from (null: none).
static INHERITED: std::sync::atomic::AtomicPtr<Layout> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// In a forked child: the parent's mapping is no longer published (the
/// child may be another worker: `workers.rs`); [`inherited`] gives it back
/// when the child opens the same file.
pub(super) fn unpublish_in_child() {
    let p = PUBLISHED.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::Relaxed);
    if !p.is_null() {
        INHERITED.store(p, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The mapping inherited from the parent (its file was the one the caller
/// opened again), if any.
pub(super) fn inherited() -> Option<&'static Layout> {
    published_as(&INHERITED)
}

/// Another worker's books, mapped for the length of one call and unmapped
/// when dropped (this process's own books stay mapped: [`publish`]). The
/// descriptor is the one its lock bytes are taken on (`owner::lent_fd`).
pub(super) struct Lent {
    ptr: std::ptr::NonNull<Layout>,
    file: File,
}

impl Lent {
    /// Map `file` (checked: its size is `SIZE`) shared and read-write.
    pub(super) fn new(file: File) -> Res<Lent> {
        let l = map_raw(&file, std::mem::size_of::<Layout>(), true)?;
        let lent = Lent {
            ptr: l.cast::<Layout>(),
            file,
        };
        super::owner::lend(&lent, lent.file.as_raw_fd())?;
        Ok(lent)
    }
}

impl std::ops::Deref for Lent {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        // SAFETY: a live mapping of `size_of::<Layout>()` bytes (see the
        // module comment: any bytes are a valid `Layout`), unmapped only
        // when `self` drops, which this borrow outlives not.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        super::owner::unlend(self);
        // SAFETY: the mapping `new` made, of this length; no reference
        // into it outlives `self` (`deref` borrows `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), std::mem::size_of::<Layout>()) };
    }
}

/// Map `len` bytes of `file` shared and read-write as the limiter layout.
/// The caller has checked the file's header and size.
pub(super) fn map(file: &File, len: usize) -> Res<&'static Layout> {
    assert!(len >= std::mem::size_of::<Layout>());
    map_as::<Layout>(file, true)
}

/// A type made of `AtomicU64` fields (and padding) alone, any bit pattern
/// of which is a valid value: what a mapped state file may be viewed as.
///
/// # Safety
/// Implement only for such types.
pub(super) unsafe trait Atomics {}
// SAFETY: atomics only (layout.rs).
unsafe impl Atomics for Layout {}
// SAFETY: atomics only (limits.rs).
unsafe impl Atomics for super::limits::Limits {}
// SAFETY: atomics only (limits.rs); a row of a mapping from `map_as` or a
// static one, either way valid for 'static.
unsafe impl Atomics for super::limits::Row {}

/// Map `file` (checked: its size is `size_of::<T>()`) shared, read-write
/// or read-only, as a `T`. A read-only mapping is only ever loaded from (a
/// store would fault, never change the file).
pub(super) fn map_as<T: Atomics>(file: &File, write: bool) -> Res<&'static T> {
    let p = map_raw(file, std::mem::size_of::<T>(), write)?;
    // mmap returns page-aligned memory, which satisfies T's alignment.
    debug_assert_eq!(p.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    // SAFETY: see the module comment and `Atomics`: any bytes are a valid
    // T, accessed through atomics only; never unmapped, hence 'static.
    Ok(unsafe { &*p.cast::<T>().as_ptr() })
}

/// A fresh shared mapping of `len` bytes of `file`.
fn map_raw(file: &File, len: usize, write: bool) -> Res<std::ptr::NonNull<u8>> {
    let prot = if write {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: a fresh shared mapping of a regular file we opened with the
    // access `prot` asks for; the kernel picks the address. Failure is
    // MAP_FAILED, checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::OperationFailed(format!(
            "cannot map the limiter state file: {}",
            std::io::Error::last_os_error()
        )));
    }
    std::ptr::NonNull::new(p.cast::<u8>())
        .ok_or_else(|| Error::Internal("mmap returned null".into()))
}

/// What was published in `slot`, if anything. A slot given here is only
/// ever stored to by [`publish_as`] or with null (`shm` keeps to that).
#[inline(always)]
pub(super) fn published_as<T: Atomics>(
    slot: &std::sync::atomic::AtomicPtr<T>,
) -> Option<&'static T> {
    let p = slot.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: the slot holds null or a pointer `publish_as` took from a
    // `&'static T` (a mapping from `map_as`, never unmapped; a part of
    // one; a static).
    unsafe { p.as_ref() }
}

/// Publish `t` (a mapping from [`map_as`], a part of one, a static) in `slot`.
pub(super) fn publish_as<T: Atomics>(slot: &std::sync::atomic::AtomicPtr<T>, t: &'static T) {
    slot.store(
        (t as *const T).cast_mut(),
        std::sync::atomic::Ordering::Release,
    );
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the node
/// (time since boot), so token-bucket and freeze timestamps written by one
/// process are meaningful to all others.
pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Run `child` in the child after every `fork()` of this process. glibc
/// removes the handler when the library that registered it is unloaded.
pub(super) fn at_fork_child(child: extern "C" fn()) {
    // SAFETY: registers a plain function with no prepare/parent handlers.
    unsafe {
        libc::pthread_atfork(None, None, Some(child));
    }
}

const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier(cmd, flags = 0, cpu_id = 0) takes no pointers; an
    // unknown command or an old kernel is an error return, not UB.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Register this process for private expedited barriers and check that one
/// works. False: not available here (old kernel, seccomp, emulator).
pub(super) fn membarrier_register() -> bool {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
        && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
}

/// A full memory barrier on every running thread of this process (the
/// process registered with [`membarrier_register`]). The global command,
/// which needs no registration, is the fallback should the expedited one
/// fail after registration succeeded.
pub(super) fn membarrier_all_threads() {
    if !membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) {
        membarrier(MEMBARRIER_CMD_GLOBAL);
    }
}

/// This thread's id: never 0, unique among live threads. On x86-64 and
/// AArch64 it is the thread pointer, which the ELF TLS ABI has every thread
/// carry (x86-64: the first word of the TCB `%fs` points to is the TCB's
/// own address; AArch64: `tpidr_el0`); reading it is one instruction,
/// where `pthread_self` from a shared library is a call through the PLT
/// (3.6 % of a memory check's cycles under perf).
#[inline(always)]
pub(super) fn thread_id() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let tp: u64;
        // SAFETY: reads the word at %fs:0, which every thread's TCB has.
        unsafe {
            std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp,
                options(nostack, readonly, preserves_flags, pure))
        };
        tp
    }
    #[cfg(target_arch = "aarch64")]
    {
        let tp: u64;
        // SAFETY: reads a register that every thread has.
        unsafe {
            std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp,
                options(nostack, nomem, preserves_flags, pure))
        };
        tp
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // SAFETY: pthread_self has no preconditions and cannot fail.
        unsafe { libc::pthread_self() as u64 }
    }
}

/// Take (`lock`) or release an open-file-description lock on byte `off` of
/// the file `fd` refers to, without waiting. Ok(false): another open file
/// description holds it. OFD locks belong to the open file description, so
/// the kernel drops them when the last descriptor of it is closed, a
/// process's death included, and a process of any pid namespace sees them.
pub(super) fn ofd_lock(fd: i32, off: u64, lock: bool) -> std::io::Result<bool> {
    ofd_set(fd, off, if lock { libc::F_WRLCK } else { libc::F_UNLCK })
}

/// [`ofd_lock`] for a read (shared) lock: Ok(false) while another open file
/// description holds a write lock on the byte.
pub(super) fn ofd_read_lock(fd: i32, off: u64) -> std::io::Result<bool> {
    ofd_set(fd, off, libc::F_RDLCK)
}

fn ofd_set(fd: i32, off: u64, kind: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock is plain data; zeroed is a valid value (l_pid must be 0
    // for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = off as libc::off_t;
    fl.l_len = 1;
    loop {
        // SAFETY: F_OFD_SETLK reads the flock we own; a bad fd is EBADF.
        if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// The size of the file `fd` refers to (fstat).
pub(super) fn file_size(fd: i32) -> std::io::Result<u64> {
    // SAFETY: fstat writes one stat we own; a bad fd is EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// Close a descriptor this module's caller owns (async-signal-safe: used
/// in the fork handler).
pub(super) fn close(fd: i32) {
    // SAFETY: the caller owns `fd` and forgets it.
    unsafe { libc::close(fd) };
}

/// A private heap copy of the given byte ranges of a state file, read with
/// `pread` (the rest zero). Never a mapping: a file cut short under the
/// reader is a short read (an error), never a SIGBUS, and nothing another
/// process writes afterwards can reach the copy.
pub(super) fn read_copy(
    file: &File,
    parts: &[std::ops::Range<usize>],
) -> std::io::Result<Box<Layout>> {
    let layout = std::alloc::Layout::new::<Layout>();
    // SAFETY: Layout is not zero-sized; a null return is handled below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: allocated with `Layout`'s own layout, so the Box may own and
    // free it; all-atomic layout (see the module comment): zero bytes are a
    // valid value.
    let mut copy: Box<Layout> = unsafe { Box::from_raw(p.cast::<Layout>()) };
    read_into(file, parts, &mut copy)?;
    Ok(copy)
}

/// [`read_copy`] into an existing copy (reused: the bytes outside `parts`
/// keep what they held; a partial read leaves them part-written).
pub(super) fn read_into(
    file: &File,
    parts: &[std::ops::Range<usize>],
    copy: &mut Layout,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    // SAFETY: the bytes of a `Layout` we borrow exclusively for as long as
    // `bytes` lives; any bytes written there are a valid `Layout` (atomics
    // only).
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(
            std::ptr::from_mut::<Layout>(copy).cast::<u8>(),
            std::mem::size_of::<Layout>(),
        )
    };
    for r in parts {
        file.read_exact_at(&mut bytes[r.clone()], r.start as u64)?;
    }
    Ok(())
}

/// Whether another open file description holds a lock on byte `off` of the
/// file `fd` refers to (`F_OFD_GETLK`: a query that takes nothing, allowed
/// on a read-only descriptor).
pub(super) fn ofd_locked(fd: i32, off: u64) -> std::io::Result<bool> {
    // SAFETY: flock is plain data; zeroed is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = off as libc::off_t;
    fl.l_len = 1;
    // SAFETY: F_OFD_GETLK reads and writes the flock we own.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// The exit code of a fenced child that faulted.
const FAULTED: libc::c_int = 99;

/// Whether [`fenced`] can share this process's memory with its child: 0 not
/// known yet, 1 yes, 2 no ([`fence_probe`]: calls run unfenced).
static FENCE_WORKS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

struct Job<F, T> {
    f: Option<F>,
    out: Option<std::thread::Result<T>>,
}

extern "C" fn on_fault(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe and ends only the fenced child.
    unsafe { libc::_exit(FAULTED) }
}

extern "C" fn run_job<F: FnOnce() -> T, T>(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the child's signal handlers are its own (no CLONE_SIGHAND):
    // a SIGBUS or SIGSEGV here ends the child with FAULTED, never a handler
    // of the host program; both are unblocked so the fault reaches ours.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_fault as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGBUS);
        libc::sigaddset(&mut set, libc::SIGSEGV);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    // SAFETY: `arg` is the `Job` on the stack of the thread that cloned this
    // child, which waits (CLONE_VFORK) until the child exits.
    let job = unsafe { &mut *arg.cast::<Job<F, T>>() };
    if let Some(f) = job.f.take() {
        job.out = Some(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    }
    0
}

/// The stack of a fenced child: with a guard page below it.
const FENCE_STACK: usize = 512 * 1024;

/// Run `job` in a child task that shares this process's memory and
/// descriptors (`clone(CLONE_VM | CLONE_VFORK | CLONE_FILES)`: this thread
/// waits while it runs). Err: it could not start; Ok(None): it faulted.
fn clone_job<F: FnOnce() -> T, T>(job: &mut Job<F, T>) -> Res<Option<()>> {
    // SAFETY: a fresh private anonymous mapping; its lowest page is made a
    // guard. Unmapped below once the child has exited.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            FENCE_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(Error::OperationFailed(format!(
            "cannot map a stack: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the mapping above; the child's stack grows down from its top.
    let pid = unsafe {
        libc::mprotect(stack, 4096, libc::PROT_NONE);
        libc::clone(
            run_job::<F, T>,
            stack.cast::<u8>().add(FENCE_STACK).cast(),
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
    // SAFETY: the stack mapped above; the child no longer runs on it.
    unsafe { libc::munmap(stack, FENCE_STACK) };
    if pid <= 0 {
        return Err(Error::OperationFailed(format!(
            "cannot start a fenced call: {started}"
        )));
    }
    let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok(clean.then_some(()))
}

/// Whether a fenced child shares this process's memory: it sets a value in
/// the caller's memory, which only a shared one can. Valgrind aborts the
/// whole program on such a `clone` (it runs threads and forks only), so
/// under it (its preload library named in `LD_PRELOAD`) none is tried.
fn fence_probe() -> bool {
    let valgrind = std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("/vgpreload_"));
    let shared = !valgrind && {
        let mut probe = Job {
            f: Some(|| ()),
            out: None,
        };
        clone_job(&mut probe).is_ok_and(|r| r.is_some()) && probe.out.is_some()
    };
    if !shared {
        eprintln!(
            "accelerator: calls into other workers' limiter books run unfenced in this process ({}): a truncation in that instant would be a SIGBUS here",
            if valgrind { "under valgrind" } else { "clone(CLONE_VM) refused" }
        );
    }
    shared
}

/// Run `f` so that a fault on a mapping it touches cannot kill this
/// process: another worker's books, mapped for one call ([`Lent`]), can be
/// truncated by that worker's processes at any instant, and a load past
/// the end is a SIGBUS, which in the host side (the hypervisor) would kill
/// it. `f` runs in a child task sharing this process's memory and
/// descriptors while this thread waits; a fault ends the child alone, and
/// the call is refused. Where no such child can run ([`fence_probe`]:
/// valgrind, a seccomp filter), `f` runs here, unfenced, said once on stderr.
pub(super) fn fenced<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    use std::sync::atomic::Ordering::Relaxed;
    if FENCE_WORKS.load(Relaxed) == 0 {
        FENCE_WORKS.store(if fence_probe() { 1 } else { 2 }, Relaxed);
    }
    if FENCE_WORKS.load(Relaxed) != 1 {
        return f();
    }
    let mut job = Job {
        f: Some(f),
        out: None,
    };
    match (clone_job(&mut job)?, job.out) {
        (Some(()), Some(Ok(r))) => r,
        (Some(()), Some(Err(_))) => Err(Error::Internal(
            "a fenced call panicked".into(),
        )),
        _ => Err(Error::OperationFailed(
            "another worker's limiter books changed size under this call (truncated by one of its processes); refused".into(),
        )),
    }
}
