//! The token bucket's clock: CLOCK_MONOTONIC in 1/16 ns, with one reading
//! shared by up to [`REUSE`] consecutive compute checks of this process.
//!
//! Why: a clock_gettime costs about as much as the rest of a compute
//! check (about 30 ns on the 2-core VMs this was measured on). A reading t'
//! older than the true time t is only used where it cannot matter much (see
//! `compute_fast` and `compute_slow`): to grant a request that finds the
//! bucket's TAT at or past t', charging it from TAT. If TAT ≥ t that is
//! exactly what the true time gives; if t' ≤ TAT < t (the bucket refilled since t'), the grant is
//! charged up to t − TAT early. A refill (TAT < t') and a refusal always
//! take a fresh reading, so the worker's long-run rate is exact and a burst
//! can exceed B by at most the age of a reading (the time spanned by 64 of
//! this process's compute checks), and never by more than B: grants against
//! one reading t' end where TAT reaches t' + 100 ms. The statics are racy by
//! design: any value one of them holds is a true past reading.

use super::map;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Checks one reading may serve. A kernel launch itself takes microseconds,
/// so at any real launch rate 64 checks span well under a millisecond of
/// the 100 ms window; 16 cost about 1 ns more per check (`make bench`).
const REUSE: u64 = 64;

static READING: AtomicU64 = AtomicU64::new(0);
/// Checks served by `READING`; starts spent so the first check reads.
static USES: AtomicU64 = AtomicU64::new(REUSE);

/// (time, whether it was read just now).
#[inline]
pub(super) fn now() -> (u64, bool) {
    let uses = USES.load(Relaxed);
    if uses < REUSE {
        USES.store(uses + 1, Relaxed);
        return (READING.load(Relaxed), false);
    }
    (fresh(), true)
}

/// A fresh reading, remembered for the next checks.
#[cold]
pub(super) fn fresh() -> u64 {
    let t = map::monotonic_ns().saturating_mul(16);
    READING.store(t, Relaxed);
    USES.store(1, Relaxed);
    t
}
