//! Which vendor serves the calls, chosen once on first use.
//!
//! `ACCELERATOR_VENDOR` names one explicitly. Otherwise the real vendors
//! compiled in are tried, those whose hardware PCI shows first (then in
//! the order of `REAL`: nvidia, ascend, amd, habana); the first whose library loads and
//! lists devices wins. When none does, a vendor whose hardware PCI shows
//! stands in with no devices and the reason (what PCI shows, what is
//! missing), else one whose library loaded with no devices. The stub is
//! used only when it is named or is the only vendor compiled, and then a
//! machine whose PCI bus shows accelerators gets a warning: a production
//! build never silently reports simulated devices. docs/pci.md has the
//! table of cases.

use crate::log::log_at;
use crate::pci::{self, report, PciDevice};
use crate::vendor::{DeviceInfo, Vendor};
use accel_common::{Error, Res};
use std::sync::OnceLock;

type Opener = fn() -> Res<Box<dyn Vendor>>;

/// Real vendors in order of preference.
const REAL: &[(&str, Opener)] = &[
    #[cfg(feature = "nvidia")]
    ("nvidia", crate::nvidia::open),
    #[cfg(feature = "ascend")]
    ("ascend", crate::ascend::open),
    #[cfg(feature = "amd")]
    ("amd", crate::amd::open),
    #[cfg(feature = "habana")]
    ("habana", crate::habana::open),
];

#[cfg(feature = "stub")]
const STUB: Option<Opener> = Some(crate::stub::open);
#[cfg(not(feature = "stub"))]
const STUB: Option<Opener> = None;

/// The chosen vendor and, for one standing in without its driver, why.
struct Active {
    vendor: Box<dyn Vendor>,
    why: Option<String>,
}

static ACTIVE: OnceLock<Res<Active>> = OnceLock::new();

fn active() -> Res<&'static Active> {
    match ACTIVE.get_or_init(choose) {
        Ok(a) => Ok(a),
        Err(e) => Err(e.clone()),
    }
}

/// The active vendor, or the configuration error that prevents one.
pub fn vendor() -> Res<&'static dyn Vendor> {
    active().map(|a| a.vendor.as_ref())
}

/// The active vendor's devices beside PCI's accelerators (`probe --pci`).
pub fn pci_rows() -> Res<Vec<report::Row>> {
    let a = active()?;
    let devices = a.vendor.devices()?;
    Ok(report::rows(&view(a, &devices), pci::devices()))
}

/// One line: the vendor, its devices, what PCI shows, mismatches.
pub fn status() -> Res<String> {
    let a = active()?;
    let devices = a.vendor.devices()?;
    Ok(report::status(&view(a, &devices), pci::devices()))
}

fn view<'a>(a: &'a Active, devices: &'a [DeviceInfo]) -> report::Active<'a> {
    report::Active {
        module: a.vendor.name(),
        devices,
        why: a.why.as_deref(),
    }
}

fn compiled() -> Vec<&'static str> {
    let mut names: Vec<&str> = REAL.iter().map(|(n, _)| *n).collect();
    if STUB.is_some() {
        names.push("stub");
    }
    names
}

/// Whether PCI shows hardware of the vendor module `name`.
fn on_pci(pci: &[PciDevice], name: &str) -> bool {
    pci.iter().any(|p| p.vendor.module == name)
}

fn choose() -> Res<Active> {
    let pci = pci::devices();
    let chosen = match std::env::var("ACCELERATOR_VENDOR") {
        Ok(name) if !name.is_empty() => open_named(&name, pci)?,
        _ => open_auto(pci)?,
    };
    warn_mismatches(&chosen, pci);
    Ok(chosen)
}

fn found(vendor: Box<dyn Vendor>) -> Active {
    Active { vendor, why: None }
}

fn open_auto(pci: &[PciDevice]) -> Res<Active> {
    if REAL.is_empty() {
        let open = STUB.ok_or_else(|| Error::Internal("no vendor compiled in".into()))?;
        return open().map(found);
    }
    let names: Vec<&'static str> = REAL.iter().map(|(n, _)| *n).collect();
    let mut loaded_empty = None;
    let mut failed: Vec<(&'static str, String)> = Vec::new();
    for name in try_order(&names, pci) {
        let Some(&(_, open)) = REAL.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        match open() {
            Ok(v) => match v.devices() {
                Ok(d) if !d.is_empty() => return Ok(found(v)),
                Ok(_) => {
                    log_at!(Info, "vendor {name}: driver loaded but reports no devices");
                    loaded_empty.get_or_insert(v);
                }
                Err(e) => failed.push((name, e.to_string())),
            },
            Err(e) => failed.push((name, e.to_string())),
        }
    }
    match without_devices(&failed, loaded_empty.is_some(), names[0], pci) {
        Fallback::Loaded => {
            Ok(found(loaded_empty.ok_or_else(|| {
                Error::Internal("no loaded vendor to fall back on".into())
            })?))
        }
        Fallback::Absent(name, why) => Ok(absent(name, &why, pci)),
    }
}

/// The order vendors are tried in: those whose hardware PCI shows first,
/// then the rest, each group in the compiled order.
fn try_order(names: &[&'static str], pci: &[PciDevice]) -> Vec<&'static str> {
    let mut order = names.to_vec();
    order.sort_by_key(|name| !on_pci(pci, name)); // stable
    order
}

#[derive(Debug, PartialEq)]
enum Fallback {
    /// The vendor whose library loaded and listed nothing.
    Loaded,
    /// A vendor without its driver, and why.
    Absent(&'static str, String),
}

/// When no vendor lists devices: a vendor whose hardware PCI shows but
/// whose library failed explains itself, rather than a loaded vendor with
/// nothing to show; else the loaded one; else the first that failed.
fn without_devices(
    failed: &[(&'static str, String)],
    loaded: bool,
    first: &'static str,
    pci: &[PciDevice],
) -> Fallback {
    if let Some((name, why)) = failed.iter().find(|(n, _)| on_pci(pci, n)) {
        return Fallback::Absent(name, why.clone());
    }
    if loaded {
        return Fallback::Loaded;
    }
    let (name, why) = failed
        .first()
        .cloned()
        .unwrap_or((first, "no devices".into()));
    Fallback::Absent(name, why)
}

fn open_named(name: &str, pci: &[PciDevice]) -> Res<Active> {
    if let Some(&(real, open)) = REAL.iter().find(|(n, _)| *n == name) {
        return Ok(match open() {
            Ok(v) => found(v),
            Err(e) => absent(real, &e.to_string(), pci),
        });
    }
    match (name, STUB) {
        ("stub", Some(open)) => open().map(found),
        _ => Err(Error::InvalidParam(format!(
            "ACCELERATOR_VENDOR={name:?} is not compiled into this library (available: {}); {}",
            compiled().join(", "),
            report::summary(pci)
        ))),
    }
}

/// A vendor without its driver: no devices, and the reason, with what
/// PCI shows, in every error it returns.
fn absent(name: &'static str, why: &str, pci: &[PciDevice]) -> Active {
    let explained = report::explain(name, why, pci);
    log_at!(Warn, "vendor {explained}");
    Active {
        vendor: Box::new(Absent {
            name,
            why: explained,
        }),
        why: Some(why.to_string()),
    }
}

/// Say once, at the choice, what PCI shows that the vendor does not list.
fn warn_mismatches(a: &Active, pci: &[PciDevice]) {
    let Ok(devices) = a.vendor.devices() else {
        return;
    };
    if a.vendor.name() == "stub" && !pci.is_empty() {
        log_at!(
            Warn,
            "the stub's simulated devices are reported, but {}",
            report::summary(pci)
        );
        return;
    }
    for r in report::rows(&view(a, &devices), pci) {
        if !r.state.mismatch() || a.why.is_some() {
            continue;
        }
        match &r.pci {
            Some(p) => log_at!(Warn, "pci {}: {}; fix: {}", p.address, r.note, r.fix),
            // A sysfs without the device (a container's) hides nothing.
            None => log_at!(Info, "pci: {}; fix: {}", r.note, r.fix),
        }
    }
}

/// Stands in for a vendor whose driver is missing: no devices, so every
/// device-addressed call is NOT_FOUND and nothing is invented.
struct Absent {
    name: &'static str,
    why: String,
}

impl Vendor for Absent {
    fn name(&self) -> &'static str {
        self.name
    }
    fn devices(&self) -> Res<Vec<crate::vendor::DeviceInfo>> {
        Ok(Vec::new())
    }
    fn related_devices(&self, index: usize) -> Res<Vec<crate::vendor::Link>> {
        Err(self.no_device(index))
    }
    fn partition_templates(&self, index: usize) -> Res<Vec<crate::vendor::Template>> {
        Err(self.no_device(index))
    }
    fn topology(&self, indices: &[usize]) -> Res<crate::vendor::Topology> {
        Err(self.no_device(indices.first().copied().unwrap_or(0)))
    }
    fn assign_partition(&self, _: &str, uuid: &str) -> Res<crate::vendor::Partition> {
        Err(self.no_uuid(uuid))
    }
    fn remove_partition(&self, _: &str, uuid: &str) -> Res<()> {
        Err(self.no_uuid(uuid))
    }
    fn snapshot(&self, _: &[i32], _: &str) -> Res<()> {
        Err(Error::NotSupported(self.why.clone()))
    }
    fn resume(&self, _: &[i32], _: &str) -> Res<()> {
        Err(Error::NotSupported(self.why.clone()))
    }
    fn process_compute(
        &self,
        _: &crate::vendor::ProcessQuery,
    ) -> Res<Vec<crate::vendor::ProcessCompute>> {
        Ok(Vec::new())
    }
    fn process_memory(
        &self,
        _: &crate::vendor::ProcessQuery,
    ) -> Res<Vec<crate::vendor::ProcessMemory>> {
        Ok(Vec::new())
    }
    fn metrics(&self, uuid: &str) -> Res<crate::vendor::Metrics> {
        Err(self.no_uuid(uuid))
    }
    fn extended_metrics(&self, uuid: &str) -> Res<crate::vendor::ExtendedMetrics> {
        Err(self.no_uuid(uuid))
    }
    fn partition_metrics(&self, uuid: &str) -> Res<crate::vendor::Metrics> {
        Err(self.no_uuid(uuid))
    }
    fn mount_libs(&self) -> Res<Vec<crate::vendor::Mount>> {
        Ok(Vec::new())
    }
}

impl Absent {
    fn no_device(&self, index: usize) -> Error {
        Error::NotFound(format!("device index {index}: no devices ({})", self.why))
    }

    fn no_uuid(&self, uuid: &str) -> Error {
        Error::NotFound(format!("device {uuid:?}: no devices ({})", self.why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::vendors;

    fn on_bus(vendor: u16) -> PciDevice {
        PciDevice {
            address: "0000:3b:00.0".into(),
            vendor_id: vendor,
            device_id: 0xd801,
            class: 0x120000,
            vendor: vendors::by_id(vendor).unwrap(),
            numa_node: 0,
            current_link: Default::default(),
            max_link: Default::default(),
            iommu_group: None,
            driver: None,
            sriov_total_vfs: 0,
            sriov_num_vfs: 0,
            physfn: None,
        }
    }

    #[test]
    fn vendors_whose_hardware_is_on_the_bus_are_tried_first() {
        let names = ["nvidia", "ascend", "amd"];
        assert_eq!(try_order(&names, &[]), names);
        assert_eq!(
            try_order(&names, &[on_bus(0x19e5)]),
            ["ascend", "nvidia", "amd"]
        );
        assert_eq!(
            try_order(&names, &[on_bus(0x1002), on_bus(0x10de)]),
            ["nvidia", "amd", "ascend"]
        );
    }

    #[test]
    fn without_devices_the_hardware_on_the_bus_explains_itself() {
        let failed = [
            ("nvidia", "no NVML".to_string()),
            ("ascend", "no DCMI".to_string()),
        ];
        // Huawei NPUs on the bus: DCMI's failure is the answer, not NVIDIA's.
        assert_eq!(
            without_devices(&failed, false, "nvidia", &[on_bus(0x19e5)]),
            Fallback::Absent("ascend", "no DCMI".into())
        );
        // ... even when another vendor's library loaded with nothing to show.
        assert_eq!(
            without_devices(&failed[1..], true, "nvidia", &[on_bus(0x19e5)]),
            Fallback::Absent("ascend", "no DCMI".into())
        );
        // Nothing on the bus: a library that loaded wins, else the first failure.
        assert_eq!(
            without_devices(&failed[1..], true, "nvidia", &[]),
            Fallback::Loaded
        );
        assert_eq!(
            without_devices(&failed, false, "nvidia", &[]),
            Fallback::Absent("nvidia", "no NVML".into())
        );
        assert_eq!(
            without_devices(&[], false, "nvidia", &[]),
            Fallback::Absent("nvidia", "no devices".into())
        );
    }
}
