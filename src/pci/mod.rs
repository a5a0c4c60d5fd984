//! PCI discovery over sysfs: every accelerator on the bus, whether or not a
//! vendor library sees it.
//!
//! `ACCELERATOR_SYSFS_ROOT` (default `/sys`) is the sysfs mount read, so the
//! tests run on fake trees. What counts as an accelerator: a function of a
//! known vendor (`vendors.rs`) whose class is display (0x03: VGA, 3D,
//! other display) or processing accelerator (0x12), except an integrated
//! GPU (a VGA function of Intel or AMD on a root bus, as a laptop's is).
//! `report` matches these records with a vendor library's devices.

pub mod report;
pub mod vendors;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use vendors::KnownVendor;

/// One PCIe link's state as the kernel reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkState {
    /// GT/s per lane; 0 when the kernel says "Unknown" or has no link.
    pub speed_gts: f64,
    pub width: u32,
}

impl LinkState {
    /// The PCIe generation of the speed (2.5 GT/s = 1 … 64 GT/s = 6).
    pub fn gen(&self) -> u32 {
        const GENS: [f64; 6] = [2.5, 5.0, 8.0, 16.0, 32.0, 64.0];
        GENS.iter()
            .position(|&g| (g - self.speed_gts).abs() < 0.01)
            .map_or(0, |i| i as u32 + 1)
    }
}

/// One accelerator function on the bus.
#[derive(Debug, Clone)]
pub struct PciDevice {
    /// "dddd:bb:dd.f", lowercase, as sysfs names it.
    pub address: String,
    pub vendor_id: u16,
    pub device_id: u16,
    /// 24-bit class code (0x030200 is a 3D controller).
    pub class: u32,
    pub vendor: &'static KnownVendor,
    /// -1 when the platform has no NUMA affinity for it.
    pub numa_node: i32,
    pub current_link: LinkState,
    pub max_link: LinkState,
    pub iommu_group: Option<u32>,
    /// The kernel driver bound to it, if any.
    pub driver: Option<String>,
    pub sriov_total_vfs: u32,
    pub sriov_num_vfs: u32,
    /// A virtual function's physical function.
    pub physfn: Option<String>,
}

impl PciDevice {
    pub fn driver_name(&self) -> &str {
        self.driver.as_deref().unwrap_or("")
    }
}

/// The sysfs mount read: `ACCELERATOR_SYSFS_ROOT` or `/sys`.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os("ACCELERATOR_SYSFS_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// The accelerators on this machine's bus, scanned once per process (the
/// bus changes only by hotplug, which restarts the hypervisor's discovery).
pub fn devices() -> &'static [PciDevice] {
    static SCAN: OnceLock<Vec<PciDevice>> = OnceLock::new();
    SCAN.get_or_init(|| scan(&sysfs_root()))
}

/// Every accelerator under `root`/bus/pci/devices, in address order. A
/// missing or unreadable tree is no devices (a container without /sys).
pub fn scan(root: &Path) -> Vec<PciDevice> {
    let Ok(entries) = fs::read_dir(root.join("bus/pci/devices")) else {
        return Vec::new();
    };
    let mut out: Vec<PciDevice> = entries
        .flatten()
        .filter_map(|e| read_device(&e.path(), &e.file_name().to_string_lossy()))
        .collect();
    out.sort_by(|a, b| a.address.cmp(&b.address));
    out
}

/// The record of one function, or None when it is not an accelerator.
fn read_device(dir: &Path, address: &str) -> Option<PciDevice> {
    let vendor_id = hex(dir, "vendor")? as u16;
    let device_id = hex(dir, "device")? as u16;
    let class = hex(dir, "class")?;
    let vendor = vendors::by_id(vendor_id).filter(|v| (v.accepts)(device_id))?;
    if !matches!(class >> 8, 0x0300 | 0x0302 | 0x0380 | 0x1200) {
        return None;
    }
    if class >> 8 == 0x0300 && matches!(vendor_id, 0x8086 | 0x1002) && on_root_bus(dir) {
        return None; // an integrated GPU
    }
    Some(PciDevice {
        address: address.to_ascii_lowercase(),
        vendor_id,
        device_id,
        class,
        vendor,
        numa_node: attr(dir, "numa_node")
            .and_then(|s| s.parse::<i32>().ok())
            .filter(|&n| n >= 0)
            .unwrap_or(-1),
        current_link: link(dir, "current"),
        max_link: link(dir, "max"),
        iommu_group: link_name(dir, "iommu_group").and_then(|g| g.parse().ok()),
        driver: link_name(dir, "driver"),
        sriov_total_vfs: attr(dir, "sriov_totalvfs")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        sriov_num_vfs: attr(dir, "sriov_numvfs")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        physfn: link_name(dir, "physfn"),
    })
}

fn attr(dir: &Path, name: &str) -> Option<String> {
    fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

/// "0x10de" → 0x10de.
fn hex(dir: &Path, name: &str) -> Option<u32> {
    let s = attr(dir, name)?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The last component of a symlink's target (driver → ../../bus/pci/drivers/nvidia).
fn link_name(dir: &Path, name: &str) -> Option<String> {
    let target = fs::read_link(dir.join(name)).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// `current_link_speed` reads "32.0 GT/s PCIe" (older kernels: "8 GT/s"),
/// or "Unknown"; the width a lane count.
fn link(dir: &Path, which: &str) -> LinkState {
    LinkState {
        speed_gts: attr(dir, &format!("{which}_link_speed"))
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0),
        width: attr(dir, &format!("{which}_link_width"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    }
}

/// Whether the function sits on a root bus: its device directory's parent
/// is the host bridge (`/sys/devices/pci0000:00`), not a port.
fn on_root_bus(dir: &Path) -> bool {
    fs::canonicalize(dir)
        .ok()
        .and_then(|p| {
            Some(
                p.parent()?
                    .file_name()?
                    .to_string_lossy()
                    .starts_with("pci"),
            )
        })
        .unwrap_or(false)
}

/// A PCI address in sysfs form: NVML's "00000000:3B:00.0" → "0000:3b:00.0".
pub fn normalize_address(bus_id: &str) -> Option<String> {
    let s = bus_id.trim();
    let (domain, rest) = match s.matches(':').count() {
        2 => s.split_once(':')?,
        1 => ("0", s),
        _ => return None,
    };
    let (bus, devfn) = rest.split_once(':')?;
    let (dev, func) = devfn.split_once('.')?;
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        u32::from_str_radix(domain, 16).ok()?,
        u8::from_str_radix(bus, 16).ok()?,
        u8::from_str_radix(dev, 16).ok()?,
        u8::from_str_radix(func, 16).ok()?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree as the kernel lays it out: functions under
    /// devices/pciDDDD:BB/…, linked from bus/pci/devices.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let root = std::env::temp_dir().join(format!("pci-test-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            Tree(root)
        }

        /// `path` is the chain below the host bridge, e.g.
        /// "pci0000:00/0000:00:01.0/0000:01:00.0".
        fn add(&self, path: &str, files: &[(&str, &str)], links: &[(&str, &str)]) {
            let dir = self.0.join("devices").join(path);
            fs::create_dir_all(&dir).unwrap();
            for (k, v) in files {
                fs::write(dir.join(k), format!("{v}\n")).unwrap();
            }
            for (k, target) in links {
                symlink(self.0.join(target), dir.join(k)).unwrap();
            }
            let name = path.rsplit('/').next().unwrap();
            symlink(&dir, self.0.join("bus/pci/devices").join(name)).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_every_field_of_an_accelerator() {
        let t = Tree::new("fields");
        t.add(
            "pci0000:00/0000:00:01.0/0000:18:00.0",
            &[
                ("vendor", "0x10de"),
                ("device", "0x2330"),
                ("class", "0x030200"),
                ("numa_node", "1"),
                ("current_link_speed", "16.0 GT/s PCIe"),
                ("current_link_width", "8"),
                ("max_link_speed", "32.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("sriov_totalvfs", "32"),
                ("sriov_numvfs", "2"),
            ],
            &[
                ("driver", "bus/pci/drivers/nvidia"),
                ("iommu_group", "kernel/iommu_groups/17"),
            ],
        );
        let d = scan(&t.0);
        assert_eq!(d.len(), 1);
        let d = &d[0];
        assert_eq!(d.address, "0000:18:00.0");
        assert_eq!(
            (d.vendor_id, d.device_id, d.class),
            (0x10de, 0x2330, 0x030200)
        );
        assert_eq!(d.vendor.name, "NVIDIA");
        assert_eq!(d.numa_node, 1);
        assert_eq!((d.current_link.gen(), d.current_link.width), (4, 8));
        assert_eq!((d.max_link.gen(), d.max_link.width), (5, 16));
        assert_eq!(d.iommu_group, Some(17));
        assert_eq!(d.driver.as_deref(), Some("nvidia"));
        assert_eq!((d.sriov_total_vfs, d.sriov_num_vfs), (32, 2));
        assert_eq!(d.physfn, None);
    }

    #[test]
    fn leaves_out_what_is_not_an_accelerator() {
        let t = Tree::new("filter");
        let dev = |v: &'static str, d: &'static str, c: &'static str| {
            [
                ("vendor", v),
                ("device", d),
                ("class", c),
                ("numa_node", "-1"),
            ]
        };
        // Laptop iGPU on the root bus, an NVSwitch (a bridge), an NVIDIA
        // audio function, a HiSilicon ZIP engine, a BMC's VGA.
        t.add(
            "pci0000:00/0000:00:02.0",
            &dev("0x8086", "0xa7a0", "0x030000"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:03.0/0000:07:00.0",
            &dev("0x10de", "0x22a3", "0x068000"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:03.0/0000:08:00.1",
            &dev("0x10de", "0x22ba", "0x040300"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:04.0/0000:09:00.0",
            &dev("0x19e5", "0xa250", "0x120000"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:05.0/0000:0a:00.0",
            &dev("0x1a03", "0x2000", "0x030000"),
            &[],
        );
        // What stays: an Ascend NPU, an MI300X, and an NVIDIA GPU a cloud
        // VM puts on its root bus (a 3D controller, not integrated).
        t.add(
            "pci0000:00/0000:00:06.0/0000:3b:00.0",
            &dev("0x19e5", "0xd801", "0x120000"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:07.0/0000:0c:00.0",
            &dev("0x1002", "0x74a1", "0x120000"),
            &[],
        );
        t.add(
            "pci0000:00/0000:00:04.0",
            &dev("0x10de", "0x20b0", "0x030200"),
            &[],
        );
        let got: Vec<String> = scan(&t.0).into_iter().map(|d| d.address).collect();
        assert_eq!(got, ["0000:00:04.0", "0000:0c:00.0", "0000:3b:00.0"]);
    }

    #[test]
    fn a_missing_tree_is_no_devices() {
        assert!(scan(Path::new("/nonexistent/sysfs")).is_empty());
    }

    #[test]
    fn unknown_link_speed_is_zero() {
        let t = Tree::new("link");
        t.add(
            "pci0000:00/0000:00:01.0/0000:01:00.0",
            &[
                ("vendor", "0x1002"),
                ("device", "0x74a1"),
                ("class", "0x120000"),
                ("current_link_speed", "Unknown"),
                ("current_link_width", "0"),
                ("max_link_speed", "8 GT/s"),
            ],
            &[("physfn", "devices/pci0000:00/0000:00:01.0/0000:00:09.0")],
        );
        let d = &scan(&t.0)[0];
        assert_eq!(d.current_link, LinkState::default());
        assert_eq!(d.max_link.gen(), 3);
        assert_eq!(d.numa_node, -1);
        assert_eq!(d.iommu_group, None);
        assert_eq!(d.driver, None);
        assert_eq!(d.physfn.as_deref(), Some("0000:00:09.0"));
    }

    #[test]
    fn bus_ids_normalize_to_the_sysfs_form() {
        assert_eq!(
            normalize_address("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            normalize_address("0000:86:00.0").as_deref(),
            Some("0000:86:00.0")
        );
        assert_eq!(
            normalize_address("3b:00.1").as_deref(),
            Some("0000:3b:00.1")
        );
        assert_eq!(normalize_address(""), None);
        assert_eq!(normalize_address("stub-device-0"), None);
    }
}
