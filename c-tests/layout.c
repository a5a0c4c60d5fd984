/* Prints the size, alignment and field offsets of every ABI struct as the
 * C compiler lays them out from include/accelerator.h; compared with
 * examples/layout.rs by `make test-run`. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include "accelerator.h"

#define TYPE(t) printf("%s size=%zu align=%zu\n", #t, sizeof(t), alignof(t))
#define FIELD(t, f) printf("%s.%s offset=%zu\n", #t, #f, offsetof(t, f))

int main(void) {
    TYPE(DeviceCapabilities);
    FIELD(DeviceCapabilities, supportsPartitioning);
    FIELD(DeviceCapabilities, supportsSoftIsolation);
    FIELD(DeviceCapabilities, supportsHardIsolation);
    FIELD(DeviceCapabilities, supportsSnapshot);
    FIELD(DeviceCapabilities, supportsMetrics);
    FIELD(DeviceCapabilities, maxPartitions);
    FIELD(DeviceCapabilities, maxWorkersPerDevice);
    TYPE(DeviceBasicInfo);
    FIELD(DeviceBasicInfo, uuid);
    FIELD(DeviceBasicInfo, vendor);
    FIELD(DeviceBasicInfo, model);
    FIELD(DeviceBasicInfo, driverVersion);
    FIELD(DeviceBasicInfo, firmwareVersion);
    FIELD(DeviceBasicInfo, index);
    FIELD(DeviceBasicInfo, numaNode);
    FIELD(DeviceBasicInfo, totalMemoryBytes);
    FIELD(DeviceBasicInfo, totalComputeUnits);
    FIELD(DeviceBasicInfo, maxTflops);
    FIELD(DeviceBasicInfo, pcieGen);
    FIELD(DeviceBasicInfo, pcieWidth);
    TYPE(DeviceProperties);
    FIELD(DeviceProperties, clockGraphics);
    FIELD(DeviceProperties, clockSM);
    FIELD(DeviceProperties, clockMem);
    FIELD(DeviceProperties, clockAI);
    FIELD(DeviceProperties, powerLimit);
    FIELD(DeviceProperties, temperatureThreshold);
    FIELD(DeviceProperties, eccEnabled);
    FIELD(DeviceProperties, persistenceModeEnabled);
    FIELD(DeviceProperties, computeCapability);
    FIELD(DeviceProperties, chipType);
    TYPE(RelatedDevice);
    FIELD(RelatedDevice, deviceUUID);
    FIELD(RelatedDevice, connectionType);
    FIELD(RelatedDevice, bandwidthMBps);
    FIELD(RelatedDevice, latencyNs);
    TYPE(ExtendedDeviceInfo);
    FIELD(ExtendedDeviceInfo, basic);
    FIELD(ExtendedDeviceInfo, props);
    FIELD(ExtendedDeviceInfo, relatedDevices);
    FIELD(ExtendedDeviceInfo, relatedDeviceCount);
    FIELD(ExtendedDeviceInfo, capabilities);
    TYPE(PartitionTemplate);
    FIELD(PartitionTemplate, templateId);
    FIELD(PartitionTemplate, name);
    FIELD(PartitionTemplate, memoryBytes);
    FIELD(PartitionTemplate, computeUnits);
    FIELD(PartitionTemplate, tflops);
    FIELD(PartitionTemplate, sliceCount);
    FIELD(PartitionTemplate, isDefault);
    FIELD(PartitionTemplate, description);
    TYPE(DeviceTopology);
    FIELD(DeviceTopology, deviceUUID);
    FIELD(DeviceTopology, numaNode);
    FIELD(DeviceTopology, connections);
    FIELD(DeviceTopology, connectionCount);
    TYPE(ExtendedDeviceTopology);
    FIELD(ExtendedDeviceTopology, devices);
    FIELD(ExtendedDeviceTopology, deviceCount);
    FIELD(ExtendedDeviceTopology, nvlinkBandwidthMBps);
    FIELD(ExtendedDeviceTopology, ibNicCount);
    FIELD(ExtendedDeviceTopology, topologyType);
    TYPE(PartitionAssignment);
    FIELD(PartitionAssignment, templateId);
    FIELD(PartitionAssignment, deviceUUID);
    FIELD(PartitionAssignment, partitionUUID);
    FIELD(PartitionAssignment, partitionOverheadBytes);
    TYPE(WorkerInfo);
    FIELD(WorkerInfo, workerId);
    FIELD(WorkerInfo, deviceUUID);
    FIELD(WorkerInfo, processId);
    FIELD(WorkerInfo, memoryLimitBytes);
    FIELD(WorkerInfo, computeUnitLimit);
    FIELD(WorkerInfo, isolationMode);
    TYPE(ProcessArray);
    FIELD(ProcessArray, processIds);
    FIELD(ProcessArray, processCount);
    FIELD(ProcessArray, deviceUUID);
    TYPE(ComputeUtilization);
    FIELD(ComputeUtilization, processId);
    FIELD(ComputeUtilization, deviceUUID);
    FIELD(ComputeUtilization, utilizationPercent);
    FIELD(ComputeUtilization, activeSMs);
    FIELD(ComputeUtilization, totalSMs);
    FIELD(ComputeUtilization, tflopsUsed);
    TYPE(MemoryUtilization);
    FIELD(MemoryUtilization, processId);
    FIELD(MemoryUtilization, deviceUUID);
    FIELD(MemoryUtilization, usedBytes);
    FIELD(MemoryUtilization, reservedBytes);
    FIELD(MemoryUtilization, utilizationPercent);
    TYPE(DeviceMetrics);
    FIELD(DeviceMetrics, deviceUUID);
    FIELD(DeviceMetrics, powerUsageWatts);
    FIELD(DeviceMetrics, temperatureCelsius);
    FIELD(DeviceMetrics, pcieRxBytes);
    FIELD(DeviceMetrics, pcieTxBytes);
    FIELD(DeviceMetrics, smActivePercent);
    FIELD(DeviceMetrics, tensorCoreUsagePercent);
    FIELD(DeviceMetrics, memoryUsedBytes);
    FIELD(DeviceMetrics, memoryTotalBytes);
    TYPE(ExtendedDeviceMetrics);
    FIELD(ExtendedDeviceMetrics, deviceUUID);
    FIELD(ExtendedDeviceMetrics, nvlinkBandwidthMBps);
    FIELD(ExtendedDeviceMetrics, nvlinkCount);
    FIELD(ExtendedDeviceMetrics, ibNicBandwidthMBps);
    FIELD(ExtendedDeviceMetrics, ibNicCount);
    FIELD(ExtendedDeviceMetrics, pcieBandwidthMBps);
    FIELD(ExtendedDeviceMetrics, pcieLinkCount);
    TYPE(IsolationMode);
    printf("ResultCode size=%zu align=%zu\n", sizeof(Result), alignof(Result));
    return 0;
}
