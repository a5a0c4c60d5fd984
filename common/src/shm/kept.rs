//! The host's view of other workers' books: kept mapped, kept current by
//! the kernel's notices, so a host call costs what changed, not what exists.
//!
//! A host (the hypervisor) reads every worker's books for its process
//! reports, queries a worker's usage and registers processes in a worker's
//! books (`AddWorkerProcess`). Opening and reading each file on every call,
//! and asking the kernel about every process, made those calls grow with
//! the node: 54 ms for a report of 500 workers. So each process keeps one
//! [`View`]:
//!
//! - **the books, mapped**: each worker's books are mapped once, shared
//!   (read-write where the host may write them), and guarded (`guard.rs`):
//!   a tenant that truncates its books under a host read gets zero pages
//!   there, never a SIGBUS; the call is refused and the books are mapped
//!   afresh at the next. At most [`KEPT_MAX`] at once (past that, another
//!   that no call holds is let go, unmapped at once, to map the next: a
//!   node with more workers' books than that pays mappings again on every
//!   report, and each report still reads every worker's books, one after
//!   the other, [`View::each`]); the descriptor is closed once mapped, and opened
//!   again only for a call that takes a lock byte ([`Kept::with`]), checked
//!   to be the same file.
//! - **the directories, watched** (`events::Notices`, inotify): a worker's
//!   directory created or removed, its books replaced, renamed or cut
//!   short. A call reads the notices (one `read`) and looks again only at
//!   what they name. Where inotify is unavailable or out of watches, the
//!   directory is listed and each file checked on every call instead.
//! - **the processes, watched** (`events::Exits`): a pidfd for each process
//!   a slot names, in one epoll set: a call learns of every exit with one
//!   `epoll_wait`. A slot is looked at again only when its words change
//!   (state, pid namespace, start time, owned flag: a tenant rewriting them
//!   makes the host look again, never trust the new words). Where a pidfd
//!   cannot be had (an old kernel, the descriptor limit: a host should
//!   raise its soft `RLIMIT_NOFILE` to the hard limit, as Go does for every
//!   Go program), the process is checked in `/proc` at each use.
//!
//! What a report may trust of a slot (`reports.rs`) is decided once per
//! slot and process, from `/proc`, and kept with the watch.
//!
//! The view is per process: a forked child finds it made by another pid
//! and starts a new one (the lock is held across `fork()` by this module's
//! fork handlers, so the child finds it free).

use super::events::{self, Exits, Notices};
use super::workers::{dir_name, worker_of_dir, WORKERS_DIR};
use super::*;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Books kept mapped at once by one copy of this code.
pub(super) const KEPT_MAX: usize = 4096;

/// How often a private worker's books that no live process names are
/// checked for removal (they may be held open by a process that has not
/// registered yet).
const UNUSED_CHECK_NS: u64 = 1_000_000_000;

/// One worker's books as the host keeps them.
pub(super) struct Kept {
    books: map::Mapping,
    /// The worker id its directory names, and that name's words.
    pub(super) worker: String,
    pub(super) worker_name: Name,
    pub(super) dir: PathBuf,
    path: PathBuf,
    /// The mapped file (device, inode).
    pub(super) id: (u64, u64),
    /// Why the host may not write these books (opened read-only).
    read_only: Option<String>,
    /// Its directory's inotify watch; None: not watched, checked on every
    /// use.
    wd: Option<i32>,
    /// Its directory changed: checked before the next use.
    stale: AtomicBool,
    serial: u32,
    /// This process's writes to the books (registration, reclamation), one
    /// call at a time: they share one open file description, whose lock
    /// bytes do not exclude this process's own threads. Waited for within
    /// each call's budget.
    ops: budget::Turn,
    /// What the host knows of each slot's process (index: slot).
    watches: Mutex<Vec<Watch>>,
    /// The worker's entry in the limits file, and each device's (hints).
    pub(super) limit_hints: [AtomicUsize; 2],
    /// When a private worker's books were last checked for removal.
    unused_checked_ns: AtomicU64,
    /// The names of the devices its slots used, as last read (index: device).
    device_names: Mutex<Vec<Option<(Name, String)>>>,
}

impl std::ops::Deref for Kept {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        &self.books
    }
}

/// What the host knows of one slot's process.
#[derive(Default)]
pub(super) struct Watch {
    /// The slot's words when looked at: state, pid namespace, start, owned.
    pub(super) seen: [u64; 4],
    /// The process's pid here; 0: none here (another pid namespace this
    /// process cannot see, or gone before it was found).
    pub(super) pid: i32,
    pidfd: Option<events::PidFd>,
    /// It has exited.
    pub(super) dead: bool,
    /// Whether a report may list it (`reports.rs`), once decided.
    pub(super) trusted: Option<bool>,
}

impl Watch {
    /// Whether the process still runs, as far as the host can tell: its
    /// pidfd (exits are read at the start of each call), else `/proc`.
    pub(super) fn alive(&self) -> bool {
        !self.dead && self.pid != 0 && (self.pidfd.is_some() || alive(self.pid, Some(self.seen[2])))
    }

    /// Whether only a probe of the slot's lock byte can tell (no process
    /// found here for it, or no pidfd).
    fn unknown(&self) -> bool {
        self.pid == 0 || (self.pidfd.is_none() && !self.dead)
    }
}

fn words(p: &Proc) -> [u64; 4] {
    [
        p.state.load(Acquire),
        p.ns.load(Relaxed),
        p.start.load(Relaxed),
        p.owned.load(Relaxed),
    ]
}

enum Entry {
    /// Named by the directory, not opened yet.
    New,
    Kept(Arc<Kept>),
    /// No books file in the directory (yet).
    Missing,
    /// Not usable, for this reason (looked at again when the directory
    /// changes).
    Refused(Error),
}

/// The process's view (see the module docs).
pub(super) struct View {
    /// [`FORKS`] when it was made: a forked child makes its own.
    forks: u64,
    /// The workers' directory.
    root: PathBuf,
    notices: Option<Notices>,
    root_wd: Option<i32>,
    /// `names` holds the directory's content, kept current by notices.
    listed: bool,
    names: HashMap<String, Entry>,
    by_wd: HashMap<i32, String>,
    exits: Option<Exits>,
    by_serial: HashMap<u32, String>,
    next_serial: u32,
    kept: usize,
    pub(super) visible: Visible,
    /// Processes registered by `AddWorkerProcess` here: pid → (worker's
    /// directory, slot, device).
    pub(super) added: HashMap<i32, (String, usize, usize)>,
    /// Moves whenever a worker's directory comes, goes or changes: a
    /// caller that keeps the workers it saw walks them all again
    /// (`reports::processes_named`).
    generation: u64,
    /// Workers (ids) whose books a process opened, or one of whose
    /// processes exited, since [`View::take_touched`].
    touched: HashSet<String>,
}

static VIEW: Mutex<Option<View>> = Mutex::new(None);

thread_local! {
    /// The forking thread's hold of [`VIEW`] across `fork()`.
    static HELD: RefCell<Option<MutexGuard<'static, Option<View>>>> = const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let g = VIEW.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(g));
}

extern "C" fn after_fork() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

/// Forks this process is the child of (the view knows it was made by
/// another process without asking for the pid on every call).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_child() {
    FORKS.fetch_add(1, Relaxed);
    after_fork();
}

/// The view, current: made (or made again, in a forked child or for
/// another state directory) and refreshed from the notices.
pub(super) fn view() -> MutexGuard<'static, Option<View>> {
    // Registered before any view is made, by one thread while the others
    // wait (a view made before would be a forked child's too). No `Once`: a
    // fork while another thread is inside one leaves the child waiting on
    // it forever; a child forked while the handlers are being registered
    // has no view yet.
    static HANDLERS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    loop {
        match HANDLERS.compare_exchange(0, 1, AcqRel, Acquire) {
            Ok(_) => {
                map::at_fork(before_fork, after_fork, after_fork_child);
                HANDLERS.store(2, Release);
                break;
            }
            Err(2) => break,
            Err(_) => std::thread::yield_now(),
        }
    }
    let mut g = VIEW.lock().unwrap_or_else(PoisonError::into_inner);
    let root = crate::statedir::path().join(WORKERS_DIR);
    if g.as_ref()
        .is_none_or(|v| v.forks != FORKS.load(Relaxed) || v.root != root)
    {
        *g = Some(View::new(root));
    }
    if let Some(v) = g.as_mut() {
        v.refresh();
    }
    g
}

impl View {
    fn new(root: PathBuf) -> View {
        View {
            forks: FORKS.load(Relaxed),
            root,
            // The test of the fallback (`make host-calls-test`) turns the
            // notices off, as a node without inotify has them.
            notices: if std::env::var_os("ACCELERATOR_TEST_NO_INOTIFY").is_some() {
                None
            } else {
                Notices::new()
            },
            root_wd: None,
            listed: false,
            names: HashMap::new(),
            by_wd: HashMap::new(),
            exits: Exits::new(),
            by_serial: HashMap::new(),
            next_serial: 1,
            kept: 0,
            visible: Visible::default(),
            generation: 0,
            touched: HashSet::new(),
            added: HashMap::new(),
        }
    }

    /// Take in what changed since the last call.
    fn refresh(&mut self) {
        self.visible.fresh = false;
        if let Some(n) = &self.notices {
            let mut created = Vec::new();
            let mut gone = Vec::new();
            let mut changed = Vec::new();
            let mut opened = Vec::new();
            let mut relist = false;
            let root_wd = self.root_wd;
            let whole = n.drain(|ev| {
                if Some(ev.wd) == root_wd {
                    let name = ev.name.to_string_lossy().into_owned();
                    if name.starts_with('.') {
                        // A directory being removed (`workers::remove_unused`).
                    } else if ev.mask
                        & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED)
                        != 0
                    {
                        relist = true;
                    } else if ev.mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                        gone.push(name);
                    } else if ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                        created.push(name);
                    }
                } else if ev.mask & !(libc::IN_OPEN | libc::IN_ISDIR) == 0 {
                    opened.push(ev.wd);
                } else {
                    changed.push((ev.wd, ev.mask & libc::IN_IGNORED != 0));
                }
            });
            for wd in opened {
                if let Some(Entry::Kept(k)) = self.by_wd.get(&wd).and_then(|n| self.names.get(n)) {
                    if !self.touched.contains(&k.worker) {
                        self.touched.insert(k.worker.clone());
                    }
                }
            }
            if !whole || relist || !created.is_empty() || !gone.is_empty() || !changed.is_empty() {
                self.generation += 1;
            }
            if !whole || relist {
                self.listed = false;
                if relist {
                    self.root_wd = None;
                }
                for e in self.names.values() {
                    if let Entry::Kept(k) = e {
                        k.stale.store(true, Relaxed);
                    }
                }
            }
            for name in gone {
                self.forget(&name);
            }
            for name in created {
                // A directory made under the name: whatever was found of
                // it before (books, none, a refusal) is looked at again,
                // also when its removal's notice came first in this read.
                match self.names.get_mut(&name) {
                    Some(Entry::Kept(k)) => k.stale.store(true, Relaxed),
                    Some(e) => *e = Entry::New,
                    None => {
                        self.names.insert(name, Entry::New);
                    }
                }
            }
            for (wd, ignored) in changed {
                let Some(name) = self.by_wd.get(&wd).cloned() else {
                    continue;
                };
                if ignored {
                    self.by_wd.remove(&wd);
                }
                match self.names.get_mut(&name) {
                    Some(Entry::Kept(k)) => k.stale.store(true, Relaxed),
                    Some(e) => *e = Entry::New,
                    None => {}
                }
            }
        }
        if !self.listed {
            self.relist();
        }
        if let Some(x) = &self.exits {
            let names = &self.names;
            let by_serial = &self.by_serial;
            let mut exited = Vec::new();
            x.drain(|token| {
                let (serial, slot) = ((token >> 16) as u32, (token & 0xffff) as usize);
                if let Some(Entry::Kept(k)) = by_serial.get(&serial).and_then(|n| names.get(n)) {
                    if let Some(w) = lock(&k.watches).get_mut(slot) {
                        w.dead = true;
                        w.pidfd = None;
                        exited.push((w.pid, k.worker.clone()));
                    }
                }
            });
            for (pid, worker) in exited {
                self.added.remove(&pid);
                self.touched.insert(worker);
            }
        }
    }

    /// List the workers' directory (watching it first, so nothing created
    /// meanwhile is missed).
    fn relist(&mut self) {
        self.generation += 1;
        if self.root_wd.is_none() {
            if let Some(n) = &self.notices {
                self.root_wd = n.watch(&self.root);
            }
        }
        let Ok(dir) = std::fs::read_dir(&self.root) else {
            return; // no workers yet: listed again next time
        };
        let mut present = std::collections::HashSet::new();
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue; // a directory being removed (`workers::remove_unused`)
            }
            present.insert(name.clone());
            self.names.entry(name).or_insert(Entry::New);
        }
        let gone: Vec<String> = self
            .names
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name);
        }
        self.listed = self.root_wd.is_some();
    }

    fn forget(&mut self, name: &str) {
        self.generation += 1;
        if let Some(Entry::Kept(k)) = self.names.remove(name) {
            // Bounded by the books kept, whoever drains it.
            self.touched.remove(&k.worker);
            self.drop_kept(&k);
        }
    }

    fn drop_kept(&mut self, k: &Kept) {
        self.kept -= 1;
        self.by_serial.remove(&k.serial);
        if let Some(wd) = k.wd {
            self.by_wd.remove(&wd);
        }
        if !self.added.is_empty() {
            let name = dir_name(&k.worker);
            self.added.retain(|_, (n, _, _)| *n != name);
        }
    }

    /// Run `f` on every worker's books (each looked at again if its
    /// directory changed), or the reason they cannot be used, one after
    /// the other: `f` lets each go before the next is mapped, so past
    /// [`KEPT_MAX`] the books mapped for this call let others go at once
    /// (`evict`), and the call sees every worker whatever their number.
    pub(super) fn each(
        &mut self,
        mut f: impl FnMut(&mut View, Result<Arc<Kept>, (PathBuf, String)>),
    ) {
        let mut fresh = Vec::with_capacity(self.names.len());
        let mut look = Vec::new();
        for (n, e) in &self.names {
            match e {
                Entry::Kept(k) if !k.stale.load(Relaxed) && k.wd.is_some() && !k.books.cut() => {
                    fresh.push(k.clone())
                }
                _ => look.push(n.clone()),
            }
        }
        for k in fresh {
            f(self, Ok(k));
        }
        for n in look {
            match self.books(&n) {
                Ok(Some(k)) => f(self, Ok(k)),
                Ok(None) => {}
                Err(e) => {
                    let dir = self.root.join(&n);
                    f(self, Err((dir, e.to_string())))
                }
            }
        }
    }

    /// Moves whenever a worker's directory comes, goes or changes.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The workers whose books a process opened, or one of whose
    /// processes exited, since the last call.
    pub(super) fn take_touched(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.touched)
    }

    /// The workers' directory.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// The books in directory `name` of the workers' directory; None when
    /// there are none.
    pub(super) fn books(&mut self, name: &str) -> Res<Option<Arc<Kept>>> {
        let entry = self.names.get(name);
        if !self.listed && entry.is_none() {
            // Not listed (no notices): a directory made since the listing.
            if self.root.join(name).is_dir() {
                self.names.insert(name.to_string(), Entry::New);
                self.generation += 1;
            }
        }
        match self.names.get(name) {
            None => return Ok(None),
            Some(Entry::Kept(k)) => {
                let fresh = !k.stale.load(Relaxed) && k.wd.is_some();
                if !k.books.cut() && (fresh || k.same_file()) {
                    k.stale.store(false, Relaxed);
                    return Ok(Some(k.clone()));
                }
            }
            Some(Entry::Missing) if self.listed => return Ok(None),
            Some(Entry::Refused(e)) if self.listed => return Err(e.clone()),
            _ => {}
        }
        self.forget(name);
        let opened = self.open(name);
        let entry = match &opened {
            Ok(Some(k)) => Entry::Kept(k.clone()),
            Ok(None) => Entry::Missing,
            // This process's own shortage (no free guarded range), not
            // the books': looked at again at the next use.
            Err(Error::ResourceExhausted(_)) => Entry::New,
            Err(e) => Entry::Refused(e.clone()),
        };
        self.names.insert(name.to_string(), entry);
        opened
    }

    /// Map the books in directory `name` (watching the directory first).
    fn open(&mut self, name: &str) -> Res<Option<Arc<Kept>>> {
        let dir = self.root.join(name);
        let Some(worker) = worker_of_dir(name) else {
            return Err(Error::OperationFailed(format!(
                "{} is not a worker's directory",
                dir.display()
            )));
        };
        let wd = self.notices.as_ref().and_then(|n| n.watch(&dir));
        if let Some(wd) = wd {
            self.by_wd.insert(wd, name.to_string());
        }
        let (file, path, read_only) = match workers::open(&worker, None) {
            Ok(Some((f, p))) => (f, p, None),
            Ok(None) => return Ok(None),
            // The host may read what it may not write (a file of another
            // user): reports only.
            Err(e) => match file::open_kind_read(&file::BOOKS, &dir)? {
                Some((f, p)) => (f, p, Some(e.to_string())),
                None => return Ok(None),
            },
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot stat", &path, e))?;
        if self.kept >= KEPT_MAX {
            self.evict(name);
        }
        // No guarded range free: mappings this view let go that calls in
        // flight still hold (`Arc`), and others'; let one more of its own go.
        let books = loop {
            match map::Mapping::new(&file, read_only.is_none()) {
                Err(Error::ResourceExhausted(_)) if self.evict(name) => {}
                r => break r?,
            }
        };
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1).max(1);
        self.by_serial.insert(serial, name.to_string());
        self.kept += 1;
        let worker_name = key_words(&worker)?;
        Ok(Some(Arc::new(Kept {
            books,
            worker,
            worker_name,
            dir,
            path,
            id: (meta.dev(), meta.ino()),
            read_only,
            wd,
            stale: AtomicBool::new(false),
            serial,
            ops: budget::Turn::new(),
            watches: Mutex::new(Vec::new()),
            limit_hints: [AtomicUsize::new(usize::MAX), AtomicUsize::new(usize::MAX)],
            unused_checked_ns: AtomicU64::new(0),
            device_names: Mutex::new(vec![None; MAX_DEVICES]),
        })))
    }

    /// Let one kept mapping other than `keep` go (the table is full): one
    /// that no call holds, so that it is unmapped (and its guarded range
    /// free) at once, else any. False: none to let go.
    fn evict(&mut self, keep: &str) -> bool {
        let mut any = None;
        for (n, e) in &self.names {
            if let Entry::Kept(k) = e {
                if n.as_str() == keep {
                    continue;
                }
                if Arc::strong_count(k) == 1 {
                    any = Some(n);
                    break;
                }
                any = any.or(Some(n));
            }
        }
        let Some(n) = any.cloned() else {
            return false;
        };
        self.forget(&n);
        self.names.insert(n, Entry::New);
        true
    }

    /// Bring `k`'s watches up to date with its slots: a slot whose words
    /// changed is looked at again (its process found here, a pidfd opened).
    pub(super) fn update(&mut self, k: &Kept) {
        let claimed = k.claimed();
        let mut ws = lock(&k.watches);
        if ws.len() < claimed.len() {
            ws.resize_with(claimed.len(), Watch::default);
        }
        for (i, p) in claimed.iter().enumerate() {
            let seen = words(p);
            // A live slot whose process was not found (yet: a scan of /proc
            // made just before it started) is looked for again.
            let unfound = seen[0] & 3 == PROC_LIVE && ws[i].pid == 0 && !ws[i].dead;
            if ws[i].seen == seen && !unfound {
                continue;
            }
            let again = unfound && ws[i].seen == seen;
            ws[i] = Watch {
                seen,
                ..Watch::default()
            };
            if seen[0] & 3 != PROC_LIVE {
                continue;
            }
            let Some(pid) = self.visible.pid(seen[1], word_pid(seen[0]), seen[2], again) else {
                // Of this pid namespace: no such process (any more).
                ws[i].dead = seen[1] == owner::pid_ns();
                continue;
            };
            ws[i].pid = pid;
            // The pidfd first, then the start time again: a pidfd of the
            // process with that start time, or the slot's process is gone.
            match events::pidfd(pid) {
                Ok(fd) => {
                    if !alive(pid, Some(seen[2])) || events::exited(&fd) {
                        ws[i].dead = true;
                    } else if self
                        .exits
                        .as_ref()
                        .is_some_and(|x| x.add(&fd, u64::from(k.serial) << 16 | i as u64))
                    {
                        ws[i].pidfd = Some(fd);
                    }
                }
                Err(_) => {
                    if !alive(pid, Some(seen[2])) {
                        ws[i].dead = true;
                    }
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Kept {
    /// Whether the books' path still names the mapped file, whole.
    fn same_file(&self) -> bool {
        std::fs::metadata(&self.path)
            .is_ok_and(|m| (m.dev(), m.ino()) == self.id && m.len() >= SIZE as u64)
    }

    /// Whether the books' path no longer names the mapped file (removed or
    /// replaced since they were mapped): looked at again at the next use.
    pub(super) fn removed(&self) -> bool {
        let gone = !std::fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id);
        if gone {
            self.stale.store(true, Relaxed);
        }
        gone
    }

    /// The watches of the slots ever claimed ([`View::update`] first).
    pub(super) fn watches(&self) -> MutexGuard<'_, Vec<Watch>> {
        lock(&self.watches)
    }

    /// The name of device `d` of these books and its words, if it has one
    /// (read from the books once, and again when its words change).
    pub(super) fn device(&self, d: usize) -> Option<(Name, String)> {
        let key = self.devices.get(d)?;
        if key.state.load(Acquire) != KEY_READY {
            return None;
        }
        let mut names = lock(&self.device_names);
        let slot = names.get_mut(d)?;
        match slot {
            Some((n, s)) if key_is(key, n) => Some((*n, s.clone())),
            _ => {
                let n = key_words_of(key);
                let s = key_name(key);
                *slot = Some((n, s.clone()));
                Some((n, s))
            }
        }
    }

    /// Whether a private worker's books are due for a removal check.
    pub(super) fn unused_check_due(&self) -> bool {
        let now = map::monotonic_ns();
        let last = self.unused_checked_ns.load(Relaxed);
        now.saturating_sub(last) >= UNUSED_CHECK_NS
            && self
                .unused_checked_ns
                .compare_exchange(last, now, AcqRel, Relaxed)
                .is_ok()
    }

    /// Run `f` on these books, one such call of this process at a time,
    /// within the budget (`budget.rs`, the wait for its turn included); a
    /// lock byte it takes is taken on a
    /// descriptor opened for the call ([`lent_fd`]) and let go with it.
    /// Refused when the books were cut short meanwhile.
    pub(super) fn with<T>(&self, f: impl FnOnce(&Layout) -> Res<T>) -> Res<T> {
        if let Some(why) = &self.read_only {
            return Err(Error::OperationFailed(format!(
                "the limiter books of worker {:?} cannot be written by this process: {why}",
                self.worker
            )));
        }
        let r = budget::within(|| {
            let _one = self.ops.take();
            let _lent = Lending::start(self);
            f(self)
        });
        if self.books.cut() {
            self.stale.store(true, Relaxed);
            return Err(Error::OperationFailed(format!(
                "the limiter books of worker {:?} were truncated under this call; refused",
                self.worker
            )));
        }
        r
    }

    /// Reclaim the slots whose process the host saw exit, or cannot watch
    /// (and those left mid-claim or mid-reclaim): the rest are alive. Inside
    /// [`Kept::with`].
    pub(super) fn sweep_exited(&self, l: &Layout) -> usize {
        let todo: Vec<usize> = {
            let ws = lock(&self.watches);
            l.claimed()
                .iter()
                .enumerate()
                .filter(|(i, p)| {
                    let st = p.state.load(Acquire) & 3;
                    st != PROC_FREE
                        && (st != PROC_LIVE || ws.get(*i).is_none_or(|w| w.dead || w.unknown()))
                })
                .map(|(i, _)| i)
                .collect()
        };
        todo.into_iter().filter(|&i| reclaim(l, i)).count()
    }
}

/// The books a call on this thread runs on ([`Kept::with`]), and the
/// descriptor opened for its lock bytes, if one was needed.
struct Lending {
    addr: usize,
    path: PathBuf,
    id: (u64, u64),
    file: Option<File>,
}

thread_local! {
    static LENT: RefCell<Option<Lending>> = const { RefCell::new(None) };
}

/// Ends the lending (closing its descriptor, which lets go of every lock
/// byte the call took on it) when dropped.
struct LendGuard(Option<Lending>);

impl Lending {
    fn start(k: &Kept) -> LendGuard {
        let new = Lending {
            addr: std::ptr::from_ref::<Layout>(k) as usize,
            path: k.path.clone(),
            id: k.id,
            file: None,
        };
        LendGuard(
            LENT.try_with(|l| l.borrow_mut().replace(new))
                .ok()
                .flatten(),
        )
    }
}

impl Drop for LendGuard {
    fn drop(&mut self) {
        let outer = self.0.take();
        let _ = LENT.try_with(|l| *l.borrow_mut() = outer);
    }
}

/// The descriptor of the books `l` lent to this thread's call, opened on
/// first use and checked to be the mapped file.
pub(super) fn lent_fd(l: &Layout) -> Res<i32> {
    let addr = std::ptr::from_ref(l) as usize;
    LENT.try_with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(lent) = cell.as_mut().filter(|x| x.addr == addr) else {
            return Err(Error::Internal(
                "another worker's books used outside a call on them".into(),
            ));
        };
        if let Some(f) = &lent.file {
            return Ok(f.as_raw_fd());
        }
        let replaced = || {
            Error::OperationFailed(format!(
                "limiter state file {} was removed or replaced under this call; refused",
                lent.path.display()
            ))
        };
        let f = crate::statedir::open(&lent.path, crate::statedir::Create::Never)?
            .ok_or_else(replaced)?;
        let m = f
            .metadata()
            .map_err(|e| Error::io("cannot stat", &lent.path, e))?;
        if (m.dev(), m.ino()) != lent.id {
            return Err(replaced());
        }
        let fd = f.as_raw_fd();
        // The call uses the books from here on, as a client does (the
        // users lock's read side, let go with the descriptor): a removal
        // (`workers::remove_unused`, which holds the write side while it
        // looks) leaves them; one that took them first has renamed them
        // away. Waited for within the budget: a tenant may hold it too.
        while !map::ofd_read_lock(fd, owner::users_lock())
            .map_err(|e| Error::io("cannot lock", &lent.path, e))?
        {
            budget::check();
            std::thread::yield_now();
        }
        if !std::fs::metadata(&lent.path).is_ok_and(|m| (m.dev(), m.ino()) == lent.id) {
            return Err(replaced());
        }
        lent.file = Some(f);
        Ok(fd)
    })
    .unwrap_or_else(|_| Err(Error::Internal("thread is exiting".into())))
}

/// The books of `worker` (None when it has none), looked at as
/// [`View::books`] does, their watches current.
pub(super) fn books(worker: &str) -> Res<Option<Arc<Kept>>> {
    let mut g = view();
    let v = g
        .as_mut()
        .ok_or_else(|| Error::Internal("no view".into()))?;
    let k = v.books(&dir_name(worker))?;
    if let Some(k) = &k {
        v.update(k);
    }
    Ok(k)
}

/// Whether process `pid` (a pid here, not this process) is registered on
/// device `uuid` as [`remember_added`] recorded: its slot still names it
/// (the same words), it has not exited, and the slot has used that device.
/// A few loads, and the notices' two reads.
pub(super) fn added(pid: i32, uuid: &str) -> bool {
    let mut g = view();
    let Some(v) = g.as_mut() else {
        return false;
    };
    let Some((name, i, d)) = v.added.get(&pid).cloned() else {
        return false;
    };
    let still = match v.books(&name) {
        Ok(Some(k)) => {
            let p = k.claimed().get(i);
            let ws = k.watches();
            ws.get(i).zip(p).is_some_and(|(w, p)| {
                w.pid == pid
                    && w.seen == words(p)
                    && w.alive()
                    && p.devmask.load(Acquire) & 1 << d != 0
                    && k.devices[d].state.load(Acquire) == KEY_READY
                    && key_words(uuid).is_ok_and(|n| key_is(&k.devices[d], &n))
            })
        }
        _ => false,
    };
    if !still {
        v.added.remove(&pid);
    }
    still
}

/// Remember that process `pid` is registered in `k` on device slot `d`
/// (for [`added`]), if the host watches it.
pub(super) fn remember_added(k: &Kept, pid: i32, d: usize) {
    let mut g = view();
    let Some(v) = g.as_mut() else {
        return;
    };
    v.update(k);
    let slot = k
        .watches()
        .iter()
        .position(|w| w.pid == pid && w.pidfd.is_some() && !w.dead);
    if let Some(i) = slot {
        v.added.insert(pid, (dir_name(&k.worker), i, d));
    }
}

/// Pids of the caller's pid namespace, checked, and of other pid
/// namespaces as the caller's namespace sees them, from
/// `/proc/<pid>/status` (`NSpid`: the pid in each namespace from the
/// caller's down to the process's own) and `/proc/<pid>/ns/pid`. The scan
/// is kept, and made again at most once per call, when a slot names a
/// process it does not know. Either way a slot's process is found only if
/// a process of its pid namespace, pid and start time exists: the books
/// are a tenant's to write, and must not name another's process (or the
/// host's) as theirs.
#[derive(Default)]
pub(super) struct Visible {
    /// (namespace, pid in it, start time) → pid here.
    map: HashMap<(u64, i32, u64), i32>,
    /// Scanned during this call.
    fresh: bool,
    /// When it was last scanned (CLOCK_MONOTONIC ns).
    scanned_ns: u64,
}

/// How often `/proc` is scanned at most for processes of other pid
/// namespaces that slots name and the last scan did not find.
const RESCAN_NS: u64 = 50_000_000;

impl Visible {
    /// `again`: the slot was looked for before and not found (its retries
    /// scan at most every [`RESCAN_NS`]; a slot seen for the first time may
    /// scan at once).
    pub(super) fn pid(&mut self, ns: u64, pid: i32, start: u64, again: bool) -> Option<i32> {
        if ns == owner::pid_ns() {
            return (same_namespace(pid, ns) && alive(pid, Some(start))).then_some(pid);
        }
        if let Some(&here) = self.map.get(&(ns, pid, start)) {
            return Some(here);
        }
        // At most one scan per call, and retries at most every
        // [`RESCAN_NS`]: a slot naming a process this process cannot see (a
        // forged one, or the caller in a container) must not make every
        // call scan `/proc`.
        let now = map::monotonic_ns();
        if self.fresh || (again && now.saturating_sub(self.scanned_ns) < RESCAN_NS) {
            return None;
        }
        self.map = scan_proc();
        self.fresh = true;
        self.scanned_ns = now;
        self.map.get(&(ns, pid, start)).copied()
    }
}

/// Whether process `pid` (of the caller's pid namespace) is of namespace `ns`.
fn same_namespace(pid: i32, ns: u64) -> bool {
    pid == my_pid() || std::fs::metadata(format!("/proc/{pid}/ns/pid")).is_ok_and(|m| m.ino() == ns)
}

fn scan_proc() -> HashMap<(u64, i32, u64), i32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(here) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let (Some((ns, inner)), Some((_, start))) =
            (workers::own_namespace_pid(here), proc_stat(here))
        {
            map.insert((ns, inner, start), here);
        }
    }
    map
}
