//! Contention management for the shared words.
//!
//! Two processes hammering one cache line with compare-and-swap lose most of
//! their time moving the line back and forth: each one's load brings it
//! over shared, its CAS fetches it again, and its follow-up store (the
//! `settled` word) a third time, while the other process's attempt in
//! between fails and starts over. Waiting a little after a failed attempt
//! lets the process that won finish its whole operation with the line in
//! its own cache. The waits are short and bounded (see [`Backoff::wait`]),
//! so a process that is preempted or killed costs the others at most that.

use std::hint::spin_loop;

/// Exponential backoff: 64, 128, 256, 512, then 1,024 pause instructions
/// per wait (a `pause` takes ~24 ns on the AMD EPYC this was tuned on, ~40
/// ns on recent Intel cores: 1.5 µs for the first wait, 24–40 µs for the
/// longest). Smaller first waits (32) and larger caps (8,192) both measured
/// slower under 2 processes.
pub struct Backoff(u32);

/// Waits before the longest one.
const STEPS: u32 = 4;

impl Backoff {
    pub fn new() -> Backoff {
        Backoff(0)
    }

    /// Wait before the next attempt, twice as long as the last time (up to
    /// the longest wait).
    #[cold]
    pub fn wait(&mut self) {
        for _ in 0..64u32 << self.0.min(STEPS) {
            spin_loop();
        }
        self.0 += 1;
    }

    /// Whether the longest wait has been made.
    pub fn exhausted(&self) -> bool {
        self.0 > STEPS
    }
}
