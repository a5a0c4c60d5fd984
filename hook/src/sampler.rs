//! The sampler: measured utilization steers each worker's refill rate.
//!
//! Every process with a limited worker runs one sampler thread, started on
//! its first limited launch (never at load). Every [`TICK`] it:
//! - refreshes, for each device the process launched on, the charge of a
//!   launch and the fail-closed hold (`launch::refresh`);
//! - tries to take the device's lease (an OFD lock on a byte of the
//!   limiter's state file, `shm::try_sampler_lease`). One process per device
//!   on the node holds it; the kernel drops it when the holder dies, and
//!   another process's thread takes it at its next tick (≤ 20 ms).
//!
//! The holder, every [`PERIOD`], reads the device's per-process
//! utilization from NVML (`nvmlDeviceGetProcessUtilization`: SM % per
//! host pid since the last sample), sums it per worker (pids → workers from
//! the limiter's process table, as this process's pid namespace sees them)
//! and moves the gain of each limited worker it can see a process of:
//!
//! `gain ← gain × r^ALPHA`, `r = clamp(limit / measured, 1/2, 2)`
//!
//! an integral controller in the logarithm of the rate (ALPHA = 0.5: half
//! the log-error per step, at most ×1.41 or ÷1.41 per 100 ms; the whole
//! ratio, at most ÷2, when the measurement is ≥ [`SATURATED`] %, which hides
//! how far over the worker is). A sample period without any sample (nothing
//! ran; NVML's first call) moves nothing. Within
//! [`DEAD_BAND`] points of the limit nothing moves. A worker whose bucket is
//! full (it did not use its tokens: not saturating) is never raised, so the
//! gain does not wind up while it idles. The gain stays within 1/64…64.
//!
//! Without a measurement (NVML missing or failing: its errors are logged
//! once per minute) the bucket keeps throttling on the launch estimate with
//! the last gain: fail-open, the default, logged once per process and
//! device. With `ACCELERATOR_COMPUTE_FAIL_CLOSED=1`, a limited worker's
//! launches wait while its last measurement is older than [`STALE`]
//! (after [`GRACE`] from the thread's start): fail-closed.

use crate::ffi::nvml::{self, NvmlError};
use crate::{devices, launch, limits};
use accel_common::shm::{GAIN_MAX, GAIN_MIN, MAX_DEVICES};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

pub const ENV_FAIL_CLOSED: &str = "ACCELERATOR_COMPUTE_FAIL_CLOSED";
pub const TICK: Duration = Duration::from_millis(20);
pub const PERIOD: Duration = Duration::from_millis(100);
pub const STALE: Duration = Duration::from_millis(1000);
pub const GRACE: Duration = Duration::from_millis(1000);
pub const ALPHA: f64 = 0.5;
pub const DEAD_BAND: f64 = 1.0;
pub const SATURATED: f64 = 95.0;
const ERROR_EVERY: Duration = Duration::from_secs(60);

static STARTED: AtomicBool = AtomicBool::new(false);

/// Start this process's sampler thread if it is not running.
#[inline]
pub fn ensure_started() {
    if STARTED.load(Relaxed) || STARTED.swap(true, AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("cuda-limiter".into())
        .spawn(run);
    if spawned.is_err() {
        STARTED.store(false, Release);
    }
}

/// After `fork()`, in the child: it has no sampler thread.
pub fn forget_after_fork() {
    STARTED.store(false, Relaxed);
}

fn fail_closed() -> bool {
    std::env::var(ENV_FAIL_CLOSED).is_ok_and(|v| v == "1")
}

/// One controller step (see the module doc).
pub fn next_gain(gain: u64, percent: u64, measured: f64, idle: bool) -> u64 {
    let target = percent as f64;
    if (target - measured).abs() < DEAD_BAND {
        return gain;
    }
    let mut r = (target / measured.max(0.1)).clamp(0.5, 2.0);
    if idle {
        r = r.min(1.0);
    }
    // A saturated device hides how far over the worker is: take the whole step down.
    let alpha = if measured >= SATURATED && r < 1.0 {
        1.0
    } else {
        ALPHA
    };
    ((gain as f64 * r.powf(alpha)).round() as u64).clamp(GAIN_MIN, GAIN_MAX)
}

struct Sampler {
    start: Instant,
    closed: bool,
    /// Per device slot: the last sample's time and NVML timestamp.
    last: [(Option<Instant>, u64); MAX_DEVICES],
    unmeasured_told: [bool; MAX_DEVICES],
    /// NVML errors: when last reported, how many since.
    error_told: Option<Instant>,
    errors: u64,
}

fn run() {
    let mut s = Sampler {
        start: Instant::now(),
        closed: fail_closed(),
        last: [(None, 0); MAX_DEVICES],
        unmeasured_told: [false; MAX_DEVICES],
        error_told: None,
        errors: 0,
    };
    loop {
        for (slot, uuid) in devices::known() {
            s.refresh(slot, uuid);
            if limits::sampler_lease(slot) {
                s.sample_if_due(slot, uuid);
            }
        }
        std::thread::sleep(TICK);
    }
}

impl Sampler {
    fn refresh(&mut self, slot: usize, uuid: &str) {
        let Some(st) = limits::steer(slot) else {
            return;
        };
        let age = Duration::from_millis(st.now_ms.saturating_sub(st.measured_ms));
        let unmeasured = st.percent > 0 && age > STALE && self.start.elapsed() > GRACE;
        if unmeasured && !self.unmeasured_told[slot] {
            self.unmeasured_told[slot] = true;
            let what = if self.closed {
                "holding its launches until one comes (fail-closed)"
            } else {
                "limiting on launch estimates only (fail-open; ACCELERATOR_COMPUTE_FAIL_CLOSED=1 holds launches instead)"
            };
            eprintln!("libcuda_limiter: no utilization measurement for {uuid}; {what}");
        }
        launch::refresh(slot, &st, unmeasured && self.closed);
    }

    fn sample_if_due(&mut self, slot: usize, uuid: &str) {
        let (at, since) = self.last[slot];
        if at.is_some_and(|t| t.elapsed() < PERIOD) {
            return;
        }
        let samples = match nvml::process_utilization(uuid, since) {
            Ok(s) => s,
            Err(e) => return self.nvml_failed(uuid, &e),
        };
        let next = samples.iter().map(|s| s.ts).max().unwrap_or(since);
        self.last[slot] = (Some(Instant::now()), next);
        // No sample at all (nothing ran, or the first call): no information;
        // the workers are marked measured with their gains unchanged.
        let informed = !samples.is_empty();
        // Per pid, the mean of its samples; per worker, the sum of its pids'.
        let mut per_pid: HashMap<u32, (f64, f64)> = HashMap::new();
        for s in &samples {
            let e = per_pid.entry(s.pid).or_default();
            *e = (e.0 + s.sm as f64, e.1 + 1.0);
        }
        // Only workers with a process this sampler can name by the pid NVML
        // reports are corrected: the others stay unmeasured (the policy
        // applies) rather than read as idle and wound up.
        let mut per_worker: HashMap<String, f64> = HashMap::new();
        for (pid, worker) in limits::workers_on(uuid) {
            let (sum, n) = per_pid.get(&pid).copied().unwrap_or((0.0, 1.0));
            *per_worker.entry(worker).or_default() += sum / n;
        }
        for (worker, percent) in limits::compute_limits(uuid) {
            let Some(&measured) = per_worker.get(&worker) else {
                continue;
            };
            if let Some((gain, idle)) = limits::gain(&worker, uuid) {
                let next = if informed {
                    next_gain(gain, percent, measured, idle)
                } else {
                    gain
                };
                limits::set_gain(&worker, uuid, next);
            }
        }
    }

    fn nvml_failed(&mut self, uuid: &str, e: &NvmlError) {
        self.errors += 1;
        if self.error_told.is_some_and(|t| t.elapsed() < ERROR_EVERY) {
            return;
        }
        eprintln!(
            "libcuda_limiter: cannot measure utilization on {uuid}: {e} ({} failure(s) in the last minute; next report in 60 s)",
            self.errors
        );
        self.error_told = Some(Instant::now());
        self.errors = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_common::shm::GAIN_ONE;

    #[test]
    fn the_controller_moves_toward_the_limit() {
        // Measured at twice the limit: the rate falls by √2.
        assert_eq!(next_gain(GAIN_ONE, 30, 60.0, false), 724);
        // Half the limit: it rises by √2, unless the bucket idles.
        assert_eq!(next_gain(GAIN_ONE, 30, 15.0, false), 1448);
        assert_eq!(next_gain(GAIN_ONE, 30, 15.0, true), GAIN_ONE);
        // Within the dead band nothing moves; bounds hold.
        assert_eq!(next_gain(GAIN_ONE, 30, 30.5, false), GAIN_ONE);
        assert_eq!(next_gain(GAIN_MAX, 30, 0.0, false), GAIN_MAX);
        assert_eq!(next_gain(GAIN_MIN, 10, 100.0, false), GAIN_MIN);
        // Saturated: the whole ratio down.
        assert_eq!(next_gain(GAIN_ONE, 80, 100.0, false), 819);
    }

    #[test]
    fn a_proportional_plant_converges_in_ten_steps() {
        // Utilization proportional to the gain: 3× the limit at gain 1.
        let mut g = GAIN_ONE;
        for _ in 0..10 {
            let measured = 90.0 * g as f64 / GAIN_ONE as f64;
            g = next_gain(g, 30, measured, false);
        }
        let measured = 90.0 * g as f64 / GAIN_ONE as f64;
        assert!((measured - 30.0).abs() < 1.5, "{measured}");
    }
}
