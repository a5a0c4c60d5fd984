//! Queue depth: a worker whose row of the limits file carries a depth cap
//! N (`shm::depth_cap`, set by the host's scheduler) keeps at most N of a
//! process's launches queued or running on the device at once.
//!
//! The limiter sits in front of the driver's queue: once a launch is
//! queued it runs in its turn, behind everything queued before it, and a
//! kernel that runs runs to its end. A higher-priority worker's launch
//! therefore waits for what lower-priority workers have queued; capping
//! their queue bounds that wait (docs/compute.md, "Queue depth").
//!
//! How deep the queue is comes from the driver without syncing the
//! program: after each gated launch the hook records an event of its own
//! on the launch's stream ([`Events`]: the real `cuEventRecord`), and
//! before the next it asks the driver (`cuEventQuery`) which of the
//! recorded ones have completed. A launch that would make more than N
//! waits, in sleeps of [`POLL`] (a freeze is seen within [`WAIT_MAX`]),
//! holding no lock while it sleeps. Its place is reserved before the
//! driver sees it, so threads of a process launching at once never take
//! more than N between them.
//!
//! The events are the hook's: created without timing, per context (an
//! event records only on its context's streams), reused from a pool once
//! complete, never recorded into a stream that captures (a capture makes
//! graph nodes, not queued work: such a launch is not gated), forgotten in
//! a forked child (whose driver state is not the parent's). The depth is
//! per process: the processes of a worker keep N each.
//!
//! An ungated worker pays nothing more: the launch's check of the limiter
//! reads the cap with its rate (`limits::launch`).

use crate::forksafe::ForkSafe;
use crate::launch::WAIT_MAX;
use crate::limits;
use accel_common::shm::MAX_DEVICES;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often a launch held by the cap asks the driver again once the
/// launch it waits for is due: a small part of a kernel (it sees the end at
/// most this late). Until then it sleeps through the launch's expected
/// length (the process's launches' measured mean), so a waiting thread
/// wakes a few times a kernel, not every [`POLL`].
pub const POLL: Duration = Duration::from_micros(50);

/// The driver calls the gate makes (`ffi`: the real functions).
pub trait Events {
    /// A new event of the current context, without timing.
    fn create(&self) -> Option<u64>;
    /// Record `event` on `stream` (a launch's stream, the per-thread
    /// default stream as `CU_STREAM_PER_THREAD`).
    fn record(&self, event: u64, stream: u64) -> bool;
    /// Some(true): complete; Some(false): not yet; None: the driver no
    /// longer knows it (its context was destroyed).
    fn done(&self, event: u64) -> Option<bool>;
    fn destroy(&self, event: u64);
    /// Whether `stream` is capturing into a graph.
    fn capturing(&self, stream: u64) -> bool;
}

/// An event of the hook's, its context, and when it was last recorded.
#[derive(Clone, Copy)]
struct Event {
    ctx: u64,
    handle: u64,
    at: Instant,
}

#[derive(Default)]
struct Slot {
    /// Recorded after launches, not seen complete yet.
    queued: VecDeque<Event>,
    /// Launches admitted and not recorded yet.
    admitted: u32,
    timing: Timing,
}

/// How long the launches of a slot take, as the gate sees them end.
#[derive(Default)]
struct Timing {
    /// When an event was last seen complete.
    done_at: Option<Instant>,
    /// A launch's device time, as seen: from its record (or the end of the
    /// one before, if later) to its end being seen; a running mean.
    length: Duration,
}

impl Timing {
    /// The event `e` was seen complete at `now`.
    fn completed(&mut self, e: &Event, now: Instant) {
        let from = self.done_at.map_or(e.at, |d| d.max(e.at));
        let sample = now.saturating_duration_since(from);
        self.length = if self.length.is_zero() {
            sample
        } else {
            (self.length * 7 + sample) / 8
        };
        self.done_at = Some(now);
    }

    /// How long a launch that found no room sleeps before asking again:
    /// until the oldest launch in flight (`oldest`) is due to end (less an
    /// eighth of a launch, for the spread), at least [`POLL`], at most
    /// [`WAIT_MAX`].
    fn nap(&self, oldest: Option<&Event>, now: Instant) -> Duration {
        let due = oldest.map(|e| {
            let from = self.done_at.map_or(e.at, |d| d.max(e.at));
            (from + self.length - self.length / 8).saturating_duration_since(now)
        });
        due.unwrap_or(POLL).clamp(POLL, WAIT_MAX)
    }
}

#[derive(Default)]
pub struct Books {
    slots: Vec<Slot>,
    /// Complete events, for the next records of their context.
    free: Vec<Event>,
}

impl Books {
    fn slot(&mut self, slot: usize) -> &mut Slot {
        if self.slots.len() < MAX_DEVICES {
            self.slots.resize_with(MAX_DEVICES, Slot::default);
        }
        &mut self.slots[slot]
    }

    /// Drop the slot's completed events into the pool (no allocation but
    /// the pool's growth); how many are left in flight (admitted ones
    /// included).
    fn in_flight(&mut self, ev: &impl Events, slot: usize, now: Instant) -> u32 {
        self.slot(slot);
        let Books { slots, free } = self;
        let Slot {
            queued,
            admitted,
            timing,
        } = &mut slots[slot];
        queued.retain(|e| match ev.done(e.handle) {
            Some(false) => true,
            Some(true) => {
                timing.completed(e, now);
                free.push(*e);
                false
            }
            None => false,
        });
        queued.len() as u32 + *admitted
    }

    /// How long a launch on `slot` that found no room sleeps (`Timing::nap`).
    fn nap(&mut self, slot: usize, now: Instant) -> Duration {
        let s = self.slot(slot);
        s.timing.nap(s.queued.front(), now)
    }

    fn event(&mut self, ev: &impl Events, ctx: u64) -> Option<Event> {
        match self.free.iter().position(|e| e.ctx == ctx) {
            Some(i) => Some(self.free.swap_remove(i)),
            None => ev.create().map(|handle| Event {
                ctx,
                handle,
                at: Instant::now(),
            }),
        }
    }
}

pub static BOOKS: ForkSafe<Books> = ForkSafe::new();

/// A launch whose worker's queue is capped, as the launch's check found
/// it (`launch::admit`): its device slot, the cap there, and the context
/// it launches in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capped {
    pub slot: usize,
    pub cap: u32,
    pub ctx: u64,
}

/// A launch admitted under its worker's cap: recorded by [`launched`].
pub struct Ticket {
    slot: usize,
    stream: u64,
    ctx: u64,
    /// When it was admitted: the record's time (the driver's launch call
    /// between the two is short beside a launch's device time), so that a
    /// launch reads the clock once.
    at: Instant,
}

/// Before a launch on `stream` under its worker's cap (`c`, from the
/// launch's check, which found the worker not frozen): wait until fewer
/// than the cap of the worker's launches are in flight, and take a place.
/// None: not gated (the cap lifted while it waited, or the stream
/// captures).
#[cold]
#[inline(never)]
pub fn admit(ev: &impl Events, c: Capped, stream: u64) -> Option<Ticket> {
    if ev.capturing(stream) {
        return None;
    }
    let mut cap = c.cap;
    loop {
        let now = Instant::now();
        let nap = BOOKS.with(|b| {
            if b.in_flight(ev, c.slot, now) < cap {
                b.slot(c.slot).admitted += 1;
                return None;
            }
            Some(b.nap(c.slot, now))
        });
        let Some(d) = nap else {
            return Some(Ticket {
                slot: c.slot,
                stream,
                ctx: c.ctx,
                at: now,
            });
        };
        std::thread::sleep(d);
        // Asked again after each sleep: the cap and a freeze.
        loop {
            cap = limits::depth_cap(c.slot);
            if cap == 0 {
                return None;
            }
            if !limits::steer(c.slot).is_some_and(|s| s.held) {
                break;
            }
            std::thread::sleep(WAIT_MAX);
        }
    }
}

/// After the driver answered the admitted launch (`ok`: it was queued):
/// record its event.
#[cold]
#[inline(never)]
pub fn launched(ev: &impl Events, t: Ticket, ok: bool) {
    BOOKS.with(|b| {
        let s = b.slot(t.slot);
        s.admitted = s.admitted.saturating_sub(1);
        if !ok {
            return;
        }
        let Some(mut e) = b.event(ev, t.ctx) else {
            return;
        };
        e.at = t.at;
        if ev.record(e.handle, t.stream) {
            b.slot(t.slot).queued.push_back(e);
        } else {
            ev.destroy(e.handle);
        }
    });
}

/// A context is being destroyed: its events go with it.
pub fn forget_context(ctx: u64) {
    if let Some(b) = BOOKS.lock().as_mut() {
        b.free.retain(|e| e.ctx != ctx);
        for s in &mut b.slots {
            s.queued.retain(|e| e.ctx != ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A driver whose events complete when the test says.
    #[derive(Default)]
    struct Fake {
        next: RefCell<u64>,
        done: RefCell<Vec<u64>>,
        live: RefCell<Vec<u64>>,
        recorded: RefCell<Vec<(u64, u64)>>,
    }

    impl Events for Fake {
        fn create(&self) -> Option<u64> {
            *self.next.borrow_mut() += 1;
            let e = *self.next.borrow();
            self.live.borrow_mut().push(e);
            Some(e)
        }
        fn record(&self, event: u64, stream: u64) -> bool {
            self.done.borrow_mut().retain(|&e| e != event);
            self.recorded.borrow_mut().push((event, stream));
            true
        }
        fn done(&self, event: u64) -> Option<bool> {
            Some(self.done.borrow().contains(&event))
        }
        fn destroy(&self, event: u64) {
            self.live.borrow_mut().retain(|&e| e != event);
        }
        fn capturing(&self, stream: u64) -> bool {
            stream == 99
        }
    }

    #[test]
    fn counts_in_flight_and_reuses_completed_events() {
        let ev = Fake::default();
        let mut b = Books::default();
        for _ in 0..3 {
            assert!(b.in_flight(&ev, 1, Instant::now()) < 4);
            b.slot(1).admitted += 1;
        }
        assert_eq!(b.in_flight(&ev, 1, Instant::now()), 3);
        for stream in [10, 11, 12] {
            b.slot(1).admitted -= 1;
            let e = b.event(&ev, 7).unwrap();
            assert!(ev.record(e.handle, stream));
            b.slot(1).queued.push_back(e);
        }
        assert_eq!(b.in_flight(&ev, 1, Instant::now()), 3);
        ev.done.borrow_mut().extend([1, 3]);
        // Out of order: the events of other streams complete first.
        assert_eq!(b.in_flight(&ev, 1, Instant::now()), 1);
        assert_eq!(b.free.len(), 2);
        // The pool serves its context's next records; no new event.
        let e = b.event(&ev, 7).unwrap();
        assert!(e.handle == 1 || e.handle == 3);
        assert_eq!(ev.live.borrow().len(), 3);
        // Another context gets its own.
        assert_eq!(b.event(&ev, 8).unwrap().handle, 4);
        assert_eq!(b.in_flight(&ev, 0, Instant::now()), 0);
    }

    #[test]
    fn a_destroyed_context_takes_its_events() {
        let ev = Fake::default();
        BOOKS.with(|b| {
            let e = b.event(&ev, 5).unwrap();
            b.slot(2).queued.push_back(e);
            let at = Instant::now();
            b.free.push(Event {
                ctx: 5,
                handle: 9,
                at,
            });
            b.free.push(Event {
                ctx: 6,
                handle: 10,
                at,
            });
        });
        forget_context(5);
        BOOKS.with(|b| {
            assert!(b.slot(2).queued.is_empty());
            assert_eq!(b.free.len(), 1);
            assert_eq!(b.free[0].ctx, 6);
        });
    }

    #[test]
    fn sleeps_until_the_oldest_launch_is_due() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Timing::default();
        let e = |at| Event {
            ctx: 1,
            handle: 1,
            at,
        };
        // Never measured: ask again soon.
        assert_eq!(s.nap(Some(&e(t0)), t0), POLL);
        // Launches of 2 ms back to back: the mean follows them.
        s.completed(&e(t0), t0 + ms(2));
        s.completed(&e(t0 + ms(1)), t0 + ms(4));
        assert_eq!(s.length, ms(2));
        // The next recorded at 4.5 ms is due at 6.5 ms: sleep until
        // 6.25 ms, never past WAIT_MAX, never under POLL.
        let next = e(t0 + ms(4) + ms(1) / 2);
        assert_eq!(s.nap(Some(&next), t0 + ms(5)), ms(5) / 4);
        assert_eq!(s.nap(Some(&next), t0 + ms(7)), POLL);
        s.length = ms(100);
        assert_eq!(s.nap(Some(&next), t0 + ms(5)), WAIT_MAX);
    }

    #[test]
    fn capture_is_never_gated() {
        let c = Capped {
            slot: 0,
            cap: 1,
            ctx: 7,
        };
        assert!(admit(&Fake::default(), c, 99).is_none());
    }
}
