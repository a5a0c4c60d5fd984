//! Virtual memory management: how long `cuMemCreate`'s physical memory
//! stays charged.
//!
//! The driver frees such memory when the last thing that refers to it ends
//! (CUDA's `cuMemRelease`: "freed when all outstanding mappings to the
//! memory are unmapped and when all outstanding references to the handle
//! (including its shareable counterparts) are also released"). So the hook
//! counts the same references per allocation:
//! - a handle reference: `cuMemCreate`, each `cuMemRetainAllocationHandle`
//!   (the handle the address was mapped with), each import of this
//!   process's own export (a handle of its own to the same memory), each
//!   ended by one `cuMemRelease`;
//! - a mapping: `cuMemMap` until `cuMemUnmap` of a range that holds it;
//! - a multicast binding: `cuMulticastBindMem[_v2]` / `cuMulticastBindAddr[_v2]`
//!   until `cuMulticastUnbind`, or until the multicast object's last
//!   handle reference is released.
//!
//! The charge (made before the driver's `cuMemCreate`, like every other
//! allocation: `memory::allocate_with`) is given back with the last
//! reference. An import of another process's export is that process's
//! memory: not charged here (it is charged once, to the exporter, for as
//! long as the exporter holds it). Exports are recognised by what the
//! driver handed out: a FABRIC handle's 64 bytes, a POSIX descriptor's open
//! file (not its number, which the program may close and get again for
//! another file, or `dup()` to another number): the hook keeps a duplicate
//! of each exported descriptor (`ExportFd`, closed with its allocation's
//! last reference) that `ffi::vmm` compares a descriptor with.
//!
//! The books are one mutex, held across the driver's call of each ending
//! (release, unmap, unbind): once the driver has freed a handle value or an
//! address range, another thread may get it again, and its record must not
//! be taken for the old one. Nothing here is on a hot path.

use crate::forksafe::{books, ForkSafe};
use crate::limits;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;

/// What the driver handed out for an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shared {
    /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: the export's token
    /// (`ExportFd`).
    Fd(u64),
    /// `CU_MEM_HANDLE_TYPE_FABRIC`: the handle's bytes.
    Fabric([u8; 64]),
}

/// One physical allocation the hook charged.
#[derive(Debug)]
struct Alloc {
    slot: usize,
    ordinal: i32,
    bytes: u64,
    /// Handle references + mappings + bindings.
    refs: u32,
}

#[derive(Debug)]
struct Handle {
    /// The allocation; `None` for a multicast object.
    alloc: Option<u64>,
    /// Outstanding references (0: released, still named by a mapping).
    refs: u32,
}

#[derive(Debug)]
struct Mapping {
    size: u64,
    alloc: u64,
    handle: u64,
}

#[derive(Debug)]
struct Binding {
    multicast: u64,
    ordinal: i32,
    offset: u64,
    size: u64,
    alloc: u64,
}

/// The hook's duplicate of an exported POSIX descriptor: the same open
/// file description as the program's, whatever the program does with its
/// number.
#[derive(Debug)]
pub struct ExportFd {
    /// What names the export in the books (`Shared::Fd`).
    pub token: u64,
    /// The duplicate, held open: it holds the export's mark (`ffi::vmm`),
    /// closed when dropped.
    pub _kept: OwnedFd,
    /// The file's device and inode.
    pub file: (u64, u64),
}

#[derive(Debug, Default)]
pub struct Books {
    allocs: HashMap<u64, Alloc>,
    handles: HashMap<u64, Handle>,
    maps: BTreeMap<u64, Mapping>,
    bindings: Vec<Binding>,
    exports: HashMap<Shared, u64>,
    export_fds: Vec<ExportFd>,
    next: u64,
}

/// The process's books (the fork handlers in `ffi` hold them across `fork()`).
pub static BOOKS: ForkSafe<Books> = ForkSafe::new();

/// Run the driver's `call` with the books held; on success, `then`.
fn ending(call: impl FnOnce() -> i32, then: impl FnOnce(&mut Books)) -> i32 {
    if !limits::active() {
        return call();
    }
    let mut guard = BOOKS.lock();
    let result = call();
    if result == 0 {
        then(books(&mut guard));
    }
    result
}

impl Books {
    /// `handle`, just made by `cuMemCreate`, took `bytes` charged on `slot`.
    fn created(&mut self, handle: u64, slot: usize, ordinal: i32, bytes: u64) {
        self.next += 1;
        let id = self.next;
        let alloc = Alloc {
            slot,
            ordinal,
            bytes,
            refs: 1,
        };
        self.allocs.insert(id, alloc);
        self.handles.insert(
            handle,
            Handle {
                alloc: Some(id),
                refs: 1,
            },
        );
    }

    /// One reference to allocation `id` ended; the last gives its bytes back.
    fn unref(&mut self, id: u64) {
        let Some(a) = self.allocs.get_mut(&id) else {
            return;
        };
        a.refs -= 1;
        if a.refs > 0 {
            return;
        }
        limits::give_back(a.slot, a.bytes);
        self.allocs.remove(&id);
        self.handles.retain(|_, h| h.alloc != Some(id));
        self.exports.retain(|_, a| *a != id);
        // Its exported descriptors' duplicates closed.
        let exports = &self.exports;
        self.export_fds
            .retain(|e| exports.contains_key(&Shared::Fd(e.token)));
    }

    /// A new reference to allocation `id` through `handle`.
    fn reference(&mut self, handle: u64, id: u64) {
        let Some(a) = self.allocs.get_mut(&id) else {
            return;
        };
        a.refs += 1;
        let h = self.handles.entry(handle).or_insert(Handle {
            alloc: Some(id),
            refs: 0,
        });
        h.refs += 1;
    }

    fn released(&mut self, handle: u64) {
        let Some(h) = self.handles.get_mut(&handle).filter(|h| h.refs > 0) else {
            return;
        };
        h.refs -= 1;
        match h.alloc {
            Some(id) => self.unref(id),
            None if h.refs == 0 => {
                self.handles.remove(&handle);
                self.unbind(|b| b.multicast == handle);
            }
            None => {}
        }
    }

    fn mapped(&mut self, va: u64, size: u64, handle: u64) {
        let Some(id) = self.handles.get(&handle).and_then(|h| h.alloc) else {
            return;
        };
        if let Some(a) = self.allocs.get_mut(&id) {
            a.refs += 1;
            let m = Mapping {
                size,
                alloc: id,
                handle,
            };
            self.maps.insert(va, m);
        }
    }

    /// The mapping that covers `va`: (its start, allocation, handle).
    fn mapping_at(&self, va: u64) -> Option<(u64, u64, u64)> {
        let (&start, m) = self.maps.range(..=va).next_back()?;
        (va - start < m.size).then_some((start, m.alloc, m.handle))
    }

    fn unmapped(&mut self, va: u64, size: u64) {
        let end = va.saturating_add(size);
        let gone: Vec<u64> = self.maps.range(va..end).map(|(&k, _)| k).collect();
        for k in gone {
            if let Some(m) = self.maps.remove(&k) {
                self.unref(m.alloc);
            }
        }
    }

    fn retained(&mut self, handle: u64, addr: u64) {
        let id = match self.handles.get(&handle).and_then(|h| h.alloc) {
            Some(id) => Some(id),
            None => self.mapping_at(addr).map(|(_, id, _)| id),
        };
        if let Some(id) = id {
            self.reference(handle, id);
        }
    }

    fn bound(&mut self, multicast: u64, ordinal: Option<i32>, offset: u64, size: u64, id: u64) {
        let Some(a) = self.allocs.get_mut(&id) else {
            return;
        };
        a.refs += 1;
        let ordinal = ordinal.unwrap_or(a.ordinal);
        self.bindings.push(Binding {
            multicast,
            ordinal,
            offset,
            size,
            alloc: id,
        });
    }

    /// End every binding `which` selects.
    fn unbind(&mut self, which: impl Fn(&Binding) -> bool) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.bindings)
            .into_iter()
            .partition(which);
        self.bindings = kept;
        for b in gone {
            self.unref(b.alloc);
        }
    }
}

/// `handle` was made by `cuMemCreate` with `bytes` charged on `slot`
/// (device `ordinal`).
pub fn created(handle: u64, slot: usize, ordinal: i32, bytes: u64) {
    BOOKS.with(|b| b.created(handle, slot, ordinal, bytes));
}

/// `cuMemRelease(handle)`: one handle reference less (of an allocation or
/// a multicast object).
pub fn release(handle: u64, call: impl FnOnce() -> i32) -> i32 {
    ending(call, |b| b.released(handle))
}

/// `cuMemMap(va, size, …, handle)` succeeded.
pub fn mapped(va: u64, size: u64, handle: u64) {
    if limits::active() {
        BOOKS.with(|b| b.mapped(va, size, handle));
    }
}

/// `cuMemUnmap(va, size)`: every mapping in the range ends.
pub fn unmap(va: u64, size: u64, call: impl FnOnce() -> i32) -> i32 {
    ending(call, |b| b.unmapped(va, size))
}

/// `cuMemRetainAllocationHandle` gave `handle` for `addr`.
pub fn retained(handle: u64, addr: u64) {
    if limits::active() {
        BOOKS.with(|b| b.retained(handle, addr));
    }
}

/// `cuMemExportToShareableHandle` shared `handle` as `shared`.
pub fn exported(handle: u64, shared: Shared) {
    if limits::active() {
        BOOKS.with(|b| {
            if let Some(id) = b.handles.get(&handle).and_then(|h| h.alloc) {
                b.exports.insert(shared, id);
            }
        });
    }
}

/// `cuMemExportToShareableHandle` shared `handle` as a POSIX descriptor,
/// kept as `keep(token)` makes its duplicate (the descriptor and its file;
/// None: it could not be kept, the export goes unrecognised).
pub fn exported_fd(handle: u64, keep: impl FnOnce(u64) -> Option<(OwnedFd, (u64, u64))>) {
    if limits::active() {
        BOOKS.with(|b| {
            let Some(id) = b.handles.get(&handle).and_then(|h| h.alloc) else {
                return;
            };
            b.next += 1;
            let token = b.next;
            if let Some((fd, file)) = keep(token) {
                b.export_fds.push(ExportFd {
                    token,
                    _kept: fd,
                    file,
                });
                b.exports.insert(Shared::Fd(token), id);
            }
        });
    }
}

/// The export whose kept descriptor `names` says a descriptor is (None:
/// none of this process's).
pub fn export_named(names: impl Fn(&ExportFd) -> bool) -> Option<Shared> {
    if !limits::active() {
        return None;
    }
    BOOKS.with(|b| {
        b.export_fds
            .iter()
            .find(|e| names(e))
            .map(|e| Shared::Fd(e.token))
    })
}

/// `cuMemImportFromShareableHandle` made `handle` from `shared`: another
/// reference to this process's own memory, or (another process's export)
/// nothing charged here.
pub fn imported(handle: u64, shared: Shared) {
    if limits::active() {
        BOOKS.with(|b| {
            if let Some(&id) = b.exports.get(&shared) {
                b.reference(handle, id);
            }
        });
    }
}

/// `cuMulticastCreate` made `handle`.
pub fn multicast_created(handle: u64) {
    if limits::active() {
        BOOKS.with(|b| {
            b.handles.insert(
                handle,
                Handle {
                    alloc: None,
                    refs: 1,
                },
            );
        });
    }
}

/// What a multicast binding binds.
pub enum Bound {
    /// `cuMulticastBindMem[_v2]`: an allocation's handle.
    Handle(u64),
    /// `cuMulticastBindAddr[_v2]`: a mapped address.
    Address(u64),
}

/// A binding of `what` at `offset`..+`size` of `multicast`, on device
/// `ordinal` (`None`: the memory's own, the v1 calls) succeeded.
pub fn bound(multicast: u64, ordinal: Option<i32>, offset: u64, size: u64, what: Bound) {
    if !limits::active() {
        return;
    }
    BOOKS.with(|b| {
        let id = match what {
            Bound::Handle(h) => b.handles.get(&h).and_then(|h| h.alloc),
            Bound::Address(va) => b.mapping_at(va).map(|(_, id, _)| id),
        };
        if let Some(id) = id {
            b.bound(multicast, ordinal, offset, size, id);
        }
    });
}

/// `cuMulticastUnbind(multicast, ordinal, offset, size)`.
pub fn unbind(
    multicast: u64,
    ordinal: i32,
    offset: u64,
    size: u64,
    call: impl FnOnce() -> i32,
) -> i32 {
    let end = offset.saturating_add(size);
    ending(call, |b| {
        b.unbind(|x| {
            x.multicast == multicast
                && x.ordinal == ordinal
                && x.offset >= offset
                && x.offset.saturating_add(x.size) <= end
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(b: &Books, handle: u64) -> Option<u32> {
        let id = b.handles.get(&handle)?.alloc?;
        Some(b.allocs.get(&id)?.refs)
    }

    /// Every kind of reference keeps the allocation; the last one ends it
    /// (the limiter is inactive in unit tests: give_back is a no-op).
    #[test]
    fn the_last_reference_ends_an_allocation() {
        let mut b = Books::default();
        b.created(7, 0, 0, 4 << 20);
        b.mapped(0x1000_0000, 2 << 20, 7);
        b.mapped(0x1020_0000, 2 << 20, 7);
        b.released(7);
        assert_eq!(refs(&b, 7), Some(2));
        b.retained(7, 0x1000_0010);
        b.unmapped(0x1000_0000, 4 << 20);
        assert_eq!(refs(&b, 7), Some(1));
        let fd = Shared::Fd(9);
        b.exports.insert(fd, b.handles[&7].alloc.unwrap());
        b.reference(8, b.exports[&fd]);
        b.released(7);
        assert_eq!(refs(&b, 8), Some(1));
        b.handles.insert(
            100,
            Handle {
                alloc: None,
                refs: 1,
            },
        );
        let id = b.handles[&8].alloc.unwrap();
        b.bound(100, None, 0, 2 << 20, id);
        b.released(8);
        assert_eq!(b.allocs.len(), 1, "the binding keeps it");
        b.released(100);
        assert!(b.allocs.is_empty() && b.handles.is_empty() && b.exports.is_empty());
    }

    #[test]
    fn mapping_lookup() {
        let mut b = Books::default();
        b.created(1, 0, 0, 2 << 20);
        b.mapped(0x2000, 0x1000, 1);
        assert_eq!(b.mapping_at(0x2fff).map(|m| m.0), Some(0x2000));
        assert_eq!(b.mapping_at(0x3000), None);
        assert_eq!(b.mapping_at(0x1fff), None);
    }
}
