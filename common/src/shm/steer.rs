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
//! One sampler per device on the node holds the device's lease: an OFD lock
//! on a byte of the state file past the process slots' and workers' lock
//! bytes (`owner.rs`), which the kernel drops when its holder dies.

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
    let i = proc_slot(l, pid).ok()?;
    let w = l.procs[i].worker.load(Relaxed) as usize;
    let b = &l.wd.get(w)?.get(d)?.bucket;
    let row = limits::row_of(l, i, d).ok()?;
    Some(Steer {
        percent: row.cu_limit.load(Acquire).min(100),
        gain: gain_word(b.gain.load(Acquire)),
        measured_ms: b.measured_ms.load(Acquire),
        now_ms: freeze::now_ms(),
    })
}

fn bucket<'a>(l: &'a Layout, worker: &str, uuid: &str) -> Res<Option<&'a Bucket>> {
    let Some(w) = worker_index(l, worker, false)? else {
        return Ok(None);
    };
    let Some(d) = devices::lookup(l, uuid)? else {
        return Ok(None);
    };
    Ok(Some(&l.wd[w][d].bucket))
}

/// A worker's gain on a device and whether its bucket is full (the worker
/// left its tokens unused: raising its rate would only wind up the gain).
pub fn gain_of(worker: &str, uuid: &str) -> Res<Option<(u64, bool)>> {
    let l = shared()?;
    Ok(bucket(l, worker, uuid)?.map(|b| {
        let full = b.tat.load(Acquire) <= clock::fresh();
        (gain_word(b.gain.load(Acquire)), full)
    }))
}

/// The sampler's correction: store `gain` (clamped) and mark the worker measured now.
pub fn set_gain(worker: &str, uuid: &str, gain: u64) -> Res<()> {
    let l = shared()?;
    let b = bucket(l, worker, uuid)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} on {uuid:?}")))?;
    b.gain.store(gain.clamp(GAIN_MIN, GAIN_MAX), Release);
    b.measured_ms.store(freeze::now_ms().max(1), Release);
    Ok(())
}

/// Take (or keep) the sampler's lease of device slot `d`; false: another
/// live process holds it.
pub fn try_sampler_lease(d: usize) -> Res<bool> {
    owner::try_lock(sampler_lock(checked_device(d)?))
}

/// Lock byte of device slot `d`'s sampler: after the workers' lock bytes.
fn sampler_lock(d: usize) -> u64 {
    owner::worker_lock(MAX_WORKERS) + d as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gain_words_clamp() {
        assert_eq!(gain_word(0), GAIN_ONE);
        assert_eq!(gain_word(1), GAIN_MIN);
        assert_eq!(gain_word(u64::MAX), GAIN_MAX);
        assert_eq!(sampler_lock(0), owner::worker_lock(MAX_WORKERS));
    }
}
