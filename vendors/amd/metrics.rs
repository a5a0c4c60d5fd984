//! Metrics, topology and per-process figures, converted to the ABI's units.
//! What AMD SMI cannot say is 0 or empty; a failure other than "not
//! supported" is the call's error (a GPU reset between calls shows as
//! AMD SMI's NOT_FOUND on the stale handle: NOT_FOUND here).

use super::discovery::Dev;
use super::smi::{LinkKind, Proc, Smi, TEMP_CURRENT};
use crate::cbuf::known_u32;
use crate::device_table::process_memory;
use crate::driver_error::optional;
use crate::log::log_at;
use crate::vendor::{ExtendedMetrics, Link, LinkLevel, Metrics, ProcessCompute, ProcessMemory};
use accel_common::Res;

const MIB: u64 = 1 << 20;

pub fn metrics(smi: &Smi, dev: &Dev) -> Res<Metrics> {
    let h = dev.handle;
    let power = optional(smi.power_info(h))?;
    // MI300 reports the current socket power, earlier parts the average;
    // 0 (the ABI's unknown) where neither is supported.
    let power_w = power
        .and_then(|p| p.current.filter(|&w| w > 0).or(p.average))
        .map_or(0.0, f64::from);
    let temperature_c =
        optional(smi.temperature(h, TEMP_CURRENT))?.map_or(0.0, |t| t.max(0) as f64);
    let gfx = optional(smi.activity(h))?
        .and_then(|a| known_u32(a.gfx_activity))
        .map_or(0, |a| a.min(100));
    let (used, total) = optional(smi.vram_usage(h))?
        .and_then(|v| Some((known_u32(v.vram_used)?, known_u32(v.vram_total)?)))
        .map_or((0, 0), |(used, total)| {
            (u64::from(used) * MIB, u64::from(total) * MIB)
        });
    let (tx, rx) = optional(smi.pci_throughput(h))?.unwrap_or((0, 0));
    Ok(Metrics {
        device_uuid: dev.info.uuid.clone(),
        power_w,
        temperature_c,
        pcie_rx_bytes: rx,
        pcie_tx_bytes: tx,
        sm_active_percent: gfx,
        // AMD SMI reports no matrix-core activity separately.
        tensor_core_percent: 0,
        memory_used_bytes: used.min(total),
        memory_total_bytes: total,
    })
}

/// Per-XGMI-link rates from the link metrics (Gb/s → MB/s: the links'
/// current bit rate, as the ABI's NVLink list carries link bandwidths) and
/// the PCIe link's throughput of the last second (bytes/s → MB/s).
pub fn extended(smi: &Smi, dev: &Dev) -> Res<ExtendedMetrics> {
    let h = dev.handle;
    let nvlink_mbps = optional(smi.link_metrics(h))?.map_or_else(Vec::new, |m| {
        let n = (m.num_links as usize).min(m.links.len());
        m.links[..n]
            .iter()
            .filter(|l| l.link_type == smi.layout.metrics_link_xgmi)
            .filter_map(|l| known_u32(l.bit_rate))
            .map(|rate| rate.saturating_mul(125))
            .collect()
    });
    let pcie_mbps = optional(smi.pci_throughput(h))?
        .map(|(tx, rx)| vec![u32::try_from(tx.saturating_add(rx) / 1_000_000).unwrap_or(u32::MAX)])
        .unwrap_or_default();
    Ok(ExtendedMetrics {
        device_uuid: dev.info.uuid.clone(),
        nvlink_mbps,
        ib_nic_mbps: Vec::new(),
        pcie_mbps,
    })
}

/// The link from `a` to `b` as AMD SMI describes it: XGMI (one hop on a
/// fully connected MI300X node) or PCIe with its hop count as the level, and
/// for XGMI neighbours the maximum bandwidth AMD SMI gives (MB/s, as
/// rocm-smi reports it). None when AMD SMI reports no link.
pub fn link(smi: &Smi, a: &Dev, b: &Dev) -> Res<Option<Link>> {
    let Some((hops, kind)) = optional(smi.link_type(a.handle, b.handle))? else {
        return Ok(None);
    };
    let (connection_type, level) = match kind {
        LinkKind::Xgmi => ("XGMI", LinkLevel::Internal),
        LinkKind::Pcie => (
            "PCIe",
            match hops {
                0 | 1 => LinkLevel::SingleSwitch,
                2 => LinkLevel::MultiSwitch,
                _ if a.info.numa_node >= 0 && a.info.numa_node == b.info.numa_node => {
                    LinkLevel::NumaNode
                }
                _ => LinkLevel::System,
            },
        ),
        LinkKind::Other => ("Unknown", LinkLevel::Unknown),
    };
    let bandwidth_mbps = if kind == LinkKind::Xgmi {
        optional(smi.minmax_bandwidth(a.handle, b.handle))?
            .map_or(0, |(_, max)| u32::try_from(max).unwrap_or(u32::MAX))
    } else {
        0
    };
    Ok(Some(Link {
        peer_uuid: b.info.uuid.clone(),
        connection_type: connection_type.into(),
        bandwidth_mbps,
        latency_ns: 0,
        level,
    }))
}

pub fn links(smi: &Smi, dev: &Dev, peers: &[&Dev]) -> Res<Vec<Link>> {
    let mut out = Vec::new();
    for p in peers.iter().filter(|p| p.info.uuid != dev.info.uuid) {
        out.extend(link(smi, dev, p)?);
    }
    Ok(out)
}

/// The processes AMD SMI lists on each device, mapped by `f`. A device
/// whose list fails (a GPU reset, AMD SMI failing mid-list) is left out
/// with a warning, so one failing GPU does not hide the others' processes.
fn per_device<T>(smi: &Smi, devs: &[&Dev], f: impl Fn(&Dev, &Proc) -> T) -> Vec<T> {
    let mut out = Vec::new();
    for dev in devs {
        match optional(smi.processes(dev.handle)) {
            Ok(list) => out.extend(list.unwrap_or_default().iter().map(|p| f(dev, p))),
            Err(e) => log_at!(
                Warn,
                "amd: processes of {}: {e}; device left out",
                dev.info.uuid
            ),
        }
    }
    out
}

pub fn driver_memory(smi: &Smi, devs: &[&Dev]) -> Vec<ProcessMemory> {
    per_device(smi, devs, |dev, p| {
        process_memory(&dev.info, p.pid, p.vram_bytes)
    })
}

/// AMD SMI gives each process's accumulated GFX engine time, not a
/// utilization: a process is listed with 0 % (unmeasured).
pub fn driver_compute(smi: &Smi, devs: &[&Dev]) -> Vec<ProcessCompute> {
    per_device(smi, devs, |dev, p| ProcessCompute {
        process_id: p.pid.to_string(),
        device_uuid: dev.info.uuid.clone(),
        utilization_percent: 0.0,
        active_sms: 0,
        total_sms: dev.info.total_compute_units,
        tflops_used: 0.0,
    })
}
