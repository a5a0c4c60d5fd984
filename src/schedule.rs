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

use crate::sampler::{proc_key, ProcKey};
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

/// The host sampler's scheduler: every period, for each device where a
/// worker has a request or a priority set, what each worker with a live
/// process there used (the tokens its processes' launches took: device
/// time at the charge the sampler measures) and whether it used all it
/// was granted, then [`allocate`], stored in each worker's row
/// (`shm::set_granted`). O(processes) a period; nothing per launch.
#[derive(Default)]
pub(crate) struct Scheduler {
    /// Per process and device: its tokens at the last tick.
    tokens: HashMap<ProcKey, u64>,
    /// Per (worker, device) scheduled.
    kept: HashMap<(String, String), Kept>,
    last: Option<Instant>,
}

impl Scheduler {
    /// One period: `limits` and `procs` as the sampler read them now.
    pub fn tick(&mut self, limits: &[shm::LimitEntry], procs: &[shm::ProcessUsage]) {
        let now = Instant::now();
        let dt = self
            .last
            .map_or(0.0, |t| now.duration_since(t).as_nanos() as f64);
        self.last = Some(now);
        let devices = scheduled(limits);
        let mut entries: HashMap<(&str, &str), &shm::LimitEntry> = HashMap::new();
        for e in limits {
            entries.insert((&e.worker, &e.device_uuid), e);
        }
        // Per (worker, device) with a live process: the tokens since the last tick.
        let mut used: HashMap<(String, String), u64> = HashMap::new();
        let mut tokens = HashMap::new();
        for p in procs {
            if p.worker.is_empty() || !devices.contains(p.device_uuid.as_str()) {
                continue;
            }
            let key = proc_key(p);
            let delta = self
                .tokens
                .get(&key)
                .map_or(0, |&b| p.compute_tokens.saturating_sub(b));
            tokens.insert(key, p.compute_tokens);
            *used
                .entry((p.worker.clone(), p.device_uuid.clone()))
                .or_default() += delta;
        }
        self.tokens = tokens;
        // Workers gone from a scheduled device, or on a device no longer
        // scheduled: their grant is withdrawn (the hard limit applies).
        self.kept.retain(|(w, u), k| {
            let keep = used.contains_key(&(w.clone(), u.clone()));
            if !keep && k.word != 0 {
                let _ = shm::set_granted(w, u, 0);
            }
            keep
        });
        let mut by_device: HashMap<&str, Vec<(&str, Claim)>> = HashMap::new();
        for ((worker, uuid), &delta) in &used {
            let entry = entries.get(&(worker.as_str(), uuid.as_str()));
            // A worker the host never named here gets a row, once, so
            // that its hook reads what it is granted.
            let key = (worker.clone(), uuid.clone());
            if entry.is_none()
                && !self.kept.contains_key(&key)
                && shm::enlist(worker, uuid).is_err()
            {
                continue;
            }
            let limit = entry
                .and_then(|e| e.compute_percent)
                .map_or(DEVICE, |p| p * 100);
            let k = self.kept.entry(key).or_default();
            let rate = match k.word as u32 {
                0 => limit,
                g => g,
            };
            if dt > 0.0 {
                k.record(delta as f64, rate, dt);
            }
            let claim = Claim {
                request: entry.and_then(|e| e.compute_request).unwrap_or(0) * 100,
                limit,
                priority: entry.map_or_else(
                    || shm::priority_of(worker).unwrap_or(shm::DEFAULT_PRIORITY),
                    |e| e.priority,
                ),
                used: k.used(),
                most: growth(k.word as u32),
            };
            by_device.entry(uuid).or_default().push((worker, claim));
        }
        for (uuid, workers) in by_device {
            let claims: Vec<Claim> = workers.iter().map(|w| w.1).collect();
            for ((worker, _), word) in workers.iter().zip(grant_words(claims)) {
                let Some(k) = self.kept.get_mut(&(worker.to_string(), uuid.to_string())) else {
                    continue;
                };
                if k.word != word && shm::set_granted(worker, uuid, word).is_ok() {
                    k.word = word;
                }
            }
        }
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

    fn hungry(request: u32, limit: u32, priority: u32) -> Claim {
        Claim {
            request: request * 100,
            limit: limit * 100,
            priority,
            used: None,
            most: DEVICE,
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
