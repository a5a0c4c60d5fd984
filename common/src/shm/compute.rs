//! Compute: a token bucket per worker and device (GCRA form)
//!
//! One token is one nanosecond of the whole device's compute, so a device
//! has a capacity of 10^9 tokens/s. A worker with a compute limit of p %
//! is refilled at `p × 10^7` tokens/s and its bucket holds 100 ms of that
//! rate: burst `B = p × 10^6` tokens. The bucket is one word, the
//! theoretical arrival time TAT (in 1/16 ns since boot): a request of k
//! tokens at time t costs `k × 1600 / p` sixteenths of a ns, and is granted
//! iff `max(TAT, t) + cost ≤ t + 100 ms`, by one CAS of TAT. The available
//! tokens are `(t + 100 ms − max(TAT, t)) × p / 1600`. A request larger than
//! B is never granted. Without a compute limit every request is granted and
//! `UINT64_MAX` tokens are reported. The time t comes from `clock.rs`: one
//! reading serves up to 64 checks of a process, never for a refill or a
//! refusal, which bounds what that saves (there) by the age of the reading.

use super::*;

/// Outcome of a compute check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeOutcome {
    pub should_block: bool,
    pub available_tokens: u64,
}

/// `CheckAndRecordComputeOps` for process `pid`.
pub fn check_compute(pid: i32, uuid: &str, tokens: u64) -> Res<ComputeOutcome> {
    if !workers::is_own(pid) {
        // Another process: in its worker's books.
        return workers::on_device_of(pid, uuid, |b, d| compute_in(b, pid, d, tokens));
    }
    check_compute_on(pid, device_slot_for(pid, uuid)?, tokens)
}

/// [`check_compute`] on device slot `d` (from [`device_slot_for`]).
#[inline]
pub fn check_compute_on(pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    match compute_fast(pid, d, tokens) {
        Some(outcome) => Ok(outcome),
        None => compute_slow(pid, d, tokens),
    }
}

/// The token-bucket window in the TAT's unit (1/16 ns).
pub(super) const WINDOW: u64 = BURST_NS * 16;

/// The cost of `tokens` at `percent` (1..=100) in 1/16 ns: `tokens × 1600 /
/// percent`, rounded up; `None` when it does not fit in a u64 (such a
/// request is larger than any burst).
#[inline(always)]
pub(super) fn token_cost(tokens: u64, percent: u64) -> Option<u64> {
    Some(tokens.checked_mul(1600)?.div_ceil(percent))
}

/// Tokens left in a bucket with theoretical arrival time `tat` at `now`.
#[inline(always)]
pub(super) fn tokens_left(tat: u64, now: u64, percent: u64) -> u64 {
    // percent ≤ 100 and the window is 1.6e9, so the product fits in a u64
    // (no 128-bit division on the hot path).
    WINDOW.saturating_sub(tat.saturating_sub(now)) * percent / 1600
}

/// The common case of a compute check, in one pass: the caller's own
/// registered slot, a device it used before, the worker not frozen, and
/// either no limit or a grant decided on this process's last TAT and the
/// shared clock reading (see `clock.rs`), won at the first CAS. Anything
/// else (a refill, a refusal, a wrong guess, a lost race) is `None`, and
/// [`compute_slow`], which handles every case, decides.
#[inline(always)]
pub(super) fn compute_fast(pid: i32, d: usize, tokens: u64) -> Option<ComputeOutcome> {
    let l = map::published()?;
    let i = own_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = l.wd.get(d)?;
    let row = limits::row(d)?;
    if p.devmask.load(Relaxed) & 1 << d == 0 || row.cu_blocked() {
        return None;
    }
    let percent = row.cu_limit.load(Acquire).min(100);
    let _owner = local::enter(i, d);
    if percent == 0 {
        count_tokens(p, d, tokens);
        return Some(ComputeOutcome {
            should_block: false,
            available_tokens: u64::MAX,
        });
    }
    let cost = token_cost(tokens, percent)?;
    let (now, fresh) = clock::now();
    let tat = LAST_TAT[d].load(Relaxed);
    // A grant on a cached reading only for a bucket in debt (clock.rs).
    if tat < now && !fresh {
        return None;
    }
    let next = tat.max(now).checked_add(cost)?;
    if next > now.saturating_add(WINDOW) {
        return None;
    }
    wd.bucket
        .tat
        .compare_exchange(tat, next, AcqRel, Relaxed)
        .ok()?;
    LAST_TAT[d].store(next, Relaxed);
    count_tokens(p, d, tokens);
    Some(ComputeOutcome {
        should_block: false,
        available_tokens: tokens_left(next, now, percent),
    })
}

/// Add granted tokens to the process's counter on device `d`. Only the
/// process's acting thread (`local::enter`) writes it: no locked add.
#[inline(always)]
pub(super) fn count_tokens(p: &Proc, d: usize, tokens: u64) {
    let t = &p.tokens[d];
    t.store(t.load(Relaxed).wrapping_add(tokens), Relaxed);
}

/// Every case of a compute check (see [`compute_fast`]).
#[inline(never)]
pub(super) fn compute_slow(pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    let d = checked_device(d)?;
    workers::books_of_pid(pid, false)?.with(|b| compute_in(b, pid, d, tokens))
}

/// A compute check of process `pid` on device slot `d` of its worker's books `l`.
fn compute_in(l: &Layout, pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    let i = proc_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = &l.wd[d];
    let row = limits::row_of(l, d)?;
    // ≤ 100 (set_compute_limit); `min` keeps it so whatever the word holds.
    let percent = row.cu_limit.load(Acquire).min(100);
    mark_device(p, d);
    if row.cu_blocked() {
        let a = if percent == 0 {
            u64::MAX
        } else {
            tokens_left(wd.bucket.tat.load(Acquire), clock::fresh(), percent)
        };
        return Ok(ComputeOutcome {
            should_block: true,
            available_tokens: a,
        });
    }
    // As in `memory_in`: no process-local lock on another worker's books.
    let _owner = map::is_published(l).then(|| local::enter(i, d));
    if percent == 0 {
        count_tokens(p, d, tokens);
        return Ok(ComputeOutcome {
            should_block: false,
            available_tokens: u64::MAX,
        });
    }
    let cost = match token_cost(tokens, percent) {
        Some(c) => c as u128,
        None => (tokens as u128 * 1600).div_ceil(percent as u128),
    };
    let (mut now, mut fresh) = clock::now();
    // Start from the TAT this process last wrote on the device: right when
    // no other process took tokens since, and otherwise the failed CAS
    // brings the line over once, exclusive, with the true value (a load
    // first would bring it shared, and the CAS fetch it again).
    let mut tat = LAST_TAT[d].load(Relaxed);
    let mut known = false;
    let mut b = Backoff::new();
    loop {
        // A cached reading decides only grants that find the bucket in
        // debt against it; a refill or a refusal takes a fresh one, and
        // is never decided on a guessed TAT.
        let next = tat.max(now) as u128 + cost;
        let refused = next > (now + WINDOW) as u128;
        if (refused || (!fresh && tat < now)) && !(known && fresh) {
            if known {
                (now, fresh) = (clock::fresh(), true);
            } else {
                (tat, known) = (wd.bucket.tat.load(Acquire), true);
            }
            continue;
        }
        if refused {
            return Ok(ComputeOutcome {
                should_block: true,
                available_tokens: tokens_left(tat, now, percent),
            });
        }
        let next = next as u64;
        match wd.bucket.tat.compare_exchange(tat, next, AcqRel, Acquire) {
            Ok(_) => {
                LAST_TAT[d].store(next, Relaxed);
                count_tokens(p, d, tokens);
                return Ok(ComputeOutcome {
                    should_block: false,
                    available_tokens: tokens_left(next, now, percent),
                });
            }
            // A guess that was wrong is no contention; losing a race is.
            // Either way the next try starts from the value the failed CAS
            // saw: a fresh load would pull the line over shared, and the
            // CAS fetch it again (2 processes: ~35 → ~28 ns median).
            Err(current) if !known => (tat, known) = (current, true),
            Err(current) => {
                b.wait();
                tat = current;
            }
        }
    }
}

/// Per device, the TAT this process last wrote (a guess for the next CAS).
pub(super) static LAST_TAT: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
