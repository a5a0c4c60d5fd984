//! THE UNSAFE PART OF THE LIMITER: mapping the state file and viewing it as
//! the `#[repr(C)]` layout of atomics. Nothing else in `shm` is `unsafe` but
//! `fence.rs` and `guard.rs`.
//!
//! Soundness: the layout holds only `AtomicU64` fields (and padding), every
//! bit pattern of which is valid, so viewing any mapped bytes as `Layout` is
//! fine; all access goes through atomics, so concurrent writers in other
//! processes are not data races. This process's own books and the limits
//! file are never unmapped (a `&'static` is handed out); on `dlclose` of a
//! library they cost address space only, never heap. Another worker's books
//! are mapped for one call ([`Lent`]) and unmapped when it ends; what is
//! done on them runs fenced (`fence.rs`, the other `unsafe` module).

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

/// Another worker's books, mapped shared for as long as this value lives
/// (`kept.rs`), and guarded (`guard.rs`): a truncation of the file under
/// it reads as zero pages, and [`Mapping::cut`] says so.
pub(super) struct Mapping {
    ptr: std::ptr::NonNull<Layout>,
}

// SAFETY: the mapping is all atomics (`Atomics`), valid until dropped, and
// only ever read or written through those atomics: any thread may use it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `file` (checked: a worker's books), read-write if `write`.
    pub(super) fn new(file: &File, write: bool) -> Res<Mapping> {
        let len = std::mem::size_of::<Layout>();
        let p = map_raw(file, len, write)?;
        if !super::guard::guard(p.as_ptr(), len, write, -1, false) {
            // SAFETY: the mapping just made, of this length, not shared yet.
            unsafe { libc::munmap(p.as_ptr().cast(), len) };
            return Err(if super::guard::installed() {
                Error::ResourceExhausted(format!(
                    "cannot guard a mapping of another worker's books against truncation: all {} guarded \
                     ranges of this library are taken by books still mapped; refused",
                    super::guard::RANGES
                ))
            } else {
                Error::OperationFailed(
                    "cannot guard a mapping of another worker's books against truncation (no SIGBUS handler); refused".into(),
                )
            });
        }
        Ok(Mapping { ptr: p.cast() })
    }

    /// Whether the file was cut short under this mapping (its pages past
    /// the cut read as zero).
    pub(super) fn cut(&self) -> bool {
        super::guard::cut(self.ptr.as_ptr().cast())
    }
}

impl std::ops::Deref for Mapping {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        // SAFETY: a live mapping of `size_of::<Layout>()` bytes (any bytes
        // are a valid `Layout`: atomics only), unmapped only when `self`
        // drops, which this borrow outlives not.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        super::guard::unguard(self.ptr.as_ptr().cast());
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
// SAFETY: an array of such types is one too.
unsafe impl<T: Atomics, const N: usize> Atomics for [T; N] {}

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

/// Give back the pages of `v`, part of a shared read-write mapping from
/// [`map_as`] (`MADV_REMOVE`: the file's pages are punched out, and read as
/// zero from then on, in every process that maps them). False when `v` is
/// not whole pages or the file system cannot: the caller zeroes it.
pub(super) fn discard<T: Atomics>(v: &T) -> bool {
    let (addr, len) = (std::ptr::from_ref(v) as usize, std::mem::size_of::<T>());
    if addr % 4096 != 0 || len % 4096 != 0 {
        return false;
    }
    // SAFETY: the range is one object of a live mapping that stays mapped
    // (only its pages' content goes: they read as zero, a valid `T`).
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_REMOVE) == 0 }
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

/// Run `before` in the forking thread before every `fork()` of this
/// process, and `parent` / `child` after it.
pub(super) fn at_fork(before: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers plain functions.
    unsafe {
        libc::pthread_atfork(Some(before), Some(parent), Some(child));
    }
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
pub fn thread_id() -> u64 {
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

/// Whether `l` is this process's own books (published), not another
/// worker's mapped for one call.
#[inline]
pub(super) fn is_published(l: &Layout) -> bool {
    published().is_some_and(|o| std::ptr::eq(o, l))
}
