//! The devices, described once: HLML's static facts per device, in HLML's
//! index order (which is neither the bus order nor the module ids on real
//! nodes), and the device nodes the driver exposes for it.

use super::hlml::{Handle, Hlml, CLOCK_SOC};
use crate::device_table::Described;
use crate::driver_error::fact;
use crate::log::log_at;
use crate::vendor::{Capabilities, DeviceInfo, DeviceProps};
use accel_common::{Error, Res};
use std::path::Path;

const MIB: u64 = 1 << 20;
/// Where sysfs is mounted (a test points it at a prepared tree).
pub const SYSFS_ENV: &str = "ACCELERATOR_HABANA_SYSFS";

pub struct Dev {
    pub info: DeviceInfo,
    pub handle: Handle,
}

impl Described for Dev {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

/// The device nodes of the device whose minor HLML gives: the accel
/// subsystem's `/dev/accel/accel<N>` and `accel_controlD<N>` (the driver
/// from kernel 6.2's accel class on), or the older habanalabs class's
/// `/dev/hl<N>` and `hl_controlD<N>`, as sysfs shows the class; none when
/// it shows neither.
pub fn nodes(minor: u32) -> Vec<String> {
    let root = std::env::var(SYSFS_ENV)
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "/sys".into());
    let class = Path::new(&root).join("class");
    if class.join(format!("accel/accel{minor}")).exists() {
        vec![
            format!("/dev/accel/accel{minor}"),
            format!("/dev/accel/accel_controlD{minor}"),
        ]
    } else if class.join(format!("habanalabs/hl{minor}")).exists() {
        vec![
            format!("/dev/hl{minor}"),
            format!("/dev/hl_controlD{minor}"),
        ]
    } else {
        Vec::new()
    }
}

/// Every device HLML reports, in its order. A device whose identity
/// cannot be read is left out (logged), not invented.
pub fn discover(hlml: &Hlml) -> Res<Vec<Dev>> {
    let driver_version = fact(hlml.driver_version()).unwrap_or_default();
    let mut out = Vec::new();
    for h in hlml.devices().map_err(Error::from)? {
        let uuid = match hlml.uuid(h) {
            Ok(u) if !u.is_empty() => u,
            Ok(_) => {
                log_at!(Warn, "habana: a device reports an empty UUID; left out");
                continue;
            }
            Err(e) => {
                log_at!(Warn, "habana: a device is left out: {e}");
                continue;
            }
        };
        out.push(describe(hlml, h, uuid, out.len(), &driver_version));
    }
    Ok(out)
}

fn describe(hlml: &Hlml, h: Handle, uuid: String, index: usize, driver: &str) -> Dev {
    let pci = fact(hlml.pci(h));
    // As HLML writes it (an 8-digit domain from 1.19): `pci::report`
    // normalizes it to match sysfs.
    let bus_id = pci.as_ref().map(|p| p.bus_id.clone()).unwrap_or_default();
    let minor = fact(hlml.minor(h));
    let module_id = fact(hlml.module_id(h));
    let memory = fact(hlml.memory(h));
    let nodes = minor.map(nodes).unwrap_or_default();
    let mut extra_props = vec![("pci.bus_id".into(), bus_id.clone())];
    if let Some(p) = &pci {
        extra_props.push((
            "habana.pci_device_id".into(),
            format!("{:#06x}", p.pci_device_id >> 16),
        ));
    }
    if let Some(s) = fact(hlml.serial(h)) {
        extra_props.push(("habana.serial".into(), s));
    }
    // What the Habana container runtime (HABANA_VISIBLE_DEVICES: the
    // accel index) and the frameworks (HABANA_VISIBLE_MODULES: the module
    // id) read to expose this device.
    if let Some(m) = minor {
        extra_props.push(("habana.visible_devices".into(), m.to_string()));
    }
    if let Some(m) = module_id {
        extra_props.push(("habana.module_id".into(), m.to_string()));
    }
    if let Some(control) = nodes.get(1) {
        extra_props.push(("habana.control_node".into(), control.clone()));
    }
    let info = DeviceInfo {
        uuid,
        vendor: "Habana".into(),
        // The board's model (HL-225: Gaudi 2; HL-325L: Gaudi 3).
        model: fact(hlml.name(h)).unwrap_or_default(),
        driver_version: driver.into(),
        firmware_version: fact(hlml.firmware(h)).unwrap_or_default(),
        index: index as i32,
        numa_node: fact(hlml.numa_node(h)).flatten().map_or(-1, |n| n as i32),
        total_memory_bytes: memory.map_or(0, |m| m.total),
        // HLML gives no count of TPCs or MMEs, nor a peak-FLOPS figure.
        total_compute_units: 0,
        max_tflops: 0.0,
        pcie_gen: fact(hlml.link_generation(h)).unwrap_or(0),
        pcie_width: fact(hlml.link_width(h)).unwrap_or(0),
        device_node: nodes.first().cloned().unwrap_or_default(),
        extra_props,
        props: DeviceProps {
            clock_ai_mhz: fact(hlml.max_clock(h, CLOCK_SOC)).unwrap_or(0),
            ecc_enabled: fact(hlml.ecc_enabled(h)).unwrap_or(false),
            // mW → W
            power_limit_w: fact(hlml.power_limit(h)).map_or(0, |mw| mw / 1000),
            ..DeviceProps::default()
        },
        caps: Capabilities {
            partitioning: false,
            // No hook enforces limits on Habana programs.
            soft_isolation: false,
            hard_isolation: false,
            snapshot: false,
            metrics: hlml.has_metrics(),
            max_partitions: 0,
            max_workers_per_device: 0,
        },
    };
    log_at!(
        Debug,
        "habana: device {index} = {} ({} MiB, pci {bus_id}, module {module_id:?}, node {:?}) uuid {}",
        info.model,
        info.total_memory_bytes / MIB,
        info.device_node,
        info.uuid
    );
    Dev { info, handle: h }
}
