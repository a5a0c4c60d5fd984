//! A call on another worker's books waits on that worker's state for
//! [`BUDGET`] at most.
//!
//! A host's call about another worker (`AddWorkerProcess`, a usage query, a
//! check naming another worker's process) runs on that worker's books
//! (`kept.rs`), which its tenant writes: a lock byte it keeps, or a usage
//! word naming an op that never settles, would keep the call's loops
//! spinning. Each loop that waits on the books calls [`check`]; inside
//! [`within`], once the budget is spent, `check` unwinds the call (with
//! `resume_unwind`, which prints nothing) back to `within`, which refuses
//! it. The protocol allows a call to stop at any point, as a killed process
//! does (`reclaim.rs`): the next process to touch the books completes or
//! undoes what it left. Locks of this process it held are let go on the way
//! (their guards' drops); lock bytes on the books' descriptor go with the
//! descriptor, which `kept.rs` closes at the end of each call.
//!
//! Outside `within` (a process's own books), `check` is one load.
//!
//! The budget counts from the call's start: a call that waits for its
//! turn on the books behind this process's other calls on them ([`Turn`])
//! waits within it, so N host threads queued on a stalled worker's books
//! are each refused after 2 s, not after N × 2 s.

use crate::{Error, Res};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long a call may wait on another worker's books.
pub(super) const BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Calls running inside [`within`] in this process: [`check`] costs one
/// load without.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's deadline (CLOCK_MONOTONIC ns), 0 outside [`within`].
    static DEADLINE: Cell<u64> = const { Cell::new(0) };
}

/// The unwinding payload of a spent budget.
struct Spent;

/// In a loop that waits on another worker's books: give up the call once
/// its budget is spent (nothing outside [`within`]).
#[inline]
pub(super) fn check() {
    if RUNNING.load(Relaxed) == 0 {
        return;
    }
    let deadline = DEADLINE.try_with(Cell::get).unwrap_or(0);
    if deadline != 0 && super::map::monotonic_ns() > deadline {
        std::panic::resume_unwind(Box::new(Spent));
    }
}

/// What is left of this thread's budget; None outside [`within`].
fn left() -> Option<Duration> {
    match DEADLINE.try_with(Cell::get).unwrap_or(0) {
        0 => None,
        deadline => Some(Duration::from_nanos(
            deadline.saturating_sub(super::map::monotonic_ns()),
        )),
    }
}

/// A turn that this process's calls on one worker's books take one at a
/// time (`kept::Kept::with`), waited for within the waiting call's budget.
pub(super) struct Turn {
    /// Whether a call has the turn, and how many wait for it.
    state: Mutex<(bool, u32)>,
    free: Condvar,
}

/// A turn taken: given back when dropped (on unwinding too).
pub(super) struct TurnGuard<'a>(&'a Turn);

impl Turn {
    pub(super) const fn new() -> Turn {
        Turn {
            state: Mutex::new((false, 0)),
            free: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (bool, u32)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take the turn, waiting while another call has it; inside
    /// [`within`], a budget spent meanwhile unwinds the call as [`check`]
    /// does.
    pub(super) fn take(&self) -> TurnGuard<'_> {
        let mut st = self.state();
        while st.0 {
            let wait = left().unwrap_or(Duration::from_secs(3600));
            st.1 += 1;
            st = self
                .free
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            st.1 -= 1;
            if st.0 {
                // Not holding the mutex while the call unwinds.
                drop(st);
                check();
                st = self.state();
            }
        }
        st.0 = true;
        TurnGuard(self)
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.0 = false;
        // A wake costs a system call: only for a call that waits.
        if st.1 > 0 {
            self.0.free.notify_one();
        }
    }
}

/// Run `f`, a call on another worker's books, with the budget (a call
/// already inside keeps its own deadline).
pub(super) fn within<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    let outer = DEADLINE.try_with(Cell::get).unwrap_or(0);
    if outer != 0 {
        return f();
    }
    let deadline = super::map::monotonic_ns() + BUDGET.as_nanos() as u64;
    let _ = DEADLINE.try_with(|d| d.set(deadline));
    RUNNING.fetch_add(1, AcqRel);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    RUNNING.fetch_sub(1, AcqRel);
    let _ = DEADLINE.try_with(|d| d.set(0));
    match r {
        Ok(r) => r,
        Err(p) if p.is::<Spent>() => Err(Error::OperationFailed(format!(
            "another worker's limiter books stayed locked or inconsistent for {} s under this call; refused",
            BUDGET.as_secs()
        ))),
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_call_that_keeps_waiting_is_refused_after_its_budget() {
        let t0 = Instant::now();
        let r: Res<()> = within(|| loop {
            check();
            std::thread::yield_now();
        });
        assert!(r.unwrap_err().to_string().contains("stayed locked"));
        assert!(t0.elapsed() >= BUDGET && t0.elapsed() < BUDGET * 3);
        // Outside a call, nothing is bounded and the next call works.
        check();
        assert_eq!(within(|| Ok(7)).unwrap(), 7);
    }

    #[test]
    fn calls_queued_for_a_turn_are_refused_within_their_own_budget() {
        static TURN: Turn = Turn::new();
        let t0 = Instant::now();
        // A call that keeps the books stalled, and three queued behind it.
        let calls: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let r: Res<()> = within(|| {
                        let _turn = TURN.take();
                        loop {
                            check();
                            std::thread::yield_now();
                        }
                    });
                    (r.is_err(), t0.elapsed())
                })
            })
            .collect();
        for c in calls {
            let (refused, took) = c.join().unwrap();
            assert!(refused && took < BUDGET * 2, "refused after {took:?}");
        }
        // Given back by every refused call.
        let again: Res<()> = within(|| {
            drop(TURN.take());
            Ok(())
        });
        assert!(again.is_ok());
    }
}
