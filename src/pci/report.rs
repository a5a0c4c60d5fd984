//! The two views side by side: the accelerators PCI shows and the devices
//! the active vendor lists, matched by bus id, with what each mismatch
//! means and the one thing to do about it.

use super::{normalize_address, vendors, PciDevice};
use crate::vendor::DeviceInfo;

/// Where a row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// PCI shows it and the vendor lists it.
    Listed,
    /// The active vendor's hardware, not listed by it (driver missing,
    /// unbound, another driver bound).
    NotListed,
    /// Bound to vfio-pci: a VM's, not the host's.
    PassedThrough,
    /// Hardware the active vendor does not drive.
    OtherVendor,
    /// Listed by the vendor, with no PCI record under the sysfs root.
    NoPciRecord,
    /// The stub's simulated devices: no hardware to match.
    Simulated,
}

impl State {
    pub fn mismatch(self) -> bool {
        !matches!(self, State::Listed | State::Simulated)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Listed => "listed",
            State::NotListed => "not-listed",
            State::PassedThrough => "passed-through",
            State::OtherVendor => "other-vendor",
            State::NoPciRecord => "no-pci-record",
            State::Simulated => "simulated",
        }
    }
}

/// One row of the joined view.
#[derive(Debug, Clone)]
pub struct Row {
    pub pci: Option<PciDevice>,
    /// The vendor's device index and UUID.
    pub device: Option<(i32, String)>,
    pub state: State,
    /// What the row is, in one line.
    pub note: String,
    /// What to do, in one line ("" when nothing).
    pub fix: String,
}

/// A vendor device's PCI address, from the `pci.bus_id` property its
/// vendor module sets.
pub fn bus_id(d: &DeviceInfo) -> Option<String> {
    d.extra_props
        .iter()
        .find(|(k, _)| k == "pci.bus_id")
        .and_then(|(_, v)| normalize_address(v))
}

/// The vendor-independent status of the active vendor `module` (`why` is
/// the reason it has no driver, when it has none).
pub struct Active<'a> {
    pub module: &'a str,
    pub devices: &'a [DeviceInfo],
    pub why: Option<&'a str>,
}

/// Fill what a vendor left unknown from its device's PCI record, and add
/// the record as `pci.*` properties (docs/pci.md): the only way the fixed
/// ABIs carry it (v1: numaNode, pcieGen, pcieWidth; v2: properties).
pub fn enrich(devices: &mut [DeviceInfo], pci: &[PciDevice]) {
    for d in devices {
        let Some(p) = bus_id(d).and_then(|a| pci.iter().find(|p| p.address == a)) else {
            continue;
        };
        if d.numa_node < 0 {
            d.numa_node = p.numa_node;
        }
        if d.pcie_gen == 0 {
            d.pcie_gen = p.max_link.gen();
        }
        if d.pcie_width == 0 {
            d.pcie_width = p.max_link.width;
        }
        d.extra_props.extend(props(p));
    }
}

/// A PCI record as property keys and values.
pub fn props(p: &PciDevice) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "pci.vendor_id".to_string(),
            format!("0x{:04x}", p.vendor_id),
        ),
        ("pci.device_id".into(), format!("0x{:04x}", p.device_id)),
        ("pci.class".into(), format!("0x{:06x}", p.class)),
    ];
    if let Some(driver) = &p.driver {
        out.push(("pci.driver".into(), driver.clone()));
    }
    let mut link = |k: &str, l: &super::LinkState| {
        if l.width > 0 {
            out.push((k.into(), format!("{} GT/s x{}", l.speed_gts, l.width)));
        }
    };
    link("pci.link.current", &p.current_link);
    link("pci.link.max", &p.max_link);
    if let Some(g) = p.iommu_group {
        out.push(("pci.iommu_group".into(), g.to_string()));
    }
    if p.sriov_total_vfs > 0 {
        out.push(("pci.sriov.total_vfs".into(), p.sriov_total_vfs.to_string()));
        out.push(("pci.sriov.num_vfs".into(), p.sriov_num_vfs.to_string()));
    }
    out
}

/// Join the two views: a row per PCI accelerator (in address order), then
/// a row per vendor device PCI does not show.
pub fn rows(active: &Active, pci: &[PciDevice]) -> Vec<Row> {
    let ids: Vec<Option<String>> = active.devices.iter().map(bus_id).collect();
    let mut out = Vec::new();
    for p in pci {
        let found = ids
            .iter()
            .position(|b| b.as_deref() == Some(p.address.as_str()));
        let (state, note, fix) = match found {
            Some(_) => (
                State::Listed,
                format!("listed by {}", active.module),
                String::new(),
            ),
            None => unlisted(active, p),
        };
        out.push(Row {
            pci: Some(p.clone()),
            device: found.map(|i| (active.devices[i].index, active.devices[i].uuid.clone())),
            state,
            note,
            fix,
        });
    }
    for (d, id) in active.devices.iter().zip(&ids) {
        if id
            .as_ref()
            .is_some_and(|a| pci.iter().any(|p| &p.address == a))
        {
            continue;
        }
        let (state, note, fix) = if active.module == "stub" {
            (
                State::Simulated,
                "simulated by the stub".into(),
                String::new(),
            )
        } else {
            let at = id.as_deref().unwrap_or("(no bus id from the driver)");
            (
                State::NoPciRecord,
                format!(
                    "listed by {} at {at}, but {} has no accelerator there",
                    active.module,
                    super::sysfs_root().join("bus/pci/devices").display()
                ),
                "in a container, mount the host's /sys read-only (or set ACCELERATOR_SYSFS_ROOT)"
                    .into(),
            )
        };
        out.push(Row {
            pci: None,
            device: Some((d.index, d.uuid.clone())),
            state,
            note,
            fix,
        });
    }
    out
}

/// Why the active vendor does not list a PCI accelerator, and the fix.
fn unlisted(active: &Active, p: &PciDevice) -> (State, String, String) {
    let a = &p.address;
    let v = p.vendor;
    if v.module != active.module {
        let fix = if v.module.is_empty() {
            format!("no vendor module drives {} devices yet", v.name)
        } else {
            format!(
                "load libaccelerator_{m}.so (or a build with the {m} feature)",
                m = v.module
            )
        };
        let note = format!("a {} device; this library serves {}", v.name, active.module);
        return (State::OtherVendor, note, fix);
    }
    let driver = p.driver_name();
    let want = v.kernel_driver;
    if driver == "vfio-pci" {
        let of = p
            .physfn
            .as_deref()
            .map(|pf| format!(" (a VF of {pf})"))
            .unwrap_or_default();
        return (
            State::PassedThrough,
            format!(
                "bound to vfio-pci{of}: passed through to a VM, not seen by {}",
                v.library
            ),
            format!(
                "nothing if a VM uses it; else: echo {a} > /sys/bus/pci/drivers/vfio-pci/unbind; \
                 echo {a} > /sys/bus/pci/drivers/{want}/bind"
            ),
        );
    }
    let (note, fix) = if driver.is_empty() {
        (
            "no kernel driver bound".to_string(),
            format!("load the {want} kernel driver (modprobe {want}) or bind it to {a}"),
        )
    } else if driver != want && !want.is_empty() {
        (
            format!("bound to {driver}, not {want}"),
            format!(
                "echo {a} > /sys/bus/pci/drivers/{driver}/unbind; \
                 echo {a} > /sys/bus/pci/drivers/{want}/bind"
            ),
        )
    } else if let Some(why) = active.why {
        (
            format!("bound to {driver}, but {} is not usable: {why}", v.library),
            format!(
                "install {} or point the library at it (see docs/pci.md)",
                v.library
            ),
        )
    } else {
        (
            format!("bound to {driver}, but {} does not list it", v.library),
            format!("check the kernel log for {a} (dmesg): the device may have failed"),
        )
    };
    (State::NotListed, note, fix)
}

/// "2 NVIDIA devices at 0000:3b:00.0, 0000:86:00.0, bound to vfio-pci":
/// PCI's devices of one vendor, grouped by the driver bound.
pub fn describe(devs: &[&PciDevice]) -> String {
    let Some(first) = devs.first() else {
        return String::new();
    };
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for d in devs {
        let driver = d.driver.as_deref().unwrap_or("no driver");
        match groups.iter_mut().find(|(k, _)| *k == driver) {
            Some((_, list)) => list.push(&d.address),
            None => groups.push((driver, vec![&d.address])),
        }
    }
    let n = devs.len();
    let parts: Vec<String> = groups
        .iter()
        .map(|(driver, list)| {
            let bound = if *driver == "no driver" {
                "with no driver bound".to_string()
            } else {
                format!("bound to {driver}")
            };
            format!("at {}, {bound}", list.join(", "))
        })
        .collect();
    format!(
        "{n} {} device{} {}",
        first.vendor.name,
        if n == 1 { "" } else { "s" },
        parts.join("; ")
    )
}

/// What PCI shows, vendor by vendor ("8 AMD devices at …, bound to amdgpu").
pub fn summary(pci: &[PciDevice]) -> String {
    let mut out: Vec<String> = Vec::new();
    for v in vendors::KNOWN {
        let mine: Vec<&PciDevice> = pci.iter().filter(|p| p.vendor.id == v.id).collect();
        if !mine.is_empty() {
            out.push(describe(&mine));
        }
    }
    if out.is_empty() {
        "PCI shows no accelerators".into()
    } else {
        format!("PCI shows {}", out.join("; "))
    }
}

/// The error of a vendor whose library cannot be loaded or initialized:
/// the reason, then what PCI shows of its hardware and what is missing.
pub fn explain(module: &str, why: &str, pci: &[PciDevice]) -> String {
    let Some(v) = vendors::by_module(module) else {
        return format!("{module}: {why}; {}", summary(pci));
    };
    let mine: Vec<&PciDevice> = pci.iter().filter(|p| p.vendor.id == v.id).collect();
    if mine.is_empty() {
        return format!(
            "{module}: {why}; PCI shows no {} devices; {}",
            v.name,
            summary(pci)
        );
    }
    let mut msg = format!("{module}: {why}; PCI shows {}", describe(&mine));
    if !v.kernel_driver.is_empty() && !mine.iter().any(|p| p.driver_name() == v.kernel_driver) {
        msg.push_str(&format!("; the {} driver is not in use", v.name));
    }
    msg
}

/// One line on the active vendor: what it lists, what PCI shows, and how
/// many of PCI's accelerators it does not list.
pub fn status(active: &Active, pci: &[PciDevice]) -> String {
    let rows = rows(active, pci);
    let mismatched = rows.iter().filter(|r| r.state.mismatch()).count();
    let head = match active.why {
        Some(why) => explain(active.module, why, pci),
        None => format!(
            "{}: {} device{}; {}",
            active.module,
            active.devices.len(),
            if active.devices.len() == 1 { "" } else { "s" },
            summary(pci)
        ),
    };
    if mismatched == 0 {
        head
    } else {
        format!("{head}; {mismatched} mismatch(es): run `probe --pci`")
    }
}

#[cfg(test)]
mod tests {
    use super::super::LinkState;
    use super::*;

    fn gpu(address: &str, vendor: u16, driver: Option<&str>) -> PciDevice {
        PciDevice {
            address: address.into(),
            vendor_id: vendor,
            device_id: 0x2330,
            class: 0x030200,
            vendor: vendors::by_id(vendor).unwrap(),
            numa_node: 0,
            current_link: LinkState::default(),
            max_link: LinkState::default(),
            iommu_group: None,
            driver: driver.map(Into::into),
            sriov_total_vfs: 0,
            sriov_num_vfs: 0,
            physfn: None,
        }
    }

    fn listed(index: i32, bus: &str) -> DeviceInfo {
        DeviceInfo {
            uuid: format!("GPU-{index}"),
            index,
            extra_props: vec![("pci.bus_id".into(), bus.into())],
            ..DeviceInfo::default()
        }
    }

    #[test]
    fn the_error_names_the_devices_and_what_is_missing() {
        let pci = [
            gpu("0000:3b:00.0", 0x10de, Some("vfio-pci")),
            gpu("0000:86:00.0", 0x10de, Some("vfio-pci")),
        ];
        assert_eq!(
            explain("nvidia", "NVML not usable", &pci),
            "nvidia: NVML not usable; PCI shows 2 NVIDIA devices at 0000:3b:00.0, \
             0000:86:00.0, bound to vfio-pci; the NVIDIA driver is not in use"
        );
        assert_eq!(
            explain("ascend", "DCMI not usable", &pci),
            "ascend: DCMI not usable; PCI shows no Huawei devices; PCI shows 2 NVIDIA devices \
             at 0000:3b:00.0, 0000:86:00.0, bound to vfio-pci"
        );
    }

    #[test]
    fn rows_match_by_bus_id_and_keep_the_unmatched() {
        let pci = [
            gpu("0000:18:00.0", 0x10de, Some("nvidia")),
            gpu("0000:3b:00.0", 0x10de, Some("nvidia")),
            gpu("0000:86:00.0", 0x10de, Some("vfio-pci")),
            gpu("0000:c1:00.0", 0x1002, Some("amdgpu")),
        ];
        let devices = [listed(0, "00000000:18:00.0"), listed(1, "00000000:AF:00.0")];
        let active = Active {
            module: "nvidia",
            devices: &devices,
            why: None,
        };
        let rows = rows(&active, &pci);
        let states: Vec<State> = rows.iter().map(|r| r.state).collect();
        assert_eq!(
            states,
            [
                State::Listed,
                State::NotListed,
                State::PassedThrough,
                State::OtherVendor,
                State::NoPciRecord
            ]
        );
        assert_eq!(rows[0].device, Some((0, "GPU-0".into())));
        assert!(
            rows[1].note.contains("NVML does not list it"),
            "{}",
            rows[1].note
        );
        assert!(
            rows[2].fix.starts_with("nothing if a VM uses it"),
            "{}",
            rows[2].fix
        );
        assert!(
            rows[3].fix.contains("libaccelerator_amd.so"),
            "{}",
            rows[3].fix
        );
        assert!(rows[4].note.contains("0000:af:00.0"), "{}", rows[4].note);
        assert!(rows
            .iter()
            .all(|r| !r.fix.contains('\n') && !r.note.contains('\n')));
    }
}
