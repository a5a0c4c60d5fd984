//! Limits and reports, for libaccelerator and its vendors.

use super::*;
use std::collections::HashSet;

pub(super) fn set_once(
    word: &AtomicU64,
    value: u64,
    what: &str,
    worker: &str,
    uuid: &str,
) -> Res<()> {
    match word.compare_exchange(0, value, AcqRel, Acquire) {
        Ok(_) => Ok(()),
        Err(v) if v == value => Ok(()),
        Err(v) => Err(Error::OperationFailed(format!(
            "{what} limit of worker {worker:?} on {uuid:?} is already {v} (hard limits are one-time)"
        ))),
    }
}

/// Set a worker's memory limit on a device (one-time; the same value
/// again is fine), in the host-owned limits file (`limits.rs`).
pub fn set_memory_limit(worker: &str, uuid: &str, bytes: u64) -> Res<()> {
    check_memory_limit(bytes)?;
    key_words(worker)?;
    key_words(uuid)?;
    limits::set_limit(worker, uuid, bytes, "memory", |r| &r.mem_limit)
}

/// Set a worker's compute limit (percent, 1–100) on a device (one-time).
pub fn set_compute_limit(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    check_compute_limit(percent)?;
    key_words(worker)?;
    key_words(uuid)?;
    limits::set_compute(worker, uuid, percent.into())
}

/// Set the share of a device a worker is guaranteed whenever it wants it
/// (percent, 0..=100; 0 = best-effort), never above its hard limit there.
/// Unlike hard limits, it may be set again.
pub fn set_compute_request(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    if percent > 100 {
        return Err(Error::InvalidParam(format!(
            "compute request {percent}% is outside 0..=100"
        )));
    }
    key_words(worker)?;
    key_words(uuid)?;
    limits::set_request(worker, uuid, percent.into())
}

/// Set a worker's priority (1..=100, higher first; a worker never given
/// one is [`limits::DEFAULT_PRIORITY`]). It may be set again.
pub fn set_worker_priority(worker: &str, priority: u32) -> Res<()> {
    if !(1..=100).contains(&priority) {
        return Err(Error::InvalidParam(format!(
            "priority {priority} is outside 1..=100"
        )));
    }
    key_words(worker)?;
    limits::set_priority(worker, priority.into())
}

/// Cap a worker's queue on a device: each of its processes keeps at most
/// `cap` launches queued or running there (0: no cap). The host's
/// scheduler sets it for the workers whose queue must stay short.
pub fn set_depth_cap(worker: &str, uuid: &str, cap: u32) -> Res<()> {
    key_words(worker)?;
    key_words(uuid)?;
    limits::set_depth_cap(worker, uuid, cap)
}

/// `AccelSetComputeUnitRequest` (ABI v2): as [`set_memory_limit_for_caller`].
pub fn set_compute_request_for_caller(uuid: &str, percent: u32) -> Res<()> {
    set_compute_request(&workers::worker_of(my_pid())?.0, uuid, percent)
}

/// `AccelSetWorkerPriority` (ABI v2): as [`set_memory_limit_for_caller`].
pub fn set_worker_priority_for_caller(priority: u32) -> Res<()> {
    set_worker_priority(&workers::worker_of(my_pid())?.0, priority)
}

/// `AccelSetMemHardLimit` (ABI v2, no worker argument): the limit of the
/// calling process's worker (`ACCELERATOR_WORKER_ID`); without one, of the
/// calling process alone: its private worker (`workers.rs`), named for its
/// pid namespace, pid and start time. One-time, like [`set_memory_limit`].
pub fn set_memory_limit_for_caller(uuid: &str, bytes: u64) -> Res<()> {
    check_memory_limit(bytes)?;
    set_memory_limit(&workers::worker_of(my_pid())?.0, uuid, bytes)
}

/// `AccelSetComputeUnitHardLimit` (ABI v2): as [`set_memory_limit_for_caller`].
pub fn set_compute_limit_for_caller(uuid: &str, percent: u32) -> Res<()> {
    check_compute_limit(percent)?;
    set_compute_limit(&workers::worker_of(my_pid())?.0, uuid, percent)
}

fn check_memory_limit(bytes: u64) -> Res<()> {
    if bytes == 0 || bytes > MAX_BYTES {
        return Err(Error::InvalidParam(format!(
            "memory limit {bytes} is outside 1..={MAX_BYTES}"
        )));
    }
    Ok(())
}

fn check_compute_limit(percent: u32) -> Res<()> {
    if !(1..=100).contains(&percent) {
        return Err(Error::InvalidParam(format!(
            "compute limit {percent}% is outside 1..=100"
        )));
    }
    Ok(())
}

/// One worker's limits on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitEntry {
    pub worker: String,
    pub device_uuid: String,
    pub memory_bytes: Option<u64>,
    pub compute_percent: Option<u32>,
    /// The compute request (`SetComputeUnitRequest`); None: best-effort.
    pub compute_request: Option<u32>,
    /// The worker's priority (1..=100; 50 when never set).
    pub priority: u32,
}

/// Every limit set on the node (from the host-owned limits file).
pub fn limits() -> Res<Vec<LimitEntry>> {
    let mut out = Vec::new();
    limits::each_row(|worker, device_uuid, row, priority| {
        let mem = row.mem_limit.load(Acquire);
        let cu = row.cu_limit.load(Acquire);
        let req = row.request.load(Acquire).min(100);
        if mem != 0 || cu != 0 || req != 0 {
            out.push(LimitEntry {
                worker,
                device_uuid,
                memory_bytes: (mem != 0).then_some(mem),
                compute_percent: (cu != 0).then_some(cu as u32),
                compute_request: (req != 0).then_some(req as u32),
                priority,
            });
        }
    })?;
    Ok(out)
}

/// [`limits`] kept between calls: read again only when the limits file's
/// names or values moved ([`limits::stamp`]), or after [`LIMITS_REREAD`]
/// (hosts of an older version write values without saying so). The host's sampler
/// asks every period: the rows of 500 workers are 500 pages of the file,
/// and reading them each period was a third of its time (docs/scale.md).
#[derive(Default)]
pub struct LimitsList {
    read: Option<((u64, u64), std::time::Instant)>,
    entries: Vec<LimitEntry>,
    /// Lists read so far that differed from the one before.
    reads: u64,
}

/// How long [`LimitsList`] trusts an unmoved stamp: the rows are read
/// again this often for hosts of an older version, whose writes do not
/// move it (reading 500 workers' rows took 2–15 ms of the test machine).
const LIMITS_REREAD: std::time::Duration = std::time::Duration::from_secs(30);

impl LimitsList {
    /// Every limit set on the node, as [`limits`] (empty when the file
    /// cannot be read), and a number that moves when the list does: what a
    /// caller derived from the list holds while it has not.
    pub fn current(&mut self) -> (&[LimitEntry], u64) {
        let Ok(stamp) = limits::stamp() else {
            self.read = None;
            if !self.entries.is_empty() {
                self.entries.clear();
                self.reads += 1;
            }
            return (&self.entries, self.reads);
        };
        let fresh = self
            .read
            .is_some_and(|(s, at)| s == stamp && at.elapsed() < LIMITS_REREAD);
        if !fresh {
            // The stamp read before the rows: a write meanwhile moves it,
            // and the next call reads again.
            let entries = limits().unwrap_or_default();
            if entries != self.entries {
                self.entries = entries;
                self.reads += 1;
            }
            self.read = Some((stamp, std::time::Instant::now()));
        }
        (&self.entries, self.reads)
    }
}

/// One worker's soft-mode words on one device (issue 34), as the host
/// sees them: what it asked for, what the sampler's scheduler grants it,
/// and the device time its live processes have taken, from which a reader
/// measures its share over an interval of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerShare {
    pub worker: String,
    pub device_uuid: String,
    /// Percent; 0: best-effort.
    pub request: u32,
    /// The hard limit, percent; 0: none.
    pub limit: u32,
    pub priority: u32,
    /// Basis points of the device; 0: no grant (the hard limit applies).
    pub granted_bp: u32,
    /// ns of the device its live processes' launches took so far.
    pub used_ns: u64,
}

/// Every worker with a compute request, limit or grant on a device.
pub fn worker_shares() -> Res<Vec<WorkerShare>> {
    let mut out = Vec::new();
    limits::each_row(|worker, device_uuid, row, priority| {
        let request = row.request.load(Acquire).min(100) as u32;
        let limit = row.cu_limit.load(Acquire).min(100) as u32;
        let granted_bp = (row.granted.load(Acquire) as u32).min(limits::RATE_MAX as u32);
        if request != 0 || limit != 0 || granted_bp != 0 {
            out.push(WorkerShare {
                worker,
                device_uuid,
                request,
                limit,
                priority,
                granted_bp,
                used_ns: 0,
            });
        }
    })?;
    if out.is_empty() {
        return Ok(out);
    }
    let mut used: std::collections::HashMap<(String, String), u64> = Default::default();
    for p in processes()? {
        *used.entry((p.worker, p.device_uuid)).or_default() += p.compute_tokens;
    }
    for e in &mut out {
        e.used_ns = used
            .get(&(e.worker.clone(), e.device_uuid.clone()))
            .copied()
            .unwrap_or(0);
    }
    Ok(out)
}

/// What the limiter recorded for one live process on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessUsage {
    /// The pid as the calling process sees it (a host pid, when the caller
    /// is on the host and the process in a container).
    pub pid: i32,
    /// The pid in the process's own pid namespace, and that namespace (the
    /// inode of its `/proc/<pid>/ns/pid`).
    pub namespace_pid: i32,
    pub pid_namespace: u64,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The worker id; empty for a process without `ACCELERATOR_WORKER_ID`
    /// (a private worker).
    pub worker: String,
    pub device_uuid: String,
    /// Bytes the limiter recorded (allocations minus frees).
    pub memory_bytes: u64,
    /// Compute tokens granted so far (1 token = 1 ns of the whole device).
    pub compute_tokens: u64,
    /// The process's launch share in force (`steer::SHARE_ONE` = its
    /// worker's charge; 0: not measured, the same).
    pub compute_share: u32,
}

/// Every live process the limiter knows that the caller can see, one entry
/// per device it used, named by its pid in the caller's pid namespace.
/// Assembled from every worker's books as this process keeps them
/// (`kept.rs`: mapped, guarded, current by the kernel's notices), each
/// checked on its own: books that cannot be used leave that worker out
/// (the reason is logged) and the others in. Dead processes are left out,
/// so the bytes are those of live processes only. A call costs a few loads
/// per live process and what changed since the last call.
///
/// The books are their tenant's to write, so a slot is reported only where
/// the host can tie its process to these books (docs/hypervisor.md, "What
/// a host report trusts"): a process of its pid namespace, pid and start
/// time exists (`kept::Visible`), and either it registered itself and holds
/// these very books open (`/proc/<pid>/fd`, [`holds_open`]), or the slot is
/// a proxy `AddWorkerProcess` made and the process started as this
/// worker's (`workers::started_as`: the environment the host chose the
/// books by); a private worker's books hold its one process alone. This is
/// decided once per slot and process, and again whenever the slot's words
/// change. A slot naming any other process (another worker's, a host
/// daemon) is left out, so it can neither add an entry nor stand beside
/// another worker's. The bytes reported are bounded by the worker's memory
/// limit on the device, when it has one. A process of a pid namespace the
/// caller cannot see (a sibling container's, from inside a container) is
/// left out: it has no pid here. The host sees every container's processes.
pub fn processes() -> Res<Vec<ProcessUsage>> {
    let mut out = Vec::new();
    let mut g = kept::view();
    let Some(view) = g.as_mut() else {
        return Ok(out);
    };
    view.each(|view, k| match k {
        Ok(k) => of_books(view, &k, true, &mut out),
        Err((dir, why)) => workers::skip(&dir, &why),
    });
    Ok(out)
}

/// [`processes`] of the workers `read` names: it is asked of each worker
/// with books (its id, and whether a process opened its books or one of
/// its processes exited since the last call of this or
/// [`processes_named`]: one caller in a process, the sampler), before its
/// books are touched, so that a caller
/// that needs only some of them (the sampler's scheduler, every period:
/// docs/scale.md) pays for those alone. Without `bytes`, each entry's
/// `memory_bytes` is 0, not read: bounding it by the worker's memory
/// limit reads the limits file's page of each worker, which a caller
/// counting tokens alone need not pay. Also returns the generation of the
/// set of workers with books, for [`processes_named`].
pub fn processes_of(
    mut read: impl FnMut(&str, bool) -> bool,
    bytes: bool,
) -> Res<(Vec<ProcessUsage>, u64)> {
    let mut out = Vec::new();
    let mut g = kept::view();
    let Some(view) = g.as_mut() else {
        return Ok((out, 0));
    };
    let touched = view.take_touched();
    view.each(|view, k| match k {
        Ok(k) if read(&k.worker, touched.contains(&k.worker)) => {
            of_books(view, &k, bytes, &mut out)
        }
        Ok(_) => {}
        Err((dir, why)) => workers::skip(&dir, &why),
    });
    Ok((out, view.generation()))
}

/// [`processes_of`] the workers `names` returns (ids) alone, without
/// walking the others: it is given the workers whose books a process
/// opened, or one of whose processes exited, since the last call. None
/// when the set of workers with books moved since `generation` (then
/// [`processes_of`] offers each of them).
pub fn processes_named(
    names: impl FnOnce(HashSet<String>) -> Vec<String>,
    bytes: bool,
    generation: u64,
) -> Res<Option<Vec<ProcessUsage>>> {
    let mut out = Vec::new();
    let mut g = kept::view();
    let Some(view) = g.as_mut() else {
        return Ok(Some(out));
    };
    if view.generation() != generation {
        return Ok(None);
    }
    for name in names(view.take_touched()) {
        let dir = workers::dir_name(&name);
        match view.books(&dir) {
            Ok(Some(k)) => of_books(view, &k, bytes, &mut out),
            Ok(None) => {}
            Err(e) => workers::skip(&view.root().join(&dir), &e.to_string()),
        }
    }
    Ok(Some(out))
}

/// The entries of the books `k` (see [`processes`]).
fn of_books(view: &mut kept::View, k: &kept::Kept, bytes: bool, out: &mut Vec<ProcessUsage>) {
    let h = &k.header;
    let named = h.worker.state.load(Relaxed) == KEY_READY
        && key_is(&h.worker, &k.worker_name)
        && h.private.load(Relaxed) <= 1;
    if !named {
        workers::skip(
            &k.dir,
            &format!("does not name worker {:?} in its header", k.worker),
        );
        return;
    }
    view.update(k);
    // The header is the tenant's to write: a named worker's books that
    // say "private" stay named, never removed.
    let private = h.private.load(Relaxed) == 1 && workers::is_private(&k.worker);
    let worker = if private { "" } else { k.worker.as_str() };
    let claimed = k.claimed();
    let mut ws = k.watches();
    let mut any_live = false;
    for (i, p) in claimed.iter().enumerate() {
        let Some(w) = ws.get_mut(i) else {
            break;
        };
        if w.seen[0] & 3 != PROC_LIVE || !w.alive() {
            continue;
        }
        any_live = true;
        let ok = match w.trusted {
            Some(ok) => ok,
            None => {
                let ok = trusted(k, w, private);
                w.trusted = Some(ok);
                ok
            }
        };
        if ok {
            let mask = p.devmask.load(Acquire);
            report(k, p, w, mask, worker, bytes, out);
        } else {
            forged(k, word_pid(w.seen[0]));
        }
    }
    drop(ws);
    if private && !any_live && k.unused_check_due() {
        workers::remove_unused(&k.dir, None);
    }
}

/// Whether the live process of watch `w` (a slot of `k`) is one these
/// books may hold (see [`processes`]).
fn trusted(k: &kept::Kept, w: &kept::Watch, private: bool) -> bool {
    let [st, ns, start, owned] = w.seen;
    let pid = w.pid;
    // A private worker's books are its one process's; either way the
    // process holds the books open, or the host registered it (a proxy
    // slot) by the environment it started with.
    if private && private_worker(ns, word_pid(st), start) != k.worker {
        return false;
    }
    // This process holds every worker's books open while it reads them: it
    // is in them only if they are its own worker's (as its limiter calls
    // name it: its environment, or its private one).
    if pid == my_pid() {
        return workers::worker_of(pid).is_ok_and(|(w, _)| w == k.worker);
    }
    if owned != 0 {
        holds_open(pid, k.id)
    } else {
        private || workers::started_as(pid, &k.worker)
    }
}

/// Add the entries of slot `p` (watch `w`) on each device of `mask`.
fn report(
    k: &kept::Kept,
    p: &Proc,
    w: &kept::Watch,
    mask: u64,
    worker: &str,
    bytes: bool,
    out: &mut Vec<ProcessUsage>,
) {
    let [st, ns, start, _] = w.seen;
    let mut left = mask;
    while left != 0 {
        let d = left.trailing_zeros() as usize;
        left &= left - 1;
        let Some((name, uuid)) = k.device(d) else {
            continue;
        };
        let bytes = if bytes {
            let limit =
                limits::memory_limit_hinted(&k.worker_name, &name, &k.limit_hints).unwrap_or(0);
            low48(p.held[d].load(Acquire)).min(if limit == 0 { MAX_BYTES } else { limit })
        } else {
            0
        };
        out.push(ProcessUsage {
            pid: w.pid,
            namespace_pid: word_pid(st),
            pid_namespace: ns,
            start_time: start,
            worker: worker.to_string(),
            device_uuid: uuid,
            memory_bytes: bytes,
            compute_tokens: p.tokens[d].load(Relaxed),
            compute_share: p.share[d].load(Relaxed),
        });
    }
}

/// A slot left out of a report: it names a process that is not one its
/// books may hold (a tenant wrote it). Logged only with
/// `ACCELERATOR_LIMITER_DEBUG=1` (as the limiter's own debug lines), and
/// then a bounded number of times (`logged.rs`): a tenant must not fill
/// the host's log.
#[cold]
fn forged(k: &kept::Kept, pid: i32) {
    if std::env::var_os("ACCELERATOR_LIMITER_DEBUG").is_some_and(|v| v == "1") {
        logged::say(
            "the limiter books at",
            &k.dir,
            &format!("name process {pid}, not theirs; left out"),
        );
    }
}

/// The caller's own worker's live processes of the caller's pid namespace
/// that hold memory on device slot `d` (from [`device_slot_for`]): (pid,
/// bytes held there), as the hook's NVML process lists show them inside a
/// worker.
/// `None`: this process has not mapped its books yet (no limiter call).
pub fn own_processes_on(d: usize) -> Option<Vec<(i32, u64)>> {
    let l = map::published()?;
    let bit = 1u64.checked_shl(u32::try_from(d).ok()?)?;
    let ns = owner::pid_ns();
    let mut out = Vec::new();
    for p in l.claimed() {
        let st = p.state.load(Acquire);
        if st & 3 != PROC_LIVE || p.ns.load(Acquire) != ns || p.devmask.load(Acquire) & bit == 0 {
            continue;
        }
        let pid = word_pid(st);
        let bytes = low48(p.held.get(d)?.load(Acquire));
        if bytes > 0 && process::alive(pid, Some(p.start.load(Acquire))) {
            out.push((pid, bytes));
        }
    }
    Some(out)
}
