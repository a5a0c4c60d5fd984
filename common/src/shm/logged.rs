//! Lines on the host's stderr that a tenant can cause, said a bounded
//! number of times.
//!
//! A worker's books are its tenant's to write: a tenant can cut them, grow
//! them, rewrite their header or name other processes in them, as often
//! as it likes, and the host says why it leaves them out of its reports.
//! So each such line is said once per file and reason, the reason compared
//! without its digits (a size, a version, a pid: whatever the tenant writes
//! there makes no new line), and all of them together at most
//! [`LINES_PER_WINDOW`] times per [`WINDOW_NS`]: the lines past that are
//! counted, and the count said with the next window's first line.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, TryLockError};

/// Lines said per window at most, the count of those left out included.
const LINES_PER_WINDOW: u32 = 20;

/// One minute.
const WINDOW_NS: u64 = 60_000_000_000;

/// Keys remembered at most: past that a new line is still said within the
/// window's bound, but may be said again later.
const KEYS_MAX: usize = 16_384;

struct Said {
    /// (file, reason without digits) already said.
    keys: HashSet<u64>,
    window_ns: u64,
    in_window: u32,
    /// Lines left out since the last count was said.
    left_out: u64,
}

static SAID: Mutex<Option<Said>> = Mutex::new(None);

/// Lines left out while [`SAID`] was busy.
static UNSAID: AtomicU64 = AtomicU64::new(0);

/// Say `accelerator: {what} {subject} {why}` on stderr, unless said before
/// for this subject and reason, or past this window's lines.
#[cold]
pub(super) fn say(what: &str, subject: &Path, why: &str) {
    let path = subject.as_os_str().as_encoded_bytes().iter();
    let reason = why.bytes().filter(|b| !b.is_ascii_digit());
    let key = fnv(path.copied().chain([0]).chain(reason));
    // Never waits: a thread saying a line meanwhile (or one that held the
    // lock when this process was forked) costs this line, counted.
    let mut g = match SAID.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            UNSAID.fetch_add(1, Relaxed);
            return;
        }
    };
    let s = g.get_or_insert_with(|| Said {
        keys: HashSet::new(),
        window_ns: 0,
        in_window: 0,
        left_out: 0,
    });
    s.left_out += UNSAID.swap(0, Relaxed);
    if s.keys.contains(&key) {
        return;
    }
    let now = super::map::monotonic_ns();
    if s.in_window == 0 || now.saturating_sub(s.window_ns) >= WINDOW_NS {
        s.window_ns = now;
        s.in_window = 0;
        if s.left_out > 0 {
            eprintln!(
                "accelerator: {} more lines about workers' books left out (at most {LINES_PER_WINDOW} a minute)",
                s.left_out
            );
            s.left_out = 0;
            s.in_window += 1;
        }
    }
    if s.in_window >= LINES_PER_WINDOW {
        s.left_out += 1;
        return;
    }
    s.in_window += 1;
    if s.keys.len() < KEYS_MAX {
        s.keys.insert(key);
    }
    eprintln!("accelerator: {what} {} {why}", subject.display());
}

/// FNV-1a.
fn fnv(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
