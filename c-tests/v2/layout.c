/* The v2 layouts of ../shared/ABI-v2.md (x86-64 Linux), asserted against
 * the generated include/v2/accelerator.h: every size and offset the
 * contract gives, every field offset the hypervisor's Go mirrors read, and
 * the constants. Fails to compile on a static mismatch; prints one line
 * per assertion group and the count. */
#include "accelerator.h"
#include "../test_util.h"
#include <stddef.h>

#define SIZE(T, n) CHECK(sizeof(T) == (n), "sizeof(" #T ") = %zu, want %d", sizeof(T), (n))
#define OFF(T, f, n)                                                                   \
  CHECK(offsetof(T, f) == (n), "offsetof(" #T ", " #f ") = %zu, want %d", offsetof(T, f), (n))

_Static_assert(sizeof(DeviceTopoNode) == 80, "DeviceTopoNode follows the Go layout");
_Static_assert(sizeof(ExtendedDeviceTopology) == 332808, "ExtendedDeviceTopology follows the Go layout");

int main(void) {
  /* Scalars and enums. */
  SIZE(bool, 1);
  SIZE(size_t, 8);
  SIZE(AccelResult, 4);
  SIZE(TopoLevelType, 4);
  SIZE(PartitionResultType, 4);
  CHECK(ACCEL_SUCCESS == 0 && ACCEL_ERROR_INVALID_PARAM == 1 && ACCEL_ERROR_NOT_FOUND == 2 &&
            ACCEL_ERROR_NOT_SUPPORTED == 3 && ACCEL_ERROR_RESOURCE_EXHAUSTED == 4 &&
            ACCEL_ERROR_OPERATION_FAILED == 5 && ACCEL_ERROR_INTERNAL == 6,
        "AccelResult values");
  CHECK(TOPO_LEVEL_INTERNAL == 0 && TOPO_LEVEL_SINGLE_SWITCH == 1 && TOPO_LEVEL_MULTI_SWITCH == 2 &&
            TOPO_LEVEL_HOST_BRIDGE == 3 && TOPO_LEVEL_NUMA_NODE == 4 && TOPO_LEVEL_SYSTEM == 5 &&
            TOPO_LEVEL_SELF == 6 && TOPO_LEVEL_UNKNOWN == 7,
        "TopoLevelType values");
  CHECK(PARTITION_TYPE_ENVIRONMENT_VARIABLE == 0 && PARTITION_TYPE_DEVICE_NODE == 1,
        "PartitionResultType values");

  /* Constants. */
  CHECK(MAX_DEVICE_PROPERTIES == 64 && MAX_TOPOLOGY_DEVICES == 64 && MAX_PARTITION_ENVS == 16 &&
            MAX_ENV_KEY_LENGTH == 64 && MAX_ENV_VALUE_LENGTH == 256 && MAX_PROCESSES == 1024 &&
            MAX_EXTRA_METRICS == 64 && MAX_MOUNT_PATH == 512 && MAX_PARTITION_DEVICE_NODES == 16 &&
            MAX_PARTITION_DEVICE_NODE_LENGTH == 1026,
        "constants");

  SIZE(VirtualizationCapabilities, 16);
  OFF(VirtualizationCapabilities, supportsRemoting, 5);
  OFF(VirtualizationCapabilities, maxPartitions, 8);
  OFF(VirtualizationCapabilities, maxWorkersPerDevice, 12);

  SIZE(DeviceBasicInfo, 472);
  OFF(DeviceBasicInfo, vendor, 64);
  OFF(DeviceBasicInfo, model, 96);
  OFF(DeviceBasicInfo, driverVersion, 224);
  OFF(DeviceBasicInfo, firmwareVersion, 304);
  OFF(DeviceBasicInfo, deviceNode, 368);
  OFF(DeviceBasicInfo, index, 432);
  OFF(DeviceBasicInfo, numaNode, 436);
  OFF(DeviceBasicInfo, totalMemoryBytes, 440);
  OFF(DeviceBasicInfo, totalComputeUnits, 448);
  OFF(DeviceBasicInfo, maxTflops, 456);
  OFF(DeviceBasicInfo, pcieGen, 464);
  OFF(DeviceBasicInfo, pcieWidth, 468);

  SIZE(DevicePropertyKV, 320);
  OFF(DevicePropertyKV, value, 64);
  SIZE(DeviceProperties, 20488);
  OFF(DeviceProperties, count, 20480);
  SIZE(ExtendedDeviceInfo, 20976);
  OFF(ExtendedDeviceInfo, props, 472);
  OFF(ExtendedDeviceInfo, virtualizationCapabilities, 20960);

  SIZE(PartitionTemplate, 480);
  OFF(PartitionTemplate, name, 64);
  OFF(PartitionTemplate, memoryBytes, 192);
  OFF(PartitionTemplate, computeUnits, 200);
  OFF(PartitionTemplate, tflops, 208);
  OFF(PartitionTemplate, sliceCount, 216);
  OFF(PartitionTemplate, isDefault, 220);
  OFF(PartitionTemplate, description, 221);

  SIZE(DeviceTopoNode, 80);
  OFF(DeviceTopoNode, peerIndex, 64);
  OFF(DeviceTopoNode, topoLevel, 68);
  OFF(DeviceTopoNode, bandwidthBytesPerSec, 72);
  SIZE(DeviceTopologyInfo, 5200);
  OFF(DeviceTopologyInfo, deviceIndex, 64);
  OFF(DeviceTopologyInfo, numaNode, 68);
  OFF(DeviceTopologyInfo, peers, 72);
  OFF(DeviceTopologyInfo, peerCount, 5192);
  SIZE(ExtendedDeviceTopology, 332808);
  OFF(ExtendedDeviceTopology, deviceCount, 332800);

  SIZE(SnapshotContext, 24);
  OFF(SnapshotContext, processCount, 8);
  OFF(SnapshotContext, deviceUUID, 16);

  SIZE(ExtraMetric, 72);
  OFF(ExtraMetric, value, 64);

  SIZE(ProcessInformation, 144);
  OFF(ProcessInformation, deviceUUID, 32);
  OFF(ProcessInformation, computeUtilizationPercent, 96);
  OFF(ProcessInformation, activeSMs, 104);
  OFF(ProcessInformation, totalSMs, 112);
  OFF(ProcessInformation, memoryUsedBytes, 120);
  OFF(ProcessInformation, memoryReservedBytes, 128);
  OFF(ProcessInformation, memoryUtilizationPercent, 136);

  SIZE(DeviceMetrics, 4728);
  OFF(DeviceMetrics, powerUsageWatts, 64);
  OFF(DeviceMetrics, temperatureCelsius, 72);
  OFF(DeviceMetrics, pcieRxBytes, 80);
  OFF(DeviceMetrics, pcieTxBytes, 88);
  OFF(DeviceMetrics, utilizationPercent, 96);
  OFF(DeviceMetrics, memoryUsedBytes, 104);
  OFF(DeviceMetrics, extraMetrics, 112);
  OFF(DeviceMetrics, extraMetricsCount, 4720);

  SIZE(MountPath, 1024);
  OFF(MountPath, guestPath, 512);

  SIZE(PartitionResult, 20580);
  OFF(PartitionResult, deviceUUID, 4);
  OFF(PartitionResult, envVars, 68);
  OFF(PartitionResult, deviceNodes, 4164);
  return test_summary();
}
