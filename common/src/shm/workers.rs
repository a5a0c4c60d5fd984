//! One books file per worker: where it lives, who creates it, which one a
//! process uses, and the removal of private workers' directories.
//!
//! A worker's books are `$ACCELERATOR_STATE_DIR/workers/<worker>/limiter.shm`
//! (with `limiter.shm.id` beside it, `file.rs`), `<worker>` being its id
//! with every byte outside `[A-Za-z0-9_.-]`, and a leading `.`, written
//! `%XX` ([`dir_name`]). The directory is created 0700 (0770 with
//! `ACCELERATOR_STATE_GROUP_ACCESS=1`), the files 0600 (0660), owned by
//! their creator: the host side, on the worker's first limit, freeze or
//! `AddWorkerProcess`; else the worker's first client. A worker's
//! containers mount its own directory read-write at the same path, and
//! `limits.shm` with its `.id` read-only, nothing of other workers: a tenant
//! that sets another `ACCELERATOR_WORKER_ID` inside its container can only
//! create a file in its own mount view, never reach another worker's books.
//!
//! A process uses the books of its worker alone, mapped once ([`open_own`]):
//! the worker of its `ACCELERATOR_WORKER_ID` when it first calls the limiter,
//! or without one a *private* worker named for the process
//! (`process::private_worker`: "the limit binds it and no other process"),
//! whose header says so. A forked child opens its own again (it may be
//! another worker). Calls about another process (`AddWorkerProcess`, a check
//! naming another pid) and about another worker (its usage) map that
//! worker's books as the caller keeps them mapped ([`Books::Kept`],
//! `kept.rs`), within a budget and guarded: a process of that worker may
//! truncate them or stall on them, and neither may kill or hang the caller.
//!
//! The host side reads every worker's books for its reports (`kept.rs`,
//! `reports.rs`), each checked on its own: a file that is missing, cut
//! short, replaced, of another layout or naming another worker is skipped
//! with its reason on stderr (once per file and reason, a bounded number of
//! lines a minute: `logged.rs`), and the others are
//! still reported. It removes a private worker's directory once no live
//! process uses it: no process holds the users byte's read lock (each holds
//! it from opening its own books until it dies, `owner.rs`) and no slot is
//! live; the remover holds the write lock while it renames the directory out
//! of the way (`.removing.…`, never a worker's name) and deletes it, so an
//! opener either holds its read lock first (and the directory stays) or
//! finds the directory gone afterwards and creates it anew; one whose
//! directory went while it made or opened the books opens them again
//! ([`open`]), as does a host call on another worker's books that went
//! before its first lock byte ([`with_books_of_pid`]).

use super::*;
use crate::statedir;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The directory of the workers' directories, in the state directory.
pub(super) const WORKERS_DIR: &str = "workers";

/// A worker's directory name (see the module docs): one path component,
/// never `.` or `..`, one name per worker id and back ([`worker_of_dir`]).
pub(super) fn dir_name(worker: &str) -> String {
    let mut out = String::with_capacity(worker.len());
    for (i, b) in worker.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The worker id a directory name stands for, if it is one [`dir_name`] gives.
pub(super) fn worker_of_dir(dir: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(dir.len());
    let mut it = dir.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex = [it.next()?, it.next()?];
            bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    (dir_name(&name) == dir).then_some(name)
}

/// The directory of `worker`'s books.
pub fn worker_dir(worker: &str) -> PathBuf {
    statedir::path().join(WORKERS_DIR).join(dir_name(worker))
}

/// The path of `worker`'s books.
pub fn books_path(worker: &str) -> PathBuf {
    worker_dir(worker).join(FILE_NAME)
}

/// The worker of process `pid` (this process, or one it can see in
/// `/proc`): its `ACCELERATOR_WORKER_ID`, else its private worker, named
/// in its own pid namespace (as the process names itself). Private: true.
pub(super) fn worker_of(pid: i32) -> Res<(String, bool)> {
    let own = pid == my_pid();
    let value = if own {
        std::env::var_os(ENV_WORKER_ID).map(|v| v.into_encoded_bytes())
    } else {
        let env = std::fs::read(format!("/proc/{pid}/environ"))
            .map_err(|_| Error::NotFound(format!("process {pid} does not exist")))?;
        env_worker(&env).map(<[u8]>::to_vec)
    };
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        let name = String::from_utf8(v).map_err(|_| {
            Error::InvalidParam(format!("{ENV_WORKER_ID} of process {pid} is not UTF-8"))
        })?;
        key_words(&name)?;
        return Ok((name, false));
    }
    let start = proc_stat(pid)
        .map(|(_, s)| s)
        .ok_or_else(|| Error::NotFound(format!("process {pid} does not exist")))?;
    let (ns, inner) = if own {
        (owner::pid_ns(), pid)
    } else {
        own_namespace_pid(pid)
            .ok_or_else(|| Error::NotFound(format!("process {pid} does not exist")))?
    };
    Ok((private_worker(ns, inner, start), true))
}

/// The `ACCELERATOR_WORKER_ID` in an environment block (`/proc/<pid>/environ`).
fn env_worker(env: &[u8]) -> Option<&[u8]> {
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"ACCELERATOR_WORKER_ID="))
}

/// Whether process `pid` (a pid here) started as a process of `worker`:
/// the environment it started with (`/proc/<pid>/environ`) names it, which
/// is how `AddWorkerProcess` chose the books it put a proxy slot in.
pub(super) fn started_as(pid: i32, worker: &str) -> bool {
    let path = if pid == my_pid() {
        "/proc/self/environ".to_string()
    } else {
        format!("/proc/{pid}/environ")
    };
    std::fs::read(path).is_ok_and(|env| env_worker(&env) == Some(worker.as_bytes()))
}

/// A process's pid namespace and its pid there (`NSpid`'s last field).
pub(super) fn own_namespace_pid(pid: i32) -> Option<(u64, i32)> {
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?.ino();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let inner = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()?;
    Some((ns, inner))
}

/// Bytes 24.. of a new books file's header: the private flag and the
/// worker's id as a ready name (`layout::Header`).
fn header_tail(worker: &str, private: bool) -> Res<Vec<u8>> {
    let (words, hash) = key_words(worker)?;
    let mut tail = vec![0u8; 64 + 16 + 64 - 24];
    tail[0..8].copy_from_slice(&u64::from(private).to_le_bytes());
    tail[40..48].copy_from_slice(&KEY_READY.to_le_bytes());
    tail[48..56].copy_from_slice(&hash.to_le_bytes());
    for (i, w) in words.iter().enumerate() {
        tail[56 + i * 8..64 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    Ok(tail)
}

/// Refuse a books file whose header names another worker, or the same
/// name as another kind (private or not) when `private` says which.
fn check_header(file: &File, path: &Path, worker: &str, private: Option<bool>) -> Res<()> {
    let mut head = [0u8; 144];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| Error::io("cannot read", path, e))?;
    let expect = header_tail(worker, private.unwrap_or(false))?;
    let flag_ok = match private {
        Some(_) => head[24..32] == expect[0..8],
        None => head[25..32] == [0; 7] && head[24] <= 1,
    };
    // Bytes 32..64 (the slots ever claimed, padding) are not the name's.
    if !flag_ok || head[64..] != expect[40..] {
        return Err(Error::OperationFailed(format!(
            "limiter state file {} is not the books of worker {worker:?}; refusing to use it",
            path.display(),
        )));
    }
    Ok(())
}

/// Open `worker`'s books read-write, checked (identity, header, name).
/// `Some(private)`: created with the directory when missing; `None`: only
/// an existing file, of either kind (else None). None as well when the
/// directory was removed (`remove_unused`: the host ending the worker, or
/// a pass) while the books were being made or opened: the caller opens
/// them again, and finds the new directory or makes it.
pub(super) fn open(worker: &str, private: Option<bool>) -> Res<Option<(File, PathBuf)>> {
    let dir = worker_dir(worker);
    let Some(private) = private else {
        if file::open_kind_read(&file::BOOKS, &dir)?.is_none() {
            return Ok(None);
        }
        let (file, path) = file::open_kind(&file::BOOKS, &dir, &[])?;
        check_header(&file, &path, worker, None)?;
        return Ok(Some((file, path)));
    };
    statedir::ensure()?;
    // Made (or found) and removed at once by a removal, before it could be
    // checked: made again. An error that is the directory's own (its
    // mode, owner, a file in its place) comes back every time.
    let mut tries = REOPENS;
    while let Err(e) = statedir::ensure_dir(&dir) {
        tries -= 1;
        if tries == 0 {
            return Err(e);
        }
    }
    let made = dir_identity(&dir);
    let opened = file::open_kind(&file::BOOKS, &dir, &header_tail(worker, private)?).and_then(
        |(file, path)| {
            check_header(&file, &path, worker, Some(private))?;
            Ok((file, path))
        },
    );
    match opened {
        Err(_) if made.is_none() || dir_identity(&dir) != made => Ok(None),
        r => r.map(Some),
    }
}

/// The identity of directory `dir`, if it exists.
fn dir_identity(dir: &Path) -> Option<Identity> {
    std::fs::symlink_metadata(dir).ok().map(|m| identity(&m))
}

/// Create `worker`'s directory and books if missing (the host side, before
/// the worker's containers mount them); opened, checked and closed, never
/// mapped. They are private when `worker` is this process's private worker
/// (a process that sets its own limits, `reports::caller_worker`).
pub(super) fn ensure(worker: &str) -> Res<()> {
    if open(worker, None)?.is_some() {
        return Ok(());
    }
    let private = worker_of(my_pid()).is_ok_and(|(w, p)| p && w == worker);
    open(worker, Some(private)).map(drop)
}

/// How many times a process opens books again that were removed while it
/// opened them: each time a removal must have run in between, which takes
/// the host longer than an open, so this bound is never reached unless the
/// directory keeps being replaced by something else.
const REOPENS: usize = 64;

/// Open and map this process's own books (`file::open_shared`), holding
/// their users lock, and keep their descriptor (`owner::adopt`).
pub(super) fn open_own() -> Res<&'static Layout> {
    let (worker, private) = worker_of(my_pid())?;
    for _ in 0..REOPENS {
        // None: the directory was removed meanwhile (the host ended the
        // worker, or a private worker's unused books): open it anew, to
        // join the books that are there now or make the new worker's.
        let Some((file, path)) = open(&worker, Some(private))? else {
            continue;
        };
        owner::hold_users(std::os::fd::AsRawFd::as_raw_fd(&file))?;
        // Removed before the lock was held: open it anew.
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot stat", &path, e))?;
        let same = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()));
        if !same {
            continue;
        }
        let l = match map::inherited() {
            Some(l) if owner::same_file(&meta) => l,
            _ => map::map(&file, SIZE)?,
        };
        owner::adopt(file, &path)?;
        return Ok(l);
    }
    Err(disappearing(&worker))
}

/// A worker's books: this process's own mapping, or another worker's as
/// this process keeps them (`kept.rs`).
pub(super) enum Books {
    Own(&'static Layout),
    Kept(std::sync::Arc<super::kept::Kept>),
}

impl std::ops::Deref for Books {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        match self {
            Books::Own(l) => l,
            Books::Kept(k) => k,
        }
    }
}

impl Books {
    /// Run `f` on these books; on another worker's, within its budget and
    /// refused if they were cut short meanwhile (`Kept::with`).
    pub(super) fn with<T>(&self, f: impl FnOnce(&Layout) -> Res<T>) -> Res<T> {
        match self {
            Books::Own(l) => f(l),
            Books::Kept(k) => k.with(f),
        }
    }

    /// Whether these books were removed (or replaced) since they were
    /// mapped: another worker's whose path names another file now.
    fn removed(&self) -> bool {
        match self {
            Books::Own(_) => false,
            Books::Kept(k) => k.removed(),
        }
    }
}

/// Run `f` on the books of process `pid`'s worker and the slot there of
/// device `uuid` (named and marked for the process if new).
pub(super) fn on_device_of<T>(
    pid: i32,
    uuid: &str,
    mut f: impl FnMut(&Layout, usize) -> Res<T>,
) -> Res<T> {
    with_books_of_pid(pid, true, |b| f(b, devices::slot_for(b, pid, uuid)?)).map(|(_, t)| t)
}

/// Run `f` on the books of process `pid`'s worker ([`books_of_pid`]), and
/// again on the books there now when these were removed under it (the
/// host ending the worker, or another thread removing a private worker's
/// books while they were unused: a call holds the books from its first
/// lock byte on, `kept::lent_fd`, so `f` had written nothing that counts).
/// Returns the books `f` ran on with its result.
pub(super) fn with_books_of_pid<T>(
    pid: i32,
    cold: bool,
    mut f: impl FnMut(&Layout) -> Res<T>,
) -> Res<(Books, T)> {
    let mut left = REOPENS;
    loop {
        let b = books_of_pid(pid, cold)?;
        left -= 1;
        match b.with(&mut f) {
            Err(_) if left > 0 && b.removed() => {}
            r => return r.map(|t| (b, t)),
        }
    }
}

fn disappearing(worker: &str) -> Error {
    Error::OperationFailed(format!("the books of worker {worker:?} keep disappearing"))
}

/// Whether `pid` is this process's (the remembered slot's pid first: no
/// system call once registered).
#[inline]
pub(super) fn is_own(pid: i32) -> bool {
    OWN_SLOT.load(Relaxed) >> 32 == pid as u32 as u64 || pid == my_pid()
}

/// The books of process `pid`'s worker (created if new); `cold`: this
/// process's own checked for truncation first (`owner::check_size`).
fn books_of_pid(pid: i32, cold: bool) -> Res<Books> {
    if is_own(pid) {
        let l = shared()?;
        if cold {
            owner::check_size()?;
        }
        return Ok(Books::Own(l));
    }
    let (worker, private) = worker_of(pid)?;
    if let Some(b) = own_if_named(&worker)? {
        return Ok(b);
    }
    for _ in 0..REOPENS {
        if let Some(k) = super::kept::books(&worker)? {
            return Ok(Books::Kept(k));
        }
        // Made now; removed meanwhile (see [`with_books_of_pid`]): made again.
        open(&worker, Some(private))?;
    }
    Err(disappearing(&worker))
}

/// The books of `worker`; None when it has none.
pub(super) fn books_of(worker: &str) -> Res<Option<Books>> {
    key_words(worker)?;
    if let Some(b) = own_if_named(worker)? {
        return Ok(Some(b));
    }
    Ok(super::kept::books(worker)?.map(Books::Kept))
}

/// This process's own books, if it has them mapped and they are `worker`'s.
fn own_if_named(worker: &str) -> Res<Option<Books>> {
    Ok(map::published()
        .filter(|l| key_name(&l.header.worker) == worker)
        .map(Books::Own))
}

/// Whether `worker` has books (a client or the host created them).
pub(super) fn exists(worker: &str) -> bool {
    books_path(worker).is_file()
}

/// Whether `worker` is a name `process::private_worker` gives.
pub(super) fn is_private(worker: &str) -> bool {
    worker.strip_prefix("process-").is_some_and(|rest| {
        let mut parts = rest.split('-');
        let ok = parts.next().is_some_and(|ns| ns.parse::<u64>().is_ok())
            && parts
                .next()
                .is_some_and(|pid| pid.parse::<i32>().is_ok_and(|p| p > 0))
            && parts
                .next()
                .is_some_and(|start| start.parse::<u64>().is_ok());
        ok && parts.next().is_none()
    })
}

/// A file's identity: device, inode and birth time (ns; 0 where the file
/// system keeps none). The birth time tells a file from a later one that
/// reuses the inode number (ext4 does at once).
pub(super) type Identity = [u64; 3];

pub(super) fn identity(m: &std::fs::Metadata) -> Identity {
    let born = m
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    [m.dev(), m.ino(), born]
}

/// What [`remove_unused`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unused {
    /// Removed: no live process used the books.
    Removed,
    /// A live process uses the books: left.
    Live,
    /// No books file.
    Missing,
    /// The books are not the file the host recorded (`expect`), or not
    /// whole (cut short, another header): left.
    Replaced,
    /// Unused, but not to be removed yet (`remove_unused_if`).
    Kept,
}

/// Remove a worker's directory if no live process uses its books: none
/// holds their users lock (every client holds it while it lives,
/// `owner.rs`) and no slot is live (a proxy slot's process, or a lock byte
/// held). With `expect`, only books with that identity (device, inode).
pub(super) fn remove_unused(dir: &Path, expect: Option<Identity>) -> Unused {
    remove_unused_if(dir, expect, || true)
}

/// [`remove_unused`] if `due()` says so once the books are found unused
/// (else [`Unused::Kept`]).
pub(super) fn remove_unused_if(
    dir: &Path,
    expect: Option<Identity>,
    due: impl FnOnce() -> bool,
) -> Unused {
    let path = dir.join(FILE_NAME);
    let Ok(Some(file)) = statedir::open(&path, statedir::Create::Never) else {
        return Unused::Missing;
    };
    if let Some(id) = expect {
        // Not the host's file, or not whole: the locks on it say nothing
        // of the processes that use the books the host recorded.
        if file.metadata().ok().as_ref().map(identity) != Some(id)
            || file::validate(&file::BOOKS, &file, &path).is_err()
        {
            return Unused::Replaced;
        }
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    if !map::ofd_lock(fd, owner::users_lock(), true).unwrap_or(false) {
        return Unused::Live; // a process holds it open
    }
    // Checked under the lock: a process that registered meanwhile holds
    // its slot's lock byte, a proxy slot names a live process.
    if any_slot_live(&file) {
        return Unused::Live;
    }
    if !due() {
        return Unused::Kept;
    }
    // Out of the way in one step (an opener finds the whole directory or
    // none), then removed under a name no worker has (`dir_name` never
    // starts with '.').
    let gone = dir.with_file_name(format!(
        ".removing.{}.{}.{}",
        owner::pid_ns(),
        my_pid(),
        map::monotonic_ns()
    ));
    match std::fs::rename(dir, &gone) {
        Ok(()) => {
            // An opener's file creation under way at the rename may still
            // put its temporary file there (`file::create`) while the
            // directory is being emptied: none can start after the
            // rename, so the next try empties it.
            let mut tries = 8;
            while let Err(e) = std::fs::remove_dir_all(&gone) {
                tries -= 1;
                if tries == 0 {
                    skip(&gone, &format!("cannot be removed ({e})"));
                    break;
                }
                std::thread::yield_now();
            }
            Unused::Removed
        }
        Err(e) => {
            skip(dir, &format!("cannot be removed ({e})"));
            Unused::Live
        }
    }
}

/// Whether a process slot of the books `file` is not free and its process
/// may be alive (read word by word with `pread`: the slots ever claimed,
/// untrusted and clamped; a read that fails counts as live).
fn any_slot_live(file: &File) -> bool {
    use std::mem::offset_of;
    let word = |at: usize| {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b, at as u64)
            .map(|()| u64::from_le_bytes(b))
    };
    let Ok(slots) = word(offset_of!(Layout, header) + offset_of!(Header, slots)) else {
        return true;
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    (0..(slots as usize).min(MAX_PROCS)).any(|i| {
        let at = offset_of!(Layout, procs) + i * std::mem::size_of::<Proc>();
        let (Ok(st), Ok(start), Ok(ns), Ok(owned)) = (
            word(at + offset_of!(Proc, state)),
            word(at + offset_of!(Proc, start)),
            word(at + offset_of!(Proc, ns)),
            word(at + offset_of!(Proc, owned)),
        ) else {
            return true;
        };
        if st & 3 == PROC_FREE {
            return false;
        }
        let proxy_alive = st & 3 == PROC_LIVE
            && owned == 0
            && (ns != owner::pid_ns() || alive(word_pid(st), Some(start)));
        proxy_alive || map::ofd_locked(fd, owner::proc_lock(i)).unwrap_or(true)
    })
}

/// Say why a worker's books are left out (a bounded number of times,
/// `logged.rs`).
#[cold]
pub(super) fn skip(path: &Path, why: &str) {
    super::logged::say("leaving out the limiter books at", path, why);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_names_round_trip_and_stay_one_component() {
        for w in [
            "w-1",
            "a.b",
            ".",
            "..",
            ".hidden",
            "a/b",
            "x%y",
            "ünï",
            "process-1-2-3",
        ] {
            let d = dir_name(w);
            assert!(
                !d.contains('/') && d != "." && d != ".." && !d.starts_with('.'),
                "{d}"
            );
            assert_eq!(worker_of_dir(&d).as_deref(), Some(w));
        }
        assert_eq!(worker_of_dir("%2f"), None); // not the canonical spelling
        assert_eq!(worker_of_dir("a%"), None);
    }
}
