//! Topology of a set of GPUs: NVLink where the GPUs are linked (bandwidth =
//! links × per-link rate of the NVLink version), else PCIe with the level
//! of the pair's common ancestor as NVML reports it.

use super::discovery::Dev;
use super::{arch, handle, Driver, NvError};
use crate::vendor::{DeviceTopology, Link, LinkLevel, Topology};
use accel_common::Res;
use nvml_wrapper::enum_wrappers::device::TopologyLevel;

/// (rank, name, level) of a common-ancestor level; a higher rank is
/// farther apart.
fn level(l: TopologyLevel) -> (u32, &'static str, LinkLevel) {
    match l {
        TopologyLevel::Internal => (0, "SameBoard", LinkLevel::Internal),
        TopologyLevel::Single => (1, "SameSwitch", LinkLevel::SingleSwitch),
        TopologyLevel::Multiple => (2, "MultiSwitch", LinkLevel::MultiSwitch),
        TopologyLevel::HostBridge => (3, "HostBridge", LinkLevel::HostBridge),
        TopologyLevel::Node => (4, "SameNUMANode", LinkLevel::NumaNode),
        TopologyLevel::System => (5, "System", LinkLevel::System),
    }
}

pub(crate) fn topology(drv: &Driver, devs: &[Dev], indices: &[usize]) -> Res<Topology> {
    let mut out = Topology {
        devices: Vec::new(),
        nvlink_bandwidth_mbps: 0,
        ib_nic_count: 0,
        topology_type: "SameBoard".into(),
    };
    let mut worst: Option<(u32, &'static str, LinkLevel)> = None;
    let mut all_nvlink = indices.len() > 1;
    for &i in indices {
        let a = &devs[i];
        let ha = handle(drv, a)?;
        let mut connections = Vec::new();
        for &j in indices {
            if j == i {
                continue;
            }
            let b = &devs[j];
            if let Some(l) = a.links.iter().find(|l| l.peer_uuid == b.info.uuid) {
                out.nvlink_bandwidth_mbps = out.nvlink_bandwidth_mbps.max(l.bandwidth_mbps);
                connections.push(l.clone());
                continue;
            }
            all_nvlink = false;
            let hb = handle(drv, b)?;
            let lv = level(
                ha.topology_common_ancestor(hb)
                    .map_err(|e| NvError::nvml("nvmlDeviceGetTopologyCommonAncestor", e))?,
            );
            if worst.is_none_or(|w| lv.0 > w.0) {
                worst = Some(lv);
            }
            connections.push(Link {
                peer_uuid: b.info.uuid.clone(),
                connection_type: "PCIe".into(),
                bandwidth_mbps: arch::pcie_mbps(a.info.pcie_gen, a.info.pcie_width)
                    .min(arch::pcie_mbps(b.info.pcie_gen, b.info.pcie_width)),
                latency_ns: 0,
                level: lv.2,
            });
        }
        out.devices.push(DeviceTopology {
            uuid: a.info.uuid.clone(),
            numa_node: a.info.numa_node,
            connections,
        });
    }
    if all_nvlink {
        out.topology_type = "NVLink".into();
    } else if let Some((_, name, _)) = worst {
        out.topology_type = name.into();
    }
    Ok(out)
}
