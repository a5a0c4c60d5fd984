//! Discovery: the static facts of every GPU, read once and cached.

use super::{arch, ffi::GiProfile, Driver, NvError};
use crate::vendor::{Capabilities, DeviceInfo, DeviceProps, Link, LinkLevel};
use accel_common::Res;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureThreshold};
use nvml_wrapper::Device;

/// NVML_NVLINK_MAX_LINKS of nvml.h 13.x (18 in 12.x headers; probing past
/// a device's last link just ends the scan).
const MAX_LINKS: u32 = 36;
/// NVML_GPU_INSTANCE_PROFILE_COUNT of nvml.h 13.x: profile ids 0..=0x11.
/// An id the installed driver does not know is INVALID_ARGUMENT, i.e. skipped.
const GI_PROFILE_IDS: u32 = 0x12;

/// One GPU as discovered.
pub(crate) struct Dev {
    pub info: DeviceInfo,
    pub pci_bus_id: String,
    /// MIG supported by the device (whatever the mode).
    pub mig_supported: bool,
    /// MIG mode currently on.
    pub mig_on: bool,
    pub profiles: Vec<GiProfile>,
    /// GPM (Hopper and later) available for SM/tensor activity.
    pub gpm: bool,
    /// The GPU's minor number (/dev/nvidia<minor>), when NVML gives it.
    pub minor: Option<u32>,
    /// Active NVLinks: (link, remote PCI bus id, nvmlNvlinkVersion_t code).
    pub nvlinks: Vec<(u32, String, u32)>,
    /// NVLinks grouped by peer GPU (related devices).
    pub links: Vec<Link>,
}

fn opt<T>(r: Result<T, nvml_wrapper::error::NvmlError>) -> Option<T> {
    r.ok()
}

pub(crate) fn discover(drv: &Driver) -> Res<Vec<Dev>> {
    let count = drv
        .nvml
        .device_count()
        .map_err(|e| NvError::nvml("nvmlDeviceGetCount", e))?;
    let driver_version = drv.nvml.sys_driver_version().unwrap_or_default();
    let mut devs = Vec::with_capacity(count as usize);
    for i in 0..count {
        let d = drv
            .nvml
            .device_by_index(i)
            .map_err(|e| NvError::nvml("nvmlDeviceGetHandleByIndex", e))?;
        devs.push(one(drv, &d, i, &driver_version)?);
    }
    // Group each device's NVLinks by the peer GPU at the far end.
    let bus_ids: Vec<(String, String)> = devs
        .iter()
        .map(|d| (d.pci_bus_id.to_ascii_lowercase(), d.info.uuid.clone()))
        .collect();
    for d in &mut devs {
        let mut links: Vec<Link> = Vec::new();
        for (_, remote, version) in &d.nvlinks {
            let Some((_, peer)) = bus_ids
                .iter()
                .find(|(b, _)| *b == remote.to_ascii_lowercase())
            else {
                continue; // an NVSwitch or a GPU outside this process's view
            };
            let rate = arch::nvlink_mbps_per_link(*version);
            match links.iter_mut().find(|l| &l.peer_uuid == peer) {
                Some(l) => l.bandwidth_mbps = l.bandwidth_mbps.saturating_add(rate),
                None => links.push(Link {
                    peer_uuid: peer.clone(),
                    connection_type: "NVLink".into(),
                    bandwidth_mbps: rate,
                    latency_ns: 0,
                    level: LinkLevel::Internal,
                }),
            }
        }
        d.links = links;
    }
    Ok(devs)
}

fn one(drv: &Driver, d: &Device, i: u32, driver_version: &str) -> Res<Dev> {
    let uuid = d
        .uuid()
        .map_err(|e| NvError::nvml("nvmlDeviceGetUUID", e))?;
    let model = d.name().unwrap_or_default();
    let cc = opt(d.cuda_compute_capability()).map(|c| (c.major, c.minor));
    let mig = opt(d.mig_mode());
    let mig_supported = mig.is_some();
    let mig_on = mig.is_some_and(|m| m.current == 1);
    let profiles: Vec<GiProfile> = if mig_supported {
        (0..GI_PROFILE_IDS)
            .filter_map(|p| drv.ext.gi_profile(d, p).ok().flatten())
            .collect()
    } else {
        Vec::new()
    };
    // SMs: NVML's count for the full-GPU MIG profile, else CUDA cores / cores per SM.
    let sms = profiles
        .iter()
        .max_by_key(|p| p.slices)
        .map(|p| u64::from(p.sms))
        .or_else(|| {
            let cores = opt(d.num_cores())?;
            let per = arch::cores_per_sm(cc?)?;
            Some(u64::from(cores / per))
        })
        .unwrap_or(0);
    let max_sm = opt(d.max_clock_info(Clock::SM)).unwrap_or(0);
    let max_tflops = cc.map_or(0.0, |cc| arch::max_tflops(sms, max_sm, cc));
    let numa_node = drv
        .ext
        .numa_node(d)
        .ok()
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(-1);
    let pci_bus_id = opt(d.pci_info()).map(|p| p.bus_id).unwrap_or_default();
    let minor = opt(d.minor_number());
    let mut nvlinks = Vec::new();
    for l in 0..MAX_LINKS {
        let link = d.link_wrapper_for(l);
        match link.is_active() {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => break, // no more links (or no NVLink at all)
        }
        let Ok(remote) = link.remote_pci_info() else {
            continue;
        };
        let version = drv.ext.nvlink_version(d, l).unwrap_or(0);
        nvlinks.push((l, remote.bus_id, version));
    }
    let snapshot = drv.cuda.as_ref().is_some_and(|c| c.has_checkpoint);
    let max_partitions = profiles
        .iter()
        .min_by_key(|p| p.slices)
        .map_or(0, |p| p.instance_count);
    Ok(Dev {
        info: DeviceInfo {
            uuid,
            vendor: "NVIDIA".into(),
            model,
            driver_version: driver_version.to_string(),
            firmware_version: d.vbios_version().unwrap_or_default(),
            index: d.index().map_or(i as i32, |x| x as i32),
            numa_node,
            total_memory_bytes: opt(d.memory_info()).map_or(0, |m| m.total),
            total_compute_units: sms,
            max_tflops,
            pcie_gen: opt(d.max_pcie_link_gen()).unwrap_or(0),
            pcie_width: opt(d.max_pcie_link_width()).unwrap_or(0),
            device_node: minor.map(|m| format!("/dev/nvidia{m}")).unwrap_or_default(),
            extra_props: vec![
                ("pci.bus_id".into(), pci_bus_id.clone()),
                ("mig.supported".into(), mig_supported.to_string()),
                ("mig.enabled".into(), mig_on.to_string()),
            ],
            props: DeviceProps {
                clock_graphics_mhz: opt(d.max_clock_info(Clock::Graphics)).unwrap_or(0),
                clock_sm_mhz: max_sm,
                clock_mem_mhz: opt(d.max_clock_info(Clock::Memory)).unwrap_or(0),
                clock_ai_mhz: 0,
                power_limit_w: opt(d.enforced_power_limit()).map_or(0, |mw| mw / 1000),
                temperature_threshold_c: opt(
                    d.temperature_threshold(TemperatureThreshold::Slowdown)
                )
                .unwrap_or(0),
                ecc_enabled: opt(d.is_ecc_enabled()).is_some_and(|e| e.currently_enabled),
                persistence_mode_enabled: opt(d.is_in_persistent_mode()).unwrap_or(false),
                compute_capability: cc.map(|(a, b)| format!("{a}.{b}")).unwrap_or_default(),
                chip_type: opt(d.architecture())
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            },
            caps: Capabilities {
                partitioning: mig_supported && !profiles.is_empty(),
                soft_isolation: true,
                hard_isolation: true,
                snapshot,
                metrics: true,
                max_partitions,
                max_workers_per_device: 64,
            },
        },
        pci_bus_id,
        minor,
        mig_supported,
        mig_on,
        profiles,
        gpm: drv.ext.gpm_supported(d),
        nvlinks,
        links: Vec::new(),
    })
}
