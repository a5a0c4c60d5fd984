//! Metrics, topology and per-process figures, converted to the ABI's units.
//! What DCMI cannot say is 0 or empty; a DCMI failure other than "not
//! supported" is the call's error.

use super::dcmi::{Dcmi, UTIL_AICORE};
use super::discovery::{Dev, MemSource};
use crate::device_table::process_memory;
use crate::driver_error::optional;
use crate::vendor::{ExtendedMetrics, Link, LinkLevel, Metrics, ProcessMemory};
use accel_common::Res;

const MIB: u64 = 1 << 20;

pub fn metrics(dcmi: &Dcmi, dev: &Dev) -> Res<Metrics> {
    let (c, d) = (dev.card, dev.device);
    // DCMI reports power in units of 0.1 W.
    let power_w = optional(dcmi.power(c, d))?.map_or(0.0, |p| f64::from(p.max(0)) / 10.0);
    let temperature_c = optional(dcmi.temperature(c, d))?.map_or(0.0, f64::from);
    let aicore = optional(dcmi.utilization(c, d, UTIL_AICORE))?
        .unwrap_or(0)
        .min(100);
    let (used, total) = match dev.mem {
        MemSource::Hbm => optional(dcmi.hbm_info(c, d))?
            .map_or((0, 0), |h| (h.memory_usage * MIB, h.memory_size * MIB)),
        MemSource::Ddr => optional(dcmi.memory_info(c, d))?.map_or((0, 0), |m| {
            (
                m.memory_size.saturating_sub(m.memory_available) * MIB,
                m.memory_size * MIB,
            )
        }),
        MemSource::None => (0, 0),
    };
    Ok(Metrics {
        device_uuid: dev.info.uuid.clone(),
        power_w,
        temperature_c,
        pcie_rx_bytes: 0,
        pcie_tx_bytes: 0,
        sm_active_percent: aicore,
        tensor_core_percent: 0,
        memory_used_bytes: used.min(total),
        memory_total_bytes: total,
    })
}

/// DCMI has no link counters that map onto the ABI's per-link bandwidths:
/// every list is empty (see docs/ascend.md).
pub fn extended(dev: &Dev) -> ExtendedMetrics {
    ExtendedMetrics {
        device_uuid: dev.info.uuid.clone(),
        ..ExtendedMetrics::default()
    }
}

/// DCMI_TOPO_TYPE_* as the ABI's connection type and the v2 level; None
/// for "self" and for values this vendor does not know.
fn connection(topo: i32) -> Option<(&'static str, LinkLevel)> {
    match topo {
        1 => Some(("SYS", LinkLevel::System)),
        2 => Some(("PHB", LinkLevel::HostBridge)),
        3 | 7 => Some(("HCCS", LinkLevel::Internal)),
        4 => Some(("PXB", LinkLevel::MultiSwitch)),
        5 => Some(("PIX", LinkLevel::SingleSwitch)),
        _ => None,
    }
}

/// Links from `dev` to each of `peers`, where DCMI reports a topology.
pub fn links(dcmi: &Dcmi, dev: &Dev, peers: &[&Dev]) -> Res<Vec<Link>> {
    let mut out = Vec::new();
    for p in peers {
        if p.info.uuid == dev.info.uuid {
            continue;
        }
        let Some(t) = optional(dcmi.topo((dev.card, dev.device), (p.card, p.device)))? else {
            continue;
        };
        if let Some((kind, level)) = connection(t) {
            out.push(Link {
                peer_uuid: p.info.uuid.clone(),
                connection_type: kind.into(),
                bandwidth_mbps: 0,
                latency_ns: 0,
                level,
            });
        }
    }
    Ok(out)
}

/// Driver data only: the processes DCMI reports on a device and their
/// device memory. (The limiter's shared accounting is not read here.)
pub fn driver_processes(dcmi: &Dcmi, dev: &Dev) -> Res<Vec<ProcessMemory>> {
    let Some(procs) = optional(dcmi.processes(dev.card, dev.device))? else {
        return Ok(Vec::new());
    };
    Ok(procs
        .into_iter()
        .map(|(pid, used)| process_memory(&dev.info, pid, used))
        .collect())
}
