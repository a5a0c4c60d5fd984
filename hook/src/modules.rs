//! What a module's or library's `__device__` globals take: the driver
//! allocates them on the device when the image loads into a context
//! (`cuModuleLoad*`, `cuLibraryLoad*`) and frees them at `cuModuleUnload` /
//! `cuLibraryUnload` or with the context.
//!
//! The size is read from the image itself, before the driver sees it, in
//! the three forms the driver loads (cuda.h, `cuModuleLoadData`): PTX text
//! (`ptx`), a cubin (an ELF image, `cubin`) or a fat binary holding either,
//! one entry per target (`fatbin`). Every read is bounded by the image
//! (`Image`): sizes and offsets the image declares are checked against it,
//! never trusted, since a tenant crafts the image. An image whose declared
//! parts cannot be read is refused (`None`) rather than loaded uncharged.

mod cubin;
mod fatbin;
mod lz4;
mod ptx;
mod zstd;

pub use fatbin::MAGIC as FATBIN_MAGIC;

/// The most the hook reads of one image or entry (1 GiB): larger ones are
/// refused as unreadable rather than held in memory.
pub const MAX_READ: u64 = 1 << 30;

/// An image the hook reads before the driver does.
pub trait Image {
    /// `len` bytes at `offset`, or None where the image has no such bytes.
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>>;
}

impl Image for [u8] {
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        let bytes = self.get(start..end)?;
        let mut copy = Vec::new();
        copy.try_reserve_exact(bytes.len()).ok()?;
        copy.extend_from_slice(bytes);
        Some(copy)
    }
}

/// `len` bytes of `image` from `base`: an entry of a fat binary.
struct Window<'a, I: ?Sized> {
    image: &'a I,
    base: u64,
    len: u64,
}

impl<I: Image + ?Sized> Image for Window<'_, I> {
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        self.image.read(self.base.checked_add(offset)?, len)
    }
}

/// The ELF magic a cubin starts with.
const ELF_MAGIC: [u8; 4] = *b"\x7fELF";

/// The bytes of the `__device__` globals `image` defines, by its magic: a
/// fat binary, a cubin, or else PTX text (`text`: the image up to its NUL,
/// which the caller found). None: the image declares parts it does not
/// have.
pub fn globals<I: Image + ?Sized>(
    image: &I,
    text: impl FnOnce() -> Option<Vec<u8>>,
) -> Option<u64> {
    match image.read(0, 4).as_deref() {
        Some(m) if m == FATBIN_MAGIC.to_le_bytes() => fatbin::globals(image),
        Some(m) if m == ELF_MAGIC => cubin::globals(image),
        _ => Some(ptx::globals(&text()?)),
    }
}

/// A little-endian field of `N` bytes at `at` in `bytes` (0 past its end:
/// the callers read fixed-size headers they checked the length of).
fn le<const N: usize>(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(f) = bytes.get(at..at + N) {
        b[..N].copy_from_slice(f);
    }
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(image: &[u8]) -> Option<u64> {
        let text = image.split(|&b| b == 0).next().unwrap_or_default().to_vec();
        globals(image, || Some(text))
    }

    #[test]
    fn ptx_cubin_and_fat_binary_are_told_apart() {
        assert_eq!(of(b".global .align 4 .u32 x[10];\n"), Some(40));
        assert_eq!(of(&cubin::tests::cubin(&[(".nv.global", 96)])), Some(96));
        let ptx = b".global .align 4 .u32 x[10];\n\0";
        assert_eq!(of(&fatbin::tests::fatbin(&[(1, 0, ptx)])), Some(40));
    }

    #[test]
    fn a_window_reads_only_inside_itself() {
        let bytes = [1u8, 2, 3, 4, 5, 6];
        let w = Window {
            image: &bytes[..],
            base: 2,
            len: 3,
        };
        assert_eq!(w.read(0, 3), Some(vec![3, 4, 5]));
        assert_eq!(w.read(1, 3), None);
        assert_eq!(w.read(u64::MAX, 2), None);
        assert_eq!(bytes[..].read(5, 2), None);
        assert_eq!(bytes[..].read(u64::MAX, 1), None);
    }
}
