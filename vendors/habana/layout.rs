//! Where each HLML release keeps the fields this vendor reads in the two
//! structures whose layout changed (`hlml_pci_info_t`,
//! `hlml_utilization_t`). The library's version decides the layout
//! ([`detect`]); a release not listed here is refused at discovery, never
//! read through another release's layout.
//!
//! Figures: what ctypes computes from the types of the habana-pyhlml wheel
//! of each release on PyPI (1.10.0 to 1.24.2, generated from that
//! release's hlml.h; HabanaAI/gohlml's hlml.h is the 1.10 one).
//! c-tests/hlml_layout.c checks the same figures against the fake's header
//! built as each release. `hlml_memory_t` never changed: `hlml.rs`.

/// One range of HLML releases sharing their layouts (x86-64 and aarch64 LP64).
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// The releases 1.first ..= 1.last.
    pub first: u32,
    pub last: u32,
    /// hlml_pci_info_t: `bus_id` (domain:bus:device.function) is at 4.
    pub pci_size: usize,
    pub pci_bus_id_len: usize,
    pub pci_device_id: usize,
    /// hlml_utilization_t: `aip` (percent) is at 0.
    pub utilization_size: usize,
}

/// 1.10: a 5-character PCI domain, the link's current speed and width only.
pub const V10: Layout = Layout {
    first: 10,
    last: 10,
    pci_size: 52,
    pci_bus_id_len: 15,
    pci_device_id: 28,
    utilization_size: 4,
};

/// 1.11 - 1.17: the link's maximum speed and width, `pci_rev`.
pub const V11: Layout = Layout {
    first: 11,
    last: 17,
    pci_size: 76,
    ..V10
};

/// 1.18: `pci_subsys_id`.
pub const V18: Layout = Layout {
    first: 18,
    last: 18,
    pci_size: 80,
    ..V10
};

/// 1.19 - 1.24: a 9-character domain moves every later field by 4;
/// utilization gains `memory`.
pub const V19: Layout = Layout {
    first: 19,
    last: 24,
    pci_size: 84,
    pci_bus_id_len: 19,
    pci_device_id: 32,
    utilization_size: 8,
};

const KNOWN: &[&Layout] = &[&V10, &V11, &V18, &V19];

/// The largest hlml_pci_info_t known (buffers are sized for it, plus
/// headroom).
pub const PCI_MAX: usize = 84;
/// The largest hlml_utilization_t known.
pub const UTILIZATION_MAX: usize = 8;

/// The releases this build reads, for a refusal's reason.
pub fn supported() -> String {
    format!("1.{} to 1.{}", V10.first, V19.last)
}

/// The major and minor numbers of a version string ("1.24.2", and any
/// prefix or suffix HLML adds: "hl-1.24.2-7c61dbc"), if it has them.
pub fn parse(version: &str) -> Option<(u32, u32)> {
    let start = version.find(|c: char| c.is_ascii_digit())?;
    let mut parts = version[start..].split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().filter(|m| !m.is_empty())?.parse().ok()?;
    Some((major, minor))
}

/// The layout of the HLML that reports `version`, if it is known.
pub fn detect(version: &str) -> Option<&'static Layout> {
    let (major, minor) = parse(version)?;
    (major == 1)
        .then(|| KNOWN.iter().find(|l| (l.first..=l.last).contains(&minor)))
        .flatten()
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_their_layout_and_unknown_ones_none() {
        assert_eq!(detect("1.24.2"), Some(&V19));
        assert_eq!(detect("1.19.0"), Some(&V19));
        assert_eq!(detect("1.18.0"), Some(&V18));
        assert_eq!(detect("1.17.1"), Some(&V11));
        assert_eq!(detect("1.11.0"), Some(&V11));
        assert_eq!(detect("1.10.0"), Some(&V10));
        assert_eq!(detect("hl-1.22.1-fw"), Some(&V19));
        for unknown in ["1.9.0", "1.25.0", "2.0.0", "0.24.2", "", "1", "abc", "1.x"] {
            assert_eq!(detect(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn the_largest_layouts_bound_every_buffer() {
        assert!(KNOWN.iter().all(|l| l.pci_size <= PCI_MAX
            && l.utilization_size <= UTILIZATION_MAX
            && l.pci_device_id + 4 <= l.pci_size
            && 4 + l.pci_bus_id_len <= l.pci_device_id));
    }
}
