//! THE FOURTH UNSAFE PART OF THE LIMITER: the kernel's change notices a
//! host keeps its view of other workers' books current with (`kept.rs`).
//!
//! - [`Notices`]: inotify on the workers' directory and each worker's
//!   directory (a worker created or removed, books replaced or cut short);
//! - [`Exits`]: an epoll set of pidfds, one per process a worker's books
//!   name, readable once that process has exited.
//!
//! Both are read without blocking, so a host call costs one system call for
//! each while nothing changed, whatever the number of workers and processes.
//! Every descriptor is close-on-exec and owned (`OwnedFd`): a forked child
//! that drops the view closes its copies only.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// An inotify instance.
pub(super) struct Notices(OwnedFd);

/// What a directory event says, for [`Notices::drain`].
pub(super) struct Notice<'a> {
    pub(super) wd: i32,
    pub(super) mask: u32,
    pub(super) name: &'a OsStr,
}

/// Events of a watched directory that change what the view holds, and
/// opens: a process that starts using a worker's books opens them, which
/// tells the host's sampler to read them now (`kept::View::take_touched`).
pub(super) const DIR_EVENTS: u32 = libc::IN_OPEN
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

impl Notices {
    /// None where inotify is not available (the view then checks each
    /// worker's files on every call).
    pub(super) fn new() -> Option<Notices> {
        // SAFETY: no pointers; a descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        // SAFETY: a fresh descriptor we own.
        (fd >= 0).then(|| Notices(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watch directory `dir`; None when it cannot be (the watch limit,
    /// `fs.inotify.max_user_watches`, is shared by the user's processes).
    pub(super) fn watch(&self, dir: &Path) -> Option<i32> {
        let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: a NUL-terminated path that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), c.as_ptr(), DIR_EVENTS) };
        (wd >= 0).then_some(wd)
    }

    /// Every event queued since the last call. False: the queue overflowed
    /// (`IN_Q_OVERFLOW`) or could not be read, so events were lost.
    pub(super) fn drain(&self, mut f: impl FnMut(Notice<'_>)) -> bool {
        let mut buf = [0u64; 512]; // 4 KiB, aligned for inotify_event
        let header = std::mem::size_of::<libc::inotify_event>();
        loop {
            // SAFETY: reads into a buffer we own, of its length.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(&buf),
                )
            };
            if n < 0 {
                return std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock;
            }
            let bytes = n as usize;
            let base = buf.as_ptr().cast::<u8>();
            let mut at = 0;
            while at + header <= bytes {
                // SAFETY: the kernel wrote whole events: a header at `at`
                // (8-byte aligned: headers and names are multiples of 4 and
                // the buffer is 8-aligned; read unaligned anyway), then
                // `len` bytes of NUL-padded name, inside `bytes`.
                let ev =
                    unsafe { std::ptr::read_unaligned(base.add(at).cast::<libc::inotify_event>()) };
                let len = ev.len as usize;
                if at + header + len > bytes {
                    break;
                }
                // SAFETY: `len` bytes after the header, inside the buffer.
                let raw = unsafe { std::slice::from_raw_parts(base.add(at + header), len) };
                let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(len)];
                if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                    return false;
                }
                f(Notice {
                    wd: ev.wd,
                    mask: ev.mask,
                    name: OsStr::from_bytes(name),
                });
                at += header + len;
            }
        }
    }
}

/// An epoll set of pidfds.
pub(super) struct Exits(OwnedFd);

impl Exits {
    pub(super) fn new() -> Option<Exits> {
        // SAFETY: no pointers; a descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // SAFETY: a fresh descriptor we own.
        (fd >= 0).then(|| Exits(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Be told (once, in [`Exits::drain`], with `token`) when the process of
    /// `pidfd` exits. The pidfd's closing takes it out of the set.
    pub(super) fn add(&self, pidfd: &PidFd, token: u64) -> bool {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            u64: token,
        };
        // SAFETY: an event we own; both descriptors are open.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                pidfd.0.as_raw_fd(),
                &mut ev,
            ) == 0
        }
    }

    /// The tokens of the processes that exited since the last call.
    pub(super) fn drain(&self, mut f: impl FnMut(u64)) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            // SAFETY: writes at most `evs.len()` events into our buffer;
            // timeout 0: never blocks.
            let n = unsafe {
                libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, 0)
            };
            if n <= 0 {
                return;
            }
            for ev in &evs[..n as usize] {
                f(ev.u64);
            }
            if (n as usize) < evs.len() {
                return;
            }
        }
    }
}

/// The kernel has no `pidfd_open` (asked once).
static NO_PIDFD: AtomicBool = AtomicBool::new(false);

/// A pidfd.
pub(super) struct PidFd(OwnedFd);

/// A pidfd for process `pid` (a pid of the caller's namespace). Refused
/// (`EMFILE`) past the process's descriptor budget (`descriptors.rs`):
/// the host program's own files come first.
pub(super) fn pidfd(pid: i32) -> std::io::Result<PidFd> {
    // Valgrind (its preload library in `LD_PRELOAD`) does not know the
    // call and warns at each: ask it nothing.
    static ASKED: AtomicBool = AtomicBool::new(false);
    if !ASKED.swap(true, Relaxed)
        && std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("/vgpreload_"))
    {
        NO_PIDFD.store(true, Relaxed);
    }
    if NO_PIDFD.load(Relaxed) {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
    }
    if !super::descriptors::take() {
        return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
    }
    // SAFETY: no pointers; a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            NO_PIDFD.store(true, Relaxed); // before Linux 5.3, or valgrind
        }
        return Err(e);
    }
    // SAFETY: a fresh close-on-exec descriptor we own (pidfds always are).
    Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

/// Whether the process of `pidfd` has exited.
pub(super) fn exited(pidfd: &PidFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.0.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd we own; timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & libc::POLLIN != 0
}
