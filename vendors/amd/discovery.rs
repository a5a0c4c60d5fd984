//! The devices, described once: AMD SMI's static facts per GPU, plus the
//! two things the kernel publishes beside the PCI device that AMD SMI
//! does not return (the DRM render node and the compute partition
//! modes the device supports; docs/amd.md says why).

use super::partition::Modes;
use super::smi::{Handle, Smi};
use crate::cbuf::{known_u32, known_u64};
use crate::device_table::Described;
use crate::driver_error::fact;
use crate::log::log_at;
use crate::vendor::{Capabilities, DeviceInfo, DeviceProps};
use accel_common::{Error, Res};
use std::path::PathBuf;

const MIB: u64 = 1 << 20;
/// Where sysfs is mounted (a test points it at a prepared tree).
pub const SYSFS_ENV: &str = "ACCELERATOR_AMD_SYSFS";

pub struct Dev {
    pub info: DeviceInfo,
    pub handle: Handle,
    pub modes: Modes,
}

impl Described for Dev {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

/// amdsmi_bdf_t as the kernel names the PCI device.
pub fn bdf_string(bdf: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        bdf >> 16,
        (bdf >> 8) & 0xff,
        (bdf >> 3) & 0x1f,
        bdf & 0x7
    )
}

/// The PCI device's sysfs directory.
pub fn sysfs_dir(bdf: &str) -> PathBuf {
    let root = std::env::var(SYSFS_ENV)
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "/sys".into());
    PathBuf::from(root).join("bus/pci/devices").join(bdf)
}

/// `/dev/dri/renderD<N>` of the device, from its `drm/` directory.
fn render_node(bdf: &str) -> String {
    let Ok(entries) = std::fs::read_dir(sysfs_dir(bdf).join("drm")) else {
        return String::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n.starts_with("renderD") && n[7..].parse::<u32>().is_ok())
        .map(|n| format!("/dev/dri/{n}"))
        .unwrap_or_default()
}

fn vram_type(t: u32) -> &'static str {
    match t {
        1 => "HBM",
        2 => "HBM2",
        3 => "HBM2E",
        4 => "HBM3",
        10 => "DDR2",
        11 => "DDR3",
        12 => "DDR4",
        17..=23 => "GDDR",
        _ => "",
    }
}

/// Every AMD GPU AMD SMI reports, in its order. A GPU whose identity
/// cannot be read is left out (logged), not invented.
pub fn discover(smi: &Smi) -> Res<Vec<Dev>> {
    let mut out = Vec::new();
    for h in smi.gpus().map_err(Error::from)? {
        let uuid = match smi.uuid(h) {
            Ok(u) if !u.is_empty() => u,
            Ok(_) => {
                log_at!(Warn, "amd: a GPU reports an empty UUID; left out");
                continue;
            }
            Err(e) => {
                log_at!(Warn, "amd: a GPU is left out: {e}");
                continue;
            }
        };
        out.push(describe(smi, h, uuid, out.len()));
    }
    Ok(out)
}

/// A clock domain's maximum (MHz), 0 where unknown.
fn max_clock(smi: &Smi, h: Handle, domain: u32) -> u32 {
    fact(smi.clock(h, domain))
        .and_then(|c| known_u32(c.max_clk))
        .unwrap_or(0)
}

fn describe(smi: &Smi, h: Handle, uuid: String, index: usize) -> Dev {
    let asic = fact(smi.asic_info(h));
    let vram = fact(smi.vram_info(h));
    let pcie = fact(smi.pcie_info(h));
    let bdf = fact(smi.bdf(h)).map(bdf_string).unwrap_or_default();
    let cus = asic.as_ref().and_then(|a| a.compute_units).unwrap_or(0);
    let total_memory_bytes = vram
        .as_ref()
        .and_then(|v| known_u64(v.size_mb))
        .map_or(0, |mb| mb.saturating_mul(MIB));
    let model = asic
        .as_ref()
        .map(|a| a.market_name.clone())
        .unwrap_or_default();
    let numa_node = fact(smi.numa_node(h)).unwrap_or(-1);
    let modes = Modes::read(smi, h, &bdf);
    let metrics = smi.has_metrics();
    let partitioning = !modes.is_empty();

    let mut extra_props = vec![
        ("pci.bus_id".into(), bdf.clone()),
        (
            "amd.vram_type".into(),
            vram.as_ref()
                .map(|v| vram_type(v.vram_type))
                .unwrap_or("")
                .into(),
        ),
        // What the ROCm container toolkit reads to expose this GPU.
        ("amd.visible_devices".into(), index.to_string()),
    ];
    if let Some(a) = &asic {
        extra_props.push(("amd.device_id".into(), format!("{:#06x}", a.device_id)));
    }
    if let Some(m) = &modes.current_compute {
        extra_props.push(("amd.compute_partition".into(), m.clone()));
    }
    if let Some(m) = &modes.current_memory {
        extra_props.push(("amd.memory_partition".into(), m.clone()));
    }
    let info = DeviceInfo {
        uuid,
        vendor: "AMD".into(),
        model,
        driver_version: fact(smi.driver_version(h)).unwrap_or_default(),
        firmware_version: fact(smi.vbios_version(h)).unwrap_or_default(),
        index: index as i32,
        numa_node,
        total_memory_bytes,
        total_compute_units: u64::from(cus),
        // AMD SMI gives no peak-FLOPS figure.
        max_tflops: 0.0,
        pcie_gen: pcie
            .as_ref()
            .map_or(0, |p| p.pcie_static.pcie_interface_version),
        pcie_width: pcie
            .as_ref()
            .map_or(0, |p| u32::from(p.pcie_static.max_pcie_width)),
        device_node: render_node(&bdf),
        extra_props,
        props: DeviceProps {
            clock_graphics_mhz: max_clock(smi, h, super::smi::CLK_GFX),
            clock_mem_mhz: max_clock(smi, h, super::smi::CLK_MEM),
            ecc_enabled: fact(smi.ecc_enabled(h)).is_some_and(|blocks| blocks != 0),
            // µW → W
            power_limit_w: fact(smi.power_cap(h))
                .and_then(|c| known_u64(c.power_cap))
                .map_or(0, |uw| (uw / 1_000_000) as u32),
            temperature_threshold_c: fact(smi.temperature(h, super::smi::TEMP_CRITICAL))
                .map_or(0, |t| t.clamp(0, i64::from(u32::MAX)) as u32),
            ..DeviceProps::default()
        },
        caps: Capabilities {
            partitioning,
            soft_isolation: false,
            hard_isolation: false,
            snapshot: false,
            metrics,
            max_partitions: modes.max_partitions(),
            max_workers_per_device: 0,
        },
    };
    log_at!(
        Debug,
        "amd: device {index} = {} ({cus} CUs, {} MiB, pci {bdf}, node {:?}) uuid {}",
        info.model,
        total_memory_bytes / MIB,
        info.device_node,
        info.uuid
    );
    Dev {
        info,
        handle: h,
        modes,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bdf_as_the_kernel_names_it() {
        // amdsmi_bdf_t: function bits 0-2, device 3-7, bus 8-15, domain 16-63.
        assert_eq!(super::bdf_string(0x0c << 8), "0000:0c:00.0");
        assert_eq!(
            super::bdf_string((1 << 16) | (0xc1 << 8) | (0x1f << 3) | 7),
            "0001:c1:1f.7"
        );
    }
}
