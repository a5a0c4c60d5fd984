//! Limits and reports, for libaccelerator and its vendors.

use super::*;

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
    limits::set_limit(worker, uuid, percent.into(), "compute", |r| &r.cu_limit)
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
}

fn ready_devices(devices: &[Key]) -> Vec<(usize, String)> {
    devices
        .iter()
        .enumerate()
        .filter(|(_, k)| k.state.load(Acquire) == KEY_READY)
        .map(|(d, k)| (d, key_name(k)))
        .collect()
}

/// Every limit set on the node (from the host-owned limits file).
pub fn limits() -> Res<Vec<LimitEntry>> {
    let mut out = Vec::new();
    limits::each_row(|worker, device_uuid, row| {
        let mem = row.mem_limit.load(Acquire);
        let cu = row.cu_limit.load(Acquire);
        if mem != 0 || cu != 0 {
            out.push(LimitEntry {
                worker,
                device_uuid,
                memory_bytes: (mem != 0).then_some(mem),
                compute_percent: (cu != 0).then_some(cu as u32),
            });
        }
    })?;
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
}

/// Every live process the limiter knows that the caller can see, one entry
/// per device it used, named by its pid in the caller's pid namespace.
/// Assembled from every worker's books, each read from a copy and checked
/// on its own (`workers::each`): books that cannot be used leave that worker
/// out (the reason is logged) and the others in. Dead processes are left
/// out, so the bytes are those of live processes only.
///
/// The books are their tenant's to write, so a slot is reported only where
/// the host can tie its process to these books (docs/hypervisor.md, "What
/// a host report trusts"): a process of its pid namespace, pid and start
/// time exists ([`Visible`]), and either it registered itself and holds
/// these very books open (`/proc/<pid>/fd`, [`holds_open`]), or the slot is
/// a proxy `AddWorkerProcess` made and the process started as this
/// worker's (`workers::started_as`: the environment the host chose the
/// books by); a private worker's books hold its one process alone. A slot
/// naming any other process (another worker's, a host daemon) is left out,
/// so it can neither add an entry nor stand beside another worker's. The
/// bytes reported are bounded by the worker's memory limit on the device,
/// when it has one. A process of a pid namespace the caller cannot see (a
/// sibling container's, from inside a container) is left out: it has no
/// pid here. The host sees every container's processes.
pub fn processes() -> Res<Vec<ProcessUsage>> {
    let mut out = Vec::new();
    let mut visible = Visible::default();
    let mut limits = std::collections::HashMap::new();
    workers::each(|worker, dir_worker, snap| {
        let devices = ready_devices(snap.devices());
        let Some(books) = snap.identity() else {
            return;
        };
        for (i, p) in snap.procs().iter().enumerate() {
            let st = p.state.load(Acquire);
            if !snap.alive(i) {
                continue;
            }
            let (ns, start) = (p.ns.load(Relaxed), p.start.load(Relaxed));
            let Some(pid) = visible.pid(ns, word_pid(st), start) else {
                continue;
            };
            // A private worker's books are its one process's; either way
            // the process holds the books open, or the host registered it
            // (a proxy slot) by the environment it started with.
            let private = worker.is_empty();
            // This process holds every worker's books open while it reads
            // them: it is in them only if they are its own worker's (as its
            // limiter calls name it: its environment, or its private one).
            let theirs = (!private || private_worker(ns, word_pid(st), start) == dir_worker)
                && if pid == my_pid() {
                    workers::worker_of(pid).is_ok_and(|(w, _)| w == dir_worker)
                } else if p.owned.load(Relaxed) != 0 {
                    holds_open(pid, books)
                } else {
                    private || workers::started_as(pid, dir_worker)
                };
            if !theirs {
                forged(dir_worker, word_pid(st));
                continue;
            }
            let mask = p.devmask.load(Acquire);
            for (d, uuid) in &devices {
                if mask & 1 << d != 0 {
                    let limit = *limits
                        .entry((dir_worker.to_string(), uuid.clone()))
                        .or_insert_with(|| limits::memory_limit_of(dir_worker, uuid).unwrap_or(0));
                    let bytes = low48(p.held[*d].load(Acquire)).min(if limit == 0 {
                        MAX_BYTES
                    } else {
                        limit
                    });
                    out.push(ProcessUsage {
                        pid,
                        namespace_pid: word_pid(st),
                        pid_namespace: ns,
                        start_time: start,
                        worker: worker.to_string(),
                        device_uuid: uuid.clone(),
                        memory_bytes: bytes,
                        compute_tokens: p.tokens[*d].load(Relaxed),
                    });
                }
            }
        }
    });
    Ok(out)
}

/// A slot left out of a report: it names a process that is not one its
/// books may hold (a tenant wrote it). Logged only with
/// `ACCELERATOR_LIMITER_DEBUG=1` (as the limiter's own debug lines): a
/// tenant must not fill the host's log.
#[cold]
fn forged(worker: &str, pid: i32) {
    if std::env::var_os("ACCELERATOR_LIMITER_DEBUG").is_some_and(|v| v == "1") {
        eprintln!(
            "accelerator: worker {worker:?}'s books name process {pid}, not theirs; left out"
        );
    }
}

/// Pids of the caller's pid namespace, checked, and of other pid
/// namespaces as the caller's namespace sees them, from
/// `/proc/<pid>/status` (`NSpid`: the pid in each namespace from the
/// caller's down to the process's own) and `/proc/<pid>/ns/pid`, read once
/// per report and only if some process is of another namespace. Either
/// way a slot is reported only if a process of its pid namespace, pid and
/// start time exists: the books are a tenant's to write, and must not list
/// another's process (or the host's) under its worker.
#[derive(Default)]
struct Visible {
    /// (namespace, pid in it, start time) → pid here.
    map: Option<std::collections::HashMap<(u64, i32, u64), i32>>,
}

impl Visible {
    fn pid(&mut self, ns: u64, pid: i32, start: u64) -> Option<i32> {
        if ns == owner::pid_ns() {
            return (same_namespace(pid, ns) && alive(pid, Some(start))).then_some(pid);
        }
        self.map
            .get_or_insert_with(scan_proc)
            .get(&(ns, pid, start))
            .copied()
    }
}

/// Whether process `pid` (of the caller's pid namespace) is of namespace `ns`.
fn same_namespace(pid: i32, ns: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    pid == my_pid() || std::fs::metadata(format!("/proc/{pid}/ns/pid")).is_ok_and(|m| m.ino() == ns)
}

fn scan_proc() -> std::collections::HashMap<(u64, i32, u64), i32> {
    use std::os::unix::fs::MetadataExt;
    let mut map = std::collections::HashMap::new();
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
        let (Ok(ns), Ok(status)) = (
            std::fs::metadata(format!("/proc/{here}/ns/pid")),
            std::fs::read_to_string(format!("/proc/{here}/status")),
        ) else {
            continue;
        };
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_ascii_whitespace().last()?.parse::<i32>().ok());
        if let (Some(inner), Some((_, start))) = (inner, proc_stat(here)) {
            map.insert((ns.ino(), inner, start), here);
        }
    }
    map
}
