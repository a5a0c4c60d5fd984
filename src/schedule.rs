//! Soft mode's allocation (issue 34; docs/compute.md, "Soft mode"): what
//! share of a device each worker on it is granted for the next period.
//!
//! Reservations, limits and shares, with priorities: every worker that
//! wants device time first gets up to its request (its **floor**; floors
//! that add up to more than the device shrink in proportion); what is left
//! goes to the workers that want more, higher priority first, and among
//! workers of one priority by water-filling (equal shares of the device,
//! never below a worker's floor, never above what it wants nor its hard
//! limit). A worker that used less than it was granted wants what it used:
//! it is granted that plus [`headroom`], so it can grow, and the
//! sampler finds it hungry again within a period or two once it does.
//!
//! All shares are basis points of the device ([`DEVICE`]). The function
//! is pure and O(n log n) in the workers of a device.

use accel_common::shm;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// The whole device, in basis points.
pub(crate) const DEVICE: u32 = 10_000;

/// What the scheduler hands out of a device: a little less than all of
/// it. Grants that add up to the whole device keep the driver's queue
/// full (a bucket lets 100 ms of its rate through at once), and a process
/// whose launch waits for room in the queue takes less than its grant: it
/// looks sated (it does not use all it was granted), is granted what it
/// used, and the others take the rest, for good (seen on the fake driver:
/// a request of 50 beside two best-effort processes sank to the third
/// that the queue gives each process). With 4 % left free the queue drains
/// and every worker is held by its own bucket. A worker alone on a device
/// is granted all of it.
pub(crate) const CAPACITY: u32 = 9_600;

/// One worker on a device, as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    /// Its request (bp; 0 = best-effort).
    pub request: u32,
    /// Its hard limit (bp; [`DEVICE`] when it has none).
    pub limit: u32,
    /// 1..=100, higher first.
    pub priority: u32,
    /// What it wants: `None` while it is hungry (it used all it was
    /// granted: as much as its limit allows), else what it used (bp).
    pub used: Option<u32>,
    /// The most a hungry worker wants this period, its request aside:
    /// [`growth`] of its grant in force.
    pub most: u32,
    /// Its books are read once a sweep only (it launched nothing for a
    /// while): it keeps its request in its grant.
    pub quiet: bool,
}

/// The most a hungry worker is granted above its request, from `granted`
/// (bp; 0: none, the whole device): twice it. A worker that grows from a
/// sated grant reaches the device in a few periods, and one that looked
/// hungry for a period because its use was measured low (before its
/// first sample, or while it idled) does not take the whole device from
/// lower-priority workers: that left them at [`MIN_GRANT`], in debt at
/// that rate for a hundred times their launch's length (a 2 ms kernel:
/// 200 ms), long after the grant came back (docs/compute.md, "Soft mode").
pub(crate) fn growth(granted: u32) -> u32 {
    if granted == 0 {
        DEVICE
    } else {
        granted.saturating_mul(2)
    }
}

/// A worker that is not hungry is granted what it used plus this much:
/// as much again, at least 10 points. Generous, because it costs the
/// others nothing unless the worker grows (their shares are computed
/// against what it used), and a bursty worker measured over a short
/// window must not look hungry by chance (docs/compute.md).
pub(crate) fn headroom(used: u32) -> u32 {
    used.max(1_000)
}

/// The share each worker of `claims` is granted (bp, in the same order)
/// out of `capacity` (bp: the device, or less, [`CAPACITY`]): at least
/// [`MIN_GRANT`] (0 would mean "no grant" to the hook), never above its
/// limit.
pub(crate) fn allocate(claims: &[Claim], capacity: u32) -> Vec<u32> {
    let cap: Vec<u32> = claims
        .iter()
        .map(|c| {
            c.limit
                .min(DEVICE)
                .min(c.used.unwrap_or(c.most.max(c.request)))
        })
        .collect();
    let mut grant: Vec<u32> = claims
        .iter()
        .zip(&cap)
        .map(|(c, &cap)| c.request.min(cap))
        .collect();
    // Oversubscribed floors shrink in proportion.
    let floors: u64 = grant.iter().map(|&g| u64::from(g)).sum();
    if floors > u64::from(capacity) {
        for g in &mut grant {
            *g = (u64::from(*g) * u64::from(capacity) / floors) as u32;
        }
    }
    // A quiet worker keeps its request in its grant (above what it is
    // given below, which takes nothing from the others unless it grows):
    // its request is guaranteed from its first launch, before a read of
    // its books sees it launch (they are read once a `SWEEP`). Shrunk as
    // the floors are when the requests add up to more than the device.
    // Not a worker read every period: one that uses less than its
    // request, granted all of it, would look sated for good beside a
    // hungry one (and, without a limit, be granted the whole device).
    let requests: u64 = claims.iter().map(|c| u64::from(c.request)).sum();
    let kept = |c: &Claim| {
        (u64::from(c.request) * u64::from(capacity) / requests.max(u64::from(capacity))) as u32
    };
    let mut left = capacity.saturating_sub(grant.iter().sum::<u32>());
    // The rest, by priority, highest first.
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(claims[i].priority));
    for group in order.chunk_by(|&a, &b| claims[a].priority == claims[b].priority) {
        if left == 0 {
            break;
        }
        left -= water_fill(group, &cap, &mut grant, left);
    }
    for (i, c) in claims.iter().enumerate() {
        if let Some(used) = c.used {
            grant[i] = grant[i].max(used.saturating_add(headroom(used)));
            if c.quiet {
                grant[i] = grant[i].max(kept(c));
            }
        }
        grant[i] = grant[i].min(c.limit.min(DEVICE)).max(MIN_GRANT);
    }
    grant
}

/// Raise the workers `group` of `grant` towards one level, each within its
/// floor (its grant now) and `cap`, using at most `left`; returns what it used.
fn water_fill(group: &[usize], cap: &[u32], grant: &mut [u32], left: u32) -> u32 {
    let floor: Vec<u32> = group.iter().map(|&i| grant[i]).collect();
    let extra = |level: u32| -> u64 {
        group
            .iter()
            .zip(&floor)
            .map(|(&i, &f)| u64::from(level.clamp(f, cap[i].max(f)) - f))
            .sum()
    };
    // The highest level whose extra fits in `left` (extra grows with the level).
    let (mut lo, mut hi) = (0u32, DEVICE);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if extra(mid) <= u64::from(left) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    for (&i, &f) in group.iter().zip(&floor) {
        grant[i] = lo.clamp(f, cap[i].max(f));
    }
    extra(lo) as u32
}

/// A grant never goes below 1 % of the device: a launch charged at a
/// lower rate would put its worker's bucket so far in debt (a 2 ms kernel
/// at 0.01 %: 20 s) that a larger grant next period could not help it for
/// seconds (the debt is kept at the rate it was taken).
pub(crate) const MIN_GRANT: u32 = 100;

/// A worker used all it was granted when its tokens over the window reach
/// this share of the grant (what its bucket let through).
const HUNGRY: f64 = 0.85;

/// The device is full when its workers used this much of it.
const FULL: u32 = 9_000;

/// The cap on a lower-priority worker's queue on the device while a worker
/// of higher priority has a live process there: launches queued or running
/// per process, the new one included (`hook/src/depth.rs`). 1: only the
/// kernel running, so a higher-priority request waits for at most one of
/// them (docs/compute.md, "Queue depth and priority latency"; 2 left one
/// queued behind it and missed the bound by a kernel).
pub(crate) const LOW_PRIORITY_DEPTH: u32 = 1;

/// Ticks in a worker's window: two periods, so that a worker launching in
/// bursts once a period does not look hungry when two bursts fall in one.
const WINDOW_TICKS: usize = 2;

/// A worker on a device, as the scheduler keeps it from period to period.
#[derive(Default)]
struct Kept {
    /// Its last ticks: (tokens granted, ns of device time its rate in
    /// force allowed, ns elapsed).
    ticks: std::collections::VecDeque<(f64, f64, f64)>,
    /// The grant word last stored.
    word: u64,
    /// Its live processes there, by (pid namespace, pid there, start
    /// time): their tokens when its books were last read.
    procs: Tokens,
    /// When its books were last read.
    read: Option<Instant>,
}

impl Kept {
    /// One tick of `dt` ns: the worker's `tokens` at `rate` (bp) in force.
    fn record(&mut self, tokens: f64, rate: u32, dt: f64) {
        if self.ticks.len() == WINDOW_TICKS {
            self.ticks.pop_front();
        }
        self.ticks
            .push_back((tokens, dt * f64::from(rate) / f64::from(DEVICE), dt));
    }

    /// What the worker wants, as [`Claim::used`]: `None` (hungry) when it
    /// took at least [`HUNGRY`] of what its grants allowed over the
    /// window, or when it has no whole tick yet; else what it used (bp).
    fn used(&self) -> Option<u32> {
        let (t, allowed, span) = self
            .ticks
            .iter()
            .fold((0.0, 0.0, 0.0), |a, x| (a.0 + x.0, a.1 + x.1, a.2 + x.2));
        (!self.ticks.is_empty() && t < HUNGRY * allowed)
            .then(|| (t / span.max(1.0) * f64::from(DEVICE)) as u32)
    }
}

/// A worker whose books showed no new launch and no new process in this
/// many reads in a row is quiet: its books are read once a [`SWEEP`]
/// only, so that a node's idle workers cost next to nothing (issue 34:
/// 500 idle workers, the sampler under 1 % of a core). Its request is
/// granted meanwhile ([`allocate`]), so it has its floor from its first
/// launch on; what it wants above that, it gets once a read sees it
/// launch: when the driver's next utilization sample shows its kernels
/// (the sampler then reads every worker's books), at the latest at its
/// next sweep.
const QUIET_READS: u32 = 5;

/// A quiet worker's books are read once in this many periods (10 s): a
/// safety net for launches no utilization sample shows. Rarely, because
/// books read after a long pause cost about ten times those read every
/// period (their pages are cold: 30–50 µs each on the 2-core test
/// machine, docs/scale.md).
const SWEEP: usize = 100;

/// Per (worker, device) the limits name: (request, hard limit, priority),
/// the first two in bp.
/// Per worker, then device (so that a lookup by `&str` allocates nothing).
type Named = HashMap<String, HashMap<String, (u32, u32, u32)>>;

/// A process's (pid namespace, pid there, start time) and its tokens.
type Tokens = HashMap<(u64, i32, u64), u64>;

/// One worker with books, as the scheduler keeps it.
#[derive(Default)]
struct Worker {
    /// Reads in a row that showed nothing new.
    quiet: u32,
    /// The last period a walk offered it (`Scheduler::reads`).
    offered: u64,
    /// Whether it waits in the sweep's wheel, and whether its sweep is due.
    in_wheel: bool,
    swept: bool,
    /// Read this period.
    read: bool,
    /// Per scheduled device where it has a live process.
    on: HashMap<String, Kept>,
}

impl Worker {
    /// This period reads its books (`name`'s), once: listed in `now`.
    fn read_now(&mut self, name: &str, now: &mut Vec<String>) {
        if !self.read {
            self.read = true;
            self.swept = false;
            now.push(name.to_owned());
        }
    }
}

/// The host sampler's scheduler: every period, for each device where a
/// worker has a request or a priority set, what each worker with a live
/// process there used (the tokens its processes' launches took: device
/// time at the charge the sampler measures) and whether it used all it
/// was granted, then [`allocate`], stored in each worker's row
/// (`shm::set_granted`). A period reads the books of the workers that
/// are not quiet and of a [`SWEEP`]'s share of the quiet ones, and
/// allocates only when a claim changed: its cost follows the workers that
/// launch, not those that wait. Nothing per launch.
#[derive(Default)]
pub(crate) struct Scheduler {
    workers: HashMap<String, Worker>,
    /// The workers that are not quiet: read every period.
    active: HashSet<String>,
    /// The quiet workers by the period (modulo [`SWEEP`]) of their next read.
    wheel: Vec<Vec<String>>,
    /// The quiet workers whose sweep is due this period.
    sweep: Vec<String>,
    /// The workers read this period.
    now: Vec<String>,
    /// Periods so far.
    period: u64,
    /// The last period that offered every worker with books to
    /// [`Self::reads`], and the generation of that set of workers
    /// (`shm::processes_of`).
    walked: Option<(u64, u64)>,
    /// The limits the last tick saw (the version of
    /// `shm::LimitsList::current`): per (worker, device) named there,
    /// (request, limit, priority), bp.
    limits: Option<(u64, Named)>,
    /// The scheduled devices of those limits.
    devices: HashSet<String>,
    /// When the last period ticked: a worker first read now is recorded
    /// over that span, its launches not counted yet (a new process's
    /// tokens start at its first read).
    last: Option<Instant>,
    /// The last allocation changed a grant (or could not store one): the
    /// next period allocates again, since a hungry worker's claim grows
    /// with its grant ([`growth`]).
    moved: bool,
}

impl Scheduler {
    /// Starts a period: call before reading the books ([`Self::due`] or
    /// [`Self::reads`]).
    pub fn next_period(&mut self) {
        self.period += 1;
        for name in self.now.drain(..) {
            if let Some(w) = self.workers.get_mut(&name) {
                w.read = false;
            }
        }
        if self.wheel.len() != SWEEP {
            self.wheel = vec![Vec::new(); SWEEP];
        }
        let slot = self.period as usize % SWEEP;
        self.sweep = std::mem::take(&mut self.wheel[slot]);
        for name in &self.sweep {
            if let Some(w) = self.workers.get_mut(name) {
                w.in_wheel = false;
                w.swept = true;
            }
        }
    }

    /// Whether this period reads the books of `worker` (asked of every
    /// worker with books, before they are touched: `shm::processes_of`);
    /// `all`: the sampler reads every worker's anyway; `touched`: a process
    /// opened its books or one of its processes exited.
    pub fn reads(&mut self, worker: &str, all: bool, touched: bool) -> bool {
        let w = match self.workers.get_mut(worker) {
            Some(w) => w,
            None => {
                self.active.insert(worker.to_owned());
                self.workers.entry(worker.to_owned()).or_default()
            }
        };
        w.offered = self.period;
        if touched && w.quiet >= QUIET_READS {
            w.quiet = 0;
            self.active.insert(worker.to_owned());
        }
        let due = all || w.quiet < QUIET_READS || w.swept;
        if due {
            w.read_now(worker, &mut self.now);
        }
        due
    }

    /// The generation of the set of workers with books that the last
    /// walk saw (`shm::processes_of`), if any: while it holds, a period
    /// reads [`Self::due`] alone.
    pub fn walked(&self) -> Option<u64> {
        self.walked.map(|(_, g)| g)
    }

    /// This period offered every worker with books to [`Self::reads`];
    /// `generation`: that set's.
    pub fn walked_now(&mut self, generation: u64) {
        self.walked = Some((self.period, generation));
    }

    /// The workers whose books this period reads, when no worker came or
    /// went since the last walk: those not quiet, the quiet ones whose
    /// sweep is due, and those `touched` (a process opened their books,
    /// or one of theirs exited: they are not quiet any more).
    pub fn due(&mut self, touched: HashSet<String>) -> Vec<String> {
        for name in touched {
            if let Some(w) = self.workers.get_mut(&name) {
                w.quiet = 0;
                self.active.insert(name);
            }
        }
        for name in self.active.iter().chain(&self.sweep) {
            if let Some(w) = self.workers.get_mut(name) {
                w.read_now(name, &mut self.now);
            }
        }
        self.now.clone()
    }

    /// The workers with a live process on device `uuid` (read or kept).
    pub fn workers_on<'a>(&'a self, uuid: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.workers
            .iter()
            .filter(move |(_, w)| w.on.contains_key(uuid))
            .map(|(name, _)| name.as_str())
    }
    /// One period: `limits` as the sampler read them now (`version`: the
    /// version of `shm::LimitsList::current`), `procs` the live processes
    /// of the workers whose books it read ([`Self::due`], [`Self::reads`]).
    pub fn tick(&mut self, limits: &[shm::LimitEntry], version: u64, procs: &[shm::ProcessUsage]) {
        let now = Instant::now();
        let last = self.last.replace(now);
        let period = self.period;
        let mut dirty = false;
        if self.limits.as_ref().is_none_or(|(v, _)| *v != version) {
            let mut named = Named::new();
            for e in limits {
                let claim = (
                    e.compute_request.unwrap_or(0) * 100,
                    e.compute_percent.map_or(DEVICE, |p| p * 100),
                    e.priority,
                );
                named
                    .entry(e.worker.clone())
                    .or_default()
                    .insert(e.device_uuid.clone(), claim);
            }
            self.limits = Some((version, named));
            self.devices = scheduled(limits).into_iter().map(str::to_owned).collect();
            // Devices no longer scheduled: their workers' grants are
            // withdrawn (the hard limit applies).
            for (name, w) in &mut self.workers {
                w.on.retain(|uuid, k| {
                    let keep = self.devices.contains(uuid);
                    if !keep {
                        withdraw(name, uuid, k);
                    }
                    keep
                });
            }
            dirty = true;
        }
        let Some((_, named)) = &self.limits else {
            return;
        };
        // Workers whose books are gone (a walk offered all the others).
        if self.walked.is_some_and(|(at, _)| at == period) {
            self.workers.retain(|name, w| {
                let keep = w.offered == period;
                if !keep {
                    for (uuid, k) in &w.on {
                        withdraw(name, uuid, k);
                    }
                    dirty |= !w.on.is_empty();
                    self.active.remove(name);
                }
                keep
            });
        }
        // Per worker read now, per scheduled device: its live processes' tokens.
        let mut seen: HashMap<&str, HashMap<&str, Tokens>> = HashMap::new();
        for p in procs {
            if p.worker.is_empty() || !self.devices.contains(&p.device_uuid) {
                continue;
            }
            seen.entry(&p.worker)
                .or_default()
                .entry(&p.device_uuid)
                .or_default()
                .insert(
                    (p.pid_namespace, p.namespace_pid, p.start_time),
                    p.compute_tokens,
                );
        }
        let none = HashMap::new();
        for name in &self.now {
            let Some(w) = self.workers.get_mut(name) else {
                continue;
            };
            let on = seen.get(name.as_str()).unwrap_or(&none);
            let mut moved = false;
            // Gone from a device: its grant there is withdrawn.
            w.on.retain(|uuid, k| {
                let keep = on.contains_key(uuid.as_str());
                if !keep {
                    withdraw(name, uuid, k);
                    dirty = true;
                }
                keep
            });
            for (&uuid, tokens) in on {
                let claim = named.get(name.as_str()).and_then(|d| d.get(uuid));
                if !w.on.contains_key(uuid) {
                    // A worker the host never named here gets a row, once,
                    // so that its hook reads what it is granted.
                    if claim.is_none() && shm::enlist(name, uuid).is_err() {
                        continue;
                    }
                    w.on.insert(uuid.to_owned(), Kept::default());
                    moved = true;
                    dirty = true;
                }
                let limit = claim.map_or(DEVICE, |c| c.1);
                let quiet = w.quiet >= QUIET_READS;
                let Some(k) = w.on.get_mut(uuid) else {
                    continue;
                };
                let mut delta = 0;
                for (p, &t) in tokens {
                    match k.procs.get(p) {
                        Some(&b) => delta += t.saturating_sub(b),
                        None => moved = true,
                    }
                }
                moved |= delta > 0;
                let rate = match k.word as u32 {
                    0 => limit,
                    g => g,
                };
                let was = k.used();
                if delta > 0 && quiet {
                    // A quiet worker launching again: what it did over the
                    // sweep says nothing of what it wants now; hungry
                    // until its next period says otherwise.
                    k.ticks.clear();
                } else if let Some(t) = k.read.or(last) {
                    k.record(delta as f64, rate, now.duration_since(t).as_nanos() as f64);
                }
                dirty |= k.used() != was;
                k.read = Some(now);
                if k.procs != *tokens {
                    k.procs.clone_from(tokens);
                }
            }
            if moved {
                w.quiet = 0;
                if !self.active.contains(name) {
                    self.active.insert(name.clone());
                }
            } else {
                w.quiet = w.quiet.saturating_add(1);
                if w.quiet >= QUIET_READS {
                    self.active.remove(name);
                    if !w.in_wheel {
                        w.in_wheel = true;
                        self.wheel[period as usize % SWEEP].push(name.clone());
                    }
                }
            }
        }
        if dirty || self.moved {
            self.moved = self.allocate_all();
        }
    }

    /// Every scheduled device's grants, stored where they changed;
    /// whether any did (or failed to).
    fn allocate_all(&mut self) -> bool {
        let Some((_, named)) = &self.limits else {
            return false;
        };
        let mut by_device: HashMap<&str, Vec<(&str, Claim, u64)>> = HashMap::new();
        for (worker, w) in &self.workers {
            for (uuid, k) in &w.on {
                let (request, limit, priority) = named
                    .get(worker)
                    .and_then(|d| d.get(uuid))
                    .copied()
                    .unwrap_or_else(|| {
                        let p = shm::priority_of(worker).unwrap_or(shm::DEFAULT_PRIORITY);
                        (0, DEVICE, p)
                    });
                let claim = Claim {
                    request,
                    limit,
                    priority,
                    used: k.used(),
                    most: growth(k.word as u32),
                    quiet: w.quiet >= QUIET_READS,
                };
                by_device
                    .entry(uuid)
                    .or_default()
                    .push((worker, claim, k.word));
            }
        }
        let mut changed = Vec::new();
        for (uuid, workers) in by_device {
            let claims: Vec<Claim> = workers.iter().map(|w| w.1).collect();
            for (&(worker, _, was), word) in workers.iter().zip(grant_words(claims)) {
                if word != was {
                    changed.push((worker.to_owned(), uuid.to_owned(), word));
                }
            }
        }
        let moved = !changed.is_empty();
        for (worker, uuid, word) in changed {
            if shm::set_granted(&worker, &uuid, word).is_ok() {
                if let Some(k) = self
                    .workers
                    .get_mut(&worker)
                    .and_then(|w| w.on.get_mut(&uuid))
                {
                    k.word = word;
                }
            }
        }
        moved
    }
}

/// A worker's grant on a device it left: withdrawn (its hard limit applies).
fn withdraw(worker: &str, uuid: &str, k: &Kept) {
    if k.word != 0 {
        let _ = shm::set_granted(worker, uuid, 0);
    }
}

/// The grant words ([`shm::grant_word`]) of the workers of one device.
fn grant_words(mut claims: Vec<Claim>) -> Vec<u64> {
    // A full device with no worker held by its grant: what each used is
    // what the device gave it, not what it wants.
    let total: u32 = claims.iter().filter_map(|c| c.used).sum();
    if total >= FULL && claims.iter().all(|c| c.used.is_some()) {
        for c in &mut claims {
            c.used = None;
        }
    }
    let top = claims.iter().map(|c| c.priority).max().unwrap_or(0);
    // Alone, a worker shares the driver's queue with no one.
    let capacity = if claims.len() == 1 { DEVICE } else { CAPACITY };
    claims
        .iter()
        .zip(allocate(&claims, capacity))
        .map(|(claim, share)| {
            let depth = if claim.priority < top {
                LOW_PRIORITY_DEPTH
            } else {
                0
            };
            // The whole device to a worker without a limit is no limit:
            // not a bucket at 100 %, which a launch charge measured a
            // little high would hold below the device.
            let share = if share >= DEVICE && claim.limit >= DEVICE {
                0
            } else {
                share
            };
            shm::grant_word(share, depth)
        })
        .collect()
}

/// The devices where a worker has a request or a priority set: the others
/// are left to hard limits alone, exactly as before soft mode.
pub(crate) fn scheduled(limits: &[shm::LimitEntry]) -> HashSet<&str> {
    limits
        .iter()
        .filter(|e| e.compute_request.is_some() || e.priority != shm::DEFAULT_PRIORITY)
        .map(|e| e.device_uuid.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "GPU-0";

    fn limit(worker: &str) -> shm::LimitEntry {
        shm::LimitEntry {
            worker: worker.into(),
            device_uuid: GPU.into(),
            memory_bytes: None,
            compute_percent: None,
            compute_request: Some(10),
            priority: 50,
        }
    }

    fn process(worker: &str, pid: i32, tokens: u64) -> shm::ProcessUsage {
        shm::ProcessUsage {
            pid,
            namespace_pid: pid,
            pid_namespace: 1,
            start_time: 1,
            worker: worker.into(),
            device_uuid: GPU.into(),
            memory_bytes: 0,
            compute_tokens: tokens,
            compute_share: 0,
        }
    }

    /// One period of `s` as the sampler runs it: a walk when `walk`, else
    /// the due workers by name; `tokens` per worker; returns those read.
    fn period(
        s: &mut Scheduler,
        limits: &[shm::LimitEntry],
        walk: bool,
        tokens: &[(&str, u64)],
    ) -> Vec<String> {
        s.next_period();
        let read: Vec<String> = if walk {
            let r = tokens
                .iter()
                .filter(|(w, _)| s.reads(w, false, false))
                .map(|(w, _)| w.to_string())
                .collect();
            s.walked_now(7);
            r
        } else {
            s.due(HashSet::new())
        };
        let procs: Vec<shm::ProcessUsage> = tokens
            .iter()
            .enumerate()
            .filter(|(_, (w, _))| read.iter().any(|r| r == w))
            .map(|(i, &(w, t))| process(w, i as i32 + 100, t))
            .collect();
        s.tick(limits, 1, &procs);
        let mut read = read;
        read.sort();
        read
    }

    #[test]
    fn quiet_workers_are_read_once_a_sweep_and_a_launch_makes_them_active() {
        let limits = [limit("a"), limit("b")];
        let mut s = Scheduler::default();
        // A walk finds both; each is read every period until quiet.
        assert_eq!(
            period(&mut s, &limits, true, &[("a", 0), ("b", 0)]),
            ["a", "b"]
        );
        let mut b = 0;
        for _ in 0..QUIET_READS {
            b += 1_000;
            assert_eq!(
                period(&mut s, &limits, false, &[("a", 0), ("b", b)]),
                ["a", "b"]
            );
        }
        // `a` launched nothing in QUIET_READS reads: quiet; `b` is read on.
        assert_eq!(period(&mut s, &limits, false, &[("a", 0), ("b", b)]), ["b"]);
        // `b` goes quiet too; then nobody is read until a sweep.
        let mut reads = 0;
        for _ in 0..SWEEP + QUIET_READS as usize {
            reads += period(&mut s, &limits, false, &[("a", 0), ("b", b)]).len();
        }
        // `b` was read until quiet (QUIET_READS - 1 more), then each once
        // by its sweep.
        assert_eq!(reads, QUIET_READS as usize - 1 + 2);
        // A sweep that finds `a` launching makes it active, and hungry.
        let mut launched = false;
        for _ in 0..SWEEP {
            let read = period(&mut s, &limits, false, &[("a", 5_000), ("b", b)]);
            if read.iter().any(|r| r == "a") {
                launched = true;
                break;
            }
        }
        assert!(launched);
        assert_eq!(
            period(&mut s, &limits, false, &[("a", 9_000), ("b", b)]),
            ["a"]
        );
        let a = &s.workers["a"].on[GPU];
        assert_eq!(a.ticks.len(), 1, "the sweep's span is not counted");
        // A walk when the driver sampled reads every worker, quiet or not.
        s.next_period();
        assert!(!s.reads("b", false, false));
        assert!(s.reads("b", true, false));
        // A process opened the books of quiet `b` (or one of its exited):
        // read now, and every period until quiet again.
        s.next_period();
        let mut due = s.due(HashSet::from(["b".to_string()]));
        due.sort();
        assert_eq!(due, ["a", "b"]);
        assert!(s.active.contains("b"));
    }

    #[test]
    fn a_worker_whose_books_are_gone_is_forgotten_at_the_next_walk() {
        let limits = [limit("a"), limit("b")];
        let mut s = Scheduler::default();
        period(&mut s, &limits, true, &[("a", 0), ("b", 0)]);
        assert!(s.workers.contains_key("b"));
        period(&mut s, &limits, true, &[("a", 0)]);
        assert!(!s.workers.contains_key("b"));
        assert!(s.workers.contains_key("a"));
    }

    fn hungry(request: u32, limit: u32, priority: u32) -> Claim {
        Claim {
            request: request * 100,
            limit: limit * 100,
            priority,
            used: None,
            most: DEVICE,
            quiet: false,
        }
    }

    fn using(request: u32, limit: u32, priority: u32, used: u32) -> Claim {
        Claim {
            used: Some(used * 100),
            ..hungry(request, limit, priority)
        }
    }

    /// The grants in percent (rounded down).
    fn shares(claims: &[Claim]) -> Vec<u32> {
        allocate(claims, DEVICE).iter().map(|g| g / 100).collect()
    }

    #[test]
    fn a_request_beside_best_effort_gets_its_request_and_the_rest_is_shared() {
        assert_eq!(shares(&[hungry(50, 100, 50), hungry(0, 100, 50)]), [50, 50]);
        // Water-filling: equal shares, never below a floor.
        assert_eq!(shares(&[hungry(20, 100, 50), hungry(0, 100, 50)]), [50, 50]);
        assert_eq!(
            shares(&[hungry(60, 100, 50), hungry(0, 100, 50), hungry(0, 100, 50)]),
            [60, 20, 20]
        );
    }

    #[test]
    fn requests_that_fit_are_kept() {
        assert_eq!(
            shares(&[hungry(30, 100, 50), hungry(70, 100, 50)]),
            [30, 70]
        );
    }

    #[test]
    fn oversubscribed_requests_shrink_in_proportion() {
        assert_eq!(
            shares(&[hungry(60, 100, 50), hungry(90, 100, 50)]),
            [40, 60]
        );
        // Shrunk in proportion to the floors, priority aside.
        assert_eq!(
            shares(&[hungry(60, 100, 90), hungry(90, 100, 10)]),
            [40, 60]
        );
    }

    #[test]
    fn alone_a_worker_gets_the_device_up_to_its_limit() {
        assert_eq!(shares(&[hungry(30, 100, 50)]), [100]);
        assert_eq!(shares(&[hungry(30, 60, 50)]), [60]);
        assert_eq!(shares(&[hungry(0, 100, 50)]), [100]);
    }

    #[test]
    fn limits_cap_and_leave_the_rest_to_others() {
        assert_eq!(shares(&[hungry(30, 40, 50), hungry(0, 100, 50)]), [40, 60]);
        assert_eq!(shares(&[hungry(0, 20, 50), hungry(0, 30, 50)]), [20, 30]);
    }

    #[test]
    fn higher_priority_takes_the_rest_first() {
        // Floors first, whatever the priority.
        assert_eq!(shares(&[hungry(0, 100, 90), hungry(30, 100, 10)]), [70, 30]);
        assert_eq!(shares(&[hungry(0, 100, 10), hungry(0, 100, 90)]), [1, 100]);
        // Limited high priority: the rest flows down.
        assert_eq!(
            shares(&[hungry(0, 50, 90), hungry(0, 100, 50), hungry(0, 100, 10)]),
            [50, 50, 1]
        );
        // A starved worker is granted 1 %, never 0 ("no grant").
        assert_eq!(
            allocate(&[hungry(0, 100, 10), hungry(0, 100, 90)], DEVICE)[0],
            MIN_GRANT
        );
    }

    #[test]
    fn a_capacity_below_the_device_scales_what_is_shared() {
        let g = allocate(&[hungry(30, 100, 50), hungry(70, 100, 50)], CAPACITY);
        assert_eq!(g, [2880, 6720]);
        let g = allocate(&[hungry(60, 100, 50), hungry(90, 100, 50)], CAPACITY);
        assert_eq!(g, [3840, 5760]);
        // Alone: the capacity, or its limit.
        assert_eq!(allocate(&[hungry(30, 100, 50)], CAPACITY), [CAPACITY]);
        assert_eq!(allocate(&[hungry(30, 60, 50)], CAPACITY), [6000]);
    }

    #[test]
    fn an_idle_worker_donates_what_it_does_not_use() {
        // Request 70, using 20: it is granted its use and headroom, the
        // best-effort worker all the rest of what it uses.
        let g = shares(&[using(70, 100, 50, 20), hungry(0, 100, 50)]);
        assert_eq!(g, [40, 80]);
        // Idle: the headroom alone; a hungry worker takes the device.
        let g = shares(&[using(50, 100, 50, 0), hungry(0, 100, 50)]);
        assert_eq!(g, [10, 100]);
        // Quiet (its books read once a sweep): its request kept, so that
        // it has it from its first launch.
        let quiet = |c: Claim| Claim { quiet: true, ..c };
        let g = shares(&[quiet(using(50, 100, 50, 0)), hungry(0, 100, 50)]);
        assert_eq!(g, [50, 100]);
        let g = shares(&[quiet(using(0, 100, 50, 0)), hungry(0, 100, 50)]);
        assert_eq!(g, [10, 100]);
        // Requests of quiet workers that add up to more than the device
        // are kept shrunk, as floors are.
        let g = shares(&[quiet(using(60, 100, 50, 0)), quiet(using(90, 100, 50, 0))]);
        assert_eq!(g, [40, 60]);
        // Headroom never above the limit.
        assert_eq!(shares(&[using(0, 30, 50, 25)]), [30]);
    }

    #[test]
    fn a_hungry_worker_grows_from_its_grant() {
        // Inference (priority 90) was granted 11 % and looks hungry:
        // 22 % now, training (priority 10) the rest, not the least grant.
        let infer = Claim {
            most: growth(1_100),
            ..hungry(0, 100, 90)
        };
        assert_eq!(shares(&[infer, hungry(0, 100, 10)]), [22, 78]);
        // Its request is never held back by it.
        let serve = Claim {
            most: growth(1_000),
            ..hungry(50, 100, 50)
        };
        assert_eq!(shares(&[serve, hungry(0, 100, 50)]), [50, 50]);
        // No grant in force: the whole device.
        assert_eq!(growth(0), DEVICE);
    }

    #[test]
    fn a_hungry_worker_with_a_request_gets_it_back() {
        // The same two once the worker with request 50 is hungry again.
        assert_eq!(shares(&[hungry(50, 100, 50), hungry(0, 100, 50)]), [50, 50]);
    }

    #[test]
    fn hungry_is_using_what_the_grant_allowed() {
        let mut k = Kept::default();
        // Not seen a whole tick yet: hungry.
        assert_eq!(k.used(), None);
        // 100 ms at a grant of 50 %: 50 ms allowed; 48 ms taken: hungry.
        k.record(48e6, 5_000, 100e6);
        assert_eq!(k.used(), None);
        // Then 10 ms: 58 of 100 ms allowed over the window: it used 29 %.
        k.record(10e6, 5_000, 100e6);
        assert_eq!(k.used(), Some(2_900));
        // The window is two ticks: the first is forgotten.
        k.record(10e6, 5_000, 100e6);
        assert_eq!(k.used(), Some(1_000));
        // A grant raised this tick counts at its own rate.
        k.record(45e6, 5_000, 100e6);
        k.record(10e6, 1_000, 100e6);
        assert_eq!(k.used(), None);
    }

    fn share(word: u64) -> u32 {
        word as u32
    }

    #[test]
    fn grant_words_of_a_device() {
        // Alone without a limit: no grant (unlimited); with one: the limit.
        assert_eq!(grant_words(vec![hungry(30, 100, 50)]), [0]);
        assert_eq!(share(grant_words(vec![hungry(30, 60, 50)])[0]), 6_000);
        // Shared: 96 % handed out.
        let w = grant_words(vec![hungry(30, 100, 50), hungry(70, 100, 50)]);
        assert_eq!(
            w.iter().map(|&w| share(w)).collect::<Vec<_>>(),
            [2_880, 6_720]
        );
        // A lower priority beside a higher one: its queue is capped.
        let w = grant_words(vec![hungry(30, 100, 90), hungry(0, 100, 10)]);
        assert_eq!((w[0] >> 32, w[1] >> 32), (0, u64::from(LOW_PRIORITY_DEPTH)));
        // A full device with nobody held by a grant: all taken as hungry.
        let w = grant_words(vec![using(30, 100, 50, 50), using(70, 100, 50, 50)]);
        assert_eq!(
            w.iter().map(|&w| share(w)).collect::<Vec<_>>(),
            [2_880, 6_720]
        );
        // Not full: what each used, plus headroom.
        let w = grant_words(vec![using(30, 100, 50, 20), using(70, 100, 50, 20)]);
        assert_eq!(
            w.iter().map(|&w| share(w)).collect::<Vec<_>>(),
            [4_000, 4_000]
        );
    }

    #[test]
    fn many_workers_oversubscribed_keep_their_shrunk_floors() {
        // 500 workers with requests of 1 %: 500 %, each floor shrunk to
        // 20 bp, granted the least grant.
        let claims: Vec<Claim> = (0..500).map(|i| hungry(1, 100, 1 + i % 100)).collect();
        assert!(allocate(&claims, DEVICE).iter().all(|&g| g == MIN_GRANT));
        // Best-effort and hungry: the highest priority takes the device.
        let claims: Vec<Claim> = (0..500).map(|i| hungry(0, 100, 1 + i % 100)).collect();
        let g = allocate(&claims, DEVICE);
        assert_eq!(g.iter().sum::<u32>(), DEVICE + 495 * MIN_GRANT);
        assert!(claims
            .iter()
            .zip(&g)
            .all(|(c, &g)| (c.priority == 100) == (g > MIN_GRANT)));
    }
}
