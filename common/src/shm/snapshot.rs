//! The host's view of a worker's books: a copy read with `pread`, never a
//! mapping (`workers::each` takes one per worker).
//!
//! A host program (the hypervisor, through libaccelerator's per-process
//! reports and its listing of limits) must survive whatever a tenant does to
//! a file the tenant can write. A report therefore reads the parts it needs
//! into a private heap copy (`map::read_copy`) and interprets that: a file
//! cut short is a short read, a removed, renamed or replaced file is refused
//! as on opening (`file.rs`), and a file whose header names another worker
//! than its directory is refused; each of these leaves that worker out of
//! the report, with its reason logged (`workers::each`). Every word of the
//! copy is treated as untrusted (indices are clamped, names read with a
//! bound).
//!
//! Nothing is written: a report does not reclaim dead processes (their
//! worker's next blocked check, a registration or a usage query does, see
//! `reclaim.rs`), it leaves them out. A registered process is alive while
//! the lock byte of its slot is held (`F_OFD_GETLK`, a query that takes
//! nothing and works on a read-only descriptor); a proxy slot's process
//! while `/proc` shows it, judged in the pid namespace it was registered
//! from (elsewhere it counts as alive, as in `reclaim.rs`).

use super::*;
use std::fs::File;
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A copy of one worker's books, the parts a report needs: the header, the
/// devices and the slots ever claimed (nothing past them is read or
/// looked at, so a copy is reused from worker to worker without zeroing).
pub(super) struct Snapshot {
    l: Box<Layout>,
    slots: usize,
    file: File,
}

impl Snapshot {
    /// The copy of `worker`'s books in `dir`, checked (identity, header, the
    /// worker it names); None when there is no file (and none was recorded).
    /// Read into `spare` if given (a copy [`Snapshot::recycle`] gave back).
    pub(super) fn take(
        dir: &Path,
        worker: &str,
        spare: Option<Box<Layout>>,
    ) -> Res<Option<Snapshot>> {
        let Some((f, path)) = file::open_kind_read(&file::BOOKS, dir)? else {
            return Ok(None);
        };
        let s = Snapshot::of_file(&f, &path, spare)?;
        let named = s.l.header.worker.state.load(Relaxed) == KEY_READY
            && key_name(&s.l.header.worker) == worker
            && s.l.header.private.load(Relaxed) <= 1;
        if !named {
            return Err(Error::OperationFailed(format!(
                "limiter state file {} does not name worker {worker:?} in its header",
                path.display()
            )));
        }
        Ok(Some(s))
    }

    /// The copy of the open books `f` (at `path`), into `spare` if given.
    pub(super) fn of_file(f: &File, path: &Path, spare: Option<Box<Layout>>) -> Res<Snapshot> {
        let failed = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::OperationFailed(format!(
                    "limiter state file {} was truncated while it was read",
                    path.display()
                ))
            } else {
                Error::io("cannot read", path, e)
            }
        };
        // The slots ever claimed (untrusted: clamped; a worker that lowers
        // it hides only its own processes).
        let mut word = [0u8; 8];
        let slots_at = offset_of!(Layout, header) + offset_of!(Header, slots);
        f.read_exact_at(&mut word, slots_at as u64)
            .map_err(failed)?;
        let slots = u64::from_le_bytes(word).min(MAX_PROCS as u64) as usize;
        let procs = offset_of!(Layout, procs);
        let parts = [
            0..std::mem::size_of::<Header>(),
            offset_of!(Layout, devices)..offset_of!(Layout, wd),
            procs..procs + slots * std::mem::size_of::<Proc>(),
        ];
        let l = match spare {
            Some(mut l) => map::read_into(f, &parts, &mut l).map(|()| l),
            None => map::read_copy(f, &parts),
        }
        .map_err(failed)?;
        let file = f
            .try_clone()
            .map_err(|e| Error::io("cannot read", path, e))?;
        Ok(Snapshot { l, slots, file })
    }

    /// The copy's memory, to read the next worker's books into.
    pub(super) fn recycle(self) -> Box<Layout> {
        self.l
    }

    /// The books' file identity (device, inode), which a process that
    /// registered itself holds open (`process::holds_open`).
    pub(super) fn identity(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().ok().map(|m| (m.dev(), m.ino()))
    }

    /// The header (as read: untrusted).
    pub(super) fn header(&self) -> &Header {
        &self.l.header
    }

    /// The devices' keys (as read: untrusted).
    pub(super) fn devices(&self) -> &[Key] {
        &self.l.devices
    }

    /// The slots ever claimed (as read: untrusted).
    pub(super) fn procs(&self) -> &[Proc] {
        &self.l.procs[..self.slots]
    }

    /// Whether process slot `i` was live in the copy and its process still
    /// is, as far as the books say. Not proof that the slot names that
    /// process: a tenant writes its books, and holds its own lock bytes;
    /// a report checks the process in `/proc` too (`reports.rs`).
    pub(super) fn alive(&self, i: usize) -> bool {
        let p = &self.procs()[i];
        let st = p.state.load(Relaxed);
        if st & 3 != PROC_LIVE {
            return false;
        }
        if p.owned.load(Relaxed) == 0 {
            return p.ns.load(Relaxed) != owner::pid_ns()
                || alive(word_pid(st), Some(p.start.load(Relaxed)));
        }
        // A failed query says nothing either way: report the process.
        map::ofd_locked(self.file.as_raw_fd(), owner::proc_lock(i)).unwrap_or(true)
    }

    /// Whether some slot is not free: live, or being claimed or reclaimed
    /// by a process holding its lock byte.
    pub(super) fn any_alive(&self) -> bool {
        (0..self.slots).any(|i| {
            let st = self.l.procs[i].state.load(Relaxed) & 3;
            st != PROC_FREE
                && (self.alive(i)
                    || map::ofd_locked(self.file.as_raw_fd(), owner::proc_lock(i)).unwrap_or(true))
        })
    }
}
