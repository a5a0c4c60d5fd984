//! Who owns a slot, and whether its owner is alive: open-file-description
//! locks on a worker's books.
//!
//! A process that registers itself owns its process slot `i` by holding an
//! OFD write lock on byte `SIZE + i` of its worker's books (past its end:
//! locks need no data there). The kernel drops the lock when the process dies,
//! whatever its pid namespace, and every process that can open the file sees
//! it, so liveness never depends on a pid, which means nothing outside its
//! own namespace: a slot whose lock can be taken has no live owner. Whoever
//! takes the lock of a dead slot is its only reclaimer; a reclaimer that dies
//! drops the lock and the next one finishes its work. Device and worker
//! names are claimed the same way (bytes after the process slots), so a
//! claimer that died mid-claim is told from one still writing. Every process
//! that opened the books as its own also holds a read lock on the *users*
//! byte for as long as it lives: the host removes a private worker's
//! directory only while it can take that byte's write lock (`workers.rs`).
//!
//! A process slot registered on behalf of another process (`AddWorkerProcess`
//! with another pid: a *proxy* slot) has no owner holding its lock until the
//! process itself registers and adopts it; until then its liveness is its
//! pid and start time in `/proc`, judged only by processes of the pid
//! namespace it was registered from (its `ns`).
//!
//! The descriptor is the one the file was mapped through (so the locks are
//! on the mapped file even if the path is renamed or replaced), close-on-exec;
//! another worker's books, kept mapped by the host (`kept.rs`), get a
//! descriptor opened for each call that takes one of their lock bytes.
//! A forked child inherits it, and with it the parent's locks; the fork
//! handler closes it in the child, so a child never keeps its parent's slot
//! alive (nor blocks anything), and opens its own worker's books afresh on
//! its first call (`file::open_shared`: the child may be another worker).
//! The handler also frees this process's cold-path locks in the child.
//! Threads of one process share the descriptor, whose locks never exclude
//! each other: [`PROCESS`] and [`KEYS`] serialise them.

use super::local::ForkLock;
use super::*;
use std::fs::File;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::AtomicI32;

/// Registration and reclamation in this process's own books.
pub(super) static PROCESS: ForkLock = ForkLock::new();
/// Name claims in this process's own books: taken inside [`PROCESS`],
/// never around it.
pub(super) static KEYS: ForkLock = ForkLock::new();

/// `lock` held for a call on the books `l` when they are this process's own
/// (its threads share their descriptor, whose locks never exclude each
/// other); another worker's books are mapped for one call through a
/// descriptor of that call's own (`map::Lent`), whose lock bytes exclude
/// every other call's as another process's would: nothing to hold, so a
/// call on one worker's books never waits for a call on another's.
pub(super) fn own_lock<'a>(lock: &'a ForkLock, l: &Layout) -> Option<super::local::ForkGuard<'a>> {
    map::is_published(l).then(|| lock.lock())
}
/// Opening the file in this process.
pub(super) static OPEN: ForkLock = ForkLock::new();

static FD: AtomicI32 = AtomicI32::new(-1);
/// The process `FD` was opened by: another one means a fork whose handler
/// was not installed yet (a fork racing the first open), and the child
/// drops its copy on its first use.
static FD_PID: AtomicU64 = AtomicU64::new(0);
static FILE_DEV: AtomicU64 = AtomicU64::new(0);
static FILE_INO: AtomicU64 = AtomicU64::new(0);
/// This process's pid namespace (inode of /proc/self/ns/pid), 0 = not read.
static NS: AtomicU64 = AtomicU64::new(0);

/// Keep `file` (the mapped state file at `path`) as this process's lock
/// descriptor.
pub(super) fn adopt(file: File, path: &Path) -> Res<()> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?;
    FILE_DEV.store(meta.dev(), Relaxed);
    FILE_INO.store(meta.ino(), Relaxed);
    FD_PID.store(my_pid() as u64, Relaxed);
    FD.store(file.into_raw_fd(), Release);
    Ok(())
}

/// Whether `meta` is the file this process's books were mapped from.
pub(super) fn same_file(meta: &std::fs::Metadata) -> bool {
    (meta.dev(), meta.ino()) == (FILE_DEV.load(Relaxed), FILE_INO.load(Relaxed))
}

/// Install the fork handler (once per process, before the first open; no
/// `Once`: a fork while it ran would leave the child blocked on it).
pub(super) fn init() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, AcqRel) {
        map::at_fork_child(after_fork);
    }
}

extern "C" fn after_fork() {
    let fd = FD.swap(-1, Relaxed);
    if fd >= 0 {
        map::close(fd);
    }
    map::unpublish_in_child();
    OWN_SLOT.store(0, Relaxed);
    limits::forget_rows();
    NS.store(0, Relaxed);
    OPEN.reset();
    PROCESS.reset();
    KEYS.reset();
}

/// The lock descriptor, reopened by path after a fork.
fn fd() -> Res<i32> {
    let fd = FD.load(Acquire);
    if fd >= 0 {
        if FD_PID.load(Relaxed) == my_pid() as u64 {
            return Ok(fd);
        }
        if FD.compare_exchange(fd, -1, AcqRel, Acquire).is_ok() {
            map::close(fd);
        }
    }
    // The path now; the inode check below tells whether it is still the
    // file this process mapped.
    let path = &own_path();
    let replaced = || {
        Error::OperationFailed(format!(
            "limiter state file {} was removed or replaced since this process mapped it; \
             refusing to use the new file (restart the process)",
            path.display()
        ))
    };
    let file = crate::statedir::open(path, crate::statedir::Create::Never)?.ok_or_else(replaced)?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?;
    if meta.dev() != FILE_DEV.load(Relaxed) || meta.ino() != FILE_INO.load(Relaxed) {
        return Err(replaced());
    }
    let fd = file.into_raw_fd();
    FD_PID.store(my_pid() as u64, Relaxed);
    match FD.compare_exchange(-1, fd, AcqRel, Acquire) {
        Ok(_) => Ok(fd),
        Err(other) => {
            map::close(fd);
            Ok(other)
        }
    }
}

/// Refuse a state file that was cut short since it was mapped (touching the
/// lost part of the mapping would be a SIGBUS): the cold entry points (limits,
/// freezing, reports, registration on a device) check it first. This
/// narrows the window; it does not close it (see the module docs of `shm`).
pub(super) fn check_size() -> Res<()> {
    let len = map::file_size(fd()?)
        .map_err(|e| Error::OperationFailed(format!("cannot stat the limiter state file: {e}")))?;
    if len < SIZE as u64 {
        return Err(Error::OperationFailed(format!(
            "limiter state file {} was truncated to {len} of {SIZE} bytes while in use; \
             refusing to touch it (restore it or restart every process that uses it)",
            own_path().display()
        )));
    }
    Ok(())
}

/// The path of this process's own books (named in their header).
fn own_path() -> std::path::PathBuf {
    let name = map::published().map(|l| key_name(&l.header.worker));
    workers::books_path(name.as_deref().unwrap_or(""))
}

/// The descriptor the lock bytes of the books `l` are taken on: this
/// process's own, or the one of another worker's books lent to this
/// thread's call (`kept::lent_fd`).
fn fd_of(l: &Layout) -> Res<i32> {
    if map::is_published(l) {
        return fd();
    }
    super::kept::lent_fd(l)
}

/// Take the lock of byte `off` of the books `l` without waiting; false:
/// held by a live process (or, for a claim, by one in the middle of it).
pub(super) fn try_lock(l: &Layout, off: u64) -> Res<bool> {
    map::ofd_lock(fd_of(l)?, off, true)
        .map_err(|e| Error::OperationFailed(format!("cannot lock the limiter state file: {e}")))
}

pub(super) fn unlock(l: &Layout, off: u64) {
    if let Ok(fd) = fd_of(l) {
        let _ = map::ofd_lock(fd, off, false);
    }
}

/// Hold a read lock on the users byte of the books `fd` refers to, waiting
/// while the host holds its write lock to remove them.
pub(super) fn hold_users(fd: i32) -> Res<()> {
    for _ in 0..10_000 {
        match map::ofd_read_lock(fd, users_lock()) {
            Ok(true) => return Ok(()),
            Ok(false) => std::thread::yield_now(),
            Err(e) => {
                return Err(Error::OperationFailed(format!(
                    "cannot lock the limiter state file: {e}"
                )))
            }
        }
    }
    Err(Error::OperationFailed(
        "the limiter's books stay locked for removal".into(),
    ))
}

/// Lock byte of process slot `i`.
pub(super) fn proc_lock(i: usize) -> u64 {
    (SIZE + i) as u64
}

/// Lock byte of the device table (`devices.rs`).
pub(super) fn device_table_lock() -> u64 {
    (SIZE + MAX_PROCS) as u64
}

/// Lock byte of the books' users (read locks) and their remover (write lock).
pub(super) fn users_lock() -> u64 {
    (SIZE + MAX_PROCS + 1) as u64
}

/// This process's pid namespace: the inode of `/proc/self/ns/pid`, unique
/// on the node while the namespace lives (0 when /proc cannot say).
pub(super) fn pid_ns() -> u64 {
    let ns = NS.load(Relaxed);
    if ns != 0 {
        return ns;
    }
    let ns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    NS.store(ns, Relaxed);
    ns
}
