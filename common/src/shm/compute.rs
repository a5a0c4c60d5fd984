//! Compute: a token bucket per worker and device (GCRA form)
//!
//! One token is one nanosecond of the whole device's compute, so a device
//! has a capacity of 10^9 tokens/s. A worker refilled at a rate of r basis
//! points of the device (`limits::Row::rate`: the share the host's
//! scheduler granted it, else its compute limit, p % = 100·p bp) gets
//! `r × 10^5` tokens/s and its bucket holds 100 ms of that rate: burst
//! `B = r × 10^4` tokens. The bucket is one word, the theoretical arrival
//! time TAT (in 1/16 ns since boot): a request of k tokens at time t costs
//! `k × 160,000 / r` sixteenths of a ns, and is granted iff
//! `max(TAT, t) + min(cost, W) ≤ t + W` (W = 100 ms), by one CAS of TAT to
//! `max(TAT, t) + cost`. The available tokens are
//! `(t + W − max(TAT, t)) × r / 160,000`. A request larger than B is granted on
//! a full bucket and leaves it in debt (TAT past `t + W`) until the refill
//! has paid it back: one launch of a kernel longer than the burst costs
//! its whole length, and the next waits for it (docs/compute.md, "Charges").
//! Without a compute limit every request is granted and `UINT64_MAX`
//! tokens are reported.
//!
//! The hook's launches ([`launch_on`]) never take the refusal: they
//! *reserve*. A reservation always moves TAT by the worker's launch charge
//! (its measured time per launch, from its row of the limits file) and
//! waits until the bucket holds `min(cost, B)` at its place in that order:
//! the TAT is a queue, so the reservations of a worker's processes go in
//! the order they asked, and no process of a worker can take a refill
//! another has been waiting for. A reservation is a process's **turn**: it
//! adds the worker's charge to the process's credit (process-local), and a
//! launch takes the process's own charge from it (the worker's scaled by
//! the process's share, which the host sampler measures): a process whose
//! kernels are shorter than the worker's mean makes several launches a
//! turn, one whose kernels are longer waits several turns for one, so the
//! hungry processes of a worker share it by device time, not by launches
//! (a turn each, round by round). The time t comes from `clock.rs`: one
//! reading serves up to 64 checks of a process, never for a refill or a
//! refusal, which bounds what that saves (there) by the age of the reading.

use super::steer::{charge_word, shared_charge};
use super::*;

/// Outcome of a compute check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeOutcome {
    pub should_block: bool,
    pub available_tokens: u64,
}

/// A hook launch's check ([`launch_on`]): what the launch does, and the
/// cap on its worker's queue on the device (`limits::Row::grant`; 0:
/// none), read with the rate from the same word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    pub launch: Launch,
    pub depth_cap: u32,
}

/// What a hook launch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// No compute limit: go.
    Unlimited,
    /// Its tokens are taken: go after this many ns (0: at once).
    After(u64),
    /// A turn is taken but the process's credit does not cover the launch
    /// yet: ask again after this many ns.
    Again(u64),
    /// The worker is frozen: nothing taken; ask again later.
    Held,
}

/// What a check asks of the bucket.
#[derive(Clone, Copy)]
pub(super) enum Ask {
    /// `CheckAndRecordComputeOps`: these tokens, or a refusal.
    Check(u64),
    /// A hook launch: the worker's launch charge on the device, reserved.
    Reserve,
}

impl Ask {
    /// The tokens a check takes from the bucket: a launch's turn takes
    /// the worker's charge.
    #[inline(always)]
    fn tokens(self, row: &limits::Row) -> u64 {
        match self {
            Ask::Check(t) => t,
            Ask::Reserve => charge_word(row.charge.load(Relaxed)),
        }
    }
}

/// Per device: this process's credit, tokens its turns took that its
/// launches have not used yet (process-local; only the acting thread,
/// `local::enter`, changes it). At most one launch's charge and one turn.
static CREDIT: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The charge of a launch of process `p` on device `d` whose worker's
/// charge is `turn`: the worker's scaled by the process's share.
#[inline(always)]
fn own_charge(p: &Proc, d: usize, turn: u64) -> u64 {
    shared_charge(turn, p.share[d].load(Relaxed))
}

/// A launch on device `d` whose own charge is `own`: true when the
/// process's credit covers it (taken).
#[inline(always)]
fn pay(d: usize, own: u64) -> bool {
    let c = CREDIT[d].load(Relaxed);
    if c < own {
        return false;
    }
    CREDIT[d].store(c - own, Relaxed);
    true
}

/// A turn of `turn` tokens granted: credit it; then the launch (its own
/// charge `own`) is paid (true) or needs another turn (false).
#[inline(always)]
fn credit(d: usize, turn: u64, own: u64) -> bool {
    // Never more than a launch and a turn: a share that fell meanwhile
    // leaves no hoard.
    let c = (CREDIT[d].load(Relaxed) + turn).min(own.saturating_add(turn));
    let paid = c >= own;
    CREDIT[d].store(if paid { c - own } else { c }, Relaxed);
    paid
}

/// Per device: the (tokens, rate) of this process's last launch's turn,
/// packed by [`cost_key`], and its cost: a worker's charge and rate change
/// once a sampler period at most, so a launch skips the division (only the
/// acting thread, `local::enter`, reads or writes them: the pair is
/// consistent).
static COST_KEY: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static COST: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// A launch charge (at most `CHARGE_MAX` < 2^47 tokens) and a rate (at
/// most 10,000 < 2^14 basis points) in one word.
#[inline(always)]
fn cost_key(tokens: u64, rate: u64) -> u64 {
    tokens << 14 | rate
}

/// [`token_cost`] of a launch's turn on device `d` (the acting thread's).
#[inline(always)]
fn turn_cost(d: usize, tokens: u64, rate: u64) -> Option<u64> {
    let key = cost_key(tokens, rate);
    if COST_KEY[d].load(Relaxed) == key {
        return Some(COST[d].load(Relaxed));
    }
    let cost = token_cost(tokens, rate)?;
    COST_KEY[d].store(key, Relaxed);
    COST[d].store(cost, Relaxed);
    Some(cost)
}

/// A launch of a kernel (or graph) by process `pid` on device slot `d`
/// (from [`device_slot_for`]): the hook's door to the bucket. Inlined into
/// the hook's launch with [`compute_fast`] (a call returning this `Res`
/// through memory cost ~2 ns a launch); [`compute_slow`] stays out of line.
#[inline(always)]
pub fn launch_on(pid: i32, d: usize) -> Res<Launched> {
    let o = match compute_fast(pid, d, Ask::Reserve) {
        Some(o) => o,
        None => compute_slow(pid, d, Ask::Reserve)?,
    };
    let launch = if o.outcome.should_block {
        Launch::Held
    } else if o.unlimited {
        Launch::Unlimited
    } else if o.again {
        Launch::Again(o.wait / 16)
    } else {
        Launch::After(o.wait / 16)
    };
    Ok(Launched {
        launch,
        depth_cap: o.depth_cap,
    })
}

/// A check's outcome, and for a reservation how long (1/16 ns) the
/// launch waits for its place.
#[derive(Clone, Copy)]
pub(super) struct Checked {
    outcome: ComputeOutcome,
    wait: u64,
    /// A launch's turn that did not pay for it (see [`Launch::Again`]).
    again: bool,
    /// No compute limit (`available_tokens` is `u64::MAX`): told apart
    /// without comparing the tokens a launch never reads.
    unlimited: bool,
    /// The worker's queue cap on the device (`limits::Row::grant`).
    depth_cap: u32,
}

impl Checked {
    #[inline(always)]
    fn go(available_tokens: u64, depth_cap: u32) -> Checked {
        Checked {
            outcome: ComputeOutcome {
                should_block: false,
                available_tokens,
            },
            wait: 0,
            again: false,
            unlimited: false,
            depth_cap,
        }
    }

    /// No compute limit: every request granted.
    #[inline(always)]
    fn unlimited(depth_cap: u32) -> Checked {
        Checked {
            unlimited: true,
            ..Checked::go(u64::MAX, depth_cap)
        }
    }

    fn refused(available_tokens: u64) -> Checked {
        Checked {
            outcome: ComputeOutcome {
                should_block: true,
                available_tokens,
            },
            ..Checked::go(available_tokens, 0)
        }
    }
}

/// `CheckAndRecordComputeOps` for process `pid`.
pub fn check_compute(pid: i32, uuid: &str, tokens: u64) -> Res<ComputeOutcome> {
    if !workers::is_own(pid) {
        // Another process: in its worker's books.
        return workers::on_device_of(pid, uuid, |b, d| {
            compute_in(b, pid, d, Ask::Check(tokens)).map(|c| c.outcome)
        });
    }
    check_compute_on(pid, device_slot_for(pid, uuid)?, tokens)
}

/// [`check_compute`] on device slot `d` (from [`device_slot_for`]).
#[inline]
pub fn check_compute_on(pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    match compute_fast(pid, d, Ask::Check(tokens)) {
        Some(c) => Ok(c.outcome),
        None => compute_slow(pid, d, Ask::Check(tokens)).map(|c| c.outcome),
    }
}

/// The token-bucket window in the TAT's unit (1/16 ns).
pub(super) const WINDOW: u64 = BURST_NS * 16;

/// 1/16 ns per token at a rate of one basis point of the device.
const COST_PER_BP: u64 = 16 * limits::RATE_MAX;

/// The cost of `tokens` at `rate` (basis points, 1..=10,000: `Row::rate`)
/// in 1/16 ns: `tokens × 160,000 / rate`, rounded up; `None` when it does
/// not fit in a u64 (such a request is larger than any burst).
#[inline(always)]
pub(super) fn token_cost(tokens: u64, rate: u64) -> Option<u64> {
    Some(tokens.checked_mul(COST_PER_BP)?.div_ceil(rate))
}

/// Where a request of `cost` finds its place in a bucket with theoretical
/// arrival time `tat` at `now`: (the next TAT, the time the bucket holds
/// `min(cost, W)` for it). Granted at once iff that time is `≤ now`; `None`
/// when it does not fit in a u64.
#[inline(always)]
pub(super) fn place(tat: u64, now: u64, cost: u64) -> Option<(u64, u64)> {
    let base = tat.max(now);
    Some((
        base.checked_add(cost)?,
        (base + cost.min(WINDOW)).saturating_sub(WINDOW),
    ))
}

/// Tokens left in a bucket with theoretical arrival time `tat` at `now`
/// and refill `rate` (basis points).
#[inline(always)]
pub(super) fn tokens_left(tat: u64, now: u64, rate: u64) -> u64 {
    // rate ≤ 10,000 and the window is 1.6e9, so the product fits in a u64
    // (no 128-bit division on the hot path).
    WINDOW.saturating_sub(tat.saturating_sub(now)) * rate / COST_PER_BP
}

/// The common case of a compute check, in one pass: the caller's own
/// registered slot, a device it used before, the worker not frozen, and
/// either no limit or a grant decided on this process's last TAT and the
/// shared clock reading (see `clock.rs`), won at the first CAS. Anything
/// else (a refill, a refusal or a wait, a wrong guess, a lost race) is
/// `None`, and [`compute_slow`], which handles every case, decides.
#[inline(always)]
pub(super) fn compute_fast(pid: i32, d: usize, ask: Ask) -> Option<Checked> {
    let l = map::published()?;
    let i = own_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = l.wd.get(d)?;
    let row = limits::row(d)?;
    if p.devmask.load(Relaxed) & 1 << d == 0 || row.cu_blocked() {
        return None;
    }
    let (rate, depth) = row.grant();
    let tokens = ask.tokens(row);
    let _owner = local::enter(i, d);
    if rate == 0 {
        count_tokens(p, d, tokens);
        return Some(Checked::unlimited(depth));
    }
    let reserve = matches!(ask, Ask::Reserve);
    let own = if reserve { own_charge(p, d, tokens) } else { 0 };
    if reserve && pay(d, own) {
        return Some(Checked::go(0, depth));
    }
    let cost = if reserve {
        turn_cost(d, tokens, rate)?
    } else {
        token_cost(tokens, rate)?
    };
    let (now, fresh) = clock::now();
    let tat = LAST_TAT[d].load(Relaxed);
    // A grant on a cached reading only for a bucket in debt (clock.rs).
    if tat < now && !fresh {
        return None;
    }
    let (next, start) = place(tat, now, cost)?;
    if start > now {
        return None;
    }
    wd.bucket
        .tat
        .compare_exchange(tat, next, AcqRel, Relaxed)
        .ok()?;
    LAST_TAT[d].store(next, Relaxed);
    count_tokens(p, d, tokens);
    let mut c = Checked::go(tokens_left(next, now, rate), depth);
    c.again = reserve && !credit(d, tokens, own);
    Some(c)
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
pub(super) fn compute_slow(pid: i32, d: usize, ask: Ask) -> Res<Checked> {
    let d = checked_device(d)?;
    workers::with_books_of_pid(pid, false, |b| compute_in(b, pid, d, ask)).map(|(_, c)| c)
}

/// A compute check of process `pid` on device slot `d` of its worker's books `l`.
fn compute_in(l: &Layout, pid: i32, d: usize, ask: Ask) -> Res<Checked> {
    let i = proc_slot(l, pid)?;
    let p = &l.procs[i];
    let wd = &l.wd[d];
    let row = limits::row_of(l, d)?;
    let (rate, depth) = row.grant();
    mark_device(p, d);
    if row.cu_blocked() {
        return Ok(if rate == 0 {
            Checked::refused(u64::MAX)
        } else {
            Checked::refused(tokens_left(
                wd.bucket.tat.load(Acquire),
                clock::fresh(),
                rate,
            ))
        });
    }
    // As in `memory_in`: no process-local lock on another worker's books.
    let _owner = map::is_published(l).then(|| local::enter(i, d));
    let tokens = ask.tokens(row);
    if rate == 0 {
        count_tokens(p, d, tokens);
        return Ok(Checked::unlimited(depth));
    }
    // Only this process's own books carry its credit (the hook's launches).
    let reserve = matches!(ask, Ask::Reserve) && _owner.is_some();
    let own = if reserve { own_charge(p, d, tokens) } else { 0 };
    if reserve && pay(d, own) {
        return Ok(Checked::go(0, depth));
    }
    // A cost no u64 TAT can hold is refused (a launch charge, at most
    // `CHARGE_MAX`, always fits).
    let Some(cost) = token_cost(tokens, rate) else {
        let tat = wd.bucket.tat.load(Acquire);
        return Ok(Checked::refused(tokens_left(tat, clock::fresh(), rate)));
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
        // debt against it; a refill, a refusal or a wait takes a fresh one,
        // and is never decided on a guessed TAT.
        let Some((next, start)) = place(tat, now, cost) else {
            return Ok(Checked::refused(tokens_left(tat, now, rate)));
        };
        let short = start > now;
        if (short || (!fresh && tat < now)) && !(known && fresh) {
            if known {
                (now, fresh) = (clock::fresh(), true);
            } else {
                (tat, known) = (wd.bucket.tat.load(Acquire), true);
            }
            continue;
        }
        if short && matches!(ask, Ask::Check(_)) {
            return Ok(Checked::refused(tokens_left(tat, now, rate)));
        }
        match wd.bucket.tat.compare_exchange(tat, next, AcqRel, Acquire) {
            Ok(_) => {
                LAST_TAT[d].store(next, Relaxed);
                count_tokens(p, d, tokens);
                let mut c = Checked::go(tokens_left(next, now, rate), depth);
                c.wait = start.saturating_sub(now);
                c.again = reserve && !credit(d, tokens, own);
                return Ok(c);
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
