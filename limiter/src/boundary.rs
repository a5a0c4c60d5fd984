//! The C boundary of liblimiter.so: the only module that touches raw
//! pointers (the pattern of libaccelerator's `src/abi/boundary.rs`).
//!
//! - `call`: the one panic-catching wrapper every export runs in. A panic
//!   becomes RESULT_ERROR_INTERNAL; every failure leaves its message for
//!   `limiterGetLastError` on this thread (and on stderr when
//!   `ACCELERATOR_LIMITER_DEBUG=1`).
//! - `cstr`: the one bounded, UTF-8-checked way to read strings.
//! - `write_fixed`: the one way to write a `char[N]`, always NUL-terminated.
//! - `pid_arg` / `device_arg`: the hot path's two strings, with a
//!   process-wide memory of texts seen before and what they resolved to
//!   (pid, device slot), so a repeated text skips validation, parsing and
//!   the device lookup.
//!
//! A successful call touches no thread-local: in a dlopen'ed library each
//! thread-local access is a `__tls_get_addr` call (~5 ns of a ~27 ns call
//! in a C model of the hot path). The last-error slot is thread-local,
//! but a success only visits it when some thread of the process has an
//! error message standing (`STANDING`).

use accel_common::cabi::panic_error;
pub use accel_common::cabi::{cstr, out, write_fixed};
use accel_common::{Error, Res, ResultCode};
use libc::c_char;
use std::cell::{RefCell, UnsafeCell};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

// ---- the last error --------------------------------------------------------

/// This thread's last error message; `None` after a success.
struct LastError(Option<CString>);

impl Drop for LastError {
    fn drop(&mut self) {
        if self.0.is_some() {
            STANDING.fetch_sub(1, Relaxed);
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = const { RefCell::new(LastError(None)) };
}

/// How many threads of the process have an error message standing. A
/// thread's own increment is visible to its own later loads, so a thread
/// with a message standing always finds this non-zero and clears it.
static STANDING: AtomicUsize = AtomicUsize::new(0);

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|slot| {
        if slot.borrow_mut().0.replace(text).is_none() {
            STANDING.fetch_add(1, Relaxed);
        }
    });
}

#[cold]
#[inline(never)]
fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|slot| {
        if slot.borrow_mut().0.take().is_some() {
            STANDING.fetch_sub(1, Relaxed);
        }
    });
}

/// This thread's last error message ("" after a success), valid until its
/// next limiter call.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().0.as_ref().map(|m| m.as_ptr()))
        .ok()
        .flatten()
        .unwrap_or(c"".as_ptr())
}

/// Run an export: catch panics, record failures, map to the Result code.
#[inline]
pub fn call(name: &str, f: impl FnOnce() -> Res<()>) -> ResultCode {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            if STANDING.load(Relaxed) != 0 {
                clear_last_error();
            }
            ResultCode::Success
        }
        Ok(Err(e)) => fail(name, e),
        Err(panic) => fail(name, panic_error(panic)),
    }
}

#[cold]
#[inline(never)]
fn fail(name: &str, e: Error) -> ResultCode {
    let message = format!("{name}: {e}");
    if std::env::var_os("ACCELERATOR_LIMITER_DEBUG").is_some_and(|v| v == "1") {
        eprintln!("liblimiter: {message}");
    }
    set_last_error(&message);
    e.code()
}

// ---- texts seen before -----------------------------------------------------

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

/// A caller text seen before, NUL-terminated and NUL-padded, with what it
/// resolved to. Written once — claimed (EMPTY → WRITING), filled, published
/// (READY, release) — and never changed after, so readers that saw READY
/// may compare against the text without any lock.
struct Entry<const N: usize> {
    state: AtomicU8,
    value: AtomicU64,
    text: UnsafeCell<Text<N>>,
}

/// Zero bytes on each side of a text in `Text::padded`.
const PAD: usize = 8;

/// A remembered text, twice: as the `char[N]` callers get back, and
/// between zero bytes for the word-wise comparison (`same`), with that
/// comparison's plan for each alignment of the caller's string.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code) // `same` is `strcmp` there
)]
struct Text<const N: usize> {
    chars: [c_char; N],
    padded: [u8; PAD + 64 + PAD],
    plans: [Plan; 8],
}

/// How `same` compares a caller's string starting at byte `off` of an
/// aligned word with a text of `len` bytes (+ NUL): words 0 ..= `last`,
/// the first masked to the string's bytes (`first`), the last to the bytes
/// up to our NUL (`tail`). Precomputed: working the masks out on each call
/// cost ~20 instructions of the hot path.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
struct Plan {
    first: u64,
    tail: u64,
    last: usize,
}

impl Plan {
    const fn new(off: usize, len: usize) -> Plan {
        let end = off + len;
        let head = !0u64 << (8 * off);
        let tail = !0u64 >> (56 - 8 * (end % 8));
        let last = end / 8;
        Plan {
            first: if last == 0 { head & tail } else { head },
            tail,
            last,
        }
    }
}

impl<const N: usize> Text<N> {
    const fn empty() -> Text<N> {
        assert!(N <= 64);
        Text {
            chars: [0; N],
            padded: [0; PAD + 64 + PAD],
            plans: [Plan::new(0, 0); 8],
        }
    }

    /// `s` (at most N − 1 bytes, no NUL).
    fn of(s: &str) -> Text<N> {
        let mut text = Text::empty();
        write_fixed(&mut text.chars, s);
        text.padded[PAD..PAD + s.len()].copy_from_slice(s.as_bytes());
        for (off, plan) in text.plans.iter_mut().enumerate() {
            *plan = Plan::new(off, s.len());
        }
        text
    }
}

impl<const N: usize> Entry<N> {
    const fn new() -> Entry<N> {
        Entry {
            state: AtomicU8::new(EMPTY),
            value: AtomicU64::new(0),
            text: UnsafeCell::new(Text::empty()),
        }
    }

    /// The published text, if any.
    fn text(&self) -> Option<&Text<N>> {
        // SAFETY: READY entries are never written again (see the type).
        (self.state.load(Acquire) == READY).then(|| unsafe { &*self.text.get() })
    }
}

/// A process-wide memory of up to `K` texts. Entries are claimed in order,
/// so the non-empty ones are always a prefix.
pub struct Seen<const N: usize, const K: usize> {
    entries: [Entry<N>; K],
    /// The entry that matched last: tried first. Written only when it
    /// changes, so a process using one text never writes it.
    hint: AtomicUsize,
}

// SAFETY: an entry's text is written only by the thread that claimed it,
// before it is published, and only read after it is published (Entry).
unsafe impl<const N: usize, const K: usize> Sync for Seen<N, K> {}

/// The text and value of the entry matching a caller's text.
type Found<'a, const N: usize> = (&'a [c_char; N], u64);

impl<const N: usize, const K: usize> Seen<N, K> {
    const fn new() -> Self {
        Seen {
            entries: [const { Entry::new() }; K],
            hint: AtomicUsize::new(0),
        }
    }

    /// The entry whose text equals `p`'s.
    ///
    /// # Safety
    /// `p` is non-NULL and readable up to its NUL or `N` bytes.
    #[inline(always)]
    unsafe fn find(&self, p: *const c_char) -> Option<Found<'_, N>> {
        let h = self.hint.load(Relaxed) % K;
        match self.entries[h].text() {
            Some(text) if same(p, text) => Some((&text.chars, self.entries[h].value.load(Relaxed))),
            _ => self.scan(p, h),
        }
    }

    #[inline(never)]
    unsafe fn scan(&self, p: *const c_char, skip: usize) -> Option<Found<'_, N>> {
        for (i, e) in self.entries.iter().enumerate() {
            if e.state.load(Acquire) == EMPTY {
                break;
            }
            match e.text() {
                Some(text) if i != skip && same(p, text) => {
                    self.hint.store(i, Relaxed);
                    return Some((&text.chars, e.value.load(Relaxed)));
                }
                _ => {}
            }
        }
        None
    }

    /// Remember `s` (validated, at most N-1 bytes, no NUL) as resolving to
    /// `value`, if an entry is free.
    fn remember(&self, s: &str, value: u64) {
        if s.is_empty() || s.len() >= N || s.as_bytes().contains(&0) {
            return;
        }
        let Some(e) = self.entries.iter().find(|e| {
            e.state
                .compare_exchange(EMPTY, WRITING, Acquire, Relaxed)
                .is_ok()
        }) else {
            return;
        };
        let text = Text::of(s);
        // SAFETY: this thread claimed the entry; nobody reads its text
        // before the READY store below.
        unsafe { *e.text.get() = text };
        e.value.store(value, Relaxed);
        e.state.store(READY, Release);
    }
}

/// Whether the caller's text at `p` equals `text`.
///
/// Compared a word at a time: a `strcmp` call for each of the hot path's
/// two texts was ~30 % of a memory check's cycles. The caller's string is
/// read in aligned 8-byte words (`word_at`), and a word only once every
/// byte before it matched a non-NUL byte of ours, so every word read holds
/// a byte of the caller's string (up to its NUL) and, never crossing a
/// page, is mapped. Bytes of a word outside the caller's string are masked
/// off, or follow a byte that already differs (the caller's NUL against a
/// byte of ours): they never decide the result.
///
/// # Safety
/// `p` is non-NULL and readable up to its NUL.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
unsafe fn same<const N: usize>(p: *const c_char, text: &Text<N>) -> bool {
    let off = p as usize % 8;
    let base = p as usize - off;
    let plan = &text.plans[off];
    // Our word j, aligned like the caller's word j: string offsets
    // 8j − off ..= 8j − off + 7 (zero padding outside the text).
    // Read without bounds checks, which cost more than the rest of a word's
    // comparison.
    let ours = text.padded.as_ptr().add(PAD - off);
    // SAFETY: j ≤ last = (off + len) / 8, so the word ends at
    // PAD − off + 8j + 8 ≤ PAD + len + 8 ≤ PAD + 64 + PAD: inside `padded`.
    let word = |j: usize| u64::from_le(std::ptr::read_unaligned(ours.add(8 * j).cast::<u64>()));
    if (word_at(base) ^ word(0)) & plan.first != 0 {
        return false;
    }
    if plan.last == 0 {
        return true;
    }
    for j in 1..plan.last {
        if word_at(base + 8 * j) != word(j) {
            return false;
        }
    }
    (word_at(base + 8 * plan.last) ^ word(plan.last)) & plan.tail == 0
}

/// Other targets: `strcmp`, which stops at the first difference or at our
/// NUL, so it reads no more of the caller's string than `same` may.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
unsafe fn same<const N: usize>(p: *const c_char, text: &Text<N>) -> bool {
    libc::strcmp(p, text.chars.as_ptr()) == 0
}

/// The aligned 8-byte word at `a`, little-endian (both targets are).
///
/// In assembly because the word may hold bytes past the end of the
/// caller's string, which Rust code may not read, but the hardware may:
/// an aligned word lies in one page.
///
/// # Safety
/// `a` is 8-aligned and some byte of the word at `a` is readable.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
unsafe fn word_at(a: usize) -> u64 {
    let w: u64;
    // Not `pure`: that would let the compiler hoist a load above the
    // comparison that makes it safe.
    #[cfg(target_arch = "x86_64")]
    std::arch::asm!("mov {w}, qword ptr [{a}]", w = out(reg) w, a = in(reg) a,
        options(nostack, readonly, preserves_flags));
    #[cfg(target_arch = "aarch64")]
    std::arch::asm!("ldr {w}, [{a}]", w = out(reg) w, a = in(reg) a,
        options(nostack, readonly, preserves_flags));
    w
}

/// deviceUUID texts → device slot. A slot stays its device's while the
/// process that resolved it lives (`shm::device_slot_for`); a forked child
/// is another process, so the child starts with this memory empty.
static DEVICES: Seen<64, 64> = Seen::new();

/// In the child after `fork()`: forget the parent's device slots (only
/// this thread exists there, so no reader is inside an entry).
extern "C" fn forget_devices_in_child() {
    for e in &DEVICES.entries {
        e.state.store(EMPTY, Relaxed);
    }
    DEVICES.hint.store(0, Relaxed);
}

/// Install the fork handler, once (a flag, not a `Once`: a fork while a
/// `Once` runs leaves the child waiting on it forever).
fn forget_devices_after_fork() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, AcqRel) {
        // SAFETY: registers a plain function as the child's fork handler.
        unsafe { libc::pthread_atfork(None, None, Some(forget_devices_in_child)) };
    }
}

/// processId texts → pid (a pure function of the text, so it stays right
/// across fork; the process slot is revalidated by shm on every call).
static PIDS: Seen<32, 8> = Seen::new();

/// `processId` as a pid: decimal digits only, positive, at most `max`
/// (< 32) bytes. A text seen before is not parsed again (comparing it with
/// the remembered text measured faster than parsing digits inline).
///
/// # Safety
/// As `cstr`.
#[inline(always)]
pub unsafe fn pid_arg(p: *const c_char, max: usize) -> Res<i32> {
    debug_assert!(max < 32);
    if !p.is_null() {
        if let Some((_, pid)) = PIDS.find(p) {
            return Ok(pid as i32);
        }
    }
    pid_slow(p, max)
}

#[cold]
unsafe fn pid_slow(p: *const c_char, max: usize) -> Res<i32> {
    let s = cstr(p, max, "processId")?;
    let pid = s
        .parse::<i32>()
        .ok()
        .filter(|&pid| pid > 0 && s.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            Error::InvalidParam(format!("processId {s:?} is not a positive decimal pid"))
        })?;
    PIDS.remember(s, pid as u32 as u64);
    Ok(pid)
}

/// A validated `deviceUUID`: either one seen before (slot known) or a new
/// one to resolve with `resolve`.
pub enum DeviceArg<'a> {
    /// The slot and the UUID, NUL-terminated and NUL-padded.
    Known(usize, &'static [c_char; 64]),
    New(&'a str),
}

/// Read `deviceUUID` (as `cstr` with `max` ≤ 63).
///
/// # Safety
/// As `cstr`.
#[inline(always)]
pub unsafe fn device_arg<'a>(p: *const c_char, max: usize) -> Res<DeviceArg<'a>> {
    debug_assert!(max < 64);
    if !p.is_null() {
        if let Some((text, slot)) = DEVICES.find(p) {
            return Ok(DeviceArg::Known(slot as usize, text));
        }
    }
    cstr(p, max, "deviceUUID").map(DeviceArg::New)
}

impl DeviceArg<'_> {
    /// The device slot, resolving (and remembering) a new UUID with `find`.
    #[inline(always)]
    pub fn resolve(&self, find: impl FnOnce(&str) -> Res<usize>) -> Res<usize> {
        match *self {
            DeviceArg::Known(d, _) => Ok(d),
            DeviceArg::New(uuid) => {
                let d = find(uuid)?;
                forget_devices_after_fork();
                DEVICES.remember(uuid, d as u64);
                Ok(d)
            }
        }
    }
}

impl DeviceArg<'_> {
    /// The UUID's text.
    pub fn text(&self) -> String {
        match self {
            DeviceArg::New(uuid) => (*uuid).to_string(),
            DeviceArg::Known(_, text) => {
                let bytes: Vec<u8> = text
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }
}

/// Write the device UUID of `arg` into a `char[64]` (as `write_fixed`).
#[inline]
pub fn write_device(field: &mut [c_char; 64], arg: &DeviceArg<'_>) {
    match arg {
        DeviceArg::New(uuid) => write_fixed(field, uuid),
        DeviceArg::Known(_, text) => *field = **text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<const N: usize, const K: usize>(seen: &Seen<N, K>, s: &std::ffi::CStr) -> Option<u64> {
        // SAFETY: a NUL-terminated string.
        unsafe { seen.find(s.as_ptr()) }.map(|(_, v)| v)
    }

    #[test]
    fn texts_compare_equal_only_to_themselves_at_every_alignment() {
        #[repr(align(8))]
        struct Buf([u8; 160]);
        let long = "GPU-0123abcd-4567-89ef-0123-456789abcdef-and-then-some-more-xyz";
        assert_eq!(long.len(), 63);
        for t in [
            "a",
            "1234",
            "1234567",
            "12345678",
            "stub-device-0",
            &long[..40],
            long,
        ] {
            let text: Text<64> = Text::of(t);
            let mut callers = vec![t.to_string(), format!("{t}x"), String::new()];
            for i in 0..t.len() {
                callers.push(t[..i].to_string());
                for b in ['Z', '\u{1}'] {
                    let mut c = t.as_bytes().to_vec();
                    c[i] = b as u8;
                    callers.push(String::from_utf8(c).unwrap());
                }
            }
            for off in 0..8 {
                for c in &callers {
                    // Garbage around the caller's string, which must not matter.
                    let mut buf = Buf([0xa5; 160]);
                    buf.0[8 + off..8 + off + c.len()].copy_from_slice(c.as_bytes());
                    buf.0[8 + off + c.len()] = 0;
                    let p = buf.0[8 + off..].as_ptr().cast::<c_char>();
                    // SAFETY: a NUL-terminated string in `buf`.
                    let got = unsafe { same(p, &text) };
                    assert_eq!(got, c == t, "{c:?} against {t:?} at offset {off}");
                }
            }
        }
    }

    #[test]
    fn remembers_texts_and_finds_them_in_any_order() {
        let seen: Seen<16, 3> = Seen::new();
        assert_eq!(find(&seen, c"a"), None);
        seen.remember("a", 1);
        seen.remember("bb", 2);
        assert_eq!(find(&seen, c"a"), Some(1));
        assert_eq!(find(&seen, c"bb"), Some(2));
        assert_eq!(find(&seen, c"a"), Some(1));
        // Prefixes and extensions of a remembered text are other texts.
        assert_eq!(find(&seen, c"b"), None);
        assert_eq!(find(&seen, c"bbb"), None);
        assert_eq!(find(&seen, c""), None);
    }

    #[test]
    fn a_full_table_or_an_unfit_text_is_not_remembered() {
        let seen: Seen<4, 2> = Seen::new();
        seen.remember("abcd", 9); // needs 5 bytes with its NUL
        seen.remember("", 9);
        assert_eq!(find(&seen, c"abcd"), None);
        seen.remember("x", 1);
        seen.remember("y", 2);
        seen.remember("z", 3);
        assert_eq!(find(&seen, c"x"), Some(1));
        assert_eq!(find(&seen, c"y"), Some(2));
        assert_eq!(find(&seen, c"z"), None);
    }

    #[test]
    fn threads_remembering_at_once_each_find_their_text() {
        let seen: &'static Seen<16, 64> = Box::leak(Box::new(Seen::new()));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let text = format!("device-{t}");
                    seen.remember(&text, t);
                    let c = std::ffi::CString::new(text).unwrap();
                    for _ in 0..1000 {
                        assert_eq!(find(seen, &c), Some(t));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
