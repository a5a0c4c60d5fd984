//! A cubin: a 64-bit little-endian ELF image (the System V ABI's layout,
//! `Elf64_Ehdr` / `Elf64_Shdr`). Its `__device__` globals are its
//! `.nv.global` section (uninitialized, `SHT_NOBITS`: it takes no bytes of
//! the file) and `.nv.global.init` (initialized); the driver allocates
//! both sections' sizes when the image loads.

use super::{le, Image, MAX_READ};

/// `Elf64_Ehdr`'s size and the fields read (offsets in bytes).
const EHDR: u64 = 64;
const E_SHOFF: usize = 0x28;
const E_SHENTSIZE: usize = 0x3A;
const E_SHNUM: usize = 0x3C;
const E_SHSTRNDX: usize = 0x3E;
/// `Elf64_Shdr`'s size and fields.
const SHDR: u64 = 64;
const SH_NAME: usize = 0x00;
const SH_OFFSET: usize = 0x18;
const SH_SIZE: usize = 0x20;
const SH_LINK: usize = 0x28;
/// `e_ident[EI_CLASS]` ELFCLASS64, `e_ident[EI_DATA]` ELFDATA2LSB.
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
/// `e_shstrndx` saying the index is in section 0's `sh_link`.
const SHN_XINDEX: u64 = 0xffff;
/// The globals' section names: `.nv.global` and `.nv.global.init`.
const GLOBAL: &[u8] = b".nv.global";

/// The bytes of the cubin's `.nv.global*` sections; None: not a 64-bit
/// little-endian ELF, or its section headers or names are not in it.
pub fn globals<I: Image + ?Sized>(image: &I) -> Option<u64> {
    let ehdr = image.read(0, EHDR)?;
    if ehdr[4] != ELFCLASS64 || ehdr[5] != ELFDATA2LSB || le::<2>(&ehdr, E_SHENTSIZE) != SHDR {
        return None;
    }
    let shoff = le::<8>(&ehdr, E_SHOFF);
    if shoff == 0 {
        return Some(0); // no sections, no globals
    }
    // Over 0xff00 sections, or a string table index past 0xff00: section
    // 0 holds the numbers (the ELF extended numbering).
    let first = image.read(shoff, SHDR)?;
    let mut count = le::<2>(&ehdr, E_SHNUM);
    if count == 0 {
        count = le::<8>(&first, SH_SIZE);
    }
    let mut strndx = le::<2>(&ehdr, E_SHSTRNDX);
    if strndx == SHN_XINDEX {
        strndx = le::<4>(&first, SH_LINK);
    }
    if count.checked_mul(SHDR)? > MAX_READ || strndx >= count {
        return None;
    }
    let table = image.read(shoff, count * SHDR)?;
    let section = |i: u64| &table[(i * SHDR) as usize..((i + 1) * SHDR) as usize];
    let strtab = section(strndx);
    let (str_off, str_size) = (le::<8>(strtab, SH_OFFSET), le::<8>(strtab, SH_SIZE));
    let mut bytes = 0u64;
    for i in 0..count {
        let s = section(i);
        let name = le::<4>(s, SH_NAME);
        if name >= str_size {
            return None;
        }
        // The name up to one byte past ".nv.global": its NUL or a '.'.
        let want = (GLOBAL.len() as u64 + 1).min(str_size - name);
        let start = image.read(str_off.checked_add(name)?, want)?;
        if start.starts_with(GLOBAL) && matches!(start.get(GLOBAL.len()), Some(0 | b'.')) {
            bytes = bytes.saturating_add(le::<8>(s, SH_SIZE));
        }
    }
    Some(bytes)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A cubin with sections `(name, size)` after the null section and
    /// `.shstrtab`.
    pub fn cubin(sections: &[(&str, u64)]) -> Vec<u8> {
        let mut names = b"\0.shstrtab\0".to_vec();
        let mut headers = vec![[0u8; 64], [0u8; 64]];
        headers[1][SH_NAME..SH_NAME + 4].copy_from_slice(&1u32.to_le_bytes());
        for (name, size) in sections {
            let mut h = [0u8; 64];
            h[SH_NAME..SH_NAME + 4].copy_from_slice(&(names.len() as u32).to_le_bytes());
            h[SH_SIZE..SH_SIZE + 8].copy_from_slice(&size.to_le_bytes());
            names.extend_from_slice(name.as_bytes());
            names.push(0);
            headers.push(h);
        }
        let str_off = EHDR;
        headers[1][SH_OFFSET..SH_OFFSET + 8].copy_from_slice(&str_off.to_le_bytes());
        headers[1][SH_SIZE..SH_SIZE + 8].copy_from_slice(&(names.len() as u64).to_le_bytes());
        let shoff = EHDR + names.len() as u64;
        let mut elf = vec![0u8; EHDR as usize];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = ELFCLASS64;
        elf[5] = ELFDATA2LSB;
        elf[E_SHOFF..E_SHOFF + 8].copy_from_slice(&shoff.to_le_bytes());
        elf[E_SHENTSIZE..E_SHENTSIZE + 2].copy_from_slice(&(SHDR as u16).to_le_bytes());
        elf[E_SHNUM..E_SHNUM + 2].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        elf[E_SHSTRNDX..E_SHSTRNDX + 2].copy_from_slice(&1u16.to_le_bytes());
        elf.extend_from_slice(&names);
        for h in headers {
            elf.extend_from_slice(&h);
        }
        elf
    }

    #[test]
    fn the_global_sections_are_summed() {
        let elf = cubin(&[
            (".text.k", 4096),
            (".nv.global", 1 << 20),
            (".nv.global.init", 256),
            (".nv.globalx", 7),
            (".nv.shared.k", 1024),
            (".nv.constant0.k", 352),
        ]);
        assert_eq!(globals(&elf[..]), Some((1 << 20) + 256));
        assert_eq!(globals(&cubin(&[(".text.k", 64)])[..]), Some(0));
    }

    #[test]
    fn a_cubin_lying_about_its_parts_is_refused() {
        let elf = cubin(&[(".nv.global", 64)]);
        // Section headers past the image.
        let mut far = elf.clone();
        far[E_SHOFF..E_SHOFF + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(globals(&far[..]), None);
        // More sections than the image holds.
        let mut many = elf.clone();
        many[E_SHNUM..E_SHNUM + 2].copy_from_slice(&0xfeffu16.to_le_bytes());
        assert_eq!(globals(&many[..]), None);
        // A name past the string table.
        let mut name = elf.clone();
        let at = elf.len() - 64 + SH_NAME;
        name[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(globals(&name[..]), None);
        // Truncated, 32-bit.
        assert_eq!(globals(&elf[..elf.len() - 1]), None);
        let mut class32 = elf;
        class32[4] = 1;
        assert_eq!(globals(&class32[..]), None);
    }
}
