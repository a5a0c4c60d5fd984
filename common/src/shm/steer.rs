//! Steering compute limits by measurement
//!
//! A launch's cost is not known when it is launched, so the hook charges an
//! estimate, and a sampler that measures the device's per-process
//! utilization corrects each worker's refill rate: the bucket's `gain`
//! word, a multiplier in 1/[`GAIN_ONE`] (0 = never corrected = 1.0). The hook
//! divides its estimate by the gain, which is the same as multiplying the
//! rate. `measured_ms` says when the sampler last measured the worker on the
//! device, so a launcher can tell a live measurement from none.
//!
//! One sampler per device and worker holds the device's lease: an OFD lock
//! on a byte of the worker's books past the process slots' lock bytes
//! (`owner.rs`), which the kernel drops when its holder dies. A sampler
//! reaches another worker's gain through that worker's books, mapped for
//! the call (`workers::books_of`), where its mount view has them.

use super::*;

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
/// registered: it has made a check there before).
pub fn steer_of(pid: i32, d: usize) -> Option<Steer> {
    let l = map::published()?;
    proc_slot(l, pid).ok()?;
    let b = &l.wd.get(d)?.bucket;
    let row = limits::row_of(l, d).ok()?;
    Some(Steer {
        percent: row.cu_limit.load(Acquire).min(100),
        gain: gain_word(b.gain.load(Acquire)),
        measured_ms: b.measured_ms.load(Acquire),
        now_ms: freeze::now_ms(),
    })
}

/// Run `f` on `worker`'s bucket on `uuid`; None when it has none.
fn with_bucket<T>(worker: &str, uuid: &str, f: impl FnOnce(&Bucket) -> T) -> Res<Option<T>> {
    let Some(b) = workers::books_of(worker)? else {
        return Ok(None);
    };
    let Some(d) = devices::lookup(&b, uuid)? else {
        return Ok(None);
    };
    Ok(Some(f(&b.wd[d].bucket)))
}

/// A worker's gain on a device and whether its bucket is full (the worker
/// left its tokens unused: raising its rate would only wind up the gain).
pub fn gain_of(worker: &str, uuid: &str) -> Res<Option<(u64, bool)>> {
    with_bucket(worker, uuid, |b| {
        let full = b.tat.load(Acquire) <= clock::fresh();
        (gain_word(b.gain.load(Acquire)), full)
    })
}

/// The sampler's correction: store `gain` (clamped) and mark the worker measured now.
pub fn set_gain(worker: &str, uuid: &str, gain: u64) -> Res<()> {
    with_bucket(worker, uuid, |b| {
        b.gain.store(gain.clamp(GAIN_MIN, GAIN_MAX), Release);
        b.measured_ms.store(freeze::now_ms().max(1), Release);
    })?
    .ok_or_else(|| Error::NotFound(format!("worker {worker:?} on {uuid:?}")))
}

/// Take (or keep) the sampler's lease of device slot `d`; false: another
/// live process holds it.
pub fn try_sampler_lease(d: usize) -> Res<bool> {
    owner::try_lock(shared()?, owner::sampler_lock(checked_device(d)?))
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
}
