//! Prints the size, alignment and every field offset of the ABI structs as
//! Rust lays them out; `c-tests/layout.c` prints the same from the header
//! and `make test-run` diffs the two.

use accelerator::abi::types::*;
use std::mem::{align_of, offset_of, size_of};

macro_rules! layout {
    ($t:ty: $($f:ident),*) => {{
        println!("{} size={} align={}", stringify!($t), size_of::<$t>(), align_of::<$t>());
        $(println!("{}.{} offset={}", stringify!($t), stringify!($f), offset_of!($t, $f));)*
    }};
}

fn main() {
    layout!(DeviceCapabilities: supportsPartitioning, supportsSoftIsolation, supportsHardIsolation, supportsSnapshot, supportsMetrics, maxPartitions, maxWorkersPerDevice);
    layout!(DeviceBasicInfo: uuid, vendor, model, driverVersion, firmwareVersion, index, numaNode, totalMemoryBytes, totalComputeUnits, maxTflops, pcieGen, pcieWidth);
    layout!(DeviceProperties: clockGraphics, clockSM, clockMem, clockAI, powerLimit, temperatureThreshold, eccEnabled, persistenceModeEnabled, computeCapability, chipType);
    layout!(RelatedDevice: deviceUUID, connectionType, bandwidthMBps, latencyNs);
    layout!(ExtendedDeviceInfo: basic, props, relatedDevices, relatedDeviceCount, capabilities);
    layout!(PartitionTemplate: templateId, name, memoryBytes, computeUnits, tflops, sliceCount, isDefault, description);
    layout!(DeviceTopology: deviceUUID, numaNode, connections, connectionCount);
    layout!(ExtendedDeviceTopology: devices, deviceCount, nvlinkBandwidthMBps, ibNicCount, topologyType);
    layout!(PartitionAssignment: templateId, deviceUUID, partitionUUID, partitionOverheadBytes);
    layout!(WorkerInfo: workerId, deviceUUID, processId, memoryLimitBytes, computeUnitLimit, isolationMode);
    layout!(ProcessArray: processIds, processCount, deviceUUID);
    layout!(ComputeUtilization: processId, deviceUUID, utilizationPercent, activeSMs, totalSMs, tflopsUsed);
    layout!(MemoryUtilization: processId, deviceUUID, usedBytes, reservedBytes, utilizationPercent);
    layout!(WorkerShare: workerId, deviceUUID, requestPercent, limitPercent, priority, grantedBasisPoints, usedNs);
    layout!(DeviceMetrics: deviceUUID, powerUsageWatts, temperatureCelsius, pcieRxBytes, pcieTxBytes, smActivePercent, tensorCoreUsagePercent, memoryUsedBytes, memoryTotalBytes);
    layout!(ExtendedDeviceMetrics: deviceUUID, nvlinkBandwidthMBps, nvlinkCount, ibNicBandwidthMBps, ibNicCount, pcieBandwidthMBps, pcieLinkCount);
    layout!(AcceleratorPciDevice: address, vendorId, deviceId, classCode, vendorName, numaNode, iommuGroup, currentLinkSpeedGTs, currentLinkWidth, maxLinkSpeedGTs, maxLinkWidth, driver, sriovTotalVfs, sriovNumVfs, physfn, deviceIndex, deviceUUID, state, mismatch, note, fix);
    layout!(IsolationMode:);
    layout!(ResultCode:);
}
