//! Steering compute limits by measurement
//!
//! A launch's cost is not known when it is launched, so the hook charges an
//! estimate, and the host's compute sampler (libaccelerator, `src/sampler.rs`),
//! which measures the device's per-process utilization, corrects each
//! worker's refill rate: the `gain` word of the worker's row in the
//! host-owned limits file (`limits.rs`), a multiplier in 1/[`GAIN_ONE`]
//! (0 = never corrected = 1.0). The hook divides its estimate by the gain,
//! which is the same as multiplying the rate. `measured_ms` says when the
//! sampler last measured the worker on the device, so a launcher can tell a
//! live measurement from none. Both words are in the host's file, which
//! clients map read-only: a tenant cannot raise its own gain, nor lower
//! another's.
//!
//! One sampler runs on the node: the host process that holds the OFD lock
//! of `$ACCELERATOR_STATE_DIR/sampler.lock` ([`take_sampler_lease`]), a file
//! a worker's container never mounts (it gets its own worker's directory
//! and the limits file, not the state directory), so no tenant can take or
//! block it. The kernel drops the
//! lock when its holder dies; another host process's sampler takes it at
//! its next try.
//!
//! The controller ([`next_gain`]) is here, beside the words it moves.

use super::*;
use std::sync::atomic::AtomicI32;

/// The gain word's unit: a gain of `GAIN_ONE` leaves the rate as set.
pub const GAIN_ONE: u64 = 1024;
/// The correction stays within 1/64 … 64 of the set rate.
pub const GAIN_MIN: u64 = GAIN_ONE / 64;
pub const GAIN_MAX: u64 = GAIN_ONE * 64;

/// A worker's compute limit on a device as its launches need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// 1..=100; 0 = unlimited.
    pub percent: u64,
    /// The rate correction in 1/`GAIN_ONE`.
    pub gain: u64,
    /// The sampler's last measurement of the worker here (ms since boot; 0 = never).
    pub measured_ms: u64,
    /// Now, in the same clock (ms since boot).
    pub now_ms: u64,
}

fn gain_word(g: u64) -> u64 {
    if g == 0 {
        GAIN_ONE
    } else {
        g.clamp(GAIN_MIN, GAIN_MAX)
    }
}

/// The limit of process `pid`'s worker on device slot `d` (the process is
/// registered: it has made a check there before), read through the row
/// the process keeps for the slot (`limits::row_of`).
pub fn steer_of(pid: i32, d: usize) -> Option<Steer> {
    let l = map::published()?;
    proc_slot(l, pid).ok()?;
    let row = limits::row_of(l, checked_device(d).ok()?).ok()?;
    Some(Steer {
        percent: row.cu_limit.load(Acquire).min(100),
        gain: gain_word(row.gain.load(Acquire)),
        measured_ms: row.measured_ms.load(Acquire),
        now_ms: freeze::now_ms(),
    })
}

/// The host's view of a worker's gain on a device (None: the host never
/// named them).
pub fn gain_of(worker: &str, uuid: &str) -> Res<Option<u64>> {
    Ok(limits::host_row_of(worker, uuid)?.map(|r| gain_word(r.gain.load(Acquire))))
}

/// The sampler's correction: store `gain` (clamped) and mark the worker
/// measured now (host side: the limits file mapped read-write).
pub fn set_gain(worker: &str, uuid: &str, gain: u64) -> Res<()> {
    let row = limits::host_row_of(worker, uuid)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} on {uuid:?}")))?;
    row.gain.store(gain.clamp(GAIN_MIN, GAIN_MAX), Release);
    row.measured_ms.store(freeze::now_ms().max(1), Release);
    Ok(())
}

/// The sampler's idle period: mark every (worker, device) of `pairs` measured
/// now, their gains unchanged, in one pass over the limits file.
pub fn mark_measured(pairs: &std::collections::HashSet<(String, String)>) -> Res<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    let now = freeze::now_ms().max(1);
    let mut key = (String::new(), String::new());
    limits::each_row(|worker, uuid, row| {
        key = (worker, uuid);
        if pairs.contains(&key) {
            row.measured_ms.store(now, Release);
        }
    })
}

// ---- the sampler's lease -------------------------------------------------------

const LEASE_NAME: &str = "sampler.lock";

/// The lease file's descriptor in this process (-1: not open). Closed in a
/// forked child, whose copy would otherwise keep the lock of a sampler that
/// died held (an OFD lock lives while any descriptor of it is open).
static LEASE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn close_lease_in_child() {
    let fd = LEASE_FD.swap(-1, Relaxed);
    if fd >= 0 {
        map::close(fd);
    }
}

/// Take (or keep) the node's sampler lease; false: another live process
/// holds it. The lease file is created in the state directory if new.
pub fn take_sampler_lease() -> Res<bool> {
    let mut fd = LEASE_FD.load(Acquire);
    if fd < 0 {
        // Not a `Once`: a fork while it ran would leave the child blocked on it.
        static AT_FORK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !AT_FORK.swap(true, AcqRel) {
            map::at_fork_child(close_lease_in_child);
        }
        let path = crate::statedir::ensure()?.join(LEASE_NAME);
        let file = crate::statedir::open(&path, crate::statedir::Create::IfMissing)?
            .ok_or_else(|| Error::Internal("lease file not created".into()))?;
        fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        LEASE_FD.store(fd, Release);
    }
    map::ofd_lock(fd, 0, true)
        .map_err(|e| Error::OperationFailed(format!("cannot lock the sampler's lease: {e}")))
}

/// Give the lease up (the sampler stops): close the descriptor.
pub fn drop_sampler_lease() {
    let fd = LEASE_FD.swap(-1, AcqRel);
    if fd >= 0 {
        map::close(fd);
    }
}

// ---- the controller ------------------------------------------------------------

/// Half the log-error removed per step near the limit.
pub const ALPHA: f64 = 0.5;
/// Within this many points of the limit nothing moves.
pub const DEAD_BAND: f64 = 1.0;
/// A measurement this high means a saturated device (see [`next_gain`]).
pub const SATURATED: f64 = 95.0;
/// Farther than this from the limit (measured more than 1.25× or less
/// than 1/1.25 of it), a larger step: [`ALPHA_FAR`].
pub const FAR: f64 = 1.25;
pub const ALPHA_FAR: f64 = 0.75;

/// One controller step: the next gain of a worker limited to `percent`
/// whose measured utilization was `measured` % with gain `gain`; `idle`:
/// it left most of its tokens unused (not held by its bucket).
///
/// `gain ← gain × r^α`, `r = clamp(limit / measured, 1/4, 4)`: an integral
/// controller on the logarithm of the rate. α = [`ALPHA`] near the limit
/// (half the error per step: no ringing though the measurement lags the
/// gain by part of a period), [`ALPHA_FAR`] far from it (r beyond [`FAR`]
/// either way), and 1, the whole ratio at once, when the device is
/// saturated (≥ [`SATURATED`] %, which hides how far over the worker is,
/// so the ratio understates the step). An idle worker is
/// never raised (the gain would wind up while it waits on something else).
/// The gain stays within [`GAIN_MIN`] … [`GAIN_MAX`].
pub fn next_gain(gain: u64, percent: u64, measured: f64, idle: bool) -> u64 {
    let target = percent as f64;
    if (target - measured).abs() < DEAD_BAND {
        return gain;
    }
    let mut r = (target / measured.max(0.1)).clamp(0.25, 4.0);
    if idle {
        r = r.min(1.0);
    }
    let alpha = if measured >= SATURATED && r < 1.0 {
        1.0
    } else if !(1.0 / FAR..=FAR).contains(&r) {
        ALPHA_FAR
    } else {
        ALPHA
    };
    ((gain as f64 * r.powf(alpha)).round() as u64).clamp(GAIN_MIN, GAIN_MAX)
}

/// The controller's input: on a saturated device (`device`, the sum of
/// every process's utilization, at least [`SATURATED`] %), the utilization
/// the worker would have at its current gain if granted exactly its
/// refill. `granted` and `refill` are tokens over the measured period.
/// Granted less than its refill, the worker is held by the device (its own
/// demand, or its neighbours'), which hides how far over it is; granted
/// more, it is spending burst credit it saved while the device held it,
/// which overstates its gain. Either way utilization per token is what the
/// period shows, and at the gain where this reads the limit the worker
/// uses at most its limit whatever its neighbours do. Below saturation
/// (and without a refill figure, the sampler's first period) the
/// measurement as it is: a worker granted less than its refill on a device
/// with room is not using its tokens, and scaling it up would read as
/// demand it does not have.
pub fn steady_utilization(measured: f64, granted: f64, refill: f64, device: f64) -> f64 {
    if refill <= 0.0 || granted <= 0.0 || device < SATURATED {
        return measured;
    }
    measured * refill / granted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gain_words_clamp() {
        assert_eq!(gain_word(0), GAIN_ONE);
        assert_eq!(gain_word(1), GAIN_MIN);
        assert_eq!(gain_word(u64::MAX), GAIN_MAX);
    }

    #[test]
    fn the_controller_moves_toward_the_limit() {
        // Near the limit: half the log-error (measured 1.2× the limit).
        assert_eq!(next_gain(GAIN_ONE, 30, 36.0, false), 935);
        assert_eq!(next_gain(GAIN_ONE, 30, 25.0, false), 1122);
        assert_eq!(next_gain(GAIN_ONE, 80, 60.0, false), 1271);
        // Far from it: three quarters of it, the ratio within ×4 or ÷4.
        assert_eq!(next_gain(GAIN_ONE, 30, 60.0, false), 609);
        assert_eq!(next_gain(GAIN_ONE, 30, 15.0, false), 1722);
        assert_eq!(next_gain(GAIN_ONE, 10, 90.0, false), 362);
        // Unless the bucket idles: never raised then.
        assert_eq!(next_gain(GAIN_ONE, 30, 15.0, true), GAIN_ONE);
        // Within the dead band nothing moves; bounds hold.
        assert_eq!(next_gain(GAIN_ONE, 30, 30.5, false), GAIN_ONE);
        assert_eq!(next_gain(GAIN_MAX, 30, 0.0, false), GAIN_MAX);
        assert_eq!(next_gain(GAIN_MIN, 10, 100.0, false), GAIN_MIN);
        // Saturated: the whole ratio down.
        assert_eq!(next_gain(GAIN_ONE, 80, 100.0, false), 819);
    }

    #[test]
    fn utilization_is_read_at_the_refill() {
        // Spending saved credit: 100 % of the device on 1.25× the refill.
        assert_eq!(steady_utilization(100.0, 125.0, 100.0, 100.0), 80.0);
        // Held by a saturated device: 100 % on half the refill = 200 %.
        assert_eq!(steady_utilization(100.0, 50.0, 100.0, 100.0), 200.0);
        // Sharing a saturated device: 30 % on half the refill = 60 %.
        assert_eq!(steady_utilization(30.0, 50.0, 100.0, 98.0), 60.0);
        // Below saturation: as measured.
        assert_eq!(steady_utilization(20.0, 50.0, 100.0, 60.0), 20.0);
        assert_eq!(steady_utilization(80.0, 125.0, 100.0, 80.0), 80.0);
        // No figures: as measured.
        assert_eq!(steady_utilization(100.0, 0.0, 100.0, 100.0), 100.0);
        assert_eq!(steady_utilization(100.0, 50.0, 0.0, 100.0), 100.0);
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

    #[test]
    fn a_plant_a_period_behind_settles() {
        // Half of each period's measurement is of the previous gain (the
        // launchers pick a new one up within 20 ms of 100, and the bucket
        // carries up to 100 ms of credit or debt over): no ringing.
        for (limit, scale) in [
            (10.0, 4.0),
            (30.0, 2.0),
            (50.0, 2.0),
            (80.0, 2.0),
            (80.0, 0.5),
        ] {
            let plant = |g: u64| (limit * scale * g as f64 / GAIN_ONE as f64).min(100.0);
            let (mut g, mut prev) = (GAIN_ONE, GAIN_ONE);
            for _ in 0..12 {
                let measured = 0.5 * plant(g) + 0.5 * plant(prev);
                prev = g;
                g = next_gain(g, limit as u64, measured, false);
            }
            let m = plant(g);
            assert!((m - limit).abs() < 2.0, "limit {limit}: {m}");
        }
    }
}
