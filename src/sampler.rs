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
//! sample (nothing ran, or the first call) marks the workers measured with
//! their gains unchanged. The vendor's errors are logged once per minute
//! with a count; the workers go unmeasured and the hook's policy applies.

use crate::log::log_at;
use crate::select::vendor;
use crate::vendor::Vendor;
use accel_common::{shm, Error};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(100);
/// A worker granted less than this share of its refill over a period is idle.
const BUSY_SHARE: f64 = 0.8;
const ERROR_EVERY: Duration = Duration::from_secs(60);

/// The running thread (with the pid that started it: a forked child has
/// none) and its stop flag.
static THREAD: Mutex<Option<(u32, JoinHandle<()>)>> = Mutex::new(None);
static STOP: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();
/// `AccelShutdown` was called: a limit starts no sampler from then on.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

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

/// `AccelShutdown`: stop and join the thread; the lease is given up.
pub fn stop() {
    SHUT_DOWN.store(true, Relaxed);
    let mut slot = THREAD.lock();
    let Some((pid, handle)) = slot.take() else {
        return;
    };
    if pid != std::process::id() {
        // A forked child's copy of its parent's handle: no such thread here.
        std::mem::forget(handle);
        return;
    }
    *STOP.lock() = true;
    WAKE.notify_all();
    let _ = handle.join();
    *STOP.lock() = false;
}

fn ensure_running() {
    let mut slot = THREAD.lock();
    match slot.as_ref() {
        Some((pid, _)) if *pid == std::process::id() => return,
        Some(_) => {
            if let Some((_, h)) = slot.take() {
                std::mem::forget(h);
            }
        }
        None => {}
    }
    let Ok(v) = vendor() else {
        return;
    };
    if !measures(v) {
        return;
    }
    crate::abi::boundary::pin_library();
    match std::thread::Builder::new()
        .name("accel-sampler".into())
        .spawn(run)
    {
        Ok(h) => *slot = Some((std::process::id(), h)),
        Err(e) => log_at!(Error, "compute sampler: cannot start its thread: {e}"),
    }
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

/// Sleep for `d` unless stopped; true: stop.
fn stopped_after(d: Duration) -> bool {
    let mut stop = STOP.lock();
    if !*stop {
        WAKE.wait_for(&mut stop, d);
    }
    *stop
}

fn run() {
    let mut s = Sampler::default();
    let mut lease_told = false;
    while !stopped_after(PERIOD) {
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
        self.last = None;
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
        let now = Instant::now();
        let elapsed = self.last.replace(now).map(|t| now - t);
        let seen = self.books(&limited);
        for (uuid, workers) in &limited {
            let since = self.since.get(uuid).copied().unwrap_or(0);
            let samples = match v.process_utilization(uuid, since) {
                Ok(s) => s,
                Err(Error::NotSupported(_)) => continue,
                Err(e) => {
                    self.failed(uuid, &e);
                    continue;
                }
            };
            let next = samples.iter().map(|s| s.timestamp).max().unwrap_or(since);
            self.since.insert(uuid.clone(), next.max(since));
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
