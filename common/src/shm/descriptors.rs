//! How many descriptors a host's view may keep open (its pidfds,
//! `events.rs`): one budget for the whole process, whichever of the
//! libraries are loaded, that always leaves the host program a margin.
//!
//! liblimiter and libaccelerator each carry a copy of this code, with
//! statics of its own, and a host loads either or both (`RTLD_LOCAL`: no
//! symbol of one is found from the other). Rather than agree on a counter,
//! each copy measures what both share: the process's open descriptors,
//! counted in `/proc/self/fd` (which sees the other copy's pidfds and the
//! host's files alike). A copy may then open at most half of the room left
//! above the margin before it counts again, so two copies that measured at
//! any two moments never take more than the room between them: the
//! second measured what the first had taken since. It counts again after
//! [`REMEASURE_NS`] too, so the host's own files opened meanwhile are seen.
//! A count costs one directory read of the open descriptors, made only
//! when a pidfd is wanted: never on a call that watches nothing new.
//!
//! The margin is a quarter of the soft `RLIMIT_NOFILE`, at least
//! [`MARGIN_MIN`]; past the budget the view checks a process in `/proc` at
//! each use instead (correct, slower).

use std::sync::Mutex;

/// The fewest descriptors left to the host program.
const MARGIN_MIN: usize = 64;

/// How long a count stands while descriptors are taken on it.
const REMEASURE_NS: u64 = 1_000_000_000;

/// How long a spent budget stands before it is counted again (a host
/// starting hundreds of processes past its budget pays one count, not one
/// per process).
const SPENT_NS: u64 = 50_000_000;

/// What this copy may still take, from its last count.
struct Budget {
    credit: usize,
    counted_ns: Option<u64>,
}

static BUDGET: Mutex<Budget> = Mutex::new(Budget {
    credit: 0,
    counted_ns: None,
});

/// Take one descriptor from the budget; false when none is left (the
/// caller does without).
pub(super) fn take() -> bool {
    let mut b = BUDGET
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = super::map::monotonic_ns();
    let age = b.counted_ns.map(|t| now.saturating_sub(t));
    let recount = match age {
        None => true,
        Some(age) if b.credit == 0 => age >= SPENT_NS,
        Some(age) => age >= REMEASURE_NS,
    };
    if recount {
        b.credit = room().map_or(0, |r| r / 2);
        b.counted_ns = Some(now);
    }
    if b.credit == 0 {
        return false;
    }
    b.credit -= 1;
    true
}

/// Descriptors the process may still open before the host's margin: the
/// soft limit, less the margin, less those open now. None: they cannot be
/// counted.
fn room() -> Option<usize> {
    let soft = soft_limit();
    let margin = (soft / 4).max(MARGIN_MIN);
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    // The count includes the directory's own descriptor, closed since.
    Some(
        soft.saturating_sub(margin)
            .saturating_sub(open.saturating_sub(1)),
    )
}

/// The process's soft `RLIMIT_NOFILE`.
fn soft_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes one struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    }
}
