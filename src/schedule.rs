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

/// The whole device, in basis points.
pub const DEVICE: u32 = 10_000;

/// One worker on a device, as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Its request (bp; 0 = best-effort).
    pub request: u32,
    /// Its hard limit (bp; [`DEVICE`] when it has none).
    pub limit: u32,
    /// 1..=100, higher first.
    pub priority: u32,
    /// What it wants: `None` while it is hungry (it used all it was
    /// granted: as much as its limit allows), else what it used (bp).
    pub used: Option<u32>,
}

/// A worker that is not hungry is granted what it used plus this much:
/// as much again, at least 10 points. Generous, because it costs the
/// others nothing unless the worker grows (their shares are computed
/// against what it used), and a bursty worker measured over a short
/// window must not look hungry by chance (docs/compute.md).
pub fn headroom(used: u32) -> u32 {
    used.max(1_000)
}

/// The share each worker of `claims` is granted (bp, in the same order):
/// at least 1 (0 would mean "no grant" to the hook), never above its limit.
pub fn allocate(claims: &[Claim]) -> Vec<u32> {
    let cap: Vec<u32> = claims
        .iter()
        .map(|c| c.limit.min(DEVICE).min(c.used.unwrap_or(DEVICE)))
        .collect();
    let mut grant: Vec<u32> = claims
        .iter()
        .zip(&cap)
        .map(|(c, &cap)| c.request.min(cap))
        .collect();
    // Oversubscribed floors shrink in proportion.
    let floors: u64 = grant.iter().map(|&g| u64::from(g)).sum();
    if floors > u64::from(DEVICE) {
        for g in &mut grant {
            *g = (u64::from(*g) * u64::from(DEVICE) / floors) as u32;
        }
    }
    let mut left = DEVICE - grant.iter().sum::<u32>();
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
        grant[i] = grant[i].min(c.limit.min(DEVICE)).max(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hungry(request: u32, limit: u32, priority: u32) -> Claim {
        Claim {
            request: request * 100,
            limit: limit * 100,
            priority,
            used: None,
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
        allocate(claims).iter().map(|g| g / 100).collect()
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
        assert_eq!(shares(&[hungry(0, 100, 10), hungry(0, 100, 90)]), [0, 100]);
        // Limited high priority: the rest flows down.
        assert_eq!(
            shares(&[hungry(0, 50, 90), hungry(0, 100, 50), hungry(0, 100, 10)]),
            [50, 50, 0]
        );
        // A starved worker is granted 1 bp, never 0 ("no grant").
        assert_eq!(allocate(&[hungry(0, 100, 10), hungry(0, 100, 90)])[0], 1);
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
    fn a_hungry_worker_with_a_request_gets_it_back() {
        // The same two once the worker with request 50 is hungry again.
        assert_eq!(shares(&[hungry(50, 100, 50), hungry(0, 100, 50)]), [50, 50]);
    }

    #[test]
    fn many_workers_oversubscribed_keep_their_shrunk_floors() {
        // 500 workers with requests of 1 %: 500 %, each floor shrunk to 20 bp.
        let claims: Vec<Claim> = (0..500).map(|i| hungry(1, 100, 1 + i % 100)).collect();
        assert!(allocate(&claims).iter().all(|&g| g == 20));
        // Best-effort and hungry: the highest priority takes the device.
        let claims: Vec<Claim> = (0..500).map(|i| hungry(0, 100, 1 + i % 100)).collect();
        let g = allocate(&claims);
        assert_eq!(g.iter().sum::<u32>(), DEVICE + 495);
        assert!(claims
            .iter()
            .zip(&g)
            .all(|(c, &g)| (c.priority == 100) == (g > 1)));
    }
}
