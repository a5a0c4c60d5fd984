//! Named slots: the text of a device UUID or worker id.

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

/// A name's words and hash, as a key holds them ([`key_words`]).
pub(super) type Name = ([u64; 8], u64);

/// Whether `k` holds the name whose words and hash are `name` (as read: a
/// tenant's key may hold anything).
pub(super) fn key_is(k: &Key, name: &Name) -> bool {
    k.hash.load(Relaxed) == name.1
        && k.words
            .iter()
            .zip(&name.0)
            .all(|(a, b)| a.load(Relaxed) == *b)
}

/// The words and hash `k` holds.
pub(super) fn key_words_of(k: &Key) -> Name {
    (
        std::array::from_fn(|i| k.words[i].load(Relaxed)),
        k.hash.load(Relaxed),
    )
}

/// The READY entry holding `name` in a table of names appended in order,
/// the entry `hint` names tried first (and the one found remembered there).
pub(super) fn find_ready_hinted<T>(
    table: &[T],
    key: impl Fn(&T) -> &Key,
    name: &Name,
    hint: &std::sync::atomic::AtomicUsize,
) -> Option<usize> {
    let ready = |k: &Key| k.state.load(Acquire) == KEY_READY && key_is(k, name);
    let h = hint.load(Relaxed);
    if table.get(h).is_some_and(|t| ready(key(t))) {
        return Some(h);
    }
    for (i, t) in table.iter().enumerate() {
        let k = key(t);
        if k.state.load(Acquire) == KEY_FREE {
            return None;
        }
        if ready(k) {
            hint.store(i, Relaxed);
            return Some(i);
        }
    }
    None
}

/// The READY entry named `name` in a table of names appended in order.
pub(super) fn find_ready<T>(table: &[T], key: impl Fn(&T) -> &Key, name: &str) -> Option<usize> {
    let (words, hash) = key_words(name).ok()?;
    for (i, t) in table.iter().enumerate() {
        let k = key(t);
        match k.state.load(Acquire) {
            KEY_FREE => return None,
            KEY_READY
                if k.hash.load(Relaxed) == hash
                    && k.words
                        .iter()
                        .zip(&words)
                        .all(|(a, b)| a.load(Relaxed) == *b) =>
            {
                return Some(i)
            }
            _ => {}
        }
    }
    None
}
