//! Who owns a slot, and whether its owner is alive: open-file-description
//! locks on the state file.
//!
//! A process that registers itself owns its process slot `i` by holding an
//! OFD write lock on byte `SIZE + i` of the state file (past its end: locks
//! need no data there). The kernel drops the lock when the process dies,
//! whatever its pid namespace, and every process that can open the file sees
//! it, so liveness never depends on a pid, which means nothing outside its
//! own namespace: a slot whose lock can be taken has no live owner. Whoever
//! takes the lock of a dead slot is its only reclaimer; a reclaimer that dies
//! drops the lock and the next one finishes its work. Device and worker
//! names are claimed the same way (bytes after the process slots), so a
//! claimer that died mid-claim is told from one still writing.
//!
//! A process slot registered on behalf of another process (`AddWorkerProcess`
//! with another pid: a *proxy* slot) has no owner holding its lock until the
//! process itself registers and adopts it; until then its liveness is its
//! pid and start time in `/proc`, judged only by processes of the pid
//! namespace it was registered from (its `ns`).
//!
//! The descriptor is the one the file was mapped through (so the locks are
//! on the mapped file even if the path is renamed or replaced), close-on-exec.
//! A forked child inherits it, and with it the parent's locks; the fork
//! handler closes it in the child, so a child never keeps its parent's slot
//! alive (nor blocks anything), and reopens the file by path on its first
//! registration, refusing a file that is no longer the one it has mapped.
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

/// Registration and reclamation in this process.
pub(super) static PROCESS: ForkLock = ForkLock::new();
/// Name claims in this process: taken inside [`PROCESS`], never around it.
pub(super) static KEYS: ForkLock = ForkLock::new();
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
    OWN_SLOT.store(0, Relaxed);
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
    let path = &crate::statedir::path().join(FILE_NAME);
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

/// Take the lock of byte `off` without waiting; false: held by a live
/// process (or, for a claim, by one in the middle of it).
pub(super) fn try_lock(off: u64) -> Res<bool> {
    map::ofd_lock(fd()?, off, true)
        .map_err(|e| Error::OperationFailed(format!("cannot lock the limiter state file: {e}")))
}

pub(super) fn unlock(off: u64) {
    if let Ok(fd) = fd() {
        let _ = map::ofd_lock(fd, off, false);
    }
}

/// Lock byte of process slot `i`.
pub(super) fn proc_lock(i: usize) -> u64 {
    (SIZE + i) as u64
}

/// Lock byte of the device table (`devices.rs`).
pub(super) fn device_table_lock() -> u64 {
    (SIZE + MAX_PROCS) as u64
}

/// Lock byte of worker entry `i`.
pub(super) fn worker_lock(i: usize) -> u64 {
    (SIZE + MAX_PROCS + 1 + i) as u64
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
