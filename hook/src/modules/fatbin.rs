//! A fat binary (nvcc's `fatBinaryHeader`: magic, version, header size,
//! then the size of the entries that follow): one entry per target, each
//! a PTX text or a cubin, possibly compressed. The layout of an entry is
//! not in CUDA's public headers; it is read as the CUDA 11 to 13 images
//! are laid out (the field offsets below). The driver loads one entry,
//! the one that suits the device, so an image is charged its largest
//! entry's globals.
//!
//! A compressed entry, LZ4 (flag 0x2000, CUDA 11 and 12) or Zstandard
//! (flag 0x8000, `nvcc --compress-mode=size`, CUDA 12.8 on), is
//! decompressed (`lz4`, `zstd`: to its declared size at most) and read as
//! the others: its uninitialized globals (`.nv.global`, which takes no
//! bytes of the file) are only known from the cubin inside.

use super::{cubin, le, lz4, ptx, zstd, Image, Window, MAX_READ};

/// `fatBinaryHeader.magic`.
pub const MAGIC: u32 = 0xBA55_ED50;
/// `fatBinaryHeader`: its size field, the entries' size.
const HEADER: u64 = 16;
const HEADER_SIZE: usize = 6;
const FAT_SIZE: usize = 8;
/// An entry's fixed part and its fields: kind, its own header's size, the
/// payload's size (padded), flags, the payload's uncompressed size.
const ENTRY: u64 = 64;
const KIND: usize = 0;
const ENTRY_SIZE: usize = 4;
const PAYLOAD: usize = 8;
const COMPRESSED_SIZE: usize = 16;
const FLAGS: usize = 40;
const UNCOMPRESSED: usize = 56;
/// The most entries read (a container holds one per target, a few dozen
/// at most): more is a crafted image, refused.
const MAX_ENTRIES: usize = 4096;
const KIND_PTX: u64 = 1;
const KIND_CUBIN: u64 = 2;
/// The compression flags: LZ4 (CUDA 11.x, 12.x) and Zstandard (12.8 on).
const LZ4: u64 = 0x2000;
const ZSTD: u64 = 0x8000;

/// The largest entry's globals; None: an entry or its payload is not in
/// the image, or a payload larger than the hook reads.
pub fn globals<I: Image + ?Sized>(image: &I) -> Option<u64> {
    let header = image.read(0, HEADER)?;
    let start = le::<2>(&header, HEADER_SIZE);
    let end = start.checked_add(le::<8>(&header, FAT_SIZE))?;
    let mut at = start;
    let mut most = 0u64;
    for _ in 0..=MAX_ENTRIES {
        if at >= end {
            return Some(most);
        }
        let entry = image.read(at, ENTRY)?;
        let (size, payload) = (le::<4>(&entry, ENTRY_SIZE), le::<8>(&entry, PAYLOAD));
        if size < ENTRY || payload > MAX_READ {
            return None;
        }
        let data = at.checked_add(size)?;
        let flags = le::<8>(&entry, FLAGS);
        let kind = le::<2>(&entry, KIND);
        let bytes = if flags & (LZ4 | ZSTD) != 0 {
            let (packed, size) = (
                le::<4>(&entry, COMPRESSED_SIZE),
                le::<8>(&entry, UNCOMPRESSED),
            );
            if packed > payload || size > MAX_READ {
                return None;
            }
            let input = image.read(data, packed)?;
            let plain = if flags & ZSTD != 0 {
                zstd::decompress(&input, size as usize)?
            } else {
                lz4::decompress(&input, size as usize)?
            };
            contents(kind, &plain[..], size)?
        } else {
            let window = Window {
                image,
                base: data,
                len: payload,
            };
            contents(kind, &window, payload)?
        };
        most = most.max(bytes);
        at = data.checked_add(payload)?;
    }
    None
}

/// The globals of an entry's `len` bytes of contents.
fn contents<I: Image + ?Sized>(kind: u64, image: &I, len: u64) -> Option<u64> {
    Some(match kind {
        KIND_PTX => ptx::globals(
            image
                .read(0, len)?
                .split(|&b| b == 0)
                .next()
                .unwrap_or_default(),
        ),
        KIND_CUBIN => cubin::globals(image)?,
        _ => 0,
    })
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A fat binary of entries `(kind, flags, contents)`: compressed with
    /// LZ4 (literals only) or Zstandard (raw blocks) where the flags say so.
    pub fn fatbin(entries: &[(u16, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(kind, flags, contents) in entries {
            let packed = match flags {
                f if f & ZSTD != 0 => zstd::tests::raw(contents),
                f if f & LZ4 != 0 => lz4::literals(contents),
                _ => contents.to_vec(),
            };
            let payload = &packed[..];
            let padded = payload.len().next_multiple_of(8);
            let mut e = [0u8; ENTRY as usize];
            e[KIND..KIND + 2].copy_from_slice(&kind.to_le_bytes());
            e[ENTRY_SIZE..ENTRY_SIZE + 4].copy_from_slice(&(ENTRY as u32).to_le_bytes());
            e[PAYLOAD..PAYLOAD + 8].copy_from_slice(&(padded as u64).to_le_bytes());
            e[FLAGS..FLAGS + 8].copy_from_slice(&flags.to_le_bytes());
            e[COMPRESSED_SIZE..COMPRESSED_SIZE + 4]
                .copy_from_slice(&(payload.len() as u32).to_le_bytes());
            let unc = match flags & (LZ4 | ZSTD) {
                0 => 0,
                _ => contents.len() as u64,
            };
            e[UNCOMPRESSED..UNCOMPRESSED + 8].copy_from_slice(&unc.to_le_bytes());
            body.extend_from_slice(&e);
            body.extend_from_slice(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut f = Vec::new();
        f.extend_from_slice(&MAGIC.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&(HEADER as u16).to_le_bytes());
        f.extend_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn the_largest_entry_counts() {
        let ptx = b".global .align 4 .u32 x[10];\n\0";
        let elf = cubin::tests::cubin(&[(".nv.global", 4096), (".nv.global.init", 8)]);
        let fb = fatbin(&[(1, 0x11, ptx), (2, 0x11, &elf), (1, 0x11, b"\0")]);
        assert_eq!(globals(&fb[..]), Some(4104));
        assert_eq!(globals(&fatbin(&[(1, 0x11, ptx)])[..]), Some(40));
        assert_eq!(globals(&fatbin(&[])[..]), Some(0));
    }

    #[test]
    fn compressed_entries_are_read_decompressed() {
        // Read from the cubin inside: `.nv.global` takes no bytes of it.
        let elf = cubin::tests::cubin(&[(".nv.global", 10 << 30)]);
        let ptx = b".global .align 4 .u32 x[10];\n\0";
        for flags in [0x2011, 0x8011] {
            assert_eq!(globals(&fatbin(&[(2, flags, &elf)])[..]), Some(10 << 30));
            assert_eq!(globals(&fatbin(&[(1, flags, ptx)])[..]), Some(40));
            // Said to be larger than it decompresses to.
            let mut fb = fatbin(&[(2, flags, &elf)]);
            let at = HEADER as usize + UNCOMPRESSED;
            fb[at..at + 8].copy_from_slice(&(elf.len() as u64 + 1).to_le_bytes());
            assert_eq!(globals(&fb[..]), None, "{flags:#x}");
        }
    }

    #[test]
    fn a_fat_binary_lying_about_its_sizes_is_refused() {
        let fb = fatbin(&[(1, 0, b".global .u8 x[5];\n\0")]);
        let mut long = fb.clone();
        long[FAT_SIZE..FAT_SIZE + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(globals(&long[..]), None);
        let mut payload = fb.clone();
        let at = HEADER as usize + PAYLOAD;
        payload[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(globals(&payload[..]), None);
        let mut entry = fb.clone();
        let at = HEADER as usize + ENTRY_SIZE;
        entry[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(globals(&entry[..]), None);
        assert_eq!(globals(&fb[..fb.len() - 1]), None);
        let empty: Vec<(u16, u64, &[u8])> = vec![(1, 0, b""); MAX_ENTRIES + 1];
        assert_eq!(globals(&fatbin(&empty)[..]), None);
        assert_eq!(globals(&fatbin(&empty[1..])[..]), Some(0));
    }
}
