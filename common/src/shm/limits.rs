//! Hard limits and freezing: the host-owned limits file.
//!
//! The books (`workers/<worker>/limiter.shm`) are written by the worker's
//! limiter clients, so nothing a client must obey lives there. Limits and freeze state live in
//! `$ACCELERATOR_STATE_DIR/limits.shm`, which only the host side writes
//! (libaccelerator's hard limits, liblimiter's FreezeWorker / AutoFreeze):
//! mode 0644, a worker's container mounts it read-only, and clients open it
//! `O_RDONLY` and map it `PROT_READ`, so a client has no way to raise its
//! own limit or thaw itself, nor to change another worker's. It is created
//! by the first host call that writes it, never by a client: until then a
//! client has no limits, and looks for the file again on each check (its
//! slow path; in a deployment the host sets a worker's limits before the
//! worker's containers start, which need the file to mount it).
//!
//! | part | size | content |
//! |---|---|---|
//! | header | 4 KiB | magic `ACCLIMS`, version, size, generation |
//! | devices | 64 × 128 B | device UUIDs the host named |
//! | workers | 1,024 × 192 B | worker ids the host named, freeze word, accumulated freeze time, priority |
//! | rows | 1,024 × 64 × 64 B | per worker and device: memory limit, compute limit, blocked bits (the worker's freeze, memory and compute auto-freeze), the host sampler's launch charge and last measurement (`steer.rs`), compute request, granted share and queue depth cap |
//!
//! Names are appended under the state directory's lock (`statedir::lock_dir`);
//! device names are never removed, worker names only once no live process
//! uses the worker (`lifetime.rs`), so an index a live process found for a
//! name stays that name's; each new or removed name bumps the generation.
//! A removed worker's entry is left CLAIMING (a lookup goes past it; the
//! next new name takes it), never FREE (a lookup stops there). A client keeps, per device slot of its
//! books, a pointer to the row it found (`ROW`): the hot path loads it and
//! the row's line (read-mostly: it changes when the host sets a limit or
//! freezes, and when the host's compute sampler stores a worker's launch charge, at
//! most every 100 ms). A slot whose worker or device has no row yet points at a
//! placeholder in the process (`UNLIMITED`, or `FROZEN` for a frozen
//! worker), valid while the generation is the one it was looked up at:
//! freezing and resuming bump it too.

use super::file::Kind;
use super::*;
use std::sync::atomic::AtomicPtr;

pub(super) const LIMITS_NAME: &str = "limits.shm";
const LIMITS_MAGIC: u64 = u64::from_le_bytes(*b"ACCLIMS\0");
/// Still 1 with the rows' (retired) gain, `measured_ms` and `charge`: they were
/// zero padding in the files before them, and zero reads as never
/// corrected and never measured, so a node's limits file survives the
/// upgrade (and an older client reading a newer file ignores the words it
/// does not know).
const LIMITS_VERSION: u64 = 1;

#[repr(C, align(4096))]
pub(super) struct LimitsHeader {
    magic: AtomicU64,
    version: AtomicU64,
    size: AtomicU64,
    /// Bumped after every new worker or device name.
    generation: AtomicU64,
    /// Bumped after every host write of a limit, request, priority or
    /// freeze ([`write`]): a reader that keeps the list of limits (the
    /// sampler, every period) reads the rows again only when this or the
    /// generation moved. In the header's padding: files written before it
    /// read 0, and hosts of that version write without bumping it (the
    /// reader reads the rows again every 30 s for them).
    values: AtomicU64,
}

#[repr(C, align(64))]
pub(super) struct LimitWorker {
    pub(super) key: Key,
    /// 0 = running, else 1 + the ms (since boot) it was frozen.
    pub(super) freeze: AtomicU64,
    pub(super) frozen_ms: AtomicU64,
    /// The identity (device, inode, birth time: `workers::identity`) of the worker's books when the host
    /// created or first saw them; 0: not known. Books that are no longer
    /// this file (removed or replaced by the tenant) are never taken for
    /// unused (`lifetime.rs`). In the entry's padding: files written
    /// before it read 0.
    pub(super) books_dev: AtomicU64,
    pub(super) books_ino: AtomicU64,
    pub(super) books_born: AtomicU64,
    /// 1 + when (ms, `CLOCK_MONOTONIC`) a reclamation pass first found the
    /// worker unused; 0: in use, or not looked at yet (`lifetime.rs`).
    pub(super) idle_since_ms: AtomicU64,
    /// 1: the host removed the worker while a process still used it; it
    /// goes as soon as none does.
    pub(super) ending: AtomicU64,
    /// The worker's priority, 1..=100 (`SetWorkerPriority`); 0: never set,
    /// [`DEFAULT_PRIORITY`]. In the entry's padding: files written before
    /// it read 0.
    pub(super) priority: AtomicU64,
}

/// The priority of a worker never given one (tensor-fusion's middle).
pub const DEFAULT_PRIORITY: u32 = 50;

const _: () = assert!(std::mem::size_of::<LimitWorker>() == 192);

/// One worker's limits on one device: the one line the hot path reads.
#[repr(C, align(64))]
pub(super) struct Row {
    /// Bytes, 0 = unlimited.
    pub(super) mem_limit: AtomicU64,
    /// Percent, 0 = unlimited.
    pub(super) cu_limit: AtomicU64,
    /// [`FROZEN_BIT`] while the worker is frozen (FreezeWorker, on each of
    /// its rows), [`MEM_BIT`] / [`CU_BIT`] while AutoFreeze holds that
    /// resource here: one load tells a check whether to block.
    pub(super) blocked: AtomicU64,
    /// Retired: the rate correction of the sampler before the launch
    /// charge (hooks of that version read it; this one leaves it 0, which
    /// they read as no correction).
    pub(super) _retired_gain: AtomicU64,
    /// When the host sampler last measured the worker here (ms since
    /// boot); 0 = never.
    pub(super) measured_ms: AtomicU64,
    /// The tokens one launch of the worker costs here: its measured device
    /// time per launch (`steer.rs`); 0 = not measured yet.
    pub(super) charge: AtomicU64,
    /// The share of the device the worker is guaranteed here, percent
    /// (`SetComputeUnitRequest`); 0 = best-effort. Zero padding in files
    /// written before it.
    pub(super) request: AtomicU64,
    /// What the host sampler's scheduler grants the worker here
    /// (`schedule.rs`): low 32 bits the share in basis points
    /// (1..=10,000; 0 = no grant: the hard limit applies), high 32 bits the
    /// cap on its queue on the device while a worker of higher priority
    /// has a live process there (0 = none). Zero padding in files written
    /// before it.
    pub(super) granted: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Row>() == 64);

/// The whole device, in the basis points of [`Row::rate`].
pub(super) const RATE_MAX: u64 = 10_000;

pub(super) const FROZEN_BIT: u64 = 1;
pub(super) const MEM_BIT: u64 = 2;
pub(super) const CU_BIT: u64 = 4;

impl Row {
    const fn with(blocked: u64) -> Row {
        Row {
            mem_limit: AtomicU64::new(0),
            cu_limit: AtomicU64::new(0),
            blocked: AtomicU64::new(blocked),
            _retired_gain: AtomicU64::new(0),
            measured_ms: AtomicU64::new(0),
            charge: AtomicU64::new(0),
            request: AtomicU64::new(0),
            granted: AtomicU64::new(0),
        }
    }

    /// The worker's refill rate here, in basis points of the device: the
    /// share the scheduler granted, else the hard limit; 0 = unlimited.
    #[inline(always)]
    pub(super) fn rate(&self) -> u64 {
        self.grant().0
    }

    /// [`Row::rate`] and the cap on the worker's queue here (0: none),
    /// from one load of the grant word: a launch's check carries the cap
    /// to the queue depth gate, on the line it reads anyway.
    #[inline(always)]
    pub(super) fn grant(&self) -> (u64, u32) {
        let word = self.granted.load(Relaxed);
        let rate = match word as u32 {
            0 => self.cu_limit.load(Acquire).min(100) * 100,
            share => u64::from(share).min(RATE_MAX),
        };
        (rate, (word >> 32) as u32)
    }

    /// Whether memory checks must block.
    #[inline(always)]
    pub(super) fn mem_blocked(&self) -> bool {
        self.blocked.load(Acquire) & (FROZEN_BIT | MEM_BIT) != 0
    }

    /// Whether compute checks must block.
    #[inline(always)]
    pub(super) fn cu_blocked(&self) -> bool {
        self.blocked.load(Acquire) & (FROZEN_BIT | CU_BIT) != 0
    }

    fn set(&self, bit: u64, on: bool) {
        if on {
            self.blocked.fetch_or(bit, AcqRel);
        } else {
            self.blocked.fetch_and(!bit, AcqRel);
        }
    }
}

#[repr(C)]
pub struct Limits {
    header: LimitsHeader,
    devices: [Key; MAX_DEVICES],
    pub(super) workers: [LimitWorker; MAX_WORKERS],
    rows: [[Row; MAX_DEVICES]; MAX_WORKERS],
}

pub(super) const LIMITS: Kind = Kind {
    name: LIMITS_NAME,
    magic: LIMITS_MAGIC,
    version: LIMITS_VERSION,
    size: std::mem::size_of::<Limits>(),
    mode: || 0o644,
};

/// The row of a worker without limits (a private worker that set none, or a worker the
/// host never named).
static UNLIMITED: Row = Row::with(0);

/// A frozen worker on a device the host never named.
static FROZEN: Row = Row::with(FROZEN_BIT);

/// Per device slot of the books: the row found for it (null: not looked
/// up). `UNLIMITED` and `FROZEN` (no row in the file) hold only while the
/// generation is `SEEN`, the one they were found at.
static ROW: [AtomicPtr<Row>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
static SEEN: AtomicU64 = AtomicU64::new(0);

fn placeholder(r: &Row) -> bool {
    std::ptr::eq(r, &UNLIMITED) || std::ptr::eq(r, &FROZEN)
}

fn keep(d: usize, r: &'static Row) {
    map::publish_as(&ROW[d], r);
}

/// This process's read-only mapping (clients) and read-write one (host).
static RO: AtomicPtr<Limits> = AtomicPtr::new(std::ptr::null_mut());
static RW: AtomicPtr<Limits> = AtomicPtr::new(std::ptr::null_mut());

/// Forget the rows looked up (a forked child, a process that changed worker).
pub(super) fn forget_rows() {
    for r in &ROW {
        r.store(std::ptr::null_mut(), Relaxed);
    }
}

/// The row of device slot `d` for this process, if looked up and current:
/// one load of this process's own word, then the row's line.
#[inline(always)]
pub(super) fn row(d: usize) -> Option<&'static Row> {
    let r = map::published_as(ROW.get(d)?)?;
    if placeholder(r)
        && map::published_as(&RO)?.header.generation.load(Acquire) != SEEN.load(Relaxed)
    {
        return None;
    }
    Some(r)
}

/// [`row`], looking it up when needed: the row of the worker of the books
/// `l` on their device slot `d`. Only rows of this process's own books are
/// kept; another worker's (`workers::Books::Kept`) are looked up each time.
#[cold]
#[inline(never)]
pub(super) fn row_of(l: &Layout, d: usize) -> Res<&'static Row> {
    let own = map::is_published(l);
    if !own {
        return row_named(&key_name(&l.header.worker), &key_name(&l.devices[d]));
    }
    if let Some(r) = row(d) {
        return Ok(r);
    }
    let Some(lim) = client()? else {
        // No limits file yet: no limits; looked for again next time.
        return Ok(&UNLIMITED);
    };
    // A client whose limits file was cut under it reads no limits (fails
    // open: zero pages, `guard.rs`) and says so once.
    let _ = intact(lim);
    let generation = lim.header.generation.load(Acquire);
    if SEEN.swap(generation, AcqRel) != generation {
        for r in &ROW {
            if map::published_as(r).is_some_and(placeholder) {
                r.store(std::ptr::null_mut(), Relaxed);
            }
        }
    }
    let worker = key_name(&l.header.worker);
    let uuid = key_name(&l.devices[d]);
    let (lw, ld) = (
        find_ready(&lim.workers, |k| &k.key, &worker),
        find_ready(&lim.devices, |k| k, &uuid),
    );
    let row = match (lw, ld) {
        (Some(lw), Some(ld)) => {
            let row = &lim.rows[lw][ld];
            keep(d, row);
            return Ok(row);
        }
        (Some(lw), None) if lim.workers[lw].freeze.load(Acquire) != 0 => &FROZEN,
        _ => &UNLIMITED,
    };
    keep(d, row);
    // A name or freeze published since the lookup began: look again next time.
    if lim.header.generation.load(Acquire) != generation {
        ROW[d].store(std::ptr::null_mut(), Relaxed);
    }
    Ok(row)
}

/// The row of `worker` on `uuid`, looked up now (not kept).
fn row_named(worker: &str, uuid: &str) -> Res<&'static Row> {
    let Some(lim) = client()? else {
        return Ok(&UNLIMITED);
    };
    Ok(
        match (
            find_ready(&lim.workers, |k| &k.key, worker),
            find_ready(&lim.devices, |k| k, uuid),
        ) {
            (Some(w), Some(d)) => &lim.rows[w][d],
            (Some(w), None) if lim.workers[w].freeze.load(Acquire) != 0 => &FROZEN,
            _ => &UNLIMITED,
        },
    )
}

/// The read-only mapping, opened on first use; None while the host has
/// not created the file (a client never does).
fn client() -> Res<Option<&'static Limits>> {
    mapping(&RO, false)
}

/// The read-write mapping, for the host's writes (the file created if new).
fn host() -> Res<&'static Limits> {
    mapping(&RW, true)?.ok_or_else(|| Error::Internal("limits file not created".into()))
}

fn mapping(slot: &AtomicPtr<Limits>, write: bool) -> Res<Option<&'static Limits>> {
    if let Some(l) = map::published_as(slot) {
        return Ok(Some(l));
    }
    let _g = owner::OPEN.lock();
    if let Some(l) = map::published_as(slot) {
        return Ok(Some(l));
    }
    let file = if write {
        file::open_kind(&LIMITS, &crate::statedir::ensure()?, &[])?.0
    } else {
        match file::open_kind_read(&LIMITS, &crate::statedir::path())? {
            Some((f, _)) => f,
            None => return Ok(None),
        }
    };
    let l = map::map_as::<Limits>(&file, write)?;
    // A truncation under this process reads as zero pages (`guard.rs`),
    // never a SIGBUS; [`intact`] says whether it happened.
    // The descriptor stays open for good, as the mapping does: the
    // handler asks it for the file's size.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
    if !guard::guard(
        l as *const Limits as *const u8,
        LIMITS.size,
        write,
        fd,
        true,
    ) {
        eprintln!(
            "accelerator: no SIGBUS handler for the limits file: a truncation of it would kill this process"
        );
    }
    map::publish_as(slot, l);
    Ok(Some(l))
}

/// Ok while `lim` (a mapping of the limits file) reads the file: Err once
/// the file was cut under this process (the pages past its end read as zero
/// from then on, `guard.rs`): the host's limits and freezes are lost, and
/// its calls on them are refused until it restarts with the file
/// re-created. Said once on stderr as well.
fn intact(lim: &Limits) -> Res<()> {
    if !guard::cut(lim as *const Limits as *const u8) {
        return Ok(());
    }
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let why = format!(
        "the limits file {} was truncated under this process: its limits and freezes read as none from then on; \
         re-create it (remove it while no process uses it) and restart the host to set them again",
        crate::statedir::path().join(LIMITS_NAME).display()
    );
    if !SAID.swap(true, Relaxed) {
        eprintln!("accelerator: {why}");
    }
    Err(Error::OperationFailed(why))
}

/// The entry named `name`, appended if new (the directory lock held).
fn claim<T>(lim: &Limits, table: &[T], key: impl Fn(&T) -> &Key, name: &str) -> Res<usize> {
    let (words, hash) = key_words(name)?;
    if let Some(i) = find_ready(table, &key, name) {
        return Ok(i);
    }
    // A CLAIMING entry under the lock: its claimer died mid-claim.
    let i = table
        .iter()
        .position(|t| matches!(key(t).state.load(Acquire), KEY_FREE | KEY_CLAIMING))
        .ok_or_else(|| {
            Error::ResourceExhausted(format!("the limits file is full; cannot add {name:?}"))
        })?;
    let k = key(&table[i]);
    k.state.store(KEY_CLAIMING, Release);
    for (a, b) in k.words.iter().zip(&words) {
        a.store(*b, Relaxed);
    }
    k.hash.store(hash, Relaxed);
    k.state.store(KEY_READY, Release);
    lim.header.generation.fetch_add(1, AcqRel);
    Ok(i)
}

/// Run `f` with the host's mapping, the state directory locked. The
/// worker's books are created too if they never existed (opened, checked
/// and closed: never mapped, `workers::ensure`), so that every file a
/// worker's container mounts exists once the host set its first limit or
/// froze it (`worker`; None: resuming creates nothing); books the host cannot use are their clients' concern, not a
/// reason to refuse a limit.
fn write<T>(worker: Option<&str>, f: impl FnOnce(&'static Limits) -> Res<T>) -> Res<T> {
    if worker.is_some() {
        lifetime::tick();
    }
    let lim = host()?;
    intact(lim)?;
    let _lock = crate::statedir::lock_dir(&crate::statedir::path())?;
    // Under the lock: a reclamation pass (`lifetime.rs`) never finds the
    // books of a worker whose entry is being made.
    if let Some(worker) = worker {
        let _ = workers::ensure(worker);
    }
    let r = f(lim);
    lim.header.values.fetch_add(1, AcqRel);
    intact(lim)?;
    r
}

/// The limits file's (generation, values) words, read by the host: when
/// neither moved, no name, limit, request, priority or freeze changed.
pub(super) fn stamp() -> Res<(u64, u64)> {
    let lim = host()?;
    let h = &lim.header;
    Ok((h.generation.load(Acquire), h.values.load(Acquire)))
}

/// Row of `worker` on `uuid`, both named if new (inside [`write`]); a new
/// worker's row starts with the worker's freeze.
fn host_row(lim: &'static Limits, worker: &str, uuid: &str) -> Res<&'static Row> {
    let w = claim_worker(lim, worker)?;
    let d = claim(lim, &lim.devices, |k| k, uuid)?;
    let row = &lim.rows[w][d];
    row.set(FROZEN_BIT, lim.workers[w].freeze.load(Acquire) != 0);
    Ok(row)
}

/// Set a one-time limit word of `worker` on `uuid`.
pub(super) fn set_limit(
    worker: &str,
    uuid: &str,
    value: u64,
    what: &str,
    word: fn(&Row) -> &AtomicU64,
) -> Res<()> {
    write(Some(worker), |lim| {
        let row = host_row(lim, worker, uuid)?;
        reports::set_once(word(row), value, what, worker, uuid)
    })
}

/// Set `worker`'s compute hard limit on `uuid` (one-time), never below
/// its request there.
pub(super) fn set_compute(worker: &str, uuid: &str, percent: u64) -> Res<()> {
    write(Some(worker), |lim| {
        let row = host_row(lim, worker, uuid)?;
        let request = row.request.load(Acquire);
        if percent < request {
            return Err(Error::InvalidParam(format!(
                "compute limit {percent}% of worker {worker:?} on {uuid:?} is below its request ({request}%)"
            )));
        }
        reports::set_once(&row.cu_limit, percent, "compute", worker, uuid)
    })
}

/// Set `worker`'s compute request on `uuid` (0..=100; changeable), never
/// above its hard limit there.
pub(super) fn set_request(worker: &str, uuid: &str, percent: u64) -> Res<()> {
    write(Some(worker), |lim| {
        // Checked before naming anything: a refused request changes nothing.
        if let (Some(w), Some(d)) = (
            find_ready(&lim.workers, |k| &k.key, worker),
            find_ready(&lim.devices, |k| k, uuid),
        ) {
            let limit = lim.rows[w][d].cu_limit.load(Acquire);
            if limit != 0 && percent > limit {
                return Err(Error::InvalidParam(format!(
                    "compute request {percent}% of worker {worker:?} on {uuid:?} is above its hard limit ({limit}%)"
                )));
            }
        }
        host_row(lim, worker, uuid)?.request.store(percent, Release);
        Ok(())
    })
}

/// Set `worker`'s queue depth cap on `uuid` (0: none; changeable), leaving
/// the granted share beside it as it is.
pub(super) fn set_depth_cap(worker: &str, uuid: &str, cap: u32) -> Res<()> {
    write(Some(worker), |lim| {
        let word = &host_row(lim, worker, uuid)?.granted;
        let _ = word.fetch_update(AcqRel, Acquire, |g| {
            Some(u64::from(cap) << 32 | (g & u64::from(u32::MAX)))
        });
        Ok(())
    })
}

/// The queue depth cap of this process's worker on device slot `d` (0:
/// none, or no row looked up yet), for a launch that waits under it (a
/// launch's check carries the cap, `compute::Launched`): the row the
/// launch's check used (a placeholder's word is 0, stale or not).
pub fn depth_cap(d: usize) -> u32 {
    ROW.get(d)
        .and_then(map::published_as)
        .map_or(0, |r| r.grant().1)
}

/// Name `worker` on `uuid` (its row made if new, no limit set).
pub(super) fn name_row(worker: &str, uuid: &str) -> Res<()> {
    write(Some(worker), |lim| host_row(lim, worker, uuid).map(|_| ()))
}

/// Set `worker`'s priority (1..=100; changeable).
pub(super) fn set_priority(worker: &str, priority: u64) -> Res<()> {
    write(Some(worker), |lim| {
        let w = claim_worker(lim, worker)?;
        lim.workers[w].priority.store(priority, Release);
        Ok(())
    })
}

/// The priority of `worker` as the host set it ([`DEFAULT_PRIORITY`] when
/// never set or not named).
pub(super) fn priority_of(worker: &str) -> Res<u32> {
    let Some(lim) = client()? else {
        return Ok(DEFAULT_PRIORITY);
    };
    let p = find_ready(&lim.workers, |k| &k.key, worker)
        .map_or(0, |w| lim.workers[w].priority.load(Acquire));
    intact(lim)?;
    Ok(priority_word(p))
}

/// A worker's priority word as a priority ([`DEFAULT_PRIORITY`] when
/// never set).
fn priority_word(p: u64) -> u32 {
    if p == 0 {
        DEFAULT_PRIORITY
    } else {
        p.min(100) as u32
    }
}

/// Set or clear an AutoFreeze bit ([`MEM_BIT`], [`CU_BIT`]) of `worker` on `uuid`.
pub(super) fn set_auto(worker: &str, uuid: &str, frozen: bool, bit: u64) -> Res<()> {
    write(Some(worker), |lim| {
        if !frozen && find_ready(&lim.devices, |k| k, uuid).is_none() {
            return Ok(()); // nothing frozen there
        }
        host_row(lim, worker, uuid)?.set(bit, frozen);
        Ok(())
    })
}

/// Freeze (`Some(now)`) or resume (`None`) `worker`: its freeze word and
/// every one of its rows; returns the worker's entry.
pub(super) fn set_frozen(worker: &str, now_ms: u64) -> Res<&'static LimitWorker> {
    write(Some(worker), |lim| {
        let w = claim_worker(lim, worker)?;
        let wk = &lim.workers[w];
        let _ = wk.freeze.compare_exchange(0, now_ms + 1, AcqRel, Acquire);
        for row in &lim.rows[w] {
            row.set(FROZEN_BIT, true);
        }
        // Clients that found no row for a device look again (`row_of`).
        lim.header.generation.fetch_add(1, AcqRel);
        Ok(wk)
    })
}

/// Resume `worker` if the host ever named it; None: it never did.
pub(super) fn set_running(worker: &str, now_ms: u64) -> Res<Option<&'static LimitWorker>> {
    write(None, |lim| {
        let Some(w) = find_ready(&lim.workers, |k| &k.key, worker) else {
            return Ok(None);
        };
        let wk = &lim.workers[w];
        let since = wk.freeze.swap(0, AcqRel);
        if since != 0 {
            wk.frozen_ms
                .fetch_add(now_ms.saturating_sub(since - 1), AcqRel);
        }
        for row in &lim.rows[w] {
            row.set(FROZEN_BIT, false);
        }
        lim.header.generation.fetch_add(1, AcqRel);
        Ok(Some(wk))
    })
}

/// The host's row of `worker` on `uuid`, if the host named both (the
/// sampler's writes: no directory lock, the sampler alone writes its words).
pub(super) fn host_row_of(worker: &str, uuid: &str) -> Res<Option<&'static Row>> {
    let lim = host()?;
    intact(lim)?;
    Ok(
        match (
            find_ready(&lim.workers, |k| &k.key, worker),
            find_ready(&lim.devices, |k| k, uuid),
        ) {
            (Some(w), Some(d)) => Some(&lim.rows[w][d]),
            _ => None,
        },
    )
}

/// The host's entry of `worker`, if named.
pub(super) fn host_worker(worker: &str) -> Res<Option<&'static LimitWorker>> {
    let lim = host()?;
    let found = find_ready(&lim.workers, |k| &k.key, worker).map(|w| &lim.workers[w]);
    intact(lim)?;
    Ok(found)
}

/// Every (worker, device, row) the host named, with the worker's priority
/// (read once per worker, not looked up per entry: 500 workers made that
/// quadratic in the sampler's every period), for the list of limits.
pub(super) fn each_row(mut f: impl FnMut(String, String, &Row, u32)) -> Res<()> {
    let lim = host()?;
    let devices: Vec<(usize, String)> = lim
        .devices
        .iter()
        .enumerate()
        .filter(|(_, k)| k.state.load(Acquire) == KEY_READY)
        .map(|(d, k)| (d, key_name(k)))
        .collect();
    for (w, wk) in lim.workers.iter().enumerate() {
        if wk.key.state.load(Acquire) != KEY_READY {
            continue;
        }
        let priority = priority_word(wk.priority.load(Acquire));
        for (d, uuid) in &devices {
            f(key_name(&wk.key), uuid.clone(), &lim.rows[w][*d], priority);
        }
    }
    intact(lim)
}

/// The memory limit of `worker` on `uuid` (0 = none) when the host named
/// both (the worker has limits there, whether or not it has books yet).
pub(super) fn named_memory_limit(worker: &str, uuid: &str) -> Res<Option<u64>> {
    let Some(lim) = client()? else {
        return Ok(None);
    };
    let limit = match (
        find_ready(&lim.workers, |k| &k.key, worker),
        find_ready(&lim.devices, |k| k, uuid),
    ) {
        (Some(w), Some(d)) => Some(lim.rows[w][d].mem_limit.load(Acquire)),
        _ => None,
    };
    intact(lim)?;
    Ok(limit)
}

/// The memory limit of `worker` on `uuid` (0 = none), read by a client.
pub(super) fn memory_limit_of(worker: &str, uuid: &str) -> Res<u64> {
    let Some(lim) = client()? else {
        return Ok(0);
    };
    let limit = match (
        find_ready(&lim.workers, |k| &k.key, worker),
        find_ready(&lim.devices, |k| k, uuid),
    ) {
        (Some(w), Some(d)) => lim.rows[w][d].mem_limit.load(Acquire),
        _ => 0,
    };
    intact(lim)?;
    Ok(limit)
}

/// [`memory_limit_of`] by the names' words, with the table positions last
/// found for this worker and device tried first (`hints`: worker, device).
pub(super) fn memory_limit_hinted(
    worker: &Name,
    uuid: &Name,
    hints: &[std::sync::atomic::AtomicUsize; 2],
) -> Res<u64> {
    let Some(lim) = client()? else {
        return Ok(0);
    };
    let limit = match (
        find_ready_hinted(&lim.workers, |k| &k.key, worker, &hints[0]),
        find_ready_hinted(&lim.devices, |k| k, uuid, &hints[1]),
    ) {
        (Some(w), Some(d)) => lim.rows[w][d].mem_limit.load(Acquire),
        _ => 0,
    };
    intact(lim)?;
    Ok(limit)
}

/// The entry of `worker`, appended if new (inside [`write`]): a full table
/// first gives back the entry of the worker without a live process the
/// longest (`lifetime.rs`), and a new entry records the identity of the
/// worker's books.
fn claim_worker(lim: &'static Limits, worker: &str) -> Res<usize> {
    let w = match claim(lim, &lim.workers, |k| &k.key, worker) {
        Err(Error::ResourceExhausted(_)) => {
            lifetime::make_room(lim, worker)?;
            claim(lim, &lim.workers, |k| &k.key, worker)?
        }
        r => r?,
    };
    let wk = &lim.workers[w];
    if wk.ending.load(Acquire) == 1 {
        // The host removed the worker while a process still used it, and
        // now limits or freezes the name again (a StatefulSet's pod made
        // again at once): a new worker's first limit, on an entry that no
        // longer ends when the old process does.
        clear_entry(lim, w);
    }
    if wk.books_ino.load(Acquire) == 0 {
        record_books(wk, worker);
    }
    Ok(w)
}

/// Record the identity of `worker`'s books in its entry (the directory
/// lock held), if they exist.
pub(super) fn record_books(wk: &LimitWorker, worker: &str) {
    if let Some([dev, ino, born]) = lifetime::books_identity(worker) {
        wk.books_dev.store(dev, Relaxed);
        wk.books_born.store(born, Relaxed);
        wk.books_ino.store(ino, Release);
    }
}

/// Every worker the host named, with its entry (for `lifetime.rs`).
pub(super) fn named_workers(lim: &Limits) -> Vec<(String, &LimitWorker)> {
    lim.workers
        .iter()
        .filter(|wk| wk.key.state.load(Acquire) == KEY_READY)
        .map(|wk| (key_name(&wk.key), wk))
        .collect()
}

/// The host's read-write mapping, for `lifetime.rs`.
pub(super) fn host_limits() -> Res<&'static Limits> {
    host()
}

/// Give back `worker`'s entry and its rows, the directory lock held: the
/// entry stops being found (the generation bumped, so clients that found
/// no row look again), its rows are zeroed (their pages given back to
/// tmpfs) and the entry is left for the next new worker. Only for a worker
/// no live process uses (a client keeps the rows it found: `ROW`).
pub(super) fn forget_locked(lim: &Limits, worker: &str) -> bool {
    let Some(w) = find_ready(&lim.workers, |k| &k.key, worker) else {
        return false;
    };
    let wk = &lim.workers[w];
    // Not READY: no lookup finds it; a claim under the lock may reuse it.
    wk.key.state.store(KEY_CLAIMING, Release);
    lim.header.generation.fetch_add(1, AcqRel);
    clear_entry(lim, w);
    wk.key.hash.store(0, Relaxed);
    for word in &wk.key.words {
        word.store(0, Relaxed);
    }
    // Left CLAIMING, never FREE: lookups (`find_ready`, in clients of
    // every version) stop at the first FREE entry, so the names after it
    // stay found; `claim` reuses the entry (CLAIMING under the lock: free).
    lim.header.generation.fetch_add(1, AcqRel);
    true
}

/// Zero entry `w`'s rows (their pages given back to tmpfs) and every word
/// but its name (the directory lock held): limits, freeze, the books'
/// identity, idle time, the ending mark. Clients that found a row keep it
/// and read no limit; the generation tells the others to look again.
fn clear_entry(lim: &Limits, w: usize) {
    let wk = &lim.workers[w];
    if !map::discard(&lim.rows[w]) {
        for row in &lim.rows[w] {
            for word in [
                &row.mem_limit,
                &row.cu_limit,
                &row.blocked,
                &row._retired_gain,
                &row.measured_ms,
                &row.charge,
                &row.request,
                &row.granted,
            ] {
                word.store(0, Relaxed);
            }
        }
    }
    for word in [
        &wk.freeze,
        &wk.frozen_ms,
        &wk.books_dev,
        &wk.books_ino,
        &wk.books_born,
        &wk.idle_since_ms,
        &wk.ending,
        &wk.priority,
    ] {
        word.store(0, Relaxed);
    }
    lim.header.generation.fetch_add(1, AcqRel);
}
