//! Device memory: every allocation charged before the driver is asked,
//! every free giving back exactly what its allocation took, and the
//! virtualized view of a worker's partition.
//!
//! The flow of an allocation (`allocate`): find the device, charge the
//! bytes to the limiter (refused: CUDA_ERROR_OUT_OF_MEMORY, the driver is
//! never called), call the driver, and either remember what the new
//! address/handle took (success) or give the charge back (failure). A free
//! (`free`) takes the record out *before* the driver runs, so an address the
//! driver hands out again meanwhile is never confused with the freed one,
//! and puts it back should the driver refuse the free.
//!
//! The records are a sharded map (64 shards, each a mutex over a hash map):
//! threads freeing different addresses rarely meet. After `fork()` the
//! child starts with no records: it holds no device memory of its own, and
//! its parent's frees stay the parent's.
//!
//! A context's own allocations (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`,
//! `cuMemAllocManaged`, arrays) die with it: the driver frees whatever is
//! still live in a context when it is destroyed (`cuCtxDestroy_v2`, a
//! primary context's last release or its reset). Their records carry the
//! context they were made in, and [`free_context`] gives them back then.
//! Stream-ordered allocations come from a memory pool, which belongs to a
//! device, not to a context; `cuMemCreate`'s physical memory names its
//! device too: neither is tied to a context. How long `cuMemCreate`'s
//! memory stays charged (handles, mappings, bindings) is `vmm`'s.
//!
//! Pools: `cuMemAllocFromPoolAsync` takes its bytes from the pool's
//! device, whatever the current one is. No driver call says where a pool
//! is (`cuMemPoolGetAttribute` has no location), so the hook remembers it
//! from where the process got the pool ([`pool_at`]: `cuMemPoolCreate`'s
//! properties, `cuDeviceGetDefaultMemPool`/`cuDeviceGetMemPool`/
//! `cuDeviceSetMemPool`'s device). A pool it never saw (imported from
//! another process) is charged to the current device.
//!
//! A pool keeps what is freed into it (reserved by the driver, not in use)
//! until it releases it: a synchronization releases what lies above its
//! release threshold (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, default 0),
//! `cuMemPoolTrimTo` down to what it is told to keep, `cuMemPoolDestroy`
//! all of it. So a free of a pool's allocation gives nothing back: its bytes
//! stay charged as the pool's kept bytes ([`free`]); the pool's next
//! allocations are served from them first, charging only the rest
//! ([`Target::Pool`]); and after each of those calls the hook asks the
//! driver how much the pool still holds unused (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`
//! less `_USED_MEM_CURRENT`) and gives back what its kept bytes exceed
//! ([`settle_pools`], [`settle_pool`]; no answer: all of them). Between two
//! such calls a real pool's fragments may hold more than the hook keeps.

use crate::devices::{self, Device};
use crate::limits::{self, Verdict};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering::*};

pub type CuResult = i32;
pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;

/// What the hook needs to know from the driver.
pub trait Driver {
    /// The device of the calling thread's current context.
    fn current_device(&self) -> Option<i32>;
    /// The calling thread's current context (0: none).
    fn current_context(&self) -> u64;
    /// The 16 UUID bytes of a device.
    fn uuid(&self, ordinal: i32) -> Option<[u8; 16]>;
    /// The device of a stream the program created (`cuStreamGetDevice`).
    fn stream_device(&self, stream: u64) -> Option<i32>;
}

/// The name spaces of things an allocation returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A device pointer (`CUdeviceptr`).
    Pointer,
    /// A `CUarray`.
    Array,
    /// A `CUmipmappedArray`.
    Mipmapped,
    /// A `CUcontext` (its reservation, `context.rs`).
    Context,
    /// A device's primary context, by ordinal (`context.rs`).
    Primary,
    /// What a context's raised limit takes (`ctxlimits.rs`).
    Limit,
    /// A `CUmodule`'s globals (`modules.rs`).
    Module,
    /// A `CUlibrary`'s globals (`modules.rs`).
    Library,
    /// The local memory launches grew a context to, by context (`localmem.rs`).
    LocalMemory,
}

/// What one allocation took.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    slot: usize,
    bytes: u64,
    /// The context the driver frees it with (0: none).
    ctx: u64,
    /// The memory pool it came from, which keeps it when freed (0: none).
    pool: u64,
}

/// Addresses are aligned: mix the bits above the alignment.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u8(&mut self, v: u8) {
        self.0 ^= v as u64;
    }
    fn write_isize(&mut self, v: isize) {
        self.0 ^= v as u64;
    }
}

type Shard = Mutex<HashMap<(Kind, u64), Record, BuildHasherDefault<AddrHasher>>>;
const SHARDS: usize = 64;
static MAP: [Shard; SHARDS] =
    [const { Mutex::new(HashMap::with_hasher(BuildHasherDefault::new())) }; SHARDS];

fn shard(key: u64) -> &'static Shard {
    let h = (key ^ key >> 21).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    &MAP[(h >> 58) as usize % SHARDS]
}

/// Before `fork()`: hold every shard and the pools so the child copies
/// none mid-update.
pub fn lock_all_for_fork() {
    std::mem::forget(POOLS.lock());
    for s in &MAP {
        std::mem::forget(s.lock());
    }
}

/// The shards and the pools, for the fork handlers to release after `fork()`.
pub fn fork_locks() -> (&'static [Shard], &'static Pools) {
    (&MAP, &POOLS)
}

/// In the child after `fork()` (shards released): no records, a new pid.
pub fn forget_after_fork() {
    for s in &MAP {
        s.lock().clear();
    }
    POOLS.lock().clear();
    limits::forget_pid();
    devices::forget_slots();
    crate::current::forget();
}

/// Outcome of the device/charge step of an allocation.
enum Step {
    /// Call the driver and record the result under `Device`.
    Charged(Device, u64),
    /// Call the driver, record nothing.
    Through,
    Refused,
}

fn charge_on(device: Result<Option<Device>, Verdict>, bytes: u64) -> Step {
    let device = match device {
        Ok(Some(d)) => d,
        Ok(None) => return Step::Through,
        Err(Verdict::Refused) => return Step::Refused,
        Err(_) => return Step::Through,
    };
    match limits::charge(device.slot, bytes) {
        Verdict::Charged => Step::Charged(device, bytes),
        Verdict::Refused => Step::Refused,
        Verdict::Unaccounted => Step::Through,
    }
}

/// Where an allocation goes.
pub enum Target {
    /// Into the current context (freed with it), on its device.
    Context,
    /// On the current context's device, outliving the context (a pool's).
    Current,
    /// On a device the call names (cuMemCreate, a pool's device).
    Ordinal(i32),
    /// From memory pool `.0` (0: one the hook cannot name) on device `.1`
    /// (None: the current one), outliving the context; served first from
    /// what the pool keeps.
    Pool(u64, Option<i32>),
}

/// The result of the driver's part of an allocation.
pub struct Allocated {
    pub result: CuResult,
    /// On success, the key of what was allocated and the bytes it really
    /// took (when the driver decides, e.g. a pitch), else the charge.
    pub key: Option<(u64, Option<u64>)>,
}

/// Charge `bytes`, run the driver's allocation `call`, and record or
/// refund. A refused allocation never reaches the driver.
#[inline]
pub fn allocate(
    drv: &impl Driver,
    target: Target,
    kind: Kind,
    bytes: u64,
    call: impl FnOnce() -> Allocated,
) -> CuResult {
    let pool = match target {
        Target::Pool(p, _) => p,
        _ => 0,
    };
    allocate_with(drv, target, bytes, call, |key, device, bytes, ctx| {
        remember_from(kind, key, device.slot, bytes, ctx, pool)
    })
}

/// [`allocate`], the success recorded by `record(key, device, bytes,
/// context)` (memory whose lifetime is not one free's: `vmm`).
#[inline]
pub fn allocate_with(
    drv: &impl Driver,
    target: Target,
    bytes: u64,
    call: impl FnOnce() -> Allocated,
    record: impl FnOnce(u64, Device, u64, u64),
) -> CuResult {
    if !limits::active() || limits::passes_through() {
        return call().result;
    }
    let (device, ctx, pool) = match target {
        Target::Context => {
            let (device, ctx) = current_device(drv);
            (device, ctx, 0)
        }
        Target::Current => (current_device(drv).0, 0, 0),
        Target::Ordinal(o) => (resolve(drv, Some(o)), 0, 0),
        Target::Pool(p, Some(o)) => (resolve(drv, Some(o)), 0, p),
        Target::Pool(p, None) => (current_device(drv).0, 0, p),
    };
    // What the pool keeps is charged already: only the rest is.
    let (slot, covered) = match &device {
        Ok(Some(d)) => (d.slot, take_kept(pool, d.slot, bytes)),
        _ => (0, 0),
    };
    let (device, charged) = match charge_on(device, bytes - covered) {
        Step::Charged(d, b) => (d, b),
        refused_or_through => {
            keep(pool, slot, covered);
            if matches!(refused_or_through, Step::Refused) {
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            return call().result;
        }
    };
    let done = call();
    let Some((key, actual)) = done.key.filter(|_| done.result == CUDA_SUCCESS) else {
        keep(pool, slot, covered);
        limits::give_back(device.slot, charged);
        return done.result;
    };
    let mut bytes = charged + covered;
    if let Some(actual) = actual {
        if actual < bytes {
            limits::give_back(device.slot, bytes - actual);
            bytes = actual;
        } else if actual > bytes && limits::charge(device.slot, actual - bytes) == Verdict::Charged
        {
            bytes = actual;
        }
    }
    record(key, device, bytes, ctx);
    done.result
}

/// The device of a CUDA ordinal (None: no current context, which the
/// driver will say).
fn resolve(drv: &impl Driver, ordinal: Option<i32>) -> Result<Option<Device>, Verdict> {
    match ordinal {
        Some(o) => devices::resolve(o, |o| drv.uuid(o)),
        None => Ok(None),
    }
}

/// The current context's device, and the context: as the thread's last
/// launch or allocation found them (`current.rs`: one driver call), else
/// asked (no context, a device the limiter cannot name, its state unusable).
#[inline]
fn current_device(drv: &impl Driver) -> (Result<Option<Device>, Verdict>, u64) {
    match crate::current::here(drv) {
        Some(here) => (Ok(Some(here.device)), here.ctx),
        None => (resolve(drv, drv.current_device()), drv.current_context()),
    }
}

/// Record that `key` took `bytes` (charged) on device slot `slot`, in
/// context `ctx` (0: none).
pub fn remember(kind: Kind, key: u64, slot: usize, bytes: u64, ctx: u64) {
    remember_from(kind, key, slot, bytes, ctx, 0);
}

/// [`remember`] an allocation of memory pool `pool` (0: none).
fn remember_from(kind: Kind, key: u64, slot: usize, bytes: u64, ctx: u64, pool: u64) {
    // An address handed out again whose earlier allocation was freed by a
    // way the hook does not see (a context destroyed with its memory, a
    // legacy entry point): that one's charge ends here.
    if let Some(old) = shard(key).lock().insert(
        (kind, key),
        Record {
            slot,
            bytes,
            ctx,
            pool,
        },
    ) {
        limits::give_back(old.slot, old.bytes);
    }
}

/// The record of `key` taken out of the books, its charge still held (put
/// it back with [`remember`], or give its bytes back).
pub fn take(kind: Kind, key: u64) -> Option<Record> {
    shard(key).lock().remove(&(kind, key))
}

/// The record of `key` dropped and its charge given back: the driver
/// never took what it was charged for (a `cuMemAllocAsync` captured into
/// a graph becomes the graph's allocation node).
pub fn uncharge(kind: Kind, key: u64) {
    if let Some(r) = take(kind, key) {
        limits::give_back(r.slot, r.bytes);
    }
}

impl Record {
    /// What the allocation took.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Run the driver's free of `key` and give back what its allocation took
/// (a pool's: its pool keeps it, still charged).
#[inline]
pub fn free(kind: Kind, key: u64, call: impl FnOnce() -> CuResult) -> CuResult {
    if !limits::active() {
        return call();
    }
    let taken = shard(key).lock().remove(&(kind, key));
    let result = call();
    if let Some(r) = taken {
        if result == CUDA_SUCCESS {
            if !keep(r.pool, r.slot, r.bytes) {
                limits::give_back(r.slot, r.bytes);
            }
        } else {
            shard(key).lock().insert((kind, key), r);
        }
    }
    result
}

/// Run the driver's destruction of a context (`kind`/`key`: its own
/// reservation's record; `ctx`: its handle) and give back its reservation
/// and every allocation still live in it (the driver frees them with it).
/// The records are taken out before the call: once the driver has
/// destroyed `ctx`, another thread may create a context that gets the same
/// handle and allocate in it, and those are not this context's. A failed
/// destruction puts them back.
pub fn free_context(kind: Kind, key: u64, ctx: u64, call: impl FnOnce() -> CuResult) -> CuResult {
    if !limits::active() {
        return call();
    }
    let mut taken = take_context(ctx);
    if let Some(r) = shard(key).lock().remove(&(kind, key)) {
        taken.push(((kind, key), r));
    }
    let result = call();
    // Again once it is gone: a thread that launched in it meanwhile keeps
    // its device (`current.rs`) under the generation moved before.
    crate::current::forget();
    if result == CUDA_SUCCESS {
        for (_, r) in taken {
            limits::give_back(r.slot, r.bytes);
        }
    } else {
        put_back(taken);
    }
    result
}

type Taken = Vec<((Kind, u64), Record)>;

/// Remove the records of the allocations made in context `ctx` (none for 0).
fn take_context(ctx: u64) -> Taken {
    let mut taken = Vec::new();
    if ctx == 0 {
        return taken;
    }
    // Its handle and its functions' may name new ones from now on.
    crate::current::forget();
    for s in &MAP {
        let mut s = s.lock();
        let keys: Vec<_> = s
            .iter()
            .filter(|(_, r)| r.ctx == ctx)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(r) = s.remove(&k) {
                taken.push((k, r));
            }
        }
    }
    taken
}

/// Re-insert records [`take_context`] removed. One whose address was handed
/// out again meanwhile (its record is newer) stays given up.
fn put_back(taken: Taken) {
    for (k, r) in taken {
        shard(k.1).lock().entry(k).or_insert(r);
    }
}

/// Where a memory pool's allocations live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// On this device (CU_MEM_LOCATION_TYPE_DEVICE).
    Device(i32),
    /// In host memory: no device's bytes.
    Host,
}

/// A memory pool the hook has met: where it allocates, and the bytes
/// freed into it that it keeps, charged to device slot `slot`.
#[derive(Debug, Clone, Copy)]
pub struct Pool {
    place: Place,
    slot: usize,
    kept: u64,
}

type Pools = Mutex<HashMap<u64, Pool, BuildHasherDefault<AddrHasher>>>;
static POOLS: Pools = Mutex::new(HashMap::with_hasher(BuildHasherDefault::new()));
/// Some pool keeps bytes: a synchronization asks the driver about them.
static KEEPING: AtomicBool = AtomicBool::new(false);

/// Pool `pool` (a `CUmemoryPool`) allocates at `place`.
pub fn pool_at(pool: u64, place: Place) {
    if pool != 0 {
        POOLS
            .lock()
            .entry(pool)
            .and_modify(|p| p.place = place)
            .or_insert(Pool {
                place,
                slot: 0,
                kept: 0,
            });
    }
}

/// Pool `pool` was destroyed (its address may name another pool later):
/// what it kept is released.
pub fn pool_gone(pool: u64) {
    if let Some(p) = POOLS.lock().remove(&pool) {
        limits::give_back(p.slot, p.kept);
    }
}

/// Where pool `pool` allocates, if the hook saw where it came from.
pub fn pool_place(pool: u64) -> Option<Place> {
    POOLS.lock().get(&pool).map(|p| p.place)
}

/// Pool `pool` keeps `bytes` more, charged to device slot `slot`; false
/// when the hook does not know the pool (a destroyed one's allocation
/// freed: released at once).
fn keep(pool: u64, slot: usize, bytes: u64) -> bool {
    if pool == 0 {
        return false;
    }
    match POOLS.lock().get_mut(&pool) {
        Some(p) if p.kept == 0 || p.slot == slot => {
            p.slot = slot;
            p.kept += bytes;
            KEEPING.store(true, Release);
            true
        }
        _ => false,
    }
}

/// Up to `bytes` of what pool `pool` keeps on device slot `slot`, taken
/// for a new allocation of it.
fn take_kept(pool: u64, slot: usize, bytes: u64) -> u64 {
    // Not a pool's allocation: no lock (every `cuMemAlloc_v2` comes here).
    if pool == 0 {
        return 0;
    }
    match POOLS.lock().get_mut(&pool) {
        Some(p) if p.slot == slot => {
            let n = p.kept.min(bytes);
            p.kept -= n;
            n
        }
        _ => 0,
    }
}

/// After a synchronization: each pool that keeps bytes settles with what
/// `idle(pool)` says the driver still holds unused in it.
pub fn settle_pools(idle: impl Fn(u64) -> Option<u64>) {
    // A load first: a synchronization with nothing kept writes nothing.
    if !KEEPING.load(Acquire) || !KEEPING.swap(false, AcqRel) {
        return;
    }
    let keeping: Vec<u64> = POOLS
        .lock()
        .iter()
        .filter(|(_, p)| p.kept > 0)
        .map(|(k, _)| *k)
        .collect();
    for pool in keeping {
        settle_pool(pool, idle(pool));
    }
}

/// Pool `pool` holds `idle` bytes unused (None: the driver cannot say, so
/// none): what it keeps beyond that is given back.
pub fn settle_pool(pool: u64, idle: Option<u64>) {
    let mut pools = POOLS.lock();
    let Some(p) = pools.get_mut(&pool) else {
        return;
    };
    let keep = p.kept.min(idle.unwrap_or(0));
    let (slot, back) = (p.slot, p.kept - keep);
    p.kept = keep;
    if keep > 0 {
        KEEPING.store(true, Release);
    }
    drop(pools);
    limits::give_back(slot, back);
}

/// The worker's partition on a device (its slot and UUID text) as (free,
/// total): its limit as the total and what is left of it as free, never
/// more than the driver's own free memory and never below 0. `None`: no
/// limit there, report the driver's figures.
#[inline]
pub fn partition(device: Option<(usize, &str)>, driver_free: u64) -> Option<(u64, u64)> {
    let (slot, uuid) = device?;
    let (used, limit) = limits::view(slot, uuid)?;
    Some((limit.saturating_sub(used).min(driver_free), limit))
}

/// The device (limiter slot, UUID text) of a CUDA ordinal for
/// [`partition`], learning it on first use.
#[inline]
pub fn view_device(drv: &impl Driver, ordinal: i32) -> Option<(usize, &'static str)> {
    let d = devices::resolve(ordinal, |o| drv.uuid(o)).ok()??;
    Some((d.slot, devices::uuid_of(d.ordinal)?))
}

/// The UUID text of a CUDA device, learning it if needed.
pub fn uuid_of(drv: &impl Driver, ordinal: i32) -> Option<&'static str> {
    if !limits::active() {
        return None;
    }
    let _ = devices::resolve(ordinal, |o| drv.uuid(o));
    devices::uuid_of(usize::try_from(ordinal).ok()?)
}

/// Bytes per element of a CUDA array format (`CUarray_format`) per channel;
/// formats whose size the hook does not know count as 16 bytes (the
/// largest), so no array is under-charged.
pub fn format_bytes(format: u32) -> u64 {
    match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => 16,
    }
}

/// Bytes of an array of `w` × `h` × `d` elements (0 = dimension unused).
pub fn array_bytes(w: u64, h: u64, d: u64, format: u32, channels: u32) -> u64 {
    w.saturating_mul(h.max(1))
        .saturating_mul(d.max(1))
        .saturating_mul(format_bytes(format))
        .saturating_mul(channels.max(1) as u64)
}

/// Bytes of a mipmapped array: every level halves each used dimension.
pub fn mipmapped_bytes(w: u64, h: u64, d: u64, format: u32, channels: u32, levels: u32) -> u64 {
    (0..levels.clamp(1, 64)).fold(0u64, |sum, l| {
        let dim = |x: u64| if x == 0 { 0 } else { (x >> l).max(1) };
        sum.saturating_add(array_bytes(dim(w), dim(h), dim(d), format, channels))
    })
}

/// The first charge of a pitched allocation: rows padded to 512 bytes, the
/// largest pitch alignment CUDA devices use; the driver's real pitch then
/// settles it.
pub fn pitch_bound(width: u64, height: u64) -> u64 {
    width
        .div_ceil(512)
        .saturating_mul(512)
        .saturating_mul(height)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_sizes() {
        assert_eq!(array_bytes(100, 0, 0, 0x20, 4), 1600);
        assert_eq!(array_bytes(10, 10, 10, 0x01, 1), 1000);
        assert_eq!(mipmapped_bytes(8, 8, 0, 0x01, 1, 4), 64 + 16 + 4 + 1);
        assert_eq!(pitch_bound(513, 2), 2048);
    }

    fn record(ctx: u64) -> Record {
        Record {
            slot: 0,
            bytes: 1,
            ctx,
            pool: 0,
        }
    }

    fn held(key: u64) -> Option<u64> {
        shard(key).lock().get(&(Kind::Pointer, key)).map(|r| r.ctx)
    }

    fn kept(pool: u64) -> Option<u64> {
        POOLS.lock().get(&pool).map(|p| p.kept)
    }

    /// A pool's freed bytes stay kept (on the slot they were charged to)
    /// until it serves an allocation with them or the driver says it
    /// released them; a destroyed pool keeps nothing more.
    #[test]
    fn pools_keep_freed_bytes_until_released() {
        let pool = 0x7e57_2000_0000;
        assert!(
            !keep(pool, 3, 100),
            "a pool the hook never met keeps nothing"
        );
        pool_at(pool, Place::Device(0));
        assert!(keep(pool, 3, 100));
        assert!(
            !keep(pool, 4, 1),
            "bytes of another slot are not this pool's"
        );
        assert_eq!(take_kept(pool, 4, 10), 0);
        assert_eq!(take_kept(pool, 3, 60), 60);
        assert_eq!(take_kept(pool, 3, 60), 40);
        assert_eq!(kept(pool), Some(0));
        assert!(keep(pool, 3, 100));
        settle_pool(pool, Some(130));
        assert_eq!(kept(pool), Some(100), "never more than it kept");
        settle_pool(pool, Some(30));
        assert_eq!(kept(pool), Some(30), "what the driver released goes back");
        settle_pool(pool, None);
        assert_eq!(kept(pool), Some(0), "a driver that cannot say released it");
        assert!(!keep(0, 3, 1));
        pool_gone(pool);
        assert!(
            !keep(pool, 3, 1),
            "a destroyed pool's frees go back at once"
        );
    }

    /// A context's records leave the map before the driver destroys it: a
    /// record made afterwards in a context that reuses the handle stays;
    /// a failed destruction puts them back, an address reused meanwhile
    /// keeping its newer record.
    #[test]
    fn context_records_taken_before_destruction() {
        let (a, b) = (0x7e57_0000_a000, 0x7e57_0000_b000);
        let keys: Vec<u64> = (0..64).map(|i| 0x7e57_1000_0000 + i * 0x20_0000).collect();
        for (i, &k) in keys.iter().enumerate() {
            shard(k)
                .lock()
                .insert((Kind::Pointer, k), record(if i % 2 == 0 { a } else { b }));
        }
        let taken = take_context(a);
        assert_eq!(taken.len(), 32);
        assert!(taken.iter().all(|(_, r)| r.ctx == a));
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(held(k), (i % 2 == 1).then_some(b));
        }
        assert!(take_context(0).is_empty());
        // The driver destroyed `a`; a new context got its handle and
        // allocated at a freed address: that record is not taken.
        shard(keys[0])
            .lock()
            .insert((Kind::Pointer, keys[0]), record(a));
        assert_eq!(held(keys[0]), Some(a));
        // A failed destruction: the rest come back, the newer one stays.
        shard(keys[2])
            .lock()
            .insert((Kind::Pointer, keys[2]), record(b));
        put_back(taken);
        for (i, &k) in keys.iter().enumerate() {
            let want = if i == 2 || i % 2 == 1 { b } else { a };
            assert_eq!(held(k), Some(want));
        }
        for &k in &keys {
            shard(k).lock().remove(&(Kind::Pointer, k));
        }
    }
}
