//! The limiter's node-wide shared state and its lock-free algorithms.
//!
//! Every process on the node maps one file, `$ACCELERATOR_STATE_DIR/limiter.shm`,
//! and coordinates through atomics in it alone: there is no mutex a process
//! can die holding. `liblimiter.so` calls the check functions on every
//! allocation and kernel launch; `libaccelerator.so` writes hard limits here
//! and reads usage back for its per-process utilization functions.
//!
//! # Layout (version [`VERSION`], fixed size, zero-initialised = empty)
//!
//! | part | size | content |
//! |---|---|---|
//! | header | 4 KiB | magic `ACCLIMIT`, layout version, total size |
//! | scratch | 4 KiB | reserved for benchmarks and diagnostics; never read by the limiter |
//! | devices | 64 × 128 B | device UUIDs, claimed the first time a UUID is seen |
//! | workers | 1,024 × 192 B | worker ids, frozen flag, accumulated freeze time; slot 0 is the anonymous pool |
//! | worker × device | 1,024 × 64 × 128 B | line 1: usage word, settled word, memory limit, memory auto-freeze, last sweep; line 2: token bucket (TAT), compute limit, compute auto-freeze |
//! | processes | 4,096 × 1,600 B | state word (pid), start time, worker, devices touched, per device: held bytes, pending intent, tokens used |
//!
//! The file is created sparse (holes read as zero), filled with the header
//! in a temporary file and published with `link(2)`, which never replaces an
//! existing file: a racing process either sees no file or a complete header.
//! A file with another magic, version or size, or a truncated one, is
//! refused with RESULT_ERROR_OPERATION_FAILED and a message saying which.
//!
//! # Workers and processes
//!
//! A process's worker is `ACCELERATOR_WORKER_ID` from its environment, read
//! once, when the process is first registered (its first limiter call or
//! `AddWorkerProcess`); a forked child registers anew and reads it then. For
//! a process id that is not the caller's own, `/proc/<pid>/environ` is read.
//! Without the variable the process is a worker of its own: it joins the
//! anonymous pool (worker slot 0), which is never limited nor frozen.
//! Processes are named by pid and start time (field 22 of `/proc/<pid>/stat`):
//! a pid reused by a new process is never mistaken for the dead one. Pids are
//! those of the limiter's pid namespace (hooks and hypervisor must share it).
//!
//! # Memory: no overshoot, and exact after any SIGKILL
//!
//! Each worker × device has one 64-bit usage word W: 43 bits of bytes, a
//! "named" bit, the 12-bit slot of the process whose operation last changed
//! it and the low 8 bits of that operation's sequence number. Each process
//! slot keeps, per device, `held` (48 bits of bytes, 16-bit sequence) and
//! `intent` (the signed byte delta and the sequence of its current op).
//!
//! An operation of process P on device d, sequence s = held.seq + 1:
//! 1. P reads W. If W names another slot's operation that is not yet in that
//!    slot's `held`, P first *settles* it (below) — it never waits. If the
//!    worker has a limit and `used + delta > limit`, the op is blocked:
//!    nothing is written.
//! 2. P writes `intent = (delta, s)` (only P ever writes its intents, except
//!    a reclaimer after P is dead) and CASes W from what it read to
//!    `(used + delta, named P, s)`. This CAS is the linearisation point: the
//!    limit check and the add are one atomic step, so no number of racing
//!    processes can overshoot.
//! 3. P stores `held = (bytes + delta, s)`. W keeps naming P's op: the next
//!    operation replaces the name in its own CAS, so an uncontended
//!    operation is one locked instruction.
//!
//! *Settling*: whoever finds W naming (slot j, s) with j's `held` still at
//! s − 1 reads j's intent, re-reads W (unchanged, so the intent belongs to
//! the named op) and CASes j's `held` from s − 1 to s, so the op is applied
//! exactly once, by whoever comes first. Killed after step 2, P's operation
//! is completed by the next process that touches W; killed before it, it
//! never happened. Hence at every moment `used(W) = Σ held` over the
//! worker's process slots, plus the one named op not yet settled. A slot
//! only starts its next op once its last one is in `held`, and blocked ops
//! leave the sequence alone, so the named op's `held` is always s − 1 or s.
//!
//! Contention (`backoff.rs`): a process that loses a CAS race waits a little
//! before its next attempt, and one that finds the word naming another
//! process's op not yet `settled` gives that owner a moment to publish it
//! before reaching into its slot, so the winner finishes its operation with
//! the line still in its cache. The waits are bounded: a dead or preempted
//! owner costs the others one short wait, then they settle its op.
//!
//! Threads: the protocol needs one actor per (slot, device) at a time; the
//! threads of a process are serialised by a process-local guard
//! (`local.rs`: biased to the first thread, so a single-threaded process
//! pays no locked instruction for it).
//!
//! # Reclaiming a dead process
//!
//! A process slot's state word is `FREE`, `CLAIMING(pid)`, `LIVE(pid)` or
//! `RECLAIMING(pid of the reclaimer)`. A process that finds a `LIVE` slot
//! whose pid is gone, a zombie, or has another start time CASes it to
//! `RECLAIMING(self)` — exactly one wins. For each device it touched, the
//! reclaimer settles any op of the dead slot that W names, then frees the
//! slot's `held` bytes through the same protocol on behalf of the dead slot
//! (intent `-held`, sequence + 1), so a reclaimer killed midway leaves
//! either nothing done or an op the next one completes; never a double
//! subtraction. Before the slot is zeroed and set `FREE`, every W that
//! names it is settled and un-named, and a `settled` word naming it cleared
//! (a new process in the slot restarts its sequences). A `RECLAIMING`
//! (or `CLAIMING`) slot whose owner is dead is taken over the same way.
//! Reclamation runs: when a memory check would block (sweeping that
//! worker's processes, at most once per millisecond per worker and device),
//! when a process registers and finds its pid stale or no free slot, and
//! before every usage report (`processes`).
//!
//! # Compute: a token bucket per worker and device (GCRA form)
//!
//! One token is one nanosecond of the whole device's compute, so a device
//! has a capacity of 10^9 tokens/s. A worker with a compute limit of p %
//! is refilled at `p × 10^7` tokens/s and its bucket holds 100 ms of that
//! rate: burst `B = p × 10^6` tokens. The bucket is one word, the
//! theoretical arrival time TAT (in 1/16 ns since boot): a request of k
//! tokens at time t costs `k × 1600 / p` sixteenths of a ns, and is granted
//! iff `max(TAT, t) + cost ≤ t + 100 ms`, by one CAS of TAT. The available
//! tokens are `(t + 100 ms − max(TAT, t)) × p / 1600`. A request larger than
//! B is never granted. Without a compute limit every request is granted and
//! `UINT64_MAX` tokens are reported. The time t comes from `clock.rs`: one
//! reading serves up to 64 checks of a process, never for a refill or a
//! refusal, which bounds what that saves (there) by the age of the reading.
//!
//! # Freeze
//!
//! A worker's freeze word is 0 (running) or 1 + the time it was frozen (ms
//! since boot); resuming adds the frozen span to `frozen_ms`. While frozen,
//! every check of the worker's processes says "block" (frees included: a
//! frozen worker makes no progress). AutoFreeze/AutoResume set and clear a
//! per-worker-and-device word for one resource ("memory" or "compute"):
//! only that resource's checks on that device block. Freeze time counts
//! FreezeWorker spans only.
//!
//! Bounds: the 16-bit per-device sequence wraps after 65,536 ops; a helper
//! preempted across exactly that many ops of one process on one device
//! between two loads is the only case the sequence check cannot tell apart.

mod backoff;
mod clock;
mod local;
mod map;

use crate::statedir::{self, Create};
use crate::{Error, Res};
use backoff::Backoff;
use std::fs::File;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Mutex, OnceLock};

pub const MAGIC: u64 = u64::from_le_bytes(*b"ACCLIMIT");
pub const VERSION: u64 = 2;
pub const FILE_NAME: &str = "limiter.shm";
pub const ENV_WORKER_ID: &str = "ACCELERATOR_WORKER_ID";

pub const MAX_DEVICES: usize = 64;
pub const MAX_WORKERS: usize = 1024;
pub const MAX_PROCS: usize = 4096;
/// Longest device UUID and worker id (the ABI's `char[64]` fields).
pub const MAX_KEY: usize = 63;
/// Offset and size of the scratch page (benchmark baselines live there).
pub const SCRATCH_OFFSET: usize = 4096;
pub const SCRATCH_SIZE: usize = 4096;

/// Largest usage a worker may have on one device, and largest single op.
pub const MAX_BYTES: u64 = (1 << 43) - 1;
/// Token-bucket window: the burst is this much time at the worker's rate.
pub const BURST_NS: u64 = 100_000_000;

// ---- the layout -----------------------------------------------------------

#[repr(C, align(4096))]
pub(crate) struct Header {
    magic: AtomicU64,
    version: AtomicU64,
    size: AtomicU64,
}

#[repr(C, align(4096))]
struct Scratch([AtomicU64; SCRATCH_SIZE / 8]);

/// A slot named by a string (device UUID or worker id).
#[repr(C, align(64))]
struct Key {
    /// KEY_FREE, KEY_READY, or (pid << 2) | KEY_CLAIMING.
    state: AtomicU64,
    hash: AtomicU64,
    words: [AtomicU64; 8],
}

#[repr(C, align(64))]
struct Worker {
    key: Key,
    /// 0 = running, else 1 + the ms (since boot) it was frozen.
    freeze: AtomicU64,
    frozen_ms: AtomicU64,
}

/// One worker on one device: the memory fields on the first cache line, the
/// token bucket on the second, so memory and compute checks of different
/// processes do not evict each other's line.
#[repr(C, align(64))]
struct WorkerDevice {
    /// used (43 bits) | NAMED_BIT | slot << 44 | seq8 << 56.
    usage: AtomicU64,
    /// The last usage word whose op is known to be in its slot's `held`.
    settled: AtomicU64,
    /// 0 = unlimited.
    mem_limit: AtomicU64,
    /// AutoFreeze of "memory": 1 = frozen.
    mem_frozen: AtomicU64,
    last_sweep_ns: AtomicU64,
    bucket: Bucket,
}

#[repr(C, align(64))]
struct Bucket {
    /// Theoretical arrival time, 1/16 ns since boot.
    tat: AtomicU64,
    /// Percent, 0 = unlimited.
    limit: AtomicU64,
    /// AutoFreeze of "compute": 1 = frozen.
    frozen: AtomicU64,
}

#[repr(C, align(64))]
struct Proc {
    /// (pid << 2) | PROC_FREE/CLAIMING/LIVE/RECLAIMING.
    state: AtomicU64,
    start: AtomicU64,
    worker: AtomicU64,
    /// Bit d: the process has used device d.
    devmask: AtomicU64,
    /// bytes (48 bits) | seq << 48.
    held: [AtomicU64; MAX_DEVICES],
    /// delta (signed, 48 bits) | seq << 48.
    intent: [AtomicU64; MAX_DEVICES],
    tokens: [AtomicU64; MAX_DEVICES],
}

#[repr(C)]
pub struct Layout {
    header: Header,
    scratch: Scratch,
    devices: [Key; MAX_DEVICES],
    workers: [Worker; MAX_WORKERS],
    wd: [[WorkerDevice; MAX_DEVICES]; MAX_WORKERS],
    procs: [Proc; MAX_PROCS],
}

/// Size of the state file.
pub const SIZE: usize = std::mem::size_of::<Layout>();

const KEY_FREE: u64 = 0;
const KEY_CLAIMING: u64 = 1;
const KEY_READY: u64 = 2;

const PROC_FREE: u64 = 0;
const PROC_CLAIMING: u64 = 1;
const PROC_LIVE: u64 = 2;
const PROC_RECLAIMING: u64 = 3;

/// The usage word names its last operation (slot, sequence).
const NAMED_BIT: u64 = 1 << 43;
const SLOT_SHIFT: u32 = 44;
const SEQ8_SHIFT: u32 = 56;
const LOW48: u64 = (1 << 48) - 1;

fn used_of(u: u64) -> u64 {
    u & MAX_BYTES
}
fn named(u: u64) -> bool {
    u & NAMED_BIT != 0
}
fn tag_slot(u: u64) -> usize {
    ((u >> SLOT_SHIFT) & 0xfff) as usize
}
fn tag_seq8(u: u64) -> u64 {
    u >> SEQ8_SHIFT
}
fn named_word(used: u64, slot: usize, seq: u64) -> u64 {
    used | NAMED_BIT | (slot as u64) << SLOT_SHIFT | (seq & 0xff) << SEQ8_SHIFT
}
fn pack48(low: u64, seq: u64) -> u64 {
    (low & LOW48) | (seq & 0xffff) << 48
}
fn low48(w: u64) -> u64 {
    w & LOW48
}
fn seq16(w: u64) -> u64 {
    w >> 48
}
fn delta_of(intent: u64) -> i64 {
    // Sign-extend the low 48 bits.
    ((intent << 16) as i64) >> 16
}
fn proc_word(pid: i32, kind: u64) -> u64 {
    (pid as u32 as u64) << 2 | kind
}
fn word_pid(w: u64) -> i32 {
    (w >> 2) as u32 as i32
}

// ---- opening the mapping ---------------------------------------------------

static MAP: OnceLock<&'static Layout> = OnceLock::new();
static OPEN: Mutex<()> = Mutex::new(());
/// (pid << 32) | (slot + 1) of the calling process's own slot.
static OWN_SLOT: AtomicU64 = AtomicU64::new(0);
/// Registration within one process is serialised (a process-local lock dies
/// with its process, so it strands nobody else).
static REGISTER: Mutex<()> = Mutex::new(());

/// The mapping, opened (and created if missing) on first use. A failure is
/// not remembered: the next call tries again.
#[inline]
pub fn shared() -> Res<&'static Layout> {
    match MAP.get() {
        Some(l) => Ok(l),
        None => open_shared(),
    }
}

#[cold]
#[inline(never)]
fn open_shared() -> Res<&'static Layout> {
    let _g = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = MAP.get() {
        return Ok(l);
    }
    let l = open_or_create()?;
    // Before any check can take a stripe of the process-local lock.
    local::init();
    let _ = MAP.set(l);
    Ok(l)
}

fn open_or_create() -> Res<&'static Layout> {
    let dir = statedir::ensure()?;
    let path = dir.join(FILE_NAME);
    for _ in 0..3 {
        if let Some(file) = statedir::open(&path, Create::Never)? {
            return validate_and_map(&file, &path);
        }
        create(&dir, &path)?;
    }
    Err(Error::OperationFailed(format!(
        "limiter state file {} keeps disappearing",
        path.display()
    )))
}

fn create(dir: &Path, path: &Path) -> Res<()> {
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let file = statedir::open(&tmp, Create::IfMissing)?
        .ok_or_else(|| Error::Internal("create returned no file".into()))?;
    let result = (|| {
        // The umask must not strip the group bits ACCELERATOR_STATE_GROUP_ACCESS asks for.
        file.set_permissions(std::fs::Permissions::from_mode(statedir::file_mode()))
            .map_err(|e| Error::io("cannot set the mode of", &tmp, e))?;
        file.set_len(SIZE as u64)
            .map_err(|e| Error::io("cannot size", &tmp, e))?;
        let mut head = [0u8; 24];
        head[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8..16].copy_from_slice(&VERSION.to_le_bytes());
        head[16..24].copy_from_slice(&(SIZE as u64).to_le_bytes());
        file.write_all_at(&head, 0)
            .map_err(|e| Error::io("cannot write", &tmp, e))?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io("cannot publish", path, e)),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

fn validate_and_map(file: &File, path: &Path) -> Res<&'static Layout> {
    let fail = |why: String| {
        Err(Error::OperationFailed(format!(
            "limiter state file {} {why}; refusing to use it (remove it when no process uses it)",
            path.display()
        )))
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?
        .len();
    let mut head = [0u8; 24];
    if len < 24 || file.read_exact_at(&mut head, 0).is_err() {
        return fail(format!("is truncated ({len} bytes)"));
    }
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    if word(0) != MAGIC {
        return fail("is not a limiter state file (bad magic number)".into());
    }
    if word(1) > VERSION {
        return fail(format!(
            "has layout version {}, newer than this library's {VERSION}",
            word(1)
        ));
    }
    if word(1) != VERSION {
        return fail(format!(
            "has layout version {}, this library needs {VERSION}",
            word(1)
        ));
    }
    if word(2) != SIZE as u64 {
        return fail(format!(
            "declares {} bytes, layout version {VERSION} has {SIZE}",
            word(2)
        ));
    }
    if len != SIZE as u64 {
        return fail(format!("is truncated ({len} of {SIZE} bytes)"));
    }
    map::map(file, SIZE)
}

// ---- liveness ---------------------------------------------------------------

/// (state letter, start time) of a process from `/proc/<pid>/stat`.
fn proc_stat(pid: i32) -> Option<(u8, u64)> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the process can still make limiter calls: it exists, is not a
/// zombie, and (when given) has this start time.
fn alive(pid: i32, start: Option<u64>) -> bool {
    match proc_stat(pid) {
        None => false,
        Some((b'Z' | b'X' | b'x', _)) => false,
        Some((_, s)) => start.is_none_or(|want| want == s),
    }
}

fn my_pid() -> i32 {
    std::process::id() as i32
}

// ---- named slots ------------------------------------------------------------

fn key_words(name: &str) -> Res<([u64; 8], u64)> {
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

fn key_name(k: &Key) -> String {
    let mut bytes = Vec::with_capacity(64);
    for w in &k.words {
        bytes.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Find `name` in a table of named slots, claiming the first free slot for
/// it when `claim`. Slots are claimed in order and never released, so the
/// first FREE slot ends the search. A slot being claimed by a live process
/// is waited for (its owner is a few stores from done); one whose claimer
/// died is taken over.
fn find_key<'a>(
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
            let take = if st == KEY_FREE {
                if !claim {
                    return Ok(None);
                }
                true
            } else {
                spins += 1;
                if spins % 64 == 0 && !alive(word_pid(st), None) {
                    if !claim {
                        break;
                    }
                    true
                } else {
                    std::thread::yield_now();
                    false
                }
            };
            if take
                && k.state
                    .compare_exchange(st, proc_word(my_pid(), KEY_CLAIMING), AcqRel, Acquire)
                    .is_ok()
            {
                for (a, b) in k.words.iter().zip(&words) {
                    a.store(*b, Relaxed);
                }
                k.hash.store(hash, Relaxed);
                k.state.store(KEY_READY, Release);
                return Ok(Some(i));
            }
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

fn device_index(l: &Layout, uuid: &str, claim: bool) -> Res<Option<usize>> {
    find_key(l.devices.iter(), uuid, claim)
}

fn device(l: &Layout, uuid: &str) -> Res<usize> {
    device_index(l, uuid, true)?.ok_or_else(|| Error::Internal("device claim".into()))
}

/// Worker slot of a named worker (slot 0, the anonymous pool, has no name).
fn worker_index(l: &Layout, worker: &str, claim: bool) -> Res<Option<usize>> {
    Ok(find_key(l.workers[1..].iter().map(|w| &w.key), worker, claim)?.map(|i| i + 1))
}

fn known_worker(l: &Layout, worker: &str) -> Res<usize> {
    worker_index(l, worker, false)?
        .ok_or_else(|| Error::NotFound(format!("worker {worker:?} is not known to the limiter")))
}

// ---- process slots ------------------------------------------------------------

/// The worker a process belongs to, from its environment.
fn worker_of(l: &Layout, pid: i32) -> Res<usize> {
    let value = if pid == my_pid() {
        std::env::var_os(ENV_WORKER_ID).map(|v| v.into_encoded_bytes())
    } else {
        std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(b"ACCELERATOR_WORKER_ID="))
                    .map(<[u8]>::to_vec)
            })
    };
    match value.filter(|v| !v.is_empty()) {
        None => Ok(0),
        Some(v) => {
            let name = String::from_utf8(v).map_err(|_| {
                Error::InvalidParam(format!("{ENV_WORKER_ID} of process {pid} is not UTF-8"))
            })?;
            worker_index(l, &name, true)?.ok_or_else(|| Error::Internal("worker claim".into()))
        }
    }
}

/// The slot of process `pid`, registering it on first use. The fast path
/// (the caller's own, registered pid) is one load of the remembered slot
/// and one of that slot's state word: a slot reclaimed or reused since is
/// no longer `LIVE(pid)` and falls to the slow path.
#[inline]
fn proc_slot(l: &Layout, pid: i32) -> Res<usize> {
    match own_slot(l, pid) {
        Some(i) => Ok(i),
        None => register(l, pid),
    }
}

/// The remembered slot of the calling process if `pid` is its pid and the
/// slot is still `LIVE(pid)`.
#[inline(always)]
fn own_slot(l: &Layout, pid: i32) -> Option<usize> {
    let cached = OWN_SLOT.load(Relaxed);
    if cached >> 32 != pid as u32 as u64 {
        return None;
    }
    let i = (cached as u32 as usize).wrapping_sub(1);
    let p = l.procs.get(i)?;
    (p.state.load(Acquire) == proc_word(pid, PROC_LIVE)).then_some(i)
}

#[cold]
#[inline(never)]
fn register(l: &Layout, pid: i32) -> Res<usize> {
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let me = my_pid();
    let start = proc_stat(pid)
        .filter(|(st, _)| !matches!(st, b'Z' | b'X' | b'x'))
        .map(|(_, s)| s)
        .ok_or_else(|| Error::NotFound(format!("process {pid} does not exist")))?;
    let live = proc_word(pid, PROC_LIVE);
    for (i, p) in l.procs.iter().enumerate() {
        if p.state.load(Acquire) == live {
            if p.start.load(Relaxed) == start {
                if pid == me {
                    OWN_SLOT.store((pid as u32 as u64) << 32 | (i as u64 + 1), Relaxed);
                }
                return Ok(i);
            }
            reclaim(l, i); // an earlier process with the same pid
        }
    }
    let worker = worker_of(l, pid)?;
    for attempt in 0..2 {
        if let Some(i) = claim_proc(l, me) {
            let p = &l.procs[i];
            p.start.store(start, Relaxed);
            p.worker.store(worker as u64, Relaxed);
            p.devmask.store(0, Relaxed);
            for d in 0..MAX_DEVICES {
                p.held[d].store(0, Relaxed);
                p.intent[d].store(0, Relaxed);
                p.tokens[d].store(0, Relaxed);
            }
            p.state.store(live, Release);
            if pid == me {
                OWN_SLOT.store((pid as u32 as u64) << 32 | (i as u64 + 1), Relaxed);
            }
            return Ok(i);
        }
        if attempt == 0 {
            sweep(l, None);
        }
    }
    Err(Error::ResourceExhausted(format!(
        "all {MAX_PROCS} limiter process slots are in use by live processes"
    )))
}

fn claim_proc(l: &Layout, me: i32) -> Option<usize> {
    for (i, p) in l.procs.iter().enumerate() {
        let st = p.state.load(Acquire);
        let free = st & 3 == PROC_FREE
            || (st & 3 == PROC_CLAIMING && (word_pid(st) == me || !alive(word_pid(st), None)));
        if free
            && p.state
                .compare_exchange(st, proc_word(me, PROC_CLAIMING), AcqRel, Acquire)
                .is_ok()
        {
            return Some(i);
        }
    }
    None
}

fn mark_device(p: &Proc, d: usize) {
    let bit = 1u64 << d;
    if p.devmask.load(Relaxed) & bit == 0 {
        p.devmask.fetch_or(bit, AcqRel);
    }
}

// ---- the usage protocol --------------------------------------------------

/// Make sure the operation the usage word `u` names (if any) is in its
/// slot's `held`, applying it there if its owner has not. Never waits.
/// False: `wd` moved on meanwhile and the caller must reload it.
#[inline(never)]
fn settle(l: &Layout, d: usize, wd: &WorkerDevice, u: u64) -> bool {
    if !named(u) || wd.settled.load(Acquire) == u {
        return true;
    }
    // A live owner publishes `settled` right after its CAS: give it a
    // moment rather than pull its slot's line over (and back).
    let mut b = Backoff::new();
    while !b.exhausted() {
        b.wait();
        if wd.settled.load(Acquire) == u {
            return true;
        }
        if wd.usage.load(Acquire) != u {
            return false;
        }
    }
    let p = &l.procs[tag_slot(u)];
    let h = p.held[d].load(Acquire);
    if seq16(h) & 0xff == tag_seq8(u) {
        return true; // complete
    }
    // Pending: `held` is one behind, and the owner wrote the intent of the
    // named op before its CAS (its next intent waits for `held` to catch up).
    let intent = p.intent[d].load(Acquire);
    if wd.usage.load(Acquire) != u {
        return false;
    }
    let seq = seq16(intent);
    if seq & 0xff != tag_seq8(u) || seq16(h) != seq.wrapping_sub(1) & 0xffff {
        return false; // `held` moved since it was read: look again
    }
    let bytes = (low48(h) as i64).wrapping_add(delta_of(intent)) as u64;
    // Whoever comes first applies it; a failed CAS means someone did.
    let _ = p.held[d].compare_exchange(h, pack48(bytes, seq), AcqRel, Acquire);
    true
}

enum Apply {
    Done {
        used: u64,
    },
    Blocked {
        used: u64,
    },
    /// A free larger than the `held` bytes of the slot (nothing changed).
    Overdraft {
        held: u64,
    },
}

/// Apply `delta` bytes (|delta| ≤ MAX_BYTES) of slot `i` to worker-device
/// `wd` (device `d`), refusing growth past the worker's limit. `owner`: the
/// caller is slot `i`'s own process (holding `local::enter`), not a
/// reclaimer.
#[inline(always)]
fn apply(l: &Layout, i: usize, d: usize, wd: &WorkerDevice, delta: i64, owner: bool) -> Apply {
    let p = &l.procs[i];
    let h = p.held[d].load(Acquire);
    let (bytes, seq) = (low48(h), (seq16(h) + 1) & 0xffff);
    // bytes < 2^48 and |delta| < 2^43: no i64 overflow here or below.
    let after = bytes as i64 + delta;
    if after < 0 {
        return Apply::Overdraft { held: bytes };
    }
    let intent = pack48(delta as u64, seq);
    let mut announced = false;
    let mut b = Backoff::new();
    let mut u = wd.usage.load(Acquire);
    let new = loop {
        // The owner's own last op is always complete: it finished it
        // before returning.
        if named(u) && !(owner && tag_slot(u) == i) && !settle(l, d, wd, u) {
            u = wd.usage.load(Acquire);
            continue;
        }
        let used = used_of(u);
        let target = used as i64 + delta;
        if delta > 0 && target as u64 > cap(wd.mem_limit.load(Acquire)) {
            // Nothing recorded, and `held` keeps its sequence: an intent
            // left behind is never named by the usage word.
            return Apply::Blocked { used };
        }
        if !announced {
            p.intent[d].store(intent, Release);
            announced = true;
        }
        let new = named_word(target.max(0) as u64, i, seq);
        match wd.usage.compare_exchange(u, new, AcqRel, Acquire) {
            Ok(_) => break new,
            Err(_) => {
                b.wait();
                u = wd.usage.load(Acquire);
            }
        }
    };
    let applied = pack48(after as u64, seq);
    if owner {
        // Only a helper of this very op may write `held` now, and with the
        // same value.
        p.held[d].store(applied, Release);
    } else {
        let _ = p.held[d].compare_exchange(h, applied, AcqRel, Acquire);
    }
    // Tell the next process it need not look at our `held`. Only the
    // actor of an op writes this: a late write names an op of a slot that
    // cannot have moved on, so it never vouches for a later pending op.
    wd.settled.store(new, Release);
    Apply::Done { used: used_of(new) }
}

/// Settle and remove every reference of `wd`'s usage and settled words to
/// slot `i`, so the slot can be reused (a new process restarts its
/// sequences at 0, and a leftover `settled` naming the slot could vouch for
/// its first op). Only the reclaimer acts for a dead slot, so nobody writes
/// a `settled` naming it after this.
fn unname(l: &Layout, i: usize, d: usize, wd: &WorkerDevice) {
    loop {
        let u = wd.usage.load(Acquire);
        if !named(u) || tag_slot(u) != i {
            break;
        }
        if settle(l, d, wd, u) {
            let _ = wd.usage.compare_exchange(u, used_of(u), AcqRel, Acquire);
        }
    }
    let s = wd.settled.load(Acquire);
    if named(s) && tag_slot(s) == i {
        let _ = wd.settled.compare_exchange(s, 0, AcqRel, Acquire);
    }
}

/// Reclaim slot `i` if its process is dead (or its reclaimer died).
/// Returns whether this call reclaimed it.
fn reclaim(l: &Layout, i: usize) -> bool {
    let p = &l.procs[i];
    let me = my_pid();
    loop {
        let st = p.state.load(Acquire);
        let pid = word_pid(st);
        let ours = match st & 3 {
            PROC_LIVE => !alive(pid, Some(p.start.load(Relaxed))),
            PROC_RECLAIMING => pid != me && !alive(pid, None),
            _ => return false,
        };
        if !ours {
            return false;
        }
        if p.state
            .compare_exchange(st, proc_word(me, PROC_RECLAIMING), AcqRel, Acquire)
            .is_ok()
        {
            break;
        }
    }
    let w = (p.worker.load(Relaxed) as usize).min(MAX_WORKERS - 1);
    let mask = p.devmask.load(Acquire);
    for d in (0..MAX_DEVICES).filter(|d| mask & 1 << d != 0) {
        let wd = &l.wd[w][d];
        unname(l, i, d, wd);
        let held = low48(p.held[d].load(Acquire));
        if held > 0 {
            // held ≤ MAX_BYTES: it is part of the usage word's total.
            let _ = apply(l, i, d, wd, -(held.min(MAX_BYTES) as i64), false);
            unname(l, i, d, wd);
        }
        p.tokens[d].store(0, Relaxed);
    }
    p.devmask.store(0, Relaxed);
    p.state.store(proc_word(0, PROC_FREE), Release);
    true
}

/// Reclaim every dead process (of one worker, when given). Returns how many.
fn sweep(l: &Layout, worker: Option<usize>) -> usize {
    let me = my_pid();
    let mut n = 0;
    for (i, p) in l.procs.iter().enumerate() {
        let st = p.state.load(Acquire);
        let kind = st & 3;
        if kind != PROC_LIVE && kind != PROC_RECLAIMING {
            continue;
        }
        if kind == PROC_LIVE && word_pid(st) == me {
            continue;
        }
        if worker.is_some_and(|w| p.worker.load(Relaxed) as usize != w) {
            continue;
        }
        if reclaim(l, i) {
            n += 1;
        }
    }
    n
}

// ---- the limiter's operations --------------------------------------------------

/// Outcome of a memory check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemOutcome {
    pub should_block: bool,
    /// `limit − usage` after the op (`u64::MAX` when the worker has no limit).
    pub available_bytes: u64,
}

/// Outcome of a compute check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeOutcome {
    pub should_block: bool,
    pub available_tokens: u64,
}

/// Whether a check must block: the worker is frozen, or `auto` (the
/// resource's AutoFreeze word on the device) is set.
fn frozen(l: &Layout, w: usize, auto: &AtomicU64) -> bool {
    (w != 0 && l.workers[w].freeze.load(Acquire) != 0) || auto.load(Acquire) != 0
}

/// The most a worker with memory limit `limit` (0 = none) may use.
fn cap(limit: u64) -> u64 {
    if limit == 0 {
        MAX_BYTES
    } else {
        limit.min(MAX_BYTES)
    }
}

fn available(limit: u64, used: u64) -> u64 {
    if limit == 0 {
        u64::MAX
    } else {
        limit.saturating_sub(used)
    }
}

/// The device slot of `uuid`, claimed the first time it is seen. Device
/// slots are never released or renamed, so a caller may keep the index for
/// the life of the process (forked children included: they share the
/// mapping) and pass it to [`check_memory_on`] / [`check_compute_on`].
pub fn device_slot(uuid: &str) -> Res<usize> {
    device(shared()?, uuid)
}

fn checked_device(d: usize) -> Res<usize> {
    if d < MAX_DEVICES {
        Ok(d)
    } else {
        Err(Error::Internal(format!("device slot {d} out of range")))
    }
}

/// `CheckAndRecordMemoryOps` for process `pid` (positive delta: allocate).
pub fn check_memory(pid: i32, uuid: &str, delta: i64) -> Res<MemOutcome> {
    check_memory_on(pid, device_slot(uuid)?, delta)
}

/// [`check_memory`] on device slot `d` (from [`device_slot`]).
#[inline]
pub fn check_memory_on(pid: i32, d: usize, delta: i64) -> Res<MemOutcome> {
    match memory_fast(pid, d, delta) {
        Some(outcome) => Ok(outcome),
        None => memory_slow(pid, d, delta),
    }
}

/// The common case of a memory check, in one pass: the caller's own
/// registered slot, a device it used before, the worker not frozen, the
/// usage word naming nothing left to settle, within the limit, and no race
/// lost. It is `apply`'s owner path with every branch that leaves that case
/// turned into `None`, which hands the op to [`memory_slow`] (which handles
/// every case, this one included). Nothing shared is written before the
/// CAS but the op's `intent`, which the slow path writes again unchanged.
#[inline(always)]
fn memory_fast(pid: i32, d: usize, delta: i64) -> Option<MemOutcome> {
    let l = *MAP.get()?;
    if d >= MAX_DEVICES || delta.unsigned_abs() > MAX_BYTES {
        return None;
    }
    let i = own_slot(l, pid)?;
    let p = &l.procs[i];
    let w = p.worker.load(Relaxed) as usize;
    let wd = l.wd.get(w)?.get(d)?;
    if p.devmask.load(Relaxed) & 1 << d == 0 || frozen(l, w, &wd.mem_frozen) {
        return None;
    }
    let _owner = local::enter(i, d);
    let h = p.held[d].load(Acquire);
    let (bytes, seq) = (low48(h), (seq16(h) + 1) & 0xffff);
    let after = bytes as i64 + delta;
    let u = wd.usage.load(Acquire);
    if after < 0 || (named(u) && tag_slot(u) != i && wd.settled.load(Acquire) != u) {
        return None;
    }
    let target = used_of(u) as i64 + delta;
    let limit = wd.mem_limit.load(Acquire);
    if target < 0 || (delta > 0 && target as u64 > cap(limit)) {
        return None;
    }
    p.intent[d].store(pack48(delta as u64, seq), Release);
    let new = named_word(target as u64, i, seq);
    wd.usage.compare_exchange(u, new, AcqRel, Relaxed).ok()?;
    p.held[d].store(pack48(after as u64, seq), Release);
    wd.settled.store(new, Release);
    Some(MemOutcome {
        should_block: false,
        available_bytes: available(limit, target as u64),
    })
}

/// Every case of a memory check (see [`memory_fast`]).
#[inline(never)]
fn memory_slow(pid: i32, d: usize, delta: i64) -> Res<MemOutcome> {
    if delta.unsigned_abs() > MAX_BYTES {
        return Err(too_large(delta));
    }
    let l = shared()?;
    let d = checked_device(d)?;
    let i = proc_slot(l, pid)?;
    let p = &l.procs[i];
    let w = (p.worker.load(Relaxed) as usize).min(MAX_WORKERS - 1);
    let wd = &l.wd[w][d];
    let outcome = |should_block, used| MemOutcome {
        should_block,
        available_bytes: available(wd.mem_limit.load(Acquire), used),
    };
    if frozen(l, w, &wd.mem_frozen) {
        return Ok(outcome(true, used_of(wd.usage.load(Acquire))));
    }
    mark_device(p, d);
    let _owner = local::enter(i, d);
    match apply(l, i, d, wd, delta, true) {
        Apply::Done { used } => Ok(outcome(false, used)),
        Apply::Blocked { used } => Ok(match retry_after_sweep(l, i, d, w, wd, delta) {
            Some(Apply::Done { used }) => outcome(false, used),
            Some(Apply::Blocked { used }) => outcome(true, used),
            _ => outcome(true, used),
        }),
        Apply::Overdraft { held } => Err(overdraft(delta, held)),
    }
}

/// A blocked allocation may fit once the worker's dead processes are
/// reclaimed: sweep them (see `try_sweep`) and try once more.
#[cold]
#[inline(never)]
fn retry_after_sweep(
    l: &Layout,
    i: usize,
    d: usize,
    w: usize,
    wd: &WorkerDevice,
    delta: i64,
) -> Option<Apply> {
    try_sweep(l, w, wd).then(|| apply(l, i, d, wd, delta, true))
}

#[cold]
fn too_large(delta: i64) -> Error {
    Error::InvalidParam(format!(
        "{delta} bytes in one operation (at most {MAX_BYTES})"
    ))
}

#[cold]
fn overdraft(delta: i64, held: u64) -> Error {
    Error::InvalidParam(format!(
        "freeing {} bytes, but the process holds {held} on this device",
        delta.unsigned_abs()
    ))
}

/// Sweep the worker's dead processes, at most once a millisecond per worker
/// and device; true when something was reclaimed.
fn try_sweep(l: &Layout, w: usize, wd: &WorkerDevice) -> bool {
    let now = map::monotonic_ns();
    let last = wd.last_sweep_ns.load(Relaxed);
    if now.saturating_sub(last) < 1_000_000
        || wd
            .last_sweep_ns
            .compare_exchange(last, now, AcqRel, Relaxed)
            .is_err()
    {
        return false;
    }
    sweep(l, Some(w)) > 0
}

/// `CheckAndRecordComputeOps` for process `pid`.
pub fn check_compute(pid: i32, uuid: &str, tokens: u64) -> Res<ComputeOutcome> {
    check_compute_on(pid, device_slot(uuid)?, tokens)
}

/// [`check_compute`] on device slot `d` (from [`device_slot`]).
#[inline]
pub fn check_compute_on(pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    match compute_fast(pid, d, tokens) {
        Some(outcome) => Ok(outcome),
        None => compute_slow(pid, d, tokens),
    }
}

/// The token-bucket window in the TAT's unit (1/16 ns).
const WINDOW: u64 = BURST_NS * 16;

/// The cost of `tokens` at `percent` (1..=100) in 1/16 ns: `tokens × 1600 /
/// percent`, rounded up; `None` when it does not fit in a u64 (such a
/// request is larger than any burst).
#[inline(always)]
fn token_cost(tokens: u64, percent: u64) -> Option<u64> {
    Some(tokens.checked_mul(1600)?.div_ceil(percent))
}

/// Tokens left in a bucket with theoretical arrival time `tat` at `now`.
#[inline(always)]
fn tokens_left(tat: u64, now: u64, percent: u64) -> u64 {
    // percent ≤ 100 and the window is 1.6e9, so the product fits in a u64
    // (no 128-bit division on the hot path).
    WINDOW.saturating_sub(tat.saturating_sub(now)) * percent / 1600
}

/// The common case of a compute check, in one pass: the caller's own
/// registered slot, a device it used before, the worker not frozen, and
/// either no limit or a grant decided on this process's last TAT and the
/// shared clock reading (see `clock.rs`), won at the first CAS. Anything
/// else (a refill, a refusal, a wrong guess, a lost race) is `None`, and
/// [`compute_slow`], which handles every case, decides.
#[inline(always)]
fn compute_fast(pid: i32, d: usize, tokens: u64) -> Option<ComputeOutcome> {
    let l = *MAP.get()?;
    let i = own_slot(l, pid)?;
    let p = &l.procs[i];
    let w = p.worker.load(Relaxed) as usize;
    let wd = l.wd.get(w)?.get(d)?;
    if p.devmask.load(Relaxed) & 1 << d == 0 || frozen(l, w, &wd.bucket.frozen) {
        return None;
    }
    let percent = wd.bucket.limit.load(Acquire).min(100);
    let _owner = local::enter(i, d);
    if percent == 0 {
        count_tokens(p, d, tokens);
        return Some(ComputeOutcome {
            should_block: false,
            available_tokens: u64::MAX,
        });
    }
    let cost = token_cost(tokens, percent)?;
    let (now, fresh) = clock::now();
    let tat = LAST_TAT[d].load(Relaxed);
    // A grant on a cached reading only for a bucket in debt (clock.rs).
    if tat < now && !fresh {
        return None;
    }
    let next = tat.max(now).checked_add(cost)?;
    if next > now.saturating_add(WINDOW) {
        return None;
    }
    wd.bucket
        .tat
        .compare_exchange(tat, next, AcqRel, Relaxed)
        .ok()?;
    LAST_TAT[d].store(next, Relaxed);
    count_tokens(p, d, tokens);
    Some(ComputeOutcome {
        should_block: false,
        available_tokens: tokens_left(next, now, percent),
    })
}

/// Add granted tokens to the process's counter on device `d`. Only the
/// process's acting thread (`local::enter`) writes it: no locked add.
#[inline(always)]
fn count_tokens(p: &Proc, d: usize, tokens: u64) {
    let t = &p.tokens[d];
    t.store(t.load(Relaxed).wrapping_add(tokens), Relaxed);
}

/// Every case of a compute check (see [`compute_fast`]).
#[inline(never)]
fn compute_slow(pid: i32, d: usize, tokens: u64) -> Res<ComputeOutcome> {
    let l = shared()?;
    let d = checked_device(d)?;
    let i = proc_slot(l, pid)?;
    let p = &l.procs[i];
    let w = (p.worker.load(Relaxed) as usize).min(MAX_WORKERS - 1);
    let wd = &l.wd[w][d];
    // ≤ 100 (set_compute_limit); `min` keeps it so for any word a foreign
    // writer left.
    let percent = wd.bucket.limit.load(Acquire).min(100);
    mark_device(p, d);
    if frozen(l, w, &wd.bucket.frozen) {
        let a = if percent == 0 {
            u64::MAX
        } else {
            tokens_left(wd.bucket.tat.load(Acquire), clock::fresh(), percent)
        };
        return Ok(ComputeOutcome {
            should_block: true,
            available_tokens: a,
        });
    }
    let _owner = local::enter(i, d);
    if percent == 0 {
        count_tokens(p, d, tokens);
        return Ok(ComputeOutcome {
            should_block: false,
            available_tokens: u64::MAX,
        });
    }
    let cost = match token_cost(tokens, percent) {
        Some(c) => c as u128,
        None => (tokens as u128 * 1600).div_ceil(percent as u128),
    };
    let (mut now, mut fresh) = clock::now();
    // Start from the TAT this process last wrote on the device: right when
    // no other process took tokens since, and otherwise the failed CAS
    // brings the line over once, exclusive, with the true value (a load
    // first would bring it shared, and the CAS fetch it again).
    let mut tat = LAST_TAT[d].load(Relaxed);
    let mut known = false;
    let mut b = Backoff::new();
    loop {
        // A cached reading decides only grants that find the bucket in
        // debt against it; a refill or a refusal takes a fresh one, and
        // is never decided on a guessed TAT.
        let next = tat.max(now) as u128 + cost;
        let refused = next > (now + WINDOW) as u128;
        if (refused || (!fresh && tat < now)) && !(known && fresh) {
            if known {
                (now, fresh) = (clock::fresh(), true);
            } else {
                (tat, known) = (wd.bucket.tat.load(Acquire), true);
            }
            continue;
        }
        if refused {
            return Ok(ComputeOutcome {
                should_block: true,
                available_tokens: tokens_left(tat, now, percent),
            });
        }
        let next = next as u64;
        match wd.bucket.tat.compare_exchange(tat, next, AcqRel, Acquire) {
            Ok(_) => {
                LAST_TAT[d].store(next, Relaxed);
                count_tokens(p, d, tokens);
                return Ok(ComputeOutcome {
                    should_block: false,
                    available_tokens: tokens_left(next, now, percent),
                });
            }
            // A guess that was wrong is no contention; losing a race is.
            // Either way the next try starts from the value the failed CAS
            // saw: a fresh load would pull the line over shared, and the
            // CAS fetch it again (2 processes: ~35 → ~28 ns median).
            Err(current) if !known => (tat, known) = (current, true),
            Err(current) => {
                b.wait();
                tat = current;
            }
        }
    }
}

/// Per device, the TAT this process last wrote (a guess for the next CAS).
static LAST_TAT: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// A worker's freeze state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreezeState {
    pub frozen: bool,
    pub freeze_time_ms: u64,
}

fn now_ms() -> u64 {
    map::monotonic_ns() / 1_000_000
}

fn freeze_state(wk: &Worker) -> FreezeState {
    let f = wk.freeze.load(Acquire);
    let total = wk.frozen_ms.load(Acquire);
    FreezeState {
        frozen: f != 0,
        freeze_time_ms: if f == 0 {
            total
        } else {
            total + now_ms().saturating_sub(f - 1)
        },
    }
}

/// `FreezeWorker`: idempotent; NOT_FOUND for a worker the limiter never saw.
pub fn freeze_worker(worker: &str) -> Res<FreezeState> {
    let l = shared()?;
    let wk = &l.workers[known_worker(l, worker)?];
    let _ = wk.freeze.compare_exchange(0, now_ms() + 1, AcqRel, Acquire);
    Ok(freeze_state(wk))
}

/// `ResumeWorker`: idempotent; adds the frozen span to the freeze time.
pub fn resume_worker(worker: &str) -> Res<FreezeState> {
    let l = shared()?;
    let wk = &l.workers[known_worker(l, worker)?];
    let since = wk.freeze.swap(0, AcqRel);
    if since != 0 {
        wk.frozen_ms
            .fetch_add(now_ms().saturating_sub(since - 1), AcqRel);
    }
    Ok(freeze_state(wk))
}

/// The resource of `AutoFreeze`/`AutoResume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    Compute,
}

impl std::str::FromStr for Resource {
    type Err = Error;
    fn from_str(s: &str) -> Res<Resource> {
        match s {
            "memory" => Ok(Resource::Memory),
            "compute" => Ok(Resource::Compute),
            _ => Err(Error::InvalidParam(format!(
                "resource type {s:?} is neither \"memory\" nor \"compute\""
            ))),
        }
    }
}

/// `AutoFreeze` (`frozen`) / `AutoResume` of one resource of a worker on a device.
pub fn auto_freeze(worker: &str, uuid: &str, resource: Resource, frozen: bool) -> Res<()> {
    let l = shared()?;
    let w = known_worker(l, worker)?;
    let d = device(l, uuid)?;
    let wd = &l.wd[w][d];
    let word = match resource {
        Resource::Memory => &wd.mem_frozen,
        Resource::Compute => &wd.bucket.frozen,
    };
    word.store(frozen.into(), Release);
    Ok(())
}

/// `AddWorkerProcess`: register `pid` (and its worker) on a device.
pub fn add_process(uuid: &str, pid: i32) -> Res<()> {
    let l = shared()?;
    let d = device(l, uuid)?;
    let i = proc_slot(l, pid)?;
    mark_device(&l.procs[i], d);
    Ok(())
}

// ---- limits and reports, for libaccelerator and its vendors ---------------------

fn set_once(word: &AtomicU64, value: u64, what: &str, worker: &str, uuid: &str) -> Res<()> {
    match word.compare_exchange(0, value, AcqRel, Acquire) {
        Ok(_) => Ok(()),
        Err(v) if v == value => Ok(()),
        Err(v) => Err(Error::OperationFailed(format!(
            "{what} limit of worker {worker:?} on {uuid:?} is already {v} (hard limits are one-time)"
        ))),
    }
}

/// Set a worker's memory limit on a device (one-time; the same value again is fine).
pub fn set_memory_limit(worker: &str, uuid: &str, bytes: u64) -> Res<()> {
    if bytes == 0 || bytes > MAX_BYTES {
        return Err(Error::InvalidParam(format!(
            "memory limit {bytes} is outside 1..={MAX_BYTES}"
        )));
    }
    let l = shared()?;
    let w = worker_index(l, worker, true)?.ok_or_else(|| Error::Internal("worker".into()))?;
    let d = device(l, uuid)?;
    set_once(&l.wd[w][d].mem_limit, bytes, "memory", worker, uuid)
}

/// Set a worker's compute limit (percent, 1–100) on a device (one-time).
pub fn set_compute_limit(worker: &str, uuid: &str, percent: u32) -> Res<()> {
    if !(1..=100).contains(&percent) {
        return Err(Error::InvalidParam(format!(
            "compute limit {percent}% is outside 1..=100"
        )));
    }
    let l = shared()?;
    let w = worker_index(l, worker, true)?.ok_or_else(|| Error::Internal("worker".into()))?;
    let d = device(l, uuid)?;
    set_once(
        &l.wd[w][d].bucket.limit,
        percent.into(),
        "compute",
        worker,
        uuid,
    )
}

/// One worker's limits on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitEntry {
    pub worker: String,
    pub device_uuid: String,
    pub memory_bytes: Option<u64>,
    pub compute_percent: Option<u32>,
}

fn ready_devices(l: &Layout) -> Vec<(usize, String)> {
    l.devices
        .iter()
        .enumerate()
        .filter(|(_, k)| k.state.load(Acquire) == KEY_READY)
        .map(|(d, k)| (d, key_name(k)))
        .collect()
}

/// Every limit set on the node.
pub fn limits() -> Res<Vec<LimitEntry>> {
    let l = shared()?;
    let devices = ready_devices(l);
    let mut out = Vec::new();
    for (w, wk) in l.workers.iter().enumerate().skip(1) {
        if wk.key.state.load(Acquire) != KEY_READY {
            continue;
        }
        for (d, uuid) in &devices {
            let mem = l.wd[w][*d].mem_limit.load(Acquire);
            let cu = l.wd[w][*d].bucket.limit.load(Acquire);
            if mem != 0 || cu != 0 {
                out.push(LimitEntry {
                    worker: key_name(&wk.key),
                    device_uuid: uuid.clone(),
                    memory_bytes: (mem != 0).then_some(mem),
                    compute_percent: (cu != 0).then_some(cu as u32),
                });
            }
        }
    }
    Ok(out)
}

/// What the limiter recorded for one live process on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessUsage {
    pub pid: i32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The worker id; empty for a process without `ACCELERATOR_WORKER_ID`.
    pub worker: String,
    pub device_uuid: String,
    /// Bytes the limiter recorded (allocations minus frees).
    pub memory_bytes: u64,
    /// Compute tokens granted so far (1 token = 1 ns of the whole device).
    pub compute_tokens: u64,
}

/// Every live process the limiter knows, one entry per device it used.
/// Dead processes are reclaimed first, so the bytes are those of live
/// processes only.
pub fn processes() -> Res<Vec<ProcessUsage>> {
    let l = shared()?;
    sweep(l, None);
    let devices = ready_devices(l);
    let mut out = Vec::new();
    for p in &l.procs {
        let st = p.state.load(Acquire);
        if st & 3 != PROC_LIVE {
            continue;
        }
        let w = (p.worker.load(Relaxed) as usize).min(MAX_WORKERS - 1);
        let worker = if w == 0 {
            String::new()
        } else {
            key_name(&l.workers[w].key)
        };
        let mask = p.devmask.load(Acquire);
        for (d, uuid) in &devices {
            if mask & 1 << d != 0 {
                out.push(ProcessUsage {
                    pid: word_pid(st),
                    start_time: p.start.load(Relaxed),
                    worker: worker.clone(),
                    device_uuid: uuid.clone(),
                    memory_bytes: low48(p.held[*d].load(Acquire)),
                    compute_tokens: p.tokens[*d].load(Relaxed),
                });
            }
        }
    }
    Ok(out)
}

/// A worker's recorded usage on a device and its memory limit (None:
/// unlimited). NOT_FOUND for an unknown worker or device.
pub fn worker_usage(worker: &str, uuid: &str) -> Res<(u64, Option<u64>)> {
    let l = shared()?;
    let w = known_worker(l, worker)?;
    let d = device_index(l, uuid, false)?
        .ok_or_else(|| Error::NotFound(format!("device {uuid:?} is not known to the limiter")))?;
    let wd = &l.wd[w][d];
    let limit = wd.mem_limit.load(Acquire);
    Ok((
        used_of(wd.usage.load(Acquire)),
        (limit != 0).then_some(limit),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        assert_eq!(delta_of(pack48(-5i64 as u64, 7)), -5);
        assert_eq!(seq16(pack48(-5i64 as u64, 7)), 7);
        let u = named_word(123, 4095, 0x1ff);
        assert!(named(u));
        assert_eq!((used_of(u), tag_slot(u), tag_seq8(u)), (123, 4095, 0xff));
        assert_eq!(word_pid(proc_word(4_194_304, PROC_LIVE)), 4_194_304);
        assert_eq!(SIZE % 4096, 0);
    }
}
