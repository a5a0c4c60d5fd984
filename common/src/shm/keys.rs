//! Named slots: the text of a device UUID or worker id, and the worker
//! table, whose entries are claimed the first time a worker id is seen.

use super::*;

// ---- named slots ------------------------------------------------------------

pub(super) fn key_words(name: &str) -> Res<([u64; 8], u64)> {
    if name.is_empty() || name.len() > MAX_KEY {
        return Err(Error::InvalidParam(format!(
            "{name:?} must be 1 to {MAX_KEY} bytes long"
        )));
    }
    let mut bytes = [0u8; 64];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    let mut words = [0u64; 8];
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, w) in words.iter_mut().enumerate() {
        *w = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        hash = (hash ^ *w).wrapping_mul(0x0100_0000_01b3);
    }
    Ok((words, hash | 1))
}

pub(super) fn key_name(k: &Key) -> String {
    let mut bytes = Vec::with_capacity(64);
    for w in &k.words {
        bytes.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Find `name` in a table of named slots, claiming the first free slot for
/// it when `claim`. Slots are claimed in order and never released, so the
/// first FREE slot ends the search. A claimer holds the slot's lock byte
/// (`owner.rs`) from before it marks the slot until the name
/// is published: a slot being claimed is waited for while its lock is held,
/// and taken over (claim) or passed (lookup) once it is not: its claimer died.
pub(super) fn find_key<'a>(
    table: impl Iterator<Item = &'a Key>,
    name: &str,
    claim: bool,
) -> Res<Option<usize>> {
    let (words, hash) = key_words(name)?;
    for (i, k) in table.enumerate() {
        let mut spins = 0u32;
        loop {
            let st = k.state.load(Acquire);
            if st == KEY_READY {
                if k.hash.load(Relaxed) == hash
                    && k.words
                        .iter()
                        .zip(&words)
                        .all(|(a, b)| a.load(Relaxed) == *b)
                {
                    return Ok(Some(i));
                }
                break;
            }
            if st == KEY_FREE && !claim {
                return Ok(None);
            }
            spins += 1;
            if st != KEY_FREE && spins % 64 != 0 {
                std::thread::yield_now();
                continue;
            }
            let _g = owner::KEYS.lock();
            if !owner::try_lock(owner::worker_lock(i))? {
                drop(_g);
                std::thread::yield_now();
                continue;
            }
            let st = k.state.load(Acquire);
            if st == KEY_READY || !claim {
                owner::unlock(owner::worker_lock(i));
                if st == KEY_READY {
                    continue;
                }
                break; // its claimer died: no name to compare
            }
            k.state.store(KEY_CLAIMING, Release);
            for (a, b) in k.words.iter().zip(&words) {
                a.store(*b, Relaxed);
            }
            k.hash.store(hash, Relaxed);
            k.state.store(KEY_READY, Release);
            owner::unlock(owner::worker_lock(i));
            return Ok(Some(i));
        }
    }
    if claim {
        Err(Error::ResourceExhausted(format!(
            "the limiter's table is full; cannot add {name:?}"
        )))
    } else {
        Ok(None)
    }
}

/// Worker slot of a named worker (slot 0, the anonymous pool, has no name).
pub(super) fn worker_index(l: &Layout, worker: &str, claim: bool) -> Res<Option<usize>> {
    Ok(find_key(l.workers[1..].iter().map(|w| &w.key), worker, claim)?.map(|i| i + 1))
}

pub(super) fn known_worker(l: &Layout, worker: &str) -> Res<usize> {
    worker_index(l, worker, false)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} is not known to the limiter")))
}
