//! The host's view of the state file: a copy read with `pread`, never a
//! mapping.
//!
//! A host program (the hypervisor, through libaccelerator's per-process
//! reports and its listing of limits) must survive whatever a tenant does to
//! a file the tenant can write. A report therefore reads the parts it needs
//! into a private heap copy (`map::read_copy`) and interprets that: a file
//! cut short is a short read, and the report is refused with an error that
//! says so; a removed, renamed or replaced file is refused as on opening
//! (`file.rs`). Every word of the copy is treated as untrusted (indices are
//! clamped, names read with a bound).
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

/// A copy of the state file's parts a report needs.
pub(super) struct Snapshot {
    pub(super) l: Box<Layout>,
    file: File,
}

/// The parts of the file a report reads (the header, device and worker
/// tables are always read).
pub(super) enum Part {
    /// The process slots.
    Processes,
    /// Nothing more (names only).
    Names,
}

impl Snapshot {
    /// The copy; None when there is no state file (and none was recorded):
    /// nothing to report.
    pub(super) fn take(part: Part) -> Res<Option<Snapshot>> {
        let Some((f, path)) = file::open_kind_read(&file::BOOKS)? else {
            return Ok(None);
        };
        let rest = match part {
            Part::Processes => offset_of!(Layout, procs)..SIZE,
            Part::Names => 0..0,
        };
        let parts = [
            0..std::mem::size_of::<Header>(),
            offset_of!(Layout, devices)..offset_of!(Layout, wd),
            rest,
        ];
        let l = map::read_copy(&f, &parts).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::OperationFailed(format!(
                    "limiter state file {} was truncated while it was read; refusing to report \
                     from it (restore it or restart every process that uses it)",
                    path.display()
                ))
            } else {
                Error::io("cannot read", &path, e)
            }
        })?;
        Ok(Some(Snapshot { l, file: f }))
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
}
