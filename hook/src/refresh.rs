//! The refresh thread: each limited process's view of its steering.
//!
//! The host's compute sampler (libaccelerator, `src/sampler.rs`) measures
//! every worker's utilization and stores each limited worker's gain and
//! measurement time in its row of the host-owned limits file, which this
//! process maps read-only. A process with a limited worker runs one thread,
//! started on its first limited launch (never at load), that every [`TICK`],
//! for each device the process launched on, tells whether the worker is
//! measured, and refreshes the fail-closed hold (`launch::refresh`). (The
//! launch charge itself is read from the row by each launch.)
//!
//! Without a measurement (no host sampler, NVML missing or failing there,
//! a worker the sampler cannot see) the row's `measured_ms` goes stale.
//! After [`STALE`] (and [`GRACE`] from the thread's start) the worker is
//! unmeasured: fail-open, the default, keeps throttling on the last launch
//! charge measured (the estimate if none was); with `ACCELERATOR_COMPUTE_FAIL_CLOSED=1`
//! its launches wait until a measurement comes (fail-closed). Each process
//! says which, once per device, on stderr.

use crate::{devices, launch, limits};
use accel_common::shm::MAX_DEVICES;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

pub const ENV_FAIL_CLOSED: &str = "ACCELERATOR_COMPUTE_FAIL_CLOSED";
pub const TICK: Duration = Duration::from_millis(20);
pub const STALE: Duration = Duration::from_millis(1000);
pub const GRACE: Duration = Duration::from_millis(1000);

static STARTED: AtomicBool = AtomicBool::new(false);

/// Start this process's refresh thread if it is not running (inlined into
/// every limited launch: one load).
#[inline(always)]
pub fn ensure_started() {
    if !STARTED.load(Relaxed) {
        start();
    }
}

#[cold]
#[inline(never)]
fn start() {
    if STARTED.swap(true, AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("cuda-limiter".into())
        .spawn(run);
    if spawned.is_err() {
        STARTED.store(false, Release);
    }
}

/// After `fork()`, in the child: it has no refresh thread.
pub fn forget_after_fork() {
    STARTED.store(false, Relaxed);
}

fn fail_closed() -> bool {
    std::env::var(ENV_FAIL_CLOSED).is_ok_and(|v| v == "1")
}

fn run() {
    let start = Instant::now();
    let closed = fail_closed();
    let mut told = [false; MAX_DEVICES];
    loop {
        for (slot, uuid) in devices::known() {
            let Some(st) = limits::steer(slot) else {
                continue;
            };
            let age = Duration::from_millis(st.now_ms.saturating_sub(st.measured_ms));
            let unmeasured = st.percent > 0 && age > STALE && start.elapsed() > GRACE;
            if unmeasured && !told[slot] {
                told[slot] = true;
                let what = if closed {
                    "holding its launches until one comes (fail-closed)"
                } else {
                    "limiting on launch estimates only (fail-open; ACCELERATOR_COMPUTE_FAIL_CLOSED=1 holds launches instead)"
                };
                eprintln!("libcuda_limiter: no utilization measurement for {uuid}; {what}");
            }
            launch::refresh(slot, unmeasured && closed);
        }
        std::thread::sleep(TICK);
    }
}
