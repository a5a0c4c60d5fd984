//! Where each AMD SMI version keeps the fields this vendor reads, in the
//! structures whose layout changed between versions, and the enum values
//! that were renumbered. The library's version decides the layout
//! ([`detect`]); a version not listed here is refused at discovery, never
//! read through another version's layout.
//!
//! Figures: the ctypes wrapper AMD generates from each release's
//! `amd_smi/amdsmi.h` (`amdsmi_wrapper.py` of the `amdsmi` wheel 6.3.0,
//! 6.4.0 and 7.0.2 on PyPI), cross-checked with ROCm/amdsmi's header and
//! the doxygen pages of docs-6.3.1, 6.4.0 and 7.1.0 (docs/amd.md). The
//! structures that did not change (PCIe, power cap, clock, activity, VRAM
//! usage, link metrics) are declared once in `smi.rs`.
//! c-tests/amd_layout.c checks the same figures against the fake's header
//! built for each version.

/// One AMD SMI version's layouts (x86-64 and aarch64 LP64).
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// The library major version and the ROCm release that ships it.
    pub major: u32,
    pub rocm: &'static str,
    /// amdsmi_asic_info_t: `market_name` is char[256] at 0 in every version.
    pub asic_size: usize,
    pub asic_device_id: usize,
    pub asic_cus: usize,
    /// amdsmi_vram_info_t: `vram_type` is at 0 in every version.
    pub vram_size_of: usize,
    pub vram_size: usize,
    /// amdsmi_driver_info_t: `driver_version` at 0.
    pub driver_size: usize,
    pub driver_version_len: usize,
    /// amdsmi_vbios_info_t `version`.
    pub vbios_size: usize,
    pub vbios_version: usize,
    pub vbios_version_len: usize,
    /// amdsmi_power_info_t.
    pub power_size: usize,
    pub power_current: usize,
    pub power_average: usize,
    /// amdsmi_proc_info_t (an array element: its size is the stride).
    pub proc_size: usize,
    pub proc_pid: usize,
    pub proc_vram_mem: usize,
    /// amdsmi_accelerator_partition_profile_t: `profile_type` at 0 and
    /// `num_partitions` at 4 in every version.
    pub profile_size: usize,
    pub profile_memory_caps: usize,
    /// amdsmi_link_type_t's XGMI in the link metrics.
    pub metrics_link_xgmi: u32,
    /// What amdsmi_topo_get_link_type returns for PCIe and XGMI
    /// (amdsmi_io_link_type_t before 26, amdsmi_link_type_t from 26).
    pub topo_pcie: u32,
    pub topo_xgmi: u32,
    /// amdsmi_memory_partition_type_t of NPS1, NPS2, NPS4, NPS8.
    pub nps: [u32; 4],
}

const PROFILE: usize = 1152;
const MEMORY_CAPS: usize = 8;

/// AMD SMI 24.7 (ROCm 6.3). The partition profile is the released one
/// (memory_caps at 8, 1,152 bytes); an earlier amd-staging header had
/// profile_index there and 1,096 bytes.
pub const V24: Layout = Layout {
    major: 24,
    rocm: "ROCm 6.3",
    asic_size: 456,
    asic_device_id: 328,
    asic_cus: 376,
    vram_size_of: 64,
    vram_size: 8,
    driver_size: 192,
    driver_version_len: 64,
    vbios_size: 256,
    vbios_version: 160,
    vbios_version_len: 32,
    power_size: 68,
    power_current: 0,
    power_average: 4,
    proc_size: 224,
    proc_pid: 32,
    proc_vram_mem: 128,
    profile_size: PROFILE,
    profile_memory_caps: MEMORY_CAPS,
    metrics_link_xgmi: 1,
    topo_pcie: 1,
    topo_xgmi: 2,
    nps: [1, 2, 3, 4],
};

/// AMD SMI 25.x (ROCm 6.4): strings grew to 256 bytes, a leading u64
/// socket power, process names of 256 bytes; the rest as 24.x.
pub const V25: Layout = Layout {
    major: 25,
    rocm: "ROCm 6.4",
    asic_size: 896,
    asic_device_id: 520,
    asic_cus: 792,
    driver_size: 768,
    driver_version_len: 256,
    vbios_size: 1056,
    vbios_version: 544,
    vbios_version_len: 256,
    power_size: 40,
    power_current: 8,
    power_average: 12,
    proc_size: 704,
    proc_pid: 256,
    proc_vram_mem: 352,
    ..V24
};

/// AMD SMI 26.x (ROCm 7.x): `vram_vendor` a string, larger VBIOS and
/// power structures, amdsmi_link_type_t renumbered (PCIE 1, XGMI 2) and
/// used by amdsmi_topo_get_link_type (with the same numbers as 25's
/// amdsmi_io_link_type_t), NPS4/NPS8 numbered 4/8; the rest as 25.x.
pub const V26: Layout = Layout {
    major: 26,
    rocm: "ROCm 7.x",
    vram_size_of: 584,
    vram_size: 264,
    vbios_size: 1568,
    vbios_version: 768,
    power_size: 192,
    metrics_link_xgmi: 2,
    nps: [1, 2, 4, 8],
    ..V25
};

/// Every layout known, oldest first.
pub static KNOWN: [&Layout; 3] = [&V24, &V25, &V26];

/// The largest size of amdsmi_version_t (24.x/25.x: year, major, minor,
/// release, build pointer; 26.x: major, minor, release, build pointer).
pub(crate) const VERSION_SIZE: usize = 24;

/// The versions this build reads, for the refusal's reason.
pub fn supported() -> String {
    KNOWN
        .iter()
        .map(|l| format!("{}.x ({})", l.major, l.rocm))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The version amdsmi_get_lib_version wrote, from the first four u32 of
/// amdsmi_version_t, and its layout if known. Both struct versions lead
/// with the big number: `year` (24, and 25 or 0 in 25.x, whose `major` is
/// 25) before 26, `major` from 26.
pub fn detect(w: [u32; 4]) -> (String, Option<&'static Layout>) {
    let (major, rest) = match w {
        [24, ..] => (24, &w[1..]),
        [0 | 25, m, ..] if m >= 25 => (m, &w[2..]),
        [25, ..] => (25, &w[1..]),
        _ => (w[0], &w[1..3]),
    };
    let found = std::iter::once(major)
        .chain(rest.iter().copied())
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(".");
    (found, KNOWN.iter().copied().find(|l| l.major == major))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_their_layout() {
        assert_eq!(detect([24, 7, 1, 0]), ("24.7.1.0".into(), Some(&V24)));
        assert_eq!(detect([0, 25, 3, 0]), ("25.3.0".into(), Some(&V25)));
        assert_eq!(detect([25, 25, 5, 1]), ("25.5.1".into(), Some(&V25)));
        assert_eq!(detect([26, 0, 2, 0]), ("26.0.2".into(), Some(&V26)));
        assert_eq!(detect([27, 1, 0, 0]), ("27.1.0".into(), None));
        assert_eq!(detect([23, 6, 0, 0]), ("23.6.0".into(), None));
        assert_eq!(detect([0, 27, 1, 0]), ("27.1.0".into(), None));
        assert_eq!(detect([0, 0, 0, 0]).1, None);
    }

    #[test]
    fn every_field_read_lies_inside_its_structure() {
        for l in KNOWN {
            assert!(l.asic_cus + 4 <= l.asic_size && l.asic_device_id + 8 <= l.asic_size);
            assert!(l.vram_size + 8 <= l.vram_size_of);
            assert!(l.driver_version_len <= l.driver_size);
            assert!(l.vbios_version + l.vbios_version_len <= l.vbios_size);
            assert!(l.power_average + 4 <= l.power_size && l.power_current + 4 <= l.power_size);
            assert!(l.proc_vram_mem + 8 <= l.proc_size && l.proc_pid + 4 <= l.proc_size);
            assert!(l.profile_memory_caps + 4 <= l.profile_size);
        }
    }
}
