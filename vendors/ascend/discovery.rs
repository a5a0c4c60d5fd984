//! Device discovery: DCMI's cards and the NPUs on each, in logical-ID order,
//! with UUIDs derived from each chip's die ID (never from enumeration order).

use super::chips::{self, ChipSpec};
use super::dcmi::{c_str, Dcmi, Feature, FREQ_AICORE_MAX, FREQ_HBM};
use crate::device_table::Described;
use crate::driver_error::fact;
use crate::log::log_at;
use crate::vendor::{Capabilities, DeviceInfo, DeviceProps};
use accel_common::Res;

const MIB: u64 = 1 << 20;

/// Where a device's memory figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemSource {
    /// dcmi_get_device_hbm_info (910-class chips).
    Hbm,
    /// dcmi_get_device_memory_info_v3 (DDR, 310P-class chips).
    Ddr,
    None,
}

/// One NPU: its static description and its DCMI address.
pub struct Dev {
    pub info: DeviceInfo,
    pub card: i32,
    pub device: i32,
    pub aicore: u32,
    pub mem: MemSource,
    pub spec: Option<&'static ChipSpec>,
}

impl Described for Dev {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

pub fn discover(dcmi: &Dcmi) -> Res<Vec<Dev>> {
    let driver_version = fact(dcmi.driver_version()).unwrap_or_default();
    let mut found = Vec::new();
    for card in dcmi.card_list()? {
        for device in 0..dcmi.device_num_in_card(card)? {
            let logic = fact(dcmi.logic_id(card, device));
            found.push((logic, card, device));
        }
    }
    // Index order: DCMI's logical IDs where it has them, else (card, device).
    found.sort_by_key(|&(logic, card, device)| (logic.unwrap_or(i32::MAX), card, device));
    let mut devs = Vec::with_capacity(found.len());
    for (index, (_, card, device)) in found.into_iter().enumerate() {
        devs.push(describe(dcmi, index, card, device, &driver_version)?);
    }
    Ok(devs)
}

fn uuid(dcmi: &Dcmi, card: i32, device: i32) -> String {
    if let Some(die) = fact(dcmi.die_id(card, device)) {
        if die.soc_die.iter().any(|&w| w != 0) {
            let hex: String = die.soc_die.iter().map(|w| format!("{w:08x}")).collect();
            return format!("ascend-{hex}");
        }
    }
    if let Some(p) = fact(dcmi.pcie_info(card, device)) {
        return format!(
            "ascend-pci-{:04x}-{:02x}-{:02x}-{:x}",
            p.domain, p.bdf_busid, p.bdf_deviceid, p.bdf_funcid
        );
    }
    log_at!(
        Warn,
        "ascend: card {card} device {device} has neither a die ID nor a PCIe address; \
         its UUID falls back to the driver's card/device IDs"
    );
    format!("ascend-card{card}-dev{device}")
}

/// The NPU's PCI address (DCMI's) and its NUMA node (from the PCI record,
/// `crate::pci`).
fn numa_node(dcmi: &Dcmi, card: i32, device: i32) -> (i32, Option<String>) {
    let Some(p) = fact(dcmi.pcie_info(card, device)) else {
        return (-1, None);
    };
    let bdf = format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        p.domain, p.bdf_busid, p.bdf_deviceid, p.bdf_funcid
    );
    let node = crate::pci::devices()
        .iter()
        .find(|d| d.address == bdf)
        .map_or(-1, |d| d.numa_node);
    (node, Some(bdf))
}

fn memory(dcmi: &Dcmi, card: i32, device: i32) -> (u64, MemSource) {
    if let Some(h) = fact(dcmi.hbm_info(card, device)) {
        if h.memory_size > 0 {
            return (h.memory_size * MIB, MemSource::Hbm);
        }
    }
    if let Some(m) = fact(dcmi.memory_info(card, device)) {
        if m.memory_size > 0 {
            return (m.memory_size * MIB, MemSource::Ddr);
        }
    }
    (0, MemSource::None)
}

fn describe(dcmi: &Dcmi, index: usize, card: i32, device: i32, driver: &str) -> Res<Dev> {
    let chip = dcmi.chip_info(card, device)?;
    let chip_type = c_str(&chip.chip_type);
    let chip_name = c_str(&chip.chip_name);
    let chip_ver = c_str(&chip.chip_ver);
    let npu_name = fact(dcmi.chip_info_v2(card, device))
        .map(|c| c_str(&c.npu_name))
        .unwrap_or_default();
    let model = format!(
        "{} {}",
        if chip_type.is_empty() {
            "Ascend"
        } else {
            &chip_type
        },
        if npu_name.is_empty() {
            &chip_name
        } else {
            &npu_name
        }
    );
    let (total_memory_bytes, mem) = memory(dcmi, card, device);
    let (numa_node, bdf) = numa_node(dcmi, card, device);
    let spec = chips::spec_for(&chip_name);
    let aicore = chip.aicore_cnt;
    let partitioning = spec.is_some() && dcmi.has(Feature::Vnpu) && aicore > 0;
    let metrics = dcmi.has(Feature::Power)
        || dcmi.has(Feature::Temperature)
        || dcmi.has(Feature::Utilization)
        || dcmi.has(Feature::Memory);
    let uuid = uuid(dcmi, card, device);
    log_at!(
        Debug,
        "ascend: device {index} = card {card} device {device} ({model}, {aicore} AI cores, \
         {} MiB, pci {bdf:?}) uuid {uuid}",
        total_memory_bytes / MIB
    );
    let info = DeviceInfo {
        uuid,
        vendor: "Huawei".into(),
        model,
        driver_version: driver.into(),
        firmware_version: String::new(),
        index: index as i32,
        numa_node,
        total_memory_bytes,
        total_compute_units: u64::from(aicore),
        max_tflops: 0.0,
        pcie_gen: 0,
        pcie_width: 0,
        // The NPU's node; DCMI numbers /dev/davinci<N> by the logical ID
        // the index follows (see docs/ascend.md).
        device_node: format!("/dev/davinci{index}"),
        extra_props: [
            ("dcmi.card".to_string(), card.to_string()),
            ("dcmi.device".into(), device.to_string()),
        ]
        .into_iter()
        .chain(bdf.map(|b| ("pci.bus_id".to_string(), b)))
        .collect(),
        props: DeviceProps {
            clock_ai_mhz: fact(dcmi.frequency(card, device, FREQ_AICORE_MAX)).unwrap_or(0),
            clock_mem_mhz: if mem == MemSource::Hbm {
                fact(dcmi.frequency(card, device, FREQ_HBM)).unwrap_or(0)
            } else {
                0
            },
            compute_capability: chip_ver,
            chip_type: chip_name,
            ..DeviceProps::default()
        },
        caps: Capabilities {
            partitioning,
            soft_isolation: false,
            hard_isolation: false,
            snapshot: false,
            metrics,
            max_partitions: if partitioning {
                chips::max_partitions(aicore, spec)
            } else {
                0
            },
            max_workers_per_device: 0,
        },
    };
    Ok(Dev {
        info,
        card,
        device,
        aicore,
        mem,
        spec,
    })
}
