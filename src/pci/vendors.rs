//! The accelerator vendors known by PCI vendor ID.
//!
//! Sources of the IDs: the kernel's include/linux/pci_ids.h
//! (PCI_VENDOR_ID_NVIDIA 0x10de, PCI_VENDOR_ID_ATI 0x1002 — AMD's GPUs,
//! PCI_VENDOR_ID_INTEL 0x8086, PCI_VENDOR_ID_HUAWEI 0x19e5,
//! PCI_VENDOR_ID_HYGON 0x1d94), the habanalabs driver
//! (drivers/accel/habanalabs: PCI_VENDOR_ID_HABANALABS 0x1da3), and the PCI
//! ID repository (pci.ids, Debian's pci.ids 0.0~2023.04.11: 1ed5 Moore
//! Threads, 1e36 Shanghai Enflame, 1d22 Baidu — Kunlun AI accelerators).
//! docs/pci.md lists what is left out and why.

/// One vendor: which of its PCI functions are accelerators, and which of
/// our vendor modules and which kernel driver serve them.
#[derive(Debug)]
pub struct KnownVendor {
    pub id: u16,
    /// As the error messages and the probe name it.
    pub name: &'static str,
    /// The vendor module under vendors/ that drives it ("" when none).
    pub module: &'static str,
    /// The management library that module loads, for messages.
    pub library: &'static str,
    /// The kernel driver its library needs bound ("" when not known).
    pub kernel_driver: &'static str,
    /// Device IDs that are accelerators (a vendor that also makes NICs or
    /// crypto engines of the same classes narrows it).
    pub accepts: fn(u16) -> bool,
}

fn any(_: u16) -> bool {
    true
}

/// Huawei's Ascend NPUs are d1xx (310), d5xx (310P), d8xx (910, 910B…);
/// its other processing accelerators (HiSilicon ZIP/SEC/HPRE, a2xx) are not.
fn ascend(device: u16) -> bool {
    device & 0xf000 == 0xd000
}

pub static KNOWN: &[KnownVendor] = &[
    KnownVendor {
        id: 0x10de,
        name: "NVIDIA",
        module: "nvidia",
        library: "NVML",
        kernel_driver: "nvidia",
        accepts: any,
    },
    KnownVendor {
        id: 0x1002,
        name: "AMD",
        module: "amd",
        library: "AMD SMI",
        kernel_driver: "amdgpu",
        accepts: any,
    },
    KnownVendor {
        id: 0x19e5,
        name: "Huawei",
        module: "ascend",
        library: "DCMI",
        kernel_driver: "devdrv_device_driver",
        accepts: ascend,
    },
    KnownVendor {
        id: 0x8086,
        name: "Intel",
        module: "",
        library: "",
        kernel_driver: "",
        accepts: any,
    },
    KnownVendor {
        id: 0x1da3,
        name: "Habana",
        module: "habana",
        library: "HLML",
        kernel_driver: "habanalabs",
        accepts: any,
    },
    KnownVendor {
        id: 0x1d94,
        name: "Hygon",
        module: "",
        library: "",
        kernel_driver: "",
        accepts: any,
    },
    KnownVendor {
        id: 0x1ed5,
        name: "Moore Threads",
        module: "",
        library: "",
        kernel_driver: "",
        accepts: any,
    },
    KnownVendor {
        id: 0x1e36,
        name: "Enflame",
        module: "",
        library: "",
        kernel_driver: "",
        accepts: any,
    },
    KnownVendor {
        id: 0x1d22,
        name: "Kunlunxin",
        module: "",
        library: "",
        kernel_driver: "",
        accepts: any,
    },
];

pub fn by_id(id: u16) -> Option<&'static KnownVendor> {
    KNOWN.iter().find(|v| v.id == id)
}

/// The vendor a vendor module serves ("nvidia" → NVIDIA).
pub fn by_module(module: &str) -> Option<&'static KnownVendor> {
    KNOWN
        .iter()
        .find(|v| !v.module.is_empty() && v.module == module)
}
