//! CUDA device ordinals to the limiter's device slots, learned once.
//!
//! A device is named in the limiter by its UUID in NVML's text form
//! ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), which is how the hypervisor
//! sets limits; the driver gives its 16 bytes (`cuDeviceGetUuid`). The
//! ordinal → slot mapping of a process never changes, so after the first
//! lookup a device costs one load.

use crate::limits::{self, Verdict};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::OnceLock;

/// Ordinals beyond this are passed through unaccounted.
const MAX_ORDINALS: usize = 64;

/// 0: not looked up yet; else slot + 1.
static SLOTS: [AtomicUsize; MAX_ORDINALS] = [const { AtomicUsize::new(0) }; MAX_ORDINALS];
static UUIDS: [OnceLock<String>; MAX_ORDINALS] = [const { OnceLock::new() }; MAX_ORDINALS];

/// In the child after `fork()`: the limiter's device slots are resolved
/// per process (a slot stays valid while the process that resolved it
/// lives), so the child asks again; the UUIDs stay.
pub fn forget_slots() {
    for s in SLOTS.iter().chain(&NVML_SLOTS) {
        s.store(0, Release);
    }
}

/// NVML device handles the view has met: (handle, UUID text), each with
/// its limiter slot (slot + 1; 0: not looked up). NVML's handles name the
/// same device for the life of the process (they point into NVML's own
/// device table), so a handle's UUID is asked once.
const MAX_NVML: usize = 64;
static NVML_UUIDS: [OnceLock<(usize, String)>; MAX_NVML] = [const { OnceLock::new() }; MAX_NVML];
static NVML_SLOTS: [AtomicUsize; MAX_NVML] = [const { AtomicUsize::new(0) }; MAX_NVML];

/// The device (slot, UUID text) of an NVML handle; `uuid` asks NVML on
/// first use. None: NVML cannot name it, the limiter does not know it, or
/// more handles than the hook keeps.
pub fn nvml_device(
    handle: usize,
    uuid: impl FnOnce() -> Option<String>,
) -> Option<(usize, &'static str)> {
    let mut uuid = Some(uuid);
    let mut text: Option<String> = None;
    for (cell, slot) in NVML_UUIDS.iter().zip(&NVML_SLOTS) {
        let (h, t) = match cell.get() {
            Some(e) => e,
            None => {
                if text.is_none() {
                    text = Some((uuid.take()?)()?);
                }
                cell.get_or_init(|| (handle, text.clone().unwrap_or_default()))
            }
        };
        if *h != handle {
            continue;
        }
        if let s @ 1.. = slot.load(Acquire) {
            return Some((s - 1, t));
        }
        let s = limits::device(t).ok()?;
        slot.store(s + 1, Release);
        return Some((s, t));
    }
    None
}

/// A device the limiter knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub ordinal: usize,
    pub slot: usize,
}

/// NVML's text form of a device UUID.
pub fn uuid_text(b: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// The UUID text of a device seen before.
pub fn uuid_of(ordinal: usize) -> Option<&'static str> {
    UUIDS.get(ordinal)?.get().map(String::as_str)
}

/// The devices this process has used: (slot, UUID text).
pub fn known() -> impl Iterator<Item = (usize, &'static str)> {
    SLOTS
        .iter()
        .zip(&UUIDS)
        .filter_map(|(s, u)| match s.load(Acquire) {
            0 => None,
            s => Some((s - 1, u.get()?.as_str())),
        })
}

/// The device of a CUDA ordinal; `uuid` asks the driver on first use.
/// `Err`: the verdict for an allocation there (the limiter state is
/// unusable); `Ok(None)`: a device the hook cannot name (pass through).
#[inline]
pub fn resolve(
    ordinal: i32,
    uuid: impl FnOnce(i32) -> Option<[u8; 16]>,
) -> Result<Option<Device>, Verdict> {
    let Some(cell) = usize::try_from(ordinal).ok().and_then(|o| SLOTS.get(o)) else {
        return Ok(None);
    };
    let ordinal = ordinal as usize;
    match cell.load(Acquire) {
        0 => {}
        s => {
            return Ok(Some(Device {
                ordinal,
                slot: s - 1,
            }))
        }
    }
    let Some(bytes) = uuid(ordinal as i32) else {
        return Ok(None);
    };
    let text = UUIDS[ordinal].get_or_init(|| uuid_text(&bytes));
    let slot = limits::device(text)?;
    cell.store(slot + 1, Release);
    Ok(Some(Device { ordinal, slot }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_text_is_nvml_form() {
        let mut b = [0x11u8; 16];
        b[15] = 0xa4;
        assert_eq!(uuid_text(&b), "GPU-11111111-1111-1111-1111-1111111111a4");
    }
}
