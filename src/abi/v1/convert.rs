//! Safe vendor types → C structs. Pointer fields are left NULL/0 here; the
//! callers fill them according to the calling style.

use super::types::*;
use crate::abi::boundary::fixed_from;
use crate::vendor;

pub fn basic(d: &vendor::DeviceInfo) -> DeviceBasicInfo {
    DeviceBasicInfo {
        uuid: fixed_from(&d.uuid),
        vendor: fixed_from(&d.vendor),
        model: fixed_from(&d.model),
        driverVersion: fixed_from(&d.driver_version),
        firmwareVersion: fixed_from(&d.firmware_version),
        index: d.index,
        numaNode: d.numa_node,
        totalMemoryBytes: d.total_memory_bytes,
        totalComputeUnits: d.total_compute_units,
        maxTflops: d.max_tflops,
        pcieGen: d.pcie_gen,
        pcieWidth: d.pcie_width,
    }
}

pub fn props(p: &vendor::DeviceProps) -> DeviceProperties {
    DeviceProperties {
        clockGraphics: p.clock_graphics_mhz,
        clockSM: p.clock_sm_mhz,
        clockMem: p.clock_mem_mhz,
        clockAI: p.clock_ai_mhz,
        powerLimit: p.power_limit_w,
        temperatureThreshold: p.temperature_threshold_c,
        eccEnabled: p.ecc_enabled,
        persistenceModeEnabled: p.persistence_mode_enabled,
        computeCapability: fixed_from(&p.compute_capability),
        chipType: fixed_from(&p.chip_type),
    }
}

pub fn caps(c: &vendor::Capabilities) -> DeviceCapabilities {
    DeviceCapabilities {
        supportsPartitioning: c.partitioning,
        supportsSoftIsolation: c.soft_isolation,
        supportsHardIsolation: c.hard_isolation,
        supportsSnapshot: c.snapshot,
        supportsMetrics: c.metrics,
        maxPartitions: c.max_partitions,
        maxWorkersPerDevice: c.max_workers_per_device,
    }
}

pub fn device(d: &vendor::DeviceInfo) -> ExtendedDeviceInfo {
    ExtendedDeviceInfo {
        basic: basic(d),
        props: props(&d.props),
        relatedDevices: std::ptr::null_mut(),
        relatedDeviceCount: 0,
        capabilities: caps(&d.caps),
    }
}

pub fn link(l: &vendor::Link) -> RelatedDevice {
    RelatedDevice {
        deviceUUID: fixed_from(&l.peer_uuid),
        connectionType: fixed_from(&l.connection_type),
        bandwidthMBps: l.bandwidth_mbps,
        latencyNs: l.latency_ns,
    }
}

pub fn template(t: &vendor::Template) -> PartitionTemplate {
    PartitionTemplate {
        templateId: fixed_from(&t.id),
        name: fixed_from(&t.name),
        memoryBytes: t.memory_bytes,
        computeUnits: t.compute_units,
        tflops: t.tflops,
        sliceCount: t.slice_count,
        isDefault: t.is_default,
        description: fixed_from(&t.description),
    }
}

pub fn compute(p: &vendor::ProcessCompute) -> ComputeUtilization {
    ComputeUtilization {
        processId: fixed_from(&p.process_id),
        deviceUUID: fixed_from(&p.device_uuid),
        utilizationPercent: p.utilization_percent,
        activeSMs: p.active_sms,
        totalSMs: p.total_sms,
        tflopsUsed: p.tflops_used,
    }
}

pub fn memory(p: &vendor::ProcessMemory) -> MemoryUtilization {
    MemoryUtilization {
        processId: fixed_from(&p.process_id),
        deviceUUID: fixed_from(&p.device_uuid),
        usedBytes: p.used_bytes,
        reservedBytes: p.reserved_bytes,
        utilizationPercent: p.utilization_percent,
    }
}

pub fn metrics(m: &vendor::Metrics) -> DeviceMetrics {
    DeviceMetrics {
        deviceUUID: fixed_from(&m.device_uuid),
        powerUsageWatts: m.power_w,
        temperatureCelsius: m.temperature_c,
        pcieRxBytes: m.pcie_rx_bytes,
        pcieTxBytes: m.pcie_tx_bytes,
        smActivePercent: m.sm_active_percent,
        tensorCoreUsagePercent: m.tensor_core_percent,
        memoryUsedBytes: m.memory_used_bytes,
        memoryTotalBytes: m.memory_total_bytes,
    }
}

pub fn share(w: &accel_common::shm::WorkerShare) -> WorkerShare {
    WorkerShare {
        workerId: fixed_from(&w.worker),
        deviceUUID: fixed_from(&w.device_uuid),
        requestPercent: w.request,
        limitPercent: w.limit,
        priority: w.priority,
        grantedBasisPoints: w.granted_bp,
        usedNs: w.used_ns,
    }
}
