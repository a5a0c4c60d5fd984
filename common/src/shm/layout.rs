//! The layout of one worker's books (version [`VERSION`], fixed size,
//! zero-initialised = empty) and the packing of its words.
//!
//! Each worker has a file of its own, `workers/<worker>/limiter.shm`
//! (`workers.rs`): every word in it is that worker's, so what the worker's
//! processes write cannot reach another worker's books.
//!
//! | part | size | content |
//! |---|---|---|
//! | header | 4 KiB | magic `ACCLIMIT`, layout version, total size, private flag, slots ever claimed, the worker's id |
//! | scratch | 4 KiB | reserved for benchmarks and diagnostics; never read by the limiter |
//! | devices | 64 × 128 B | device UUIDs (`devices.rs`) |
//! | worker × device | 64 × 128 B | line 1: usage word, settled word, last sweep; line 2: token bucket (TAT) |
//! | processes | 2,048 × 1,856 B | state word (pid), start time, devices touched, pid namespace, owned flag, per device: held bytes, pending intent, tokens used, launch share |
//!
//! Limits and freeze state are not here (the worker's clients write this
//! file): they are in the host-owned limits file (`limits.rs`).

use super::*;

// ---- the layout -----------------------------------------------------------

#[repr(C, align(4096))]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) version: AtomicU64,
    pub(super) size: AtomicU64,
    /// 1: the private worker of one process without `ACCELERATOR_WORKER_ID`
    /// (`workers.rs`), whose directory the host removes once it is unused.
    pub(super) private: AtomicU64,
    /// One past the highest process slot ever claimed: host reports and
    /// every scan read the slots below it only (`Layout::claimed`; a
    /// worker's books are mostly holes, and stay so).
    pub(super) slots: AtomicU64,
    /// The worker's id, written by the file's creator.
    pub(super) worker: Key,
}

#[repr(C, align(4096))]
pub(super) struct Scratch(pub(super) [AtomicU64; SCRATCH_SIZE / 8]);

/// A slot named by a string (device UUID or worker id).
#[repr(C, align(64))]
pub(super) struct Key {
    /// KEY_FREE, KEY_READY, or (pid << 2) | KEY_CLAIMING.
    pub(super) state: AtomicU64,
    pub(super) hash: AtomicU64,
    pub(super) words: [AtomicU64; 8],
}

/// One worker on one device: the memory fields on the first cache line, the
/// token bucket on the second, so memory and compute checks of different
/// processes do not evict each other's line.
#[repr(C, align(64))]
pub(super) struct WorkerDevice {
    /// used (43 bits) | NAMED_BIT | slot << 44 | seq8 << 56.
    pub(super) usage: AtomicU64,
    /// The last usage word whose op is known to be in its slot's `held`.
    pub(super) settled: AtomicU64,
    pub(super) last_sweep_ns: AtomicU64,
    pub(super) bucket: Bucket,
}

#[repr(C, align(64))]
pub(super) struct Bucket {
    /// Theoretical arrival time, 1/16 ns since boot.
    pub(super) tat: AtomicU64,
}

#[repr(C, align(64))]
pub(super) struct Proc {
    /// (pid << 2) | PROC_FREE/CLAIMING/LIVE/RECLAIMING.
    pub(super) state: AtomicU64,
    pub(super) start: AtomicU64,
    /// Bit d: the process has used device d.
    pub(super) devmask: AtomicU64,
    /// The pid namespace the pid is of (`owner::pid_ns`).
    pub(super) ns: AtomicU64,
    /// 1: the process registered itself and holds the slot's lock byte;
    /// 0: a proxy slot (`owner.rs`).
    pub(super) owned: AtomicU64,
    /// bytes (48 bits) | seq << 48.
    pub(super) held: [AtomicU64; MAX_DEVICES],
    /// delta (signed, 48 bits) | seq << 48.
    pub(super) intent: [AtomicU64; MAX_DEVICES],
    pub(super) tokens: [AtomicU64; MAX_DEVICES],
    /// Per device: the process's launch charge relative to its worker's
    /// (the host sampler's measurement, `steer::SHARE_ONE` = the same;
    /// 0: not measured, the same), so that the processes of a worker share
    /// its limit by device time, not by launches.
    pub(super) share: [AtomicU32; MAX_DEVICES],
}

#[repr(C)]
pub struct Layout {
    pub(super) header: Header,
    pub(super) scratch: Scratch,
    pub(super) devices: [Key; MAX_DEVICES],
    pub(super) wd: [WorkerDevice; MAX_DEVICES],
    pub(super) procs: [Proc; MAX_PROCS],
}

impl Layout {
    /// The process slots ever claimed (below `header.slots`). Scans read
    /// only these: a read fault on a hole of a tmpfs mapping allocates its
    /// page, so a scan of all 2,048 slots made every worker's books cost
    /// 3.2 MB of RAM; a worker with one process touches five pages.
    pub(super) fn claimed(&self) -> &[Proc] {
        let n = (self.header.slots.load(SeqCst) as usize).min(MAX_PROCS);
        &self.procs[..n]
    }
}

/// Size of a worker's books.
pub const SIZE: usize = std::mem::size_of::<Layout>();

pub(super) const KEY_FREE: u64 = 0;
pub(super) const KEY_CLAIMING: u64 = 1;
pub(super) const KEY_READY: u64 = 2;
/// Devices only: being retired (`devices.rs`).
pub(super) const KEY_RETIRING: u64 = 3;

pub(super) const PROC_FREE: u64 = 0;
pub(super) const PROC_CLAIMING: u64 = 1;
pub(super) const PROC_LIVE: u64 = 2;
pub(super) const PROC_RECLAIMING: u64 = 3;

/// The usage word names its last operation (slot, sequence).
pub(super) const NAMED_BIT: u64 = 1 << 43;
pub(super) const SLOT_SHIFT: u32 = 44;
pub(super) const SEQ8_SHIFT: u32 = 56;
pub(super) const LOW48: u64 = (1 << 48) - 1;

pub(super) fn used_of(u: u64) -> u64 {
    u & MAX_BYTES
}
pub(super) fn named(u: u64) -> bool {
    u & NAMED_BIT != 0
}
pub(super) fn tag_slot(u: u64) -> usize {
    ((u >> SLOT_SHIFT) & 0xfff) as usize
}
/// What is wrong with usage word `u` as read from a worker's books (a
/// tenant writes them): the tag has 12 bits, there are [`MAX_PROCS`] slots.
pub(super) fn usage_word_fault(u: u64) -> Option<String> {
    (named(u) && tag_slot(u) >= MAX_PROCS).then(|| {
        format!(
            "its usage word {u:#018x} names process slot {} (there are {MAX_PROCS})",
            tag_slot(u)
        )
    })
}
pub(super) fn tag_seq8(u: u64) -> u64 {
    u >> SEQ8_SHIFT
}
pub(super) fn named_word(used: u64, slot: usize, seq: u64) -> u64 {
    used | NAMED_BIT | (slot as u64) << SLOT_SHIFT | (seq & 0xff) << SEQ8_SHIFT
}
pub(super) fn pack48(low: u64, seq: u64) -> u64 {
    (low & LOW48) | (seq & 0xffff) << 48
}
pub(super) fn low48(w: u64) -> u64 {
    w & LOW48
}
pub(super) fn seq16(w: u64) -> u64 {
    w >> 48
}
pub(super) fn delta_of(intent: u64) -> i64 {
    // Sign-extend the low 48 bits.
    ((intent << 16) as i64) >> 16
}
pub(super) fn proc_word(pid: i32, kind: u64) -> u64 {
    (pid as u32 as u64) << 2 | kind
}
pub(super) fn word_pid(w: u64) -> i32 {
    (w >> 2) as u32 as i32
}
