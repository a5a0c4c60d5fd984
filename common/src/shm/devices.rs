//! The device table: 64 entries, named by device UUID, and bounded against
//! callers that name devices the node does not have.
//!
//! An entry is *pinned* when libaccelerator (which checked the UUID against
//! the vendor's devices) sets a limit on it; other entries are named by
//! limiter clients (hooks), which cannot tell a real UUID from a made-up
//! one. Clients may hold at most [`CLIENT_ENTRIES`] entries, so the rest is
//! always there for the host's limits. An unpinned entry that no process
//! uses (no live process slot has it in its device mask, and every worker's
//! row for it is zero: no usage, limit or freeze) is *retired* when a new
//! name needs room, so made-up UUIDs hold entries only while the processes
//! that named them live.
//!
//! Naming and retiring take the table's lock byte (`owner.rs`), so they
//! never interleave. A client does not take it to use a device: it looks the
//! name up, marks the device in its own slot's mask, then checks the entry
//! is still that name. A retirer marks the entry `RETIRING` before it reads
//! the masks. Both sides fence between their write and their read
//! (sequentially consistent), so either the client sees the entry retiring
//! (and looks again) or the retirer sees the client's mark (and keeps the
//! entry): a device slot a process holds stays that device for as long as
//! the process lives. Host writes of a row's limits and freeze words happen
//! under the table lock.

use super::*;
use std::sync::atomic::fence;

/// Entries limiter clients may name (the others are the host's).
pub const CLIENT_ENTRIES: usize = 48;

/// Who names a device.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// A limiter client (hook): any well-formed text.
    Client,
    /// libaccelerator, which checked it against the vendor's devices.
    Host,
}

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

/// The table lock: this process's `KEYS`, then the table's lock byte.
struct TableLock<'a> {
    _keys: local::ForkGuard<'a>,
}

impl Drop for TableLock<'_> {
    fn drop(&mut self) {
        owner::unlock(owner::device_table_lock());
    }
}

fn table_lock() -> Res<TableLock<'static>> {
    loop {
        let g = owner::KEYS.lock();
        if owner::try_lock(owner::device_table_lock())? {
            return Ok(TableLock { _keys: g });
        }
        drop(g);
        std::thread::yield_now();
    }
}

/// Run `f` on the entry named `uuid` (named now if new) with the table
/// lock held: for host writes of a row's limit and freeze words.
pub(super) fn with_entry<T>(
    l: &Layout,
    uuid: &str,
    origin: Origin,
    f: impl FnOnce(usize) -> Res<T>,
) -> Res<T> {
    for attempt in 0..2 {
        {
            let _t = table_lock()?;
            if let Some(d) = entry_locked(l, uuid, origin)? {
                if origin == Origin::Host {
                    l.devices[d].pinned.store(1, Release);
                }
                return f(d);
            }
        }
        if attempt == 0 {
            // Dead processes may still hold entries: reclaim them (with
            // the table lock released: registration takes `KEYS` inside
            // `PROCESS`, never the other way round) and look again.
            sweep(l, None);
        }
    }
    Err(full(l, uuid))
}

#[cold]
fn full(l: &Layout, uuid: &str) -> Error {
    let clients = named_by_clients(l);
    Error::ResourceExhausted(format!(
        "the limiter's device table has no room for {uuid:?}: {} of its {MAX_DEVICES} entries \
         are in use, {clients} of them named by limiter clients (who may name {CLIENT_ENTRIES})",
        l.devices
            .iter()
            .filter(|k| k.state.load(Acquire) != KEY_FREE)
            .count()
    ))
}

fn named_by_clients(l: &Layout) -> usize {
    l.devices
        .iter()
        .filter(|k| k.state.load(Acquire) != KEY_FREE && k.pinned.load(Acquire) == 0)
        .count()
}

/// The entry named `uuid`, naming it if new; the table lock is held.
/// None: no room.
fn entry_locked(l: &Layout, uuid: &str, origin: Origin) -> Res<Option<usize>> {
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
    let slot = if origin == Origin::Client && named_by_clients(l) >= CLIENT_ENTRIES {
        retire_one(l)
    } else {
        free(l).or_else(|| retire_one(l))
    };
    let Some(d) = slot else {
        return Ok(None);
    };
    let k = &l.devices[d];
    k.state.store(KEY_CLAIMING, SeqCst);
    for (a, b) in k.words.iter().zip(&words) {
        a.store(*b, Relaxed);
    }
    k.hash.store(hash, Relaxed);
    k.pinned.store(0, Relaxed);
    k.state.store(KEY_READY, SeqCst);
    Ok(Some(d))
}

/// Retire one unused unpinned entry; its index (now FREE) if one was.
fn retire_one(l: &Layout) -> Option<usize> {
    (0..MAX_DEVICES).find(|&d| {
        let k = &l.devices[d];
        if k.state.load(Acquire) != KEY_READY || k.pinned.load(Acquire) != 0 {
            return false;
        }
        k.state.store(KEY_RETIRING, SeqCst);
        fence(SeqCst);
        if in_use(l, d) {
            k.state.store(KEY_READY, SeqCst);
            return false;
        }
        for w in l.wd.iter() {
            let wd = &w[d];
            for word in [&wd.usage, &wd.settled, &wd.last_sweep_ns, &wd.bucket.tat] {
                word.store(0, Relaxed);
            }
        }
        for word in &k.words {
            word.store(0, Relaxed);
        }
        k.hash.store(0, Relaxed);
        k.state.store(KEY_FREE, Release);
        true
    })
}

/// Whether some process slot has device `d` in its mask, or some worker's
/// row for it is not zero.
fn in_use(l: &Layout, d: usize) -> bool {
    let bit = 1u64 << d;
    l.procs
        .iter()
        .any(|p| p.state.load(SeqCst) & 3 != PROC_FREE && p.devmask.load(SeqCst) & bit != 0)
        || l.wd.iter().any(|w| {
            let wd = &w[d];
            used_of(wd.usage.load(Acquire)) != 0
                || wd.mem_limit.load(Acquire) != 0
                || wd.mem_frozen.load(Acquire) != 0
                || wd.bucket.limit.load(Acquire) != 0
                || wd.bucket.frozen.load(Acquire) != 0
        })
}

/// The device slot of `uuid` for process `pid` (registered now if new),
/// naming the device if new, and marked in the process's slot: the index
/// stays this device's for as long as the process lives.
pub(super) fn slot_for(l: &Layout, pid: i32, uuid: &str) -> Res<usize> {
    loop {
        let d = match lookup(l, uuid)? {
            Some(d) => d,
            None => with_entry(l, uuid, Origin::Client, Ok)?,
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
        std::thread::yield_now();
    }
}
