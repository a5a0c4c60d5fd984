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
//!   timestamp), which name host pids, and the span they cover;
//! - names each pid's worker from the limiter's books (`shm::processes`,
//!   which maps a container's (pid namespace, pid, start time) to the host
//!   pid), and counts each worker's launches since the device's last
//!   sample: the tokens granted to its processes over the charge in force;
//! - adds the worker's device time (the mean of each pid's samples times
//!   the span) and launches to its estimate (`shm::ChargeEstimate`) and
//!   stores the resulting launch charge, with the time, in the worker's row
//!   of the limits file.
//!
//! A driver that samples less often than every period (real ones: every
//! 1/6 s to 1 s) answers "nothing newer" in between: the workers are
//! marked measured with their charges unchanged, and their launches keep
//! counting until the next sample. Such a period reads no books for the
//! charges: it marks the workers (a compute limit or a grant) that the
//! last books read named measured, in one pass over the limits
//! file, so the sampler's work follows active workers, not registered ones
//! (docs/scale.md). Soft mode's scheduler reads the books of the workers
//! that launch every period, the quiet ones rarely (`schedule.rs`), and
//! the limits only when they change (`shm::LimitsList`). The vendor's errors are logged once
//! per minute with a count; the workers go unmeasured and the hook's policy
//! applies.

use crate::log::log_at;
use crate::select::vendor;
use crate::vendor::{UtilizationSample, Vendor};
use accel_common::{shm, Error};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(100);
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

/// A process on a device in the books: (pid namespace, pid there, start
/// time, device).
pub(crate) type ProcKey = (u64, i32, u64, String);

/// The key of a process of the books on its device.
pub(crate) fn proc_key(p: &shm::ProcessUsage) -> ProcKey {
    (
        p.pid_namespace,
        p.namespace_pid,
        p.start_time,
        p.device_uuid.clone(),
    )
}

/// Sample timestamps closer than this (µs) are one sample of the driver
/// (real drivers sample every 1/6 s to 1 s).
const SAME_SAMPLE_US: u64 = 20_000;

#[derive(Default)]
struct Sampler {
    /// Per device: the newest sample timestamp seen.
    since: HashMap<String, u64>,
    /// Per device: the driver's sample period (µs), the shortest gap seen
    /// between two of its samples.
    period: HashMap<String, u64>,
    /// Per device not sampled yet: when it was first read (its first
    /// samples cover the time since, which their timestamps cannot say).
    first_read: HashMap<String, Instant>,
    /// Per process and device: the tokens granted to it up to the last
    /// sample of its device, and whether that was at a sample (a process
    /// first seen between samples is counted from the next one on).
    tokens: HashMap<ProcKey, (u64, bool)>,
    /// Per (worker, device): the launch charge estimate.
    estimates: HashMap<(String, String), shm::ChargeEstimate>,
    /// Per process and device: its own launch charge estimate (its share).
    shares: HashMap<ProcKey, shm::ChargeEstimate>,
    /// (worker, device) pairs with a live process in the last books read.
    seen: HashSet<(String, String)>,
    /// Soft mode's scheduler (`schedule.rs`).
    scheduler: crate::schedule::Scheduler,
    /// The node's limits, read again only when they move.
    limits: shm::LimitsList,
    /// What the sampler derives from them.
    plan: Option<Plan>,
    /// Vendor errors: when last reported, how many since.
    error_told: Option<Instant>,
    errors: u64,
}

/// What the sampler derives from the node's limits, made again only when
/// they change (the version of `shm::LimitsList::current`).
struct Plan {
    version: u64,
    /// The devices where a worker has a request or a priority (soft mode's
    /// scheduler runs there).
    scheduled: HashSet<String>,
    /// The devices the sampler reads: those, and those with a compute limit.
    devices: Vec<String>,
    /// Per device, the workers with a compute limit there, or any limit on
    /// a scheduled device.
    limited: HashMap<String, HashSet<String>>,
}

impl Plan {
    fn of(limits: &[shm::LimitEntry], version: u64) -> Plan {
        let scheduled: HashSet<String> = crate::schedule::scheduled(limits)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut limited: HashMap<String, HashSet<String>> = HashMap::new();
        for e in limits {
            if e.compute_percent.is_some() || scheduled.contains(&e.device_uuid) {
                limited
                    .entry(e.device_uuid.clone())
                    .or_default()
                    .insert(e.worker.clone());
            }
        }
        Plan {
            version,
            devices: limited.keys().cloned().collect(),
            scheduled,
            limited,
        }
    }
}

/// A device's reading this period.
enum Reading {
    /// No sample newer than the last (or the first call): no information.
    Nothing { first: bool },
    /// Per host pid, its device time (ns) in the samples, which cover
    /// `span_ns` (0: the first samples, whose span is unknown).
    Samples {
        per_pid: HashMap<u32, f64>,
        span_ns: f64,
    },
}

/// What the books say of a worker on a device since its device's last
/// sample: its processes counted since then.
#[derive(Default)]
struct Seen {
    procs: Vec<Counted>,
}

/// A process counted since its device's last sample.
struct Counted {
    key: ProcKey,
    /// Its host pid (NVML's name for it).
    pid: u32,
    /// Tokens granted to it since the sample.
    granted: u64,
    /// Its launch share in force (`shm::SHARE_ONE` = the worker's charge).
    share: u32,
}

impl Sampler {
    /// Another process holds the lease: start afresh when taking it over.
    fn standby(&mut self) {
        self.since.clear();
        self.period.clear();
        self.first_read.clear();
        self.tokens.clear();
        self.estimates.clear();
        self.shares.clear();
        self.seen.clear();
        self.scheduler = Default::default();
    }

    fn sample(&mut self) {
        let Ok(v) = vendor() else {
            return;
        };
        let mut limits = std::mem::take(&mut self.limits);
        let (list, version) = limits.current();
        let plan = match self.plan.take() {
            Some(p) if p.version == version => p,
            _ => Plan::of(list, version),
        };
        self.measure(v, list, &plan);
        self.plan = Some(plan);
        self.limits = limits;
    }

    fn measure(&mut self, v: &dyn Vendor, limits: &[shm::LimitEntry], plan: &Plan) {
        if plan.devices.is_empty() {
            return self.standby();
        }
        // The driver first, then the books: the tokens are read as close as
        // can be to the charges stored below, so the launches counted at
        // the next sample were all charged the new charge.
        let mut readings = HashMap::new();
        for uuid in &plan.devices {
            match v.process_utilization(uuid, self.since.get(uuid).copied().unwrap_or(0)) {
                Ok(samples) => {
                    readings.insert(uuid.clone(), self.reading(uuid, &samples));
                }
                Err(Error::NotSupported(_)) => {}
                Err(e) => self.failed(uuid, &e),
            }
        }
        // Nothing newer on any device (a driver samples every 1/6 s to 1 s):
        // the books are not read for the charges, and the workers they
        // named are measured with their charges unchanged, as below.
        let fresh = readings
            .values()
            .any(|r| !matches!(r, Reading::Nothing { first: false }));
        // The scheduler reads the books of the workers it must see now
        // (all of them when the charges need them anyway).
        let mut procs = None;
        if !plan.scheduled.is_empty() {
            let s = &mut self.scheduler;
            s.next_period();
            let named = match s.walked() {
                Some(g) if !fresh => shm::processes_named(|t| s.due(t), false, g).ok().flatten(),
                _ => None,
            };
            let p = match named {
                Some(p) => p,
                None => {
                    let (p, g) =
                        shm::processes_of(|w, t| s.reads(w, fresh, t), false).unwrap_or_default();
                    s.walked_now(g);
                    p
                }
            };
            s.tick(limits, plan.version, &p);
            procs = fresh.then_some(p);
        }
        // Between samples, the workers the last books read named are
        // marked measured (a hook holding to a limit or a grant checks that
        // it is measured).
        if !fresh {
            let _ = shm::mark_measured(&self.seen);
            return;
        }
        // Per device, the workers measured there: those the limits name,
        // and on a scheduled device every worker with a process there. A
        // set, since every process the books list is looked up in it
        // (docs/scale.md).
        let mut limited = plan.limited.clone();
        for uuid in &plan.scheduled {
            let ws = limited.entry(uuid.clone()).or_default();
            for w in self.scheduler.workers_on(uuid) {
                if !ws.contains(w) {
                    ws.insert(w.to_owned());
                }
            }
        }
        let procs = procs.unwrap_or_else(|| shm::processes().unwrap_or_default());
        let seen = self.books(&limited, &readings, procs);
        self.seen = seen.keys().cloned().collect();
        self.estimates
            .retain(|(w, u), _| limited.get(u).is_some_and(|ws| ws.contains(w)));
        for (uuid, reading) in &readings {
            for worker in &limited[uuid] {
                // Only a worker with a process the books name on the device
                // is measured; the others stay unmeasured (the hook's policy
                // applies).
                let Some(w) = seen.get(&(worker.clone(), uuid.clone())) else {
                    continue;
                };
                let Ok(Some(charge)) = shm::charge_of(worker, uuid) else {
                    continue;
                };
                let next = match reading {
                    Reading::Samples { per_pid, span_ns } if *span_ns > 0.0 => {
                        let secs = span_ns / 1e9;
                        // Per process: its device time and its launches (the
                        // tokens granted to it over the charge it paid).
                        let counted: Vec<(&Counted, f64, f64)> = w
                            .procs
                            .iter()
                            .map(|c| {
                                let paid = shm::shared_charge(charge, c.share);
                                let used = per_pid.get(&c.pid).copied().unwrap_or(0.0);
                                (c, c.granted as f64 / paid as f64, used)
                            })
                            .collect();
                        let used: f64 = counted.iter().map(|c| c.2).sum();
                        let launches: f64 = counted.iter().map(|c| c.1).sum();
                        let est = self.estimates.entry((worker.clone(), uuid.clone()));
                        let next = est.or_default().add(secs, launches, used).unwrap_or(charge);
                        self.share_out(worker, uuid, next, secs, &counted);
                        log_at!(
                            Trace,
                            "sampler {worker} {uuid}: {launches:.1} launches, {:.3} ms used over \
                             {:.3} ms: charge {charge} -> {next}",
                            used / 1e6,
                            span_ns / 1e6
                        );
                        next
                    }
                    _ => charge,
                };
                let _ = shm::set_charge(worker, uuid, next);
            }
        }
    }

    /// A device's samples: per pid the device time they stand for. Each
    /// sample is its process's share of the device over one period of the
    /// driver, ending at its timestamp, and a process idle over a period
    /// has no sample for it (NVML: one per process "that had some non-zero
    /// utilization during the last sample period"). So a sample stands for
    /// the time since the driver's previous sample of any process, but
    /// never more than one period: after an idle stretch (of the process,
    /// or of the whole device) its share is not spread over the stretch,
    /// which counted an idle worker's pause as busy and held it far below
    /// its limit when it started again (issue 34). The period is the
    /// shortest gap seen between two samples; until one is seen, the gap
    /// itself. It must be the period itself, not more: with the device
    /// idle between most samples (a 100 ms graph at 30 %) every sample
    /// would be charged the excess (a quarter more ran such workers at
    /// 25 %). A driver whose samples jitter is charged its shortest gap
    /// each time: low by the jitter (its share of the period).
    fn reading(&mut self, uuid: &str, samples: &[UtilizationSample]) -> Reading {
        let since = self.since.get(uuid).copied().unwrap_or(0);
        let mut stamps: Vec<u64> = samples
            .iter()
            .map(|s| s.timestamp)
            .filter(|&t| t > since)
            .collect();
        stamps.sort_unstable();
        let Some(&newest) = stamps.last() else {
            let first = since == 0 && !self.first_read.contains_key(uuid);
            if first {
                self.first_read.insert(uuid.to_owned(), Instant::now());
            }
            return Reading::Nothing { first };
        };
        self.since.insert(uuid.to_owned(), newest);
        let first_read = self.first_read.remove(uuid);
        // The first samples span the time since the device was first read
        // (none when read with samples: the span is unknown).
        let prev = match (since, first_read) {
            (0, None) => {
                return Reading::Samples {
                    per_pid: HashMap::new(),
                    span_ns: 0.0,
                }
            }
            (0, Some(t)) => newest.saturating_sub(t.elapsed().as_micros() as u64),
            (s, _) => s,
        };
        // Each sample instant (µs) and the time it stands for (ns).
        let mut lengths: Vec<(u64, f64)> = Vec::new();
        let mut last = prev;
        for &t in &stamps {
            if lengths
                .last()
                .is_some_and(|&(at, _)| t - at < SAME_SAMPLE_US)
            {
                continue;
            }
            let gap = t.saturating_sub(last);
            if since != 0 || last != prev {
                let p = self.period.entry(uuid.to_owned()).or_insert(gap);
                *p = (*p).min(gap).max(SAME_SAMPLE_US);
            }
            let len = self.period.get(uuid).map_or(gap, |&p| gap.min(p));
            lengths.push((t, len as f64 * 1e3));
            last = t;
        }
        let mut per_pid: HashMap<u32, f64> = HashMap::new();
        for s in samples.iter().filter(|s| s.timestamp > since) {
            // The sample instant it belongs to: the last at or before it.
            let i = lengths.partition_point(|&(at, _)| at <= s.timestamp);
            let len = lengths[i.max(1) - 1].1;
            *per_pid.entry(s.pid).or_default() += f64::from(s.sm_percent) / 100.0 * len;
        }
        Reading::Samples {
            per_pid,
            span_ns: newest.saturating_sub(prev) as f64 * 1e3,
        }
    }

    /// The live processes of limited workers on the devices read, by
    /// (worker, device): the host pids counted since their device's last
    /// sample and the tokens granted to them since. A device with a new
    /// sample (or read for the first time) starts its count afresh.
    fn books(
        &mut self,
        limited: &HashMap<String, HashSet<String>>,
        readings: &HashMap<String, Reading>,
        procs: Vec<shm::ProcessUsage>,
    ) -> HashMap<(String, String), Seen> {
        let mut seen: HashMap<(String, String), Seen> = HashMap::new();
        let mut tokens = HashMap::new();
        for p in procs {
            let Some(reading) = readings.get(&p.device_uuid) else {
                continue;
            };
            if !limited[&p.device_uuid].contains(&p.worker) {
                continue;
            }
            let key = proc_key(&p);
            let before = self.tokens.get(&key).copied();
            let restart = match reading {
                Reading::Samples { .. } => true,
                Reading::Nothing { first } => *first,
            };
            tokens.insert(
                key.clone(),
                match before {
                    Some(b) if !restart => b,
                    _ => (p.compute_tokens, restart),
                },
            );
            let s = seen.entry((p.worker, p.device_uuid)).or_default();
            if let Some((b, true)) = before {
                s.procs.push(Counted {
                    key: key.clone(),
                    pid: p.pid as u32,
                    granted: p.compute_tokens.saturating_sub(b),
                    share: p.compute_share,
                });
            }
        }
        // Devices not read this period keep their counts.
        for (k, v) in &self.tokens {
            if !readings.contains_key(&k.3) {
                tokens.entry(k.clone()).or_insert(*v);
            }
        }
        self.tokens = tokens;
        self.shares.retain(|k, _| self.tokens.contains_key(k));
        seen
    }

    /// Each counted process's launch share of a worker whose launch charge
    /// is now `charge`: its own device time per launch (an estimate per
    /// process, as the worker's) over the worker's, so that the processes
    /// of a worker share its limit by device time, not by launches (a
    /// process of 0.5 ms kernels beside one of 8 ms kernels in a 40 %
    /// worker got 2.3 % and 37.3 %: issue 34). The worker's charge still
    /// holds it to its limit: the tokens its processes are granted are the
    /// sum of their launches times their own charges, which is its device
    /// time. A process not measured yet pays the worker's charge.
    fn share_out(
        &mut self,
        worker: &str,
        uuid: &str,
        charge: u64,
        secs: f64,
        counted: &[(&Counted, f64, f64)],
    ) {
        let mut out = Vec::new();
        for (c, launches, used) in counted {
            let est = self.shares.entry(c.key.clone()).or_default();
            if let Some(own) = est.add(secs, *launches, *used) {
                let share = (own as f64 / charge as f64 * f64::from(shm::SHARE_ONE)).round();
                out.push((
                    (c.key.0, c.key.1, c.key.2),
                    share.clamp(1.0, f64::from(u32::MAX)) as u32,
                ));
            }
        }
        if !out.is_empty() {
            let r = shm::set_shares(worker, uuid, &out);
            log_at!(Trace, "sampler {worker} {uuid}: shares {out:?}: {r:?}");
        }
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
