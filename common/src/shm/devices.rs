//! The device table: 64 entries, named by device UUID, and bounded against
//! callers that name devices the node does not have.
//!
//! Entries are named by the worker's limiter clients (hooks), which cannot
//! tell a real UUID from a made-up one (the host's limits name devices in
//! the limits file, `limits.rs`), so a worker's table is bounded against
//! its own processes only: an entry that no process uses (no live process
//! slot has it in its device mask, and the worker's usage on it is zero) is
//! *retired* when a new name needs room, so made-up UUIDs hold entries only
//! while the processes that named them live.
//!
//! Naming and retiring take the table's lock byte (`owner.rs`), so they
//! never interleave. A client does not take it to use a device: it looks the
//! name up, marks the device in its own slot's mask, then checks the entry
//! is still that name. A retirer marks the entry `RETIRING` before it reads
//! the masks. Both sides fence between their write and their read
//! (sequentially consistent), so either the client sees the entry retiring
//! (and looks again) or the retirer sees the client's mark (and keeps the
//! entry): a device slot a process holds stays that device for as long as
//! the process lives.

use super::*;
use std::sync::atomic::fence;

/// The READY entry named `uuid`, if any (no lock).
pub(super) fn lookup(l: &Layout, uuid: &str) -> Res<Option<usize>> {
    let (words, hash) = key_words(uuid)?;
    Ok(l.devices.iter().position(|k| {
        k.state.load(SeqCst) == KEY_READY
            && k.hash.load(Relaxed) == hash
            && k.words
                .iter()
                .zip(&words)
                .all(|(a, b)| a.load(Relaxed) == *b)
    }))
}

/// The table lock: this process's `KEYS` (own books: `owner::own_lock`),
/// then the table's lock byte.
struct TableLock<'a> {
    _keys: Option<local::ForkGuard<'static>>,
    l: &'a Layout,
}

impl Drop for TableLock<'_> {
    fn drop(&mut self) {
        owner::unlock(self.l, owner::device_table_lock());
    }
}

fn table_lock(l: &Layout) -> Res<TableLock<'_>> {
    loop {
        let g = owner::own_lock(&owner::KEYS, l);
        if owner::try_lock(l, owner::device_table_lock())? {
            return Ok(TableLock { _keys: g, l });
        }
        drop(g);
        budget::check();
        std::thread::yield_now();
    }
}

/// The entry named `uuid`, named now if new (under the table lock).
fn entry(l: &Layout, uuid: &str) -> Res<usize> {
    for attempt in 0..2 {
        {
            let _t = table_lock(l)?;
            if let Some(d) = entry_locked(l, uuid)? {
                return Ok(d);
            }
        }
        if attempt == 0 {
            // Dead processes may still hold entries: reclaim them (with
            // the table lock released: registration takes `KEYS` inside
            // `PROCESS`, never the other way round) and look again.
            sweep(l);
        }
    }
    Err(full(uuid))
}

#[cold]
fn full(uuid: &str) -> Error {
    Error::ResourceExhausted(format!(
        "the worker's device table has no room for {uuid:?}: all {MAX_DEVICES} entries are in \
         use by its live processes"
    ))
}

/// The entry named `uuid`, naming it if new; the table lock is held.
/// None: no room.
fn entry_locked(l: &Layout, uuid: &str) -> Res<Option<usize>> {
    if let Some(d) = lookup(l, uuid)? {
        return Ok(Some(d));
    }
    let (words, hash) = key_words(uuid)?;
    let free = |l: &Layout| {
        // A CLAIMING entry under the table lock: its claimer died.
        l.devices
            .iter()
            .position(|k| matches!(k.state.load(Acquire), KEY_FREE | KEY_CLAIMING))
    };
    let slot = free(l).or_else(|| retire_one(l));
    let Some(d) = slot else {
        return Ok(None);
    };
    let k = &l.devices[d];
    k.state.store(KEY_CLAIMING, SeqCst);
    for (a, b) in k.words.iter().zip(&words) {
        a.store(*b, Relaxed);
    }
    k.hash.store(hash, Relaxed);
    k.state.store(KEY_READY, SeqCst);
    Ok(Some(d))
}

/// Retire one unused entry; its index (now FREE) if one was.
fn retire_one(l: &Layout) -> Option<usize> {
    (0..MAX_DEVICES).find(|&d| {
        let k = &l.devices[d];
        if k.state.load(Acquire) != KEY_READY {
            return false;
        }
        k.state.store(KEY_RETIRING, SeqCst);
        fence(SeqCst);
        if in_use(l, d) {
            k.state.store(KEY_READY, SeqCst);
            return false;
        }
        let wd = &l.wd[d];
        for word in [&wd.usage, &wd.settled, &wd.last_sweep_ns, &wd.bucket.tat] {
            word.store(0, Relaxed);
        }
        for word in &k.words {
            word.store(0, Relaxed);
        }
        k.hash.store(0, Relaxed);
        k.state.store(KEY_FREE, Release);
        true
    })
}

/// Whether some process slot has device `d` in its mask, or the worker's
/// usage on it is not zero.
fn in_use(l: &Layout, d: usize) -> bool {
    let bit = 1u64 << d;
    l.claimed()
        .iter()
        .any(|p| p.state.load(SeqCst) & 3 != PROC_FREE && p.devmask.load(SeqCst) & bit != 0)
        || used_of(l.wd[d].usage.load(Acquire)) != 0
}

/// The device slot of `uuid` for process `pid` (registered now if new),
/// naming the device if new, and marked in the process's slot: the index
/// stays this device's for as long as the process lives.
pub(super) fn slot_for(l: &Layout, pid: i32, uuid: &str) -> Res<usize> {
    loop {
        let d = match lookup(l, uuid)? {
            Some(d) => d,
            None => entry(l, uuid)?,
        };
        let p = &l.procs[proc_slot(l, pid)?];
        let bit = 1u64 << d;
        let had = p.devmask.fetch_or(bit, SeqCst) & bit != 0;
        fence(SeqCst);
        if lookup(l, uuid)? == Some(d) {
            return Ok(d);
        }
        // Retired meanwhile (the retirer did not see the mark): again.
        if !had {
            p.devmask.fetch_and(!bit, SeqCst);
        }
        budget::check();
        std::thread::yield_now();
    }
}
