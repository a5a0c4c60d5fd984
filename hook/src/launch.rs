//! Kernel launches: a limited worker's launch takes its tokens from the
//! worker's bucket before the driver sees it.
//!
//! A launch that finds the bucket short, or the worker frozen
//! (`FreezeWorker`, `AutoFreeze` of "compute"), waits: it sleeps for the
//! time the bucket needs to refill the deficit at the worker's rate, at
//! least [`WAIT_MIN`] and at most [`WAIT_MAX`] (so a freeze or a resume is
//! seen within 2 ms), and asks again. It never fails and never spins; it
//! holds no lock while it sleeps, so the process's other threads and its
//! exit go on.
//!
//! The cost of a launch is not known when it is made: the hook charges
//! [`LAUNCH_ESTIMATE`] tokens (ns of the whole device) divided by the
//! worker's gain on the device, which the host's compute sampler steers by
//! the utilization it measures. This process's refresh thread
//! (`refresh.rs`) keeps [`CHARGE`] and [`HOLD`] per device fresh from it; a
//! launch reads one word of each.
//!
//! An unlimited worker pays one check of the limiter (no lock, no system call).

use crate::devices;
use crate::limits::{self, Gate};
use crate::memory::Driver;
use crate::refresh;
use accel_common::shm::{Steer, GAIN_ONE, MAX_DEVICES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

/// Tokens a launch costs before any correction: 50 µs of the device.
pub const LAUNCH_ESTIMATE: u64 = 50_000;
pub const WAIT_MIN: Duration = Duration::from_micros(20);
pub const WAIT_MAX: Duration = Duration::from_millis(2);

/// Per device slot: the tokens a launch is charged (0: not steered yet).
static CHARGE: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
/// Per device slot: launches wait for a measurement (fail-closed, `refresh.rs`).
static HOLD: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];

/// Before a launch on the calling thread's current device: return when the
/// launch may go to the driver.
#[inline]
pub fn admit(drv: &impl Driver) {
    if !limits::active() || limits::broken() {
        return;
    }
    let Some(ordinal) = drv.current_device() else {
        return;
    };
    let Ok(Some(dev)) = devices::resolve(ordinal, |o| drv.uuid(o)) else {
        return;
    };
    let slot = dev.slot;
    if HOLD[slot].load(Relaxed) {
        hold(slot);
    }
    let tokens = match CHARGE[slot].load(Relaxed) {
        0 => LAUNCH_ESTIMATE,
        t => t,
    };
    match limits::launch(slot, tokens) {
        Gate::Unlimited => {}
        Gate::Granted => refresh::ensure_started(),
        Gate::Wait { deficit } => wait(slot, tokens, deficit),
    }
}

#[cold]
fn hold(slot: usize) {
    refresh::ensure_started();
    while HOLD[slot].load(Relaxed) {
        std::thread::sleep(WAIT_MAX);
    }
}

#[cold]
#[inline(never)]
fn wait(slot: usize, tokens: u64, mut deficit: u64) {
    refresh::ensure_started();
    loop {
        std::thread::sleep(pause(deficit, limits::steer(slot).map_or(0, |s| s.percent)));
        match limits::launch(slot, tokens) {
            Gate::Wait { deficit: d } => deficit = d,
            _ => return,
        }
    }
}

/// How long a deficit of `deficit` tokens takes to refill at `percent` %
/// of the device (tokens are ns of the whole device), within the bounds.
/// No deficit (frozen) or no rate: the longest pause.
pub fn pause(deficit: u64, percent: u64) -> Duration {
    if deficit == 0 || percent == 0 {
        return WAIT_MAX;
    }
    Duration::from_nanos(deficit.saturating_mul(100) / percent).clamp(WAIT_MIN, WAIT_MAX)
}

/// The charge of a launch at `gain`: the estimate over the gain, and never
/// more than half a burst (`BURST_NS` at the rate), which the bucket could
/// never grant.
pub fn charge(s: &Steer) -> u64 {
    let est = LAUNCH_ESTIMATE * GAIN_ONE / s.gain.max(1);
    est.clamp(1, (s.percent.max(1) * 500_000).max(1))
}

/// The refresh thread's update of a device's charge and hold.
pub fn refresh(slot: usize, s: &Steer, hold: bool) {
    CHARGE[slot].store(charge(s), Relaxed);
    HOLD[slot].store(hold, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steer(percent: u64, gain: u64) -> Steer {
        Steer {
            percent,
            gain,
            measured_ms: 0,
            now_ms: 0,
        }
    }

    #[test]
    fn pauses_are_sized_from_the_deficit() {
        assert_eq!(pause(0, 50), WAIT_MAX);
        assert_eq!(pause(100, 0), WAIT_MAX);
        assert_eq!(pause(1, 100), WAIT_MIN);
        assert_eq!(pause(50_000, 50), Duration::from_micros(100));
        assert_eq!(pause(u64::MAX, 1), WAIT_MAX);
    }

    #[test]
    fn charges_follow_the_gain_within_a_burst() {
        assert_eq!(charge(&steer(50, GAIN_ONE)), LAUNCH_ESTIMATE);
        assert_eq!(charge(&steer(50, GAIN_ONE * 2)), LAUNCH_ESTIMATE / 2);
        assert_eq!(charge(&steer(1, GAIN_ONE / 64)), 500_000);
    }
}
