//! The host's compute sampler: measured utilization steers each limited
//! worker's refill rate (docs/compute.md, "The closed loop").
//!
//! One thread in a host process's libaccelerator, started by `AccelInit`
//! (ABI v2) or, for a v1 consumer that never calls it, by the process's
//! first compute hard limit; `AccelShutdown` stops and joins it (after
//! which a limit starts none: the process asked for no threads). Loading
//! the library starts nothing. The thread pins the library (`dlclose`
//! without shutdown never unmaps its code) and runs only where the vendor
//! measures per-process utilization (nvidia; the stub and ascend answer
//! NOT_SUPPORTED, and no thread starts).
//!
//! Of the host processes whose samplers run, one measures: the holder of the
//! node's sampler lease (`shm::take_sampler_lease`: an OFD lock on a
//! host-only file). The others try every [`PERIOD`] and take over within
//! one when the holder dies. Every [`PERIOD`] the holder, for each device
//! with a compute-limited worker:
//! - reads the per-process SM utilization samples newer than its last
//!   (NVML's `nvmlDeviceGetProcessUtilization` with the last-seen
//!   timestamp), which name host pids;
//! - names each pid's worker from the limiter's books (`shm::processes`,
//!   which maps a container's (pid namespace, pid, start time) to the host
//!   pid), sums per worker the mean of each of its pids' samples;
//! - moves each limited worker's gain with `shm::next_gain` and stores it,
//!   with the time, in the worker's row of the limits file.
//!
//! On a saturated device the controller reads each worker's utilization
//! at its refill (`shm::steady_utilization`: utilization per token granted,
//! the tokens from the books' per-process counters), since a device that
//! holds the worker hides how far over its limit it is. A worker that left
//! most of its tokens unused over the period (under [`BUSY_SHARE`] of its
//! refill) is idle: it is not held by its bucket, and is never raised. A period without any
//! sample on any limited device (nothing ran, or the first call) reads no
//! books: it marks the workers the last books read named there measured,
//! their gains unchanged (one pass over the limits file), so the sampler's
//! work follows active workers, not registered ones (docs/scale.md). The vendor's errors are logged once per minute
//! with a count; the workers go unmeasured and the hook's policy applies.

use crate::log::log_at;
use crate::select::vendor;
use crate::vendor::Vendor;
use accel_common::{shm, Error};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(100);
/// A worker granted less than this share of its refill over a period is idle.
const BUSY_SHARE: f64 = 0.8;
const ERROR_EVERY: Duration = Duration::from_secs(60);

/// The running thread, with the pid that started it and its own stop flag
/// (a thread's flag is never reused: a sampler started after a stop, or in
/// a forked child, cannot inherit a stale one).
struct Running {
    pid: u32,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// Held only for short steps that never wait on anything else (no join,
/// no vendor call, no fork-handler registration), and around every
/// `fork()` by [`hold_for_fork`], so a child never copies it held by a
/// thread it does not have. (`std`'s mutex: unlocking it in the child is a
/// store and at most a futex wake, no shared table of waiters.)
static THREAD: Mutex<Option<Running>> = Mutex::new(None);
/// `AccelShutdown` was called: a limit starts no sampler from then on.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The forking thread's hold on [`THREAD`] across `fork()`.
    static FORK_HOLD: RefCell<Option<MutexGuard<'static, Option<Running>>>> =
        const { RefCell::new(None) };
}

/// `AccelInit`: start the sampler if the vendor measures processes.
pub fn start() {
    SHUT_DOWN.store(false, Relaxed);
    ensure_running();
}

/// After a compute hard limit set by this (host) process: start the
/// sampler unless the process shut it down.
pub fn start_for_limit() {
    if !SHUT_DOWN.load(Relaxed) {
        ensure_running();
    }
}

/// `AccelShutdown`: stop and join the thread; the lease is given up. The
/// join runs outside the lock (a `fork()` meanwhile gives a child with no
/// sampler and a free lock).
pub fn stop() {
    SHUT_DOWN.store(true, Relaxed);
    install_fork_handlers();
    let Some(r) = slot().take() else {
        return;
    };
    if r.pid != std::process::id() {
        // A forked child's copy of its parent's handle: no such thread here.
        std::mem::forget(r);
        return;
    }
    r.stop.store(true, Release);
    r.handle.thread().unpark();
    let _ = r.handle.join();
}

fn ensure_running() {
    install_fork_handlers();
    if running_here(&mut slot()) {
        return;
    }
    // The vendor is asked without the lock (its first use may register
    // fork handlers, which waits for any fork in progress).
    let Ok(v) = vendor() else {
        return;
    };
    if !measures(v) {
        return;
    }
    crate::abi::boundary::pin_library();
    let mut slot = slot();
    if running_here(&mut slot) {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    match std::thread::Builder::new()
        .name("accel-sampler".into())
        .spawn(move || run(&flag))
    {
        Ok(handle) => {
            *slot = Some(Running {
                pid: std::process::id(),
                stop,
                handle,
            })
        }
        Err(e) => log_at!(Error, "compute sampler: cannot start its thread: {e}"),
    }
}

fn slot() -> MutexGuard<'static, Option<Running>> {
    THREAD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether this process's sampler runs; a parent's handle copied by
/// `fork()` (no such thread here) is dropped.
fn running_here(slot: &mut Option<Running>) -> bool {
    match slot {
        Some(r) if r.pid == std::process::id() => true,
        Some(_) => {
            std::mem::forget(slot.take());
            false
        }
        None => false,
    }
}

/// Before each use of [`THREAD`]: hold it around every
/// `fork()`. No `Once` (a fork while it ran would leave the child blocked
/// on it): two threads may both register, and the handlers are idempotent
/// (a thread holds the lock at most once).
fn install_fork_handlers() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if !DONE.load(Acquire) {
        crate::abi::boundary::at_fork(hold_for_fork, release_after_fork);
        DONE.store(true, Release);
    }
}

extern "C" fn hold_for_fork() {
    let _ = FORK_HOLD.try_with(|h| {
        let mut h = h.borrow_mut();
        if h.is_none() {
            *h = Some(slot());
        }
    });
}

/// In the parent and in the child after `fork()`: release the hold.
extern "C" fn release_after_fork() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

/// Whether the vendor measures per-process utilization (asked of its first
/// device; a vendor without devices has nothing to measure).
fn measures(v: &dyn Vendor) -> bool {
    let Some(first) = v.devices().ok().and_then(|d| d.into_iter().next()) else {
        return false;
    };
    !matches!(
        v.process_utilization(&first.uuid, u64::MAX),
        Err(Error::NotSupported(_))
    )
}

/// Sleep for `d` unless stopped (`stop` set, then an unpark); true: stop.
fn stopped_after(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if stop.load(Acquire) {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::park_timeout(left);
    }
}

fn run(stop: &AtomicBool) {
    let mut s = Sampler::default();
    let mut lease_told = false;
    while !stopped_after(stop, PERIOD) {
        match shm::take_sampler_lease() {
            Ok(true) => s.sample(),
            Ok(false) => s.standby(),
            Err(e) if !lease_told => {
                lease_told = true;
                log_at!(Warn, "compute sampler: not measuring ({e})");
            }
            Err(_) => {}
        }
    }
    shm::drop_sampler_lease();
}

#[derive(Default)]
struct Sampler {
    /// Per device: the newest sample timestamp seen.
    since: HashMap<String, u64>,
    /// Tokens granted so far per (process, device), from the last period.
    tokens: HashMap<(u64, i32, u64, String), u64>,
    last: Option<Instant>,
    /// (worker, device) pairs with a live process in the last books read.
    seen: HashSet<(String, String)>,
    /// Vendor errors: when last reported, how many since.
    error_told: Option<Instant>,
    errors: u64,
}

/// What the books say of a worker on a device over the period.
#[derive(Default)]
struct Seen {
    pids: Vec<u32>,
    granted: u64,
}

impl Sampler {
    /// Another process holds the lease: start afresh when taking it over.
    fn standby(&mut self) {
        self.since.clear();
        self.tokens.clear();
        self.seen.clear();
        self.last = None;
    }

    /// A period without any sample on any limited device: nothing ran, so
    /// the workers the books last named there are measured with their gains
    /// unchanged, without reading the books (one pass over the limits
    /// file). Their processes' tokens are read again when something runs.
    fn idle(&mut self, measured: &HashMap<String, Vec<crate::vendor::UtilizationSample>>) {
        self.seen.retain(|(_, uuid)| measured.contains_key(uuid));
        let _ = shm::mark_measured(&self.seen);
    }

    fn sample(&mut self) {
        let Ok(v) = vendor() else {
            return;
        };
        let limits = shm::limits().unwrap_or_default();
        let mut limited: HashMap<String, Vec<(String, u64)>> = HashMap::new();
        for e in limits {
            if let Some(p) = e.compute_percent {
                limited
                    .entry(e.device_uuid)
                    .or_default()
                    .push((e.worker, p.into()));
            }
        }
        if limited.is_empty() {
            return self.standby();
        }
        // The vendor's samples first: the books are read only when some
        // process ran on a limited device, so idle workers cost nothing
        // per worker but one word each (their measured time).
        let mut samples_of = HashMap::new();
        for uuid in limited.keys() {
            let since = self.since.get(uuid).copied().unwrap_or(0);
            match v.process_utilization(uuid, since) {
                Ok(samples) => {
                    let next = samples.iter().map(|s| s.timestamp).max().unwrap_or(since);
                    self.since.insert(uuid.clone(), next.max(since));
                    samples_of.insert(uuid.clone(), samples);
                }
                Err(Error::NotSupported(_)) => {}
                Err(e) => self.failed(uuid, &e),
            }
        }
        if samples_of.values().all(Vec::is_empty) {
            return self.idle(&samples_of);
        }
        // Since the last period that read the books: the tokens granted
        // meanwhile are counted against the refill of the whole span.
        let now = Instant::now();
        let elapsed = self.last.replace(now).map(|t| now - t);
        let seen = self.books(&limited);
        self.seen = seen.keys().cloned().collect();
        for (uuid, workers) in &limited {
            let Some(samples) = samples_of.remove(uuid) else {
                continue;
            };
            // Per pid, the mean of its samples.
            let mut per_pid: HashMap<u32, (f64, f64)> = HashMap::new();
            for s in &samples {
                let e = per_pid.entry(s.pid).or_default();
                *e = (e.0 + f64::from(s.sm_percent), e.1 + 1.0);
            }
            let device: f64 = per_pid.values().map(|(sum, n)| sum / n).sum();
            for (worker, percent) in workers {
                // Only a worker with a process the books name on the device
                // is measured; the others stay unmeasured (the hook's policy
                // applies) rather than read as idle and wound up.
                let Some(w) = seen.get(&(worker.clone(), uuid.clone())) else {
                    continue;
                };
                let Ok(Some(gain)) = shm::gain_of(worker, uuid) else {
                    continue;
                };
                let next = if samples.is_empty() {
                    gain
                } else {
                    let measured: f64 = w
                        .pids
                        .iter()
                        .filter_map(|p| per_pid.get(p))
                        .map(|(sum, n)| sum / n)
                        .sum();
                    let refill = elapsed.map_or(0.0, |e| *percent as f64 * 1e7 * e.as_secs_f64());
                    let granted = w.granted as f64;
                    let steady = shm::steady_utilization(measured, granted, refill, device);
                    let idle = granted < BUSY_SHARE * refill;
                    let n = shm::next_gain(gain, *percent, steady, idle);
                    log_at!(
                        Trace,
                        "sampler {worker} {uuid}: measured {measured:.1} (at the refill {steady:.1}) \
                         granted/refill {:.2} gain {gain} -> {n}",
                        granted / refill.max(1.0)
                    );
                    n
                };
                let _ = shm::set_gain(worker, uuid, next);
            }
        }
    }

    /// The live processes of limited workers on the limited devices, by
    /// (worker, device): their host pids and the tokens granted to them
    /// since the last period (all of a process's new to this sampler).
    fn books(
        &mut self,
        limited: &HashMap<String, Vec<(String, u64)>>,
    ) -> HashMap<(String, String), Seen> {
        let mut seen: HashMap<(String, String), Seen> = HashMap::new();
        let mut tokens = HashMap::new();
        for p in shm::processes().unwrap_or_default() {
            let limited_here = limited
                .get(&p.device_uuid)
                .is_some_and(|ws| ws.iter().any(|(w, _)| *w == p.worker));
            if !limited_here {
                continue;
            }
            let key = (
                p.pid_namespace,
                p.namespace_pid,
                p.start_time,
                p.device_uuid.clone(),
            );
            let before = self.tokens.get(&key).copied().unwrap_or(0);
            tokens.insert(key, p.compute_tokens);
            let s = seen.entry((p.worker, p.device_uuid)).or_default();
            s.pids.push(p.pid as u32);
            s.granted += p.compute_tokens.saturating_sub(before);
        }
        self.tokens = tokens;
        seen
    }

    fn failed(&mut self, uuid: &str, e: &Error) {
        self.errors += 1;
        if self.error_told.is_some_and(|t| t.elapsed() < ERROR_EVERY) {
            return;
        }
        log_at!(
            Error,
            "compute sampler: cannot measure utilization on {uuid}: {e} ({} failure(s) in the last minute; next report in 60 s)",
            self.errors
        );
        self.error_told = Some(Instant::now());
        self.errors = 0;
    }
}
