//! Steering compute limits by measurement
//!
//! A launch's cost is not known when it is launched: the hook charges the
//! worker's **launch charge**, the device time one launch of the worker
//! takes, which the host's compute sampler (libaccelerator,
//! `src/sampler.rs`) measures: the device's per-process utilization over
//! the launches the books counted ([`ChargeEstimate`]). The charge is the
//! `charge` word of the worker's row in the host-owned limits file
//! (`limits.rs`), in tokens (ns of the whole device; 0 = not measured yet:
//! [`LAUNCH_ESTIMATE`]); the hook reads it with the limit, on each launch
//! (`compute::launch_on`). `measured_ms` says when the sampler last
//! measured the worker on the device, so a launcher can tell a live
//! measurement from none. Both words are in the host's file, which clients
//! map read-only: a tenant can neither lower its own charge nor raise
//! another's.
//!
//! One sampler runs on the node: the host process that holds the OFD lock
//! of `$ACCELERATOR_STATE_DIR/sampler.lock` ([`take_sampler_lease`]), a file
//! a worker's container never mounts (it gets its own worker's directory
//! and the limits file, not the state directory), so no tenant can take or
//! block it. The kernel drops the
//! lock when its holder dies; another host process's sampler takes it at
//! its next try.

use super::*;
use std::sync::atomic::AtomicI32;

/// Tokens a launch costs before its worker is measured: 50 µs of the device.
pub const LAUNCH_ESTIMATE: u64 = 50_000;
/// The charge stays within 1 µs (about a real launch's own overhead) …
pub const CHARGE_MIN: u64 = 1_000;
/// … and one day of the device per launch: at 1 % that is a wait of 100
/// days, and the token cost (`charge × 160,000 / rate`, `compute.rs`) fits a u64.
pub const CHARGE_MAX: u64 = 86_400 * 1_000_000_000;

/// A worker's compute limit on a device as its launches need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// 1..=100 (the granted share or the limit, rounded up); 0 = unlimited.
    pub percent: u64,
    /// Tokens one launch costs.
    pub charge: u64,
    /// The sampler's last measurement of the worker here (ms since boot; 0 = never).
    pub measured_ms: u64,
    /// Now, in the same clock (ms since boot).
    pub now_ms: u64,
    /// The worker is frozen here (its launches wait).
    pub held: bool,
}

/// The launch charge a row's word stands for.
#[inline(always)]
pub(super) fn charge_word(c: u64) -> u64 {
    if c == 0 {
        LAUNCH_ESTIMATE
    } else {
        c.clamp(CHARGE_MIN, CHARGE_MAX)
    }
}

/// A process's share word standing for 1: its launches cost its worker's
/// charge (12 bits of fraction).
pub const SHARE_ONE: u32 = 1 << 12;
/// A share stays within 1/4096 and 1,024 times the worker's charge.
pub const SHARE_MAX: u32 = SHARE_ONE << 10;

/// The charge of a launch of a process with share word `share` (0: not
/// measured, [`SHARE_ONE`]) in a worker whose launch charge is `charge`.
#[inline(always)]
pub fn shared_charge(charge: u64, share: u32) -> u64 {
    if share == 0 {
        return charge;
    }
    ((u128::from(charge) * u128::from(share)) >> 12).clamp(CHARGE_MIN as u128, CHARGE_MAX as u128)
        as u64
}

/// The limit of process `pid`'s worker on device slot `d` (the process is
/// registered: it has made a check there before), read through the row
/// the process keeps for the slot (`limits::row_of`).
pub fn steer_of(pid: i32, d: usize) -> Option<Steer> {
    let l = map::published()?;
    proc_slot(l, pid).ok()?;
    let row = limits::row_of(l, checked_device(d).ok()?).ok()?;
    Some(Steer {
        percent: row.rate().div_ceil(100),
        charge: charge_word(row.charge.load(Acquire)),
        measured_ms: row.measured_ms.load(Acquire),
        now_ms: freeze::now_ms(),
        held: row.cu_blocked(),
    })
}

/// The host's view of a worker's launch charge on a device (None: the
/// host never named them).
pub fn charge_of(worker: &str, uuid: &str) -> Res<Option<u64>> {
    Ok(limits::host_row_of(worker, uuid)?.map(|r| charge_word(r.charge.load(Acquire))))
}

/// The sampler's measurement: store the launch `charge` (clamped) and mark
/// the worker measured now (host side: the limits file mapped read-write).
pub fn set_charge(worker: &str, uuid: &str, charge: u64) -> Res<()> {
    let row = limits::host_row_of(worker, uuid)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} on {uuid:?}")))?;
    row.charge
        .store(charge.clamp(CHARGE_MIN, CHARGE_MAX), Release);
    row.measured_ms.store(freeze::now_ms().max(1), Release);
    Ok(())
}

/// The scheduler's grant word of a row (`limits::Row::granted`): the share
/// in basis points (1..=10,000; 0: no grant, the hard limit applies) in
/// the low half, the cap on the worker's queue on the device (launches; 0:
/// none) in the high half.
pub fn grant_word(share_bp: u32, depth: u32) -> u64 {
    u64::from(depth) << 32 | u64::from(share_bp.min(limits::RATE_MAX as u32))
}

/// The sampler's scheduler (`src/schedule.rs`): store what it grants
/// `worker` on `uuid` ([`grant_word`]; host side, the limits file mapped
/// read-write). The word is stored only when it changes: every launch of
/// the worker's processes reads its line.
pub fn set_granted(worker: &str, uuid: &str, word: u64) -> Res<()> {
    let row = limits::host_row_of(worker, uuid)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} on {uuid:?}")))?;
    if row.granted.load(Relaxed) != word {
        row.granted.store(word, Relaxed);
    }
    Ok(())
}

/// A worker the scheduler found on a device without a row there (a
/// best-effort worker the host never named on it): name it, so that its
/// hook reads the share granted to it.
pub fn enlist(worker: &str, uuid: &str) -> Res<()> {
    key_words(worker)?;
    key_words(uuid)?;
    limits::name_row(worker, uuid)
}

/// `worker`'s priority (1..=100; [`limits::DEFAULT_PRIORITY`] when never set).
pub fn priority_of(worker: &str) -> Res<u32> {
    limits::priority_of(worker)
}

/// A process of a worker's books, as [`super::ProcessUsage`] names it:
/// (pid namespace, pid there, start time).
pub type ProcessKey = (u64, i32, u64);

/// The sampler's measurement of each process's launch share (the share
/// word, [`SHARE_ONE`] = its worker's charge) on a device, written into the
/// worker's books (host side: the books as the host keeps them; a process
/// that is gone is skipped).
pub fn set_shares(worker: &str, uuid: &str, shares: &[(ProcessKey, u32)]) -> Res<()> {
    let Some(k) = kept::books(worker)? else {
        return Ok(());
    };
    k.with(|l| {
        let Some(d) = devices::lookup(l, uuid)? else {
            return Ok(());
        };
        for p in l.claimed() {
            let st = p.state.load(Acquire);
            if st & 3 != PROC_LIVE {
                continue;
            }
            let key = (p.ns.load(Relaxed), word_pid(st), p.start.load(Relaxed));
            if let Some((_, share)) = shares.iter().find(|(k, _)| *k == key) {
                p.share[d].store((*share).clamp(1, SHARE_MAX), Relaxed);
            }
        }
        Ok(())
    })
}

/// The sampler's idle period: mark every (worker, device) of `pairs` measured
/// now, their charges unchanged, in one pass over the limits file.
pub fn mark_measured(pairs: &std::collections::HashSet<(String, String)>) -> Res<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    let now = freeze::now_ms().max(1);
    let mut key = (String::new(), String::new());
    limits::each_row(|worker, uuid, row, _| {
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

// ---- the estimate --------------------------------------------------------------

/// The weight of past launches halves every this many launches counted …
pub const HALF_LAUNCHES: f64 = 32.0;
/// … and every this many seconds.
pub const HALF_SECS: f64 = 2.0;

/// The sampler's estimate of a worker's device time per launch on a
/// device: device time measured over launches counted, both summed over
/// the sampler's periods, the past weighted down by the launches since
/// (half every [`HALF_LAUNCHES`]) and by time (half every [`HALF_SECS`]).
///
/// Why sums and not a ratio per period: a kernel launched near the end of
/// a period runs in the next, so one period's ratio is off by up to a
/// kernel either way, which for kernels as long as the period (graphs of
/// 100 ms) is all of it. Summed, that error is at most one kernel over all
/// the launches in the sums; a period with device time but no launch (the
/// tail of a long kernel) adds its time at full weight. Weighting by
/// launches, not time, makes a worker that launches 16,000 times a second
/// follow its last period, and one that launches once a second keep its
/// last few launches. The time half-life bounds how long a charge measured
/// too high (a worker whose launches were counted late) holds a worker
/// that, charged so much, launches too seldom to correct it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ChargeEstimate {
    launches: f64,
    used_ns: f64,
}

impl ChargeEstimate {
    /// Add one period of `secs`: `launches` (tokens granted over the charge
    /// then in force) and `used_ns` (device time measured); the charge,
    /// once launches and device time have both been seen.
    pub fn add(&mut self, secs: f64, launches: f64, used_ns: f64) -> Option<u64> {
        let keep = 0.5f64.powf(launches.max(0.0) / HALF_LAUNCHES + secs.max(0.0) / HALF_SECS);
        self.launches = self.launches * keep + launches.max(0.0);
        self.used_ns = self.used_ns * keep + used_ns.max(0.0);
        (self.launches >= 1.0 && self.used_ns > 0.0)
            .then(|| ((self.used_ns / self.launches).round() as u64).clamp(CHARGE_MIN, CHARGE_MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charge_words_clamp() {
        assert_eq!(charge_word(0), LAUNCH_ESTIMATE);
        assert_eq!(charge_word(1), CHARGE_MIN);
        assert_eq!(charge_word(u64::MAX), CHARGE_MAX);
        // The largest charge's token cost at 1 % fits the bucket's u64.
        assert!(CHARGE_MAX.checked_mul(160_000).is_some());
    }

    #[test]
    fn shares_scale_the_charge() {
        assert_eq!(shared_charge(4_000_000, 0), 4_000_000);
        assert_eq!(shared_charge(4_000_000, SHARE_ONE), 4_000_000);
        assert_eq!(shared_charge(4_000_000, SHARE_ONE / 8), 500_000);
        assert_eq!(shared_charge(4_000_000, SHARE_ONE * 2), 8_000_000);
        // Clamped to the charge's bounds, never overflowing.
        assert_eq!(shared_charge(CHARGE_MAX, SHARE_MAX), CHARGE_MAX);
        assert_eq!(shared_charge(CHARGE_MIN, 1), CHARGE_MIN);
    }

    #[test]
    fn the_estimate_is_time_per_launch() {
        let mut e = ChargeEstimate::default();
        // Nothing seen, or launches without device time yet: no estimate.
        assert_eq!(e.add(0.1, 0.0, 0.0), None);
        assert_eq!(e.add(0.1, 2.0, 0.0), None);
        // 50 µs kernels, 1,600 a period: the last period is the estimate.
        let mut e = ChargeEstimate::default();
        assert_eq!(e.add(0.1, 1600.0, 80e6), Some(50_000));
        assert_eq!(e.add(0.1, 1000.0, 2e9), Some(2_000_000));
    }

    #[test]
    fn a_long_kernel_split_over_periods_is_counted_whole() {
        // 100 ms graphs launched once a second, each launch at the end of a
        // period and its kernel in the next: one launch, then its time.
        let mut e = ChargeEstimate::default();
        let mut charge = None;
        for _ in 0..3 {
            e.add(0.1, 1.0, 2e6);
            charge = e.add(0.1, 0.0, 98e6);
            for _ in 0..8 {
                charge = e.add(0.1, 0.0, 0.0).or(charge);
            }
        }
        // Within 5 %: the kernel's head and tail are weighed a little apart.
        let c = charge.unwrap();
        assert!((95_000_000..=105_000_000).contains(&c), "{c}");
    }

    #[test]
    fn a_bad_start_washes_out() {
        // Two launches counted before any of their time (a worker started
        // at full speed on the estimate), then one 100 ms graph a period.
        let mut e = ChargeEstimate::default();
        e.add(0.1, 2.0, 1e6);
        let mut c = 0;
        for _ in 0..4 {
            c = e.add(0.1, 1.0, 100e6).unwrap();
        }
        // Within a third after four launches: 14 % at a 10 % limit.
        assert!((65_000_000..=100_000_000).contains(&c), "{c}");
    }

    #[test]
    fn a_changed_workload_is_followed() {
        let mut e = ChargeEstimate::default();
        e.add(0.1, 100.0, 100.0 * 2e6);
        // Kernels now 8 ms: within 10 % after 6 periods of 20 launches.
        let mut c = 0;
        for _ in 0..6 {
            c = e.add(0.1, 20.0, 20.0 * 8e6).unwrap();
        }
        assert!(c >= 7_200_000, "{c}");
    }

    #[test]
    fn a_charge_too_high_does_not_stick() {
        // Measured at 1 s a launch by a glitch, then 100 µs kernels launched
        // once a second (all the charge lets through): back within 2× in 10 s.
        let mut e = ChargeEstimate::default();
        e.add(0.1, 1.0, 1e9);
        let mut c = 0;
        for _ in 0..10 {
            c = e.add(1.0, 1.0, 100e3).unwrap();
        }
        assert!(c < 200_000_000, "{c}");
    }
}
