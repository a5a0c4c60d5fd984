//! The node-wide state directory and the secure opening of files in it.
//!
//! State that must outlive a process (partitions, hard limits, the limiter's
//! shared mapping) lives under `ACCELERATOR_STATE_DIR`. Defaults:
//! root → `/run/accelerator` (node-lifetime tmpfs: MIG and vNPU instances do
//! not survive a reboot either); others → `$XDG_RUNTIME_DIR/accelerator`, or
//! `/tmp/accelerator-<uid>` when that is unset.
//!
//! Every file is opened with `O_NOFOLLOW`, must be a regular file owned by
//! the effective user, and is created 0600 (plus group bits when
//! `ACCELERATOR_STATE_GROUP_ACCESS=1`, for hypervisors that share the node
//! state with a group of worker users). A directory we create is 0700/0770.

use crate::{Error, Res};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const ENV_STATE_DIR: &str = "ACCELERATOR_STATE_DIR";
pub const ENV_GROUP_ACCESS: &str = "ACCELERATOR_STATE_GROUP_ACCESS";

/// The state directory from the environment or the documented default.
pub fn path() -> PathBuf {
    if let Some(dir) = std::env::var_os(ENV_STATE_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let uid = euid();
    if uid == 0 {
        return PathBuf::from("/run/accelerator");
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&run).join("accelerator");
    }
    PathBuf::from(format!("/tmp/accelerator-{uid}"))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn group_access() -> bool {
    std::env::var(ENV_GROUP_ACCESS).is_ok_and(|v| v == "1")
}

/// Mode bits for files we create.
pub fn file_mode() -> u32 {
    if group_access() {
        0o660
    } else {
        0o600
    }
}

/// Ensure the state directory exists, is a real directory (not a symlink)
/// and belongs to us; returns its path.
pub fn ensure() -> Res<PathBuf> {
    let dir = path();
    ensure_dir(&dir)?;
    Ok(dir)
}

/// [`ensure`] for a directory `dir` in the state directory (created
/// 0700/0770 like it, with its parents).
pub fn ensure_dir(dir: &Path) -> Res<()> {
    let mode = if group_access() { 0o770 } else { 0o700 };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("cannot create state directory", dir, e)),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| Error::io("cannot stat state directory", dir, e))?;
    if meta.file_type().is_symlink() {
        return Err(Error::OperationFailed(format!(
            "state directory {} is a symlink; refusing to use it",
            dir.display()
        )));
    }
    if !meta.is_dir() {
        return Err(Error::OperationFailed(format!(
            "state directory {} is not a directory",
            dir.display()
        )));
    }
    check_owner(dir, meta.uid())
}

fn check_owner(path: &Path, uid: u32) -> Res<()> {
    let me = euid();
    if uid != me {
        return Err(Error::OperationFailed(format!(
            "{} is owned by uid {uid}, not by this process (uid {me}); refusing to use it",
            path.display()
        )));
    }
    Ok(())
}

/// How `open` treats a missing file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Create {
    Never,
    IfMissing,
}

/// Open a state file for reading and writing, refusing symlinks, non-regular
/// files and files of other users. `Ok(None)` when missing and `Create::Never`.
pub fn open(path: &Path, create: Create) -> Res<Option<File>> {
    open_with(path, create, true)
}

/// [`open`] for reading only (never creates); a file owned by root is
/// accepted as well.
pub fn open_read(path: &Path) -> Res<Option<File>> {
    open_with(path, Create::Never, false)
}

fn open_with(path: &Path, create: Create, write: bool) -> Res<Option<File>> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true)
        .write(write)
        // O_NONBLOCK: a FIFO a tenant left in its own directory must be
        // refused below (not a regular file), not block this open forever.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .mode(file_mode());
    if create == Create::IfMissing {
        opts.create(true);
    }
    checked(opts.open(path), path, create, write)
}

/// The checks of [`open`] on the outcome of an open of `path`.
fn checked(
    opened: std::io::Result<File>,
    path: &Path,
    create: Create,
    write: bool,
) -> Res<Option<File>> {
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create == Create::Never => {
            return Ok(None)
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::OperationFailed(format!(
                "state file {} is a symlink; refusing to use it",
                path.display()
            )))
        }
        Err(e) => return Err(Error::io("cannot open state file", path, e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat state file", path, e))?;
    if !meta.is_file() {
        return Err(Error::OperationFailed(format!(
            "state file {} is not a regular file",
            path.display()
        )));
    }
    // Read-only: a file of root's is fine too (a host-owned file read by a
    // worker's processes, `shm/limits.rs`).
    if write || meta.uid() != 0 {
        check_owner(path, meta.uid())?;
    }
    Ok(Some(file))
}

/// A directory of the state directory, opened once: every file opened,
/// created, linked or renamed through it is in that directory, even when
/// its path was renamed or replaced meanwhile (a worker's removal,
/// `shm/workers.rs`). A path would name the new directory halfway through,
/// and what one step learned of the old one (a file's identity) would be
/// written into the new one.
pub struct Dir {
    file: File,
    path: PathBuf,
}

impl Dir {
    /// Open directory `path` (never a symlink); None when it is missing.
    pub fn open(path: &Path) -> Res<Option<Dir>> {
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(file) => Ok(Some(Dir {
                file,
                path: path.to_path_buf(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot open state directory", path, e)),
        }
    }

    /// The path it was opened by (for messages: it may name another now).
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// [`open`] of `name` in this directory.
    pub fn open_file(&self, name: &str, create: Create) -> Res<Option<File>> {
        self.open_with(name, create, true)
    }

    /// [`open_read`] of `name` in this directory.
    pub fn open_read(&self, name: &str) -> Res<Option<File>> {
        self.open_with(name, Create::Never, false)
    }

    fn open_with(&self, name: &str, create: Create, write: bool) -> Res<Option<File>> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let c = c_name(name)?;
        let mut flags = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        flags |= if write { libc::O_RDWR } else { libc::O_RDONLY };
        if create == Create::IfMissing {
            flags |= libc::O_CREAT;
        }
        // SAFETY: a valid directory descriptor and a NUL-terminated name;
        // the descriptor returned is owned by the File alone.
        let fd = unsafe { libc::openat(self.file.as_raw_fd(), c.as_ptr(), flags, file_mode()) };
        let opened = if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: `fd` was just opened and nothing else owns it.
            Ok(unsafe { File::from_raw_fd(fd) })
        };
        checked(opened, &self.path_of(name), create, write)
    }

    /// `link(2)` `from` to `to`, both in this directory (never replaces `to`).
    pub fn link(&self, from: &str, to: &str) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (f, t) = (c_name(from).map_err(other)?, c_name(to).map_err(other)?);
        let fd = self.file.as_raw_fd();
        // SAFETY: a valid directory descriptor and NUL-terminated names.
        let rc = unsafe { libc::linkat(fd, f.as_ptr(), fd, t.as_ptr(), 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// `rename(2)` `from` over `to`, both in this directory.
    pub fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (f, t) = (c_name(from).map_err(other)?, c_name(to).map_err(other)?);
        let fd = self.file.as_raw_fd();
        // SAFETY: a valid directory descriptor and NUL-terminated names.
        let rc = unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Remove file `name` of this directory (a missing one is no error).
    pub fn remove(&self, name: &str) {
        use std::os::fd::AsRawFd;
        if let Ok(c) = c_name(name) {
            // SAFETY: a valid directory descriptor and a NUL-terminated name.
            unsafe { libc::unlinkat(self.file.as_raw_fd(), c.as_ptr(), 0) };
        }
    }
}

/// A file name of ours as a C string.
fn c_name(name: &str) -> Res<std::ffi::CString> {
    std::ffi::CString::new(name)
        .map_err(|_| Error::Internal(format!("file name {name:?} holds a NUL byte")))
}

fn other(e: Error) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// An exclusive `flock` on the state directory itself, held until dropped.
///
/// The directory is what is locked because it cannot be swapped underneath
/// the writers the way a lock file can be deleted or replaced (which let
/// two writers in at once). Each lock opens the directory anew, so threads
/// of one process exclude each other too. `flock` belongs to the open file
/// description, which a forked child shares: a fork handler closes the
/// child's copies of held locks' descriptors (the parent's unlock then
/// frees the lock for both), so a child never holds its parent's lock.
pub struct DirLock {
    file: File,
    slot: usize,
}

/// Descriptors of the directory locks this process holds (-1: free slot).
static HELD: [std::sync::atomic::AtomicI32; 64] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 64];

extern "C" fn close_held_in_child() {
    for h in &HELD {
        let fd = h.swap(-1, std::sync::atomic::Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: the child's copy of a descriptor only a lock owned.
            unsafe { libc::close(fd) };
        }
    }
}

/// Lock the state directory `dir` exclusively, waiting for other writers.
pub fn lock_dir(dir: &Path) -> Res<DirLock> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering::*;
    // Not a `Once`: a fork while it ran would leave the child blocked on it.
    static AT_FORK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !AT_FORK.swap(true, AcqRel) {
        // SAFETY: registers a plain function as the child's fork handler.
        unsafe { libc::pthread_atfork(None, None, Some(close_held_in_child)) };
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| Error::io("cannot open state directory", dir, e))?;
    let fd = file.as_raw_fd();
    // Registered before locking: a fork from here on closes the child's copy.
    let slot = HELD
        .iter()
        .position(|h| h.compare_exchange(-1, fd, AcqRel, Relaxed).is_ok())
        .ok_or_else(|| {
            Error::ResourceExhausted("64 state directory locks held by this process".into())
        })?;
    let lock = DirLock { file, slot };
    loop {
        // SAFETY: the fd is valid for the lifetime of `lock.file`.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
            return Ok(lock);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("cannot lock", dir, err));
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // Unlock first: a child forked before this point holds a copy of
        // the descriptor, and the lock is the open file description's.
        // SAFETY: the fd is valid while `self.file` lives.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        HELD[self.slot].store(-1, std::sync::atomic::Ordering::Release);
    }
}

/// Whether a process with this pid exists (signal 0 probe; EPERM means it
/// exists but belongs to someone else).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 performs only the existence/permission check.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The start time of a process in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), which together with the pid identifies a process
/// uniquely: a recycled pid has a later start time.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: parse
    // after the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        // A tenant can leave a FIFO under a state file's name in its own
        // worker's directory: opening it must not wait for a writer.
        let dir = std::env::temp_dir().join(format!("statedir-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("limiter.shm.id");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: makes a FIFO at a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_read(&path).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
