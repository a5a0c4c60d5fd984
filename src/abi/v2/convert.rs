//! Safe values → v2 C structs.

use super::types::*;
use crate::abi::boundary::{fixed_from, write_fixed};
use crate::hypervisor::{Peer, ProcessInfo, Row};
use crate::vendor::{self, LinkLevel};

pub fn device(d: &vendor::DeviceInfo, props: &[(String, String)]) -> ExtendedDeviceInfo {
    let c = &d.caps;
    let mut out = ExtendedDeviceInfo {
        basic: DeviceBasicInfo {
            uuid: fixed_from(&d.uuid),
            vendor: fixed_from(&d.vendor),
            model: fixed_from(&d.model),
            driverVersion: fixed_from(&d.driver_version),
            firmwareVersion: fixed_from(&d.firmware_version),
            deviceNode: fixed_from(&d.device_node),
            index: d.index,
            numaNode: d.numa_node,
            totalMemoryBytes: d.total_memory_bytes,
            totalComputeUnits: d.total_compute_units,
            maxTflops: d.max_tflops,
            pcieGen: d.pcie_gen,
            pcieWidth: d.pcie_width,
        },
        props: DeviceProperties {
            properties: [DevicePropertyKV {
                key: [0; MAX_ENV_KEY_LENGTH],
                value: [0; MAX_ENV_VALUE_LENGTH],
            }; MAX_DEVICE_PROPERTIES],
            count: 0,
        },
        virtualizationCapabilities: VirtualizationCapabilities {
            supportsPartitioning: c.partitioning,
            supportsSoftIsolation: c.soft_isolation,
            supportsHardIsolation: c.hard_isolation,
            supportsSnapshot: c.snapshot,
            supportsMetrics: c.metrics,
            supportsRemoting: false,
            maxPartitions: c.max_partitions,
            maxWorkersPerDevice: c.max_workers_per_device,
        },
    };
    for (slot, (k, v)) in out.props.properties.iter_mut().zip(props) {
        write_fixed(&mut slot.key, k);
        write_fixed(&mut slot.value, v);
    }
    out.props.count = props.len().min(MAX_DEVICE_PROPERTIES);
    out
}

pub fn level(l: LinkLevel) -> TopoLevelType {
    match l {
        LinkLevel::Internal => TopoLevelType::TopoLevelInternal,
        LinkLevel::SingleSwitch => TopoLevelType::TopoLevelSingleSwitch,
        LinkLevel::MultiSwitch => TopoLevelType::TopoLevelMultiSwitch,
        LinkLevel::HostBridge => TopoLevelType::TopoLevelHostBridge,
        LinkLevel::NumaNode => TopoLevelType::TopoLevelNumaNode,
        LinkLevel::System => TopoLevelType::TopoLevelSystem,
        LinkLevel::Unknown => TopoLevelType::TopoLevelUnknown,
    }
}

fn peer(p: &Peer) -> DeviceTopoNode {
    DeviceTopoNode {
        peerUUID: fixed_from(&p.uuid),
        peerIndex: p.index,
        topoLevel: level(p.level),
        bandwidthBytesPerSec: p.bandwidth_bytes_per_sec,
    }
}

/// Fill a (zeroed) row in place: the struct is too big to build on the stack.
pub fn row(dst: &mut DeviceTopologyInfo, r: &Row) {
    write_fixed(&mut dst.deviceUUID, &r.uuid);
    dst.deviceIndex = r.index;
    dst.numaNode = r.numa_node;
    for (slot, p) in dst.peers.iter_mut().zip(&r.peers) {
        *slot = peer(p);
    }
    dst.peerCount = r.peers.len().min(MAX_TOPOLOGY_DEVICES);
}

pub fn process(p: &ProcessInfo) -> ProcessInformation {
    ProcessInformation {
        processId: fixed_from(&p.pid),
        deviceUUID: fixed_from(&p.device_uuid),
        computeUtilizationPercent: p.compute_percent,
        activeSMs: p.active_sms,
        totalSMs: p.total_sms,
        memoryUsedBytes: p.memory_used,
        memoryReservedBytes: p.memory_reserved,
        memoryUtilizationPercent: p.memory_percent,
    }
}

/// Fill a metrics entry in place; `uuid` is echoed as the caller gave it.
pub fn metrics(dst: &mut DeviceMetrics, uuid: &str, m: &vendor::Metrics, extra: &[(String, f64)]) {
    write_fixed(&mut dst.deviceUUID, uuid);
    dst.powerUsageWatts = m.power_w;
    dst.temperatureCelsius = m.temperature_c;
    dst.pcieRxBytes = m.pcie_rx_bytes;
    dst.pcieTxBytes = m.pcie_tx_bytes;
    dst.utilizationPercent = m.sm_active_percent;
    dst.memoryUsedBytes = m.memory_used_bytes;
    for (slot, (k, v)) in dst.extraMetrics.iter_mut().zip(extra) {
        write_fixed(&mut slot.key, k);
        slot.value = *v;
    }
    for slot in dst.extraMetrics.iter_mut().skip(extra.len()) {
        slot.key = [0; 64];
        slot.value = 0.0;
    }
    dst.extraMetricsCount = extra.len().min(MAX_EXTRA_METRICS);
}

pub fn mount(m: &vendor::Mount) -> MountPath {
    MountPath {
        hostPath: fixed_from(&m.host_path),
        guestPath: fixed_from(&m.guest_path),
    }
}
