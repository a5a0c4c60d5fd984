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

/// A copy of one worker's books, the parts a report needs.
pub(super) struct Snapshot {
    pub(super) l: Box<Layout>,
    file: File,
}

impl Snapshot {
    /// The copy of `worker`'s books in `dir`, checked (identity, header, the
    /// worker it names); None when there is no file (and none was recorded).
    pub(super) fn take(dir: &Path, worker: &str) -> Res<Option<Snapshot>> {
        let Some((f, path)) = file::open_kind_read(&file::BOOKS, dir)? else {
            return Ok(None);
        };
        let s = Snapshot::of_file(&f, &path)?;
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

    /// The copy of the open books `f` (at `path`).
    pub(super) fn of_file(f: &File, path: &Path) -> Res<Snapshot> {
        // The slots ever claimed (untrusted: clamped; a worker that lowers
        // it hides only its own processes).
        let mut word = [0u8; 8];
        let slots_at = offset_of!(Layout, header) + offset_of!(Header, slots);
        let slots = f
            .read_exact_at(&mut word, slots_at as u64)
            .map(|()| u64::from_le_bytes(word).min(MAX_PROCS as u64) as usize);
        let procs = offset_of!(Layout, procs);
        let parts = slots.and_then(|n| {
            let parts = [
                0..std::mem::size_of::<Header>(),
                offset_of!(Layout, devices)..offset_of!(Layout, wd),
                procs..procs + n * std::mem::size_of::<Proc>(),
            ];
            map::read_copy(f, &parts)
        });
        let l = parts.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::OperationFailed(format!(
                    "limiter state file {} was truncated while it was read",
                    path.display()
                ))
            } else {
                Error::io("cannot read", path, e)
            }
        })?;
        let file = f
            .try_clone()
            .map_err(|e| Error::io("cannot read", path, e))?;
        Ok(Snapshot { l, file })
    }

    /// Whether process slot `i` was live in the copy and its process still is.
    pub(super) fn alive(&self, i: usize) -> bool {
        let p = &self.l.procs[i];
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
        (0..MAX_PROCS).any(|i| {
            let st = self.l.procs[i].state.load(Relaxed) & 3;
            st != PROC_FREE
                && (self.alive(i)
                    || map::ofd_locked(self.file.as_raw_fd(), owner::proc_lock(i)).unwrap_or(true))
        })
    }
}
