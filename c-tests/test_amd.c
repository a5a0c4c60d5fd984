/* The AMD vendor against the fake libamd_smi.so (c-tests/fakes/amdsmi.c),
 * through the C ABI.
 *
 * usage: test_amd build/libaccelerator_amd.so
 * with ACCELERATOR_AMDSMI_PATH (the fake) and ACCELERATOR_AMD_SYSFS (its
 * sysfs tree) set, as vendors/amd/vendor.mk does.
 *
 * Every configuration runs in a fresh forked child (vendor_suite.h): the
 * child sets its environment, dlopens the library, checks, and reports its
 * counts through a pipe. The fake reads its fault variables on every call,
 * so a scenario can break a GPU between two calls. */
#include "vendor_suite.h"

#include <pthread.h>

/* The fake's UUIDs: GPU i of the MI300X node, of the MI210 node. */
static void uuid_of(int i, char out[64]) {
  snprintf(out, 64, "%02xff74a1-0000-1000-8000-0000000000%02x", i, i);
}
static void uuid210_of(int i, char out[64]) {
  snprintf(out, 64, "%02xff740f-0000-1000-8000-0000000000%02x", i, i);
}

static void load(void) { suite_load("amd"); }

/* How often the library lists `pid` on the given devices (all eight
 * MI300X when `uuids` is NULL). */
static int lists_pid(const char **uuids, size_t n, const char *pid) {
  char all[8][64];
  const char *every[8];
  if (!uuids) {
    for (int i = 0; i < 8; i++) {
      uuid_of(i, all[i]);
      every[i] = all[i];
    }
    uuids = every;
    n = 8;
  }
  const char *pids[] = {pid};
  MemoryUtilization *mu = NULL;
  size_t nmu = 0;
  int found = 0;
  EXPECT_RC(p_getProcessMemoryUtilization(uuids, n, pids, 1, &mu, &nmu), RESULT_SUCCESS);
  for (size_t i = 0; i < nmu; i++)
    found += strcmp(mu[i].processId, pid) == 0;
  p_freeMemoryUtilizations(mu, nmu);
  return found;
}

/* ------------------------------------------------------------ scenarios */

static void *metrics_thread(void *arg) {
  (void)arg;
  char u0[64], u1[64];
  uuid_of(0, u0);
  uuid_of(1, u1);
  const char *uuids[] = {u0, u1};
  for (int i = 0; i < (test_quick() ? 5 : 200); i++) {
    DeviceMetrics *m = NULL;
    EXPECT_RC(p_getDeviceMetrics(uuids, 2, &m), RESULT_SUCCESS);
    CHECK(m && m[0].temperatureCelsius == 41.0 && m[1].smActivePercent == 87, "concurrent metrics");
    p_freeDeviceMetrics(m, 2);
  }
  return NULL;
}

static void scenario_mi300x(void) {
  load();
  CHECK(strcmp(p_acceleratorVendorName(), "amd") == 0, "vendor %s", p_acceleratorVendorName());
  CHECK(count() == 8, "eight MI300X");
  char u[8][64];
  for (int i = 0; i < 8; i++)
    uuid_of(i, u[i]);

  for (int i = 0; i < 8; i++) {
    ExtendedDeviceInfo info;
    memset(&info, 0, sizeof info);
    EXPECT_RC(p_getDeviceInfo(i, &info), RESULT_SUCCESS);
    DeviceBasicInfo *b = &info.basic;
    CHECK(strcmp(b->uuid, u[i]) == 0, "uuid %d = %s", i, b->uuid);
    CHECK(strcmp(b->vendor, "AMD") == 0, "vendor %s", b->vendor);
    CHECK(strcmp(b->model, "AMD Instinct MI300X") == 0, "model %s", b->model);
    CHECK(strcmp(b->driverVersion, "6.10.5") == 0, "driver %s", b->driverVersion);
    CHECK(strcmp(b->firmwareVersion, "113-M3000100-103") == 0, "VBIOS %s", b->firmwareVersion);
    CHECK(b->index == i && b->numaNode == i / 4, "index %d numa %d", b->index, b->numaNode);
    CHECK(b->totalComputeUnits == 304, "CUs %llu", (unsigned long long)b->totalComputeUnits);
    CHECK(b->totalMemoryBytes == 192 * GIB, "memory %llu", (unsigned long long)b->totalMemoryBytes);
    CHECK(b->pcieGen == 5 && b->pcieWidth == 16, "PCIe Gen%u x%u", b->pcieGen, b->pcieWidth);
    CHECK(b->maxTflops == 0.0, "no invented TFLOPS");
    CHECK(info.props.powerLimit == 750 && info.props.temperatureThreshold == 105, "power %u temp %u",
          info.props.powerLimit, info.props.temperatureThreshold);
    CHECK(info.props.clockGraphics == 2100 && info.props.clockMem == 1300 && info.props.eccEnabled,
          "clocks %u/%u MHz, ECC %d", info.props.clockGraphics, info.props.clockMem, info.props.eccEnabled);
    CHECK(info.capabilities.supportsPartitioning && info.capabilities.maxPartitions == 8,
          "partitioning, max %u", info.capabilities.maxPartitions);
    CHECK(!info.capabilities.supportsSnapshot && info.capabilities.supportsMetrics, "caps");
    CHECK(info.relatedDeviceCount == 7, "7 XGMI peers of %d: %zu", i, info.relatedDeviceCount);
    for (size_t k = 0; k < info.relatedDeviceCount; k++)
      CHECK(strcmp(info.relatedDevices[k].connectionType, "XGMI") == 0 &&
                info.relatedDevices[k].bandwidthMBps == 64000 &&
                strcmp(info.relatedDevices[k].deviceUUID, b->uuid) != 0,
            "peer %zu: %s %u MB/s", k, info.relatedDevices[k].connectionType,
            info.relatedDevices[k].bandwidthMBps);
    p_freeExtendedDeviceInfo(&info);
  }

  /* Templates: the compute modes the kernel lists, the memory modes of
   * the profile's memory_caps, each with its share. */
  PartitionTemplate *t = NULL;
  size_t nt = 0;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  const char *ids[] = {"SPX", "DPX", "QPX", "CPX", "NPS1", "NPS4"};
  const unsigned long long cus[] = {304, 152, 76, 38, 304, 304};
  const unsigned long long mem[] = {192, 96, 48, 24, 192, 48};
  const unsigned slices[] = {1, 2, 4, 8, 1, 4};
  CHECK(nt == 6, "MI300X templates %zu", nt);
  for (size_t i = 0; i < nt && i < 6; i++)
    CHECK(strcmp(t[i].templateId, ids[i]) == 0 && t[i].computeUnits == cus[i] &&
              t[i].memoryBytes == mem[i] * GIB && t[i].sliceCount == slices[i] &&
              t[i].isDefault == (i == 0 || i == 4) && t[i].description[0],
          "template %zu: %s %llu CUs %llu bytes x%u", i, t[i].templateId,
          (unsigned long long)t[i].computeUnits, (unsigned long long)t[i].memoryBytes, t[i].sliceCount);
  p_freePartitionTemplates(t, nt);
  EXPECT_RC(p_getPartitionTemplates(-1, &t, &nt), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(p_getPartitionTemplates(8, &t, &nt), RESULT_ERROR_NOT_FOUND);

  /* Partition modes: a device-wide change on an idle device. */
  char p[64], want[80];
  CHECK(assign("CPX", u[0], p), "CPX on GPU 0: %s", err());
  snprintf(want, sizeof want, "%s/CPX", u[0]);
  CHECK(strcmp(p, want) == 0, "partition uuid %s", p);
  CHECK(assign("nps4", u[0], NULL), "NPS4 (any case) on GPU 0: %s", err());
  /* GPU 1 runs a process: the mode change is refused before the driver. */
  CHECK(!assign("CPX", u[1], NULL), "CPX on busy GPU 1");
  CHECK(strstr(err(), "busy") && strstr(err(), "4343"), "busy: %s", err());
  CHECK(!assign("TPX", u[0], NULL), "TPX is not offered");
  CHECK(strstr(err(), "not found") != NULL, "unknown mode: %s", err());
  CHECK(!assign("CPX", "no-such-gpu", NULL), "unknown device");
  CHECK(!p_assignPartition(NULL), "NULL assignment");
  CHECK(p_removePartition(p, u[0]), "remove CPX by uuid: %s", err());
  CHECK(!p_removePartition("CPX", u[0]), "GPU 0 is back in SPX");
  CHECK(strstr(err(), "not found") && strstr(err(), "SPX"), "remove again: %s", err());
  CHECK(p_removePartition("NPS4", u[0]), "remove NPS4: %s", err());
  CHECK(p_removePartition("SPX", u[0]), "removing the default mode is a no-op: %s", err());
  CHECK(!p_removePartition(NULL, u[0]), "NULL template");

  /* Metrics. */
  const char *uuids[] = {u[0], u[1]};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(uuids, 2, &m), RESULT_SUCCESS);
  if (m) {
    CHECK(m[0].powerUsageWatts == 320 && m[0].temperatureCelsius == 41, "power %f temp %f",
          m[0].powerUsageWatts, m[0].temperatureCelsius);
    CHECK(m[0].memoryUsedBytes == 256 * MIB && m[0].memoryTotalBytes == 192 * GIB, "memory 0");
    CHECK(m[0].pcieTxBytes == 1000000 && m[0].pcieRxBytes == 2000000, "PCIe bytes");
    CHECK(m[1].smActivePercent == 87 && m[1].tensorCoreUsagePercent == 0, "GFX %u", m[1].smActivePercent);
    CHECK(m[1].memoryUsedBytes == 2304 * MIB, "memory 1 %llu", (unsigned long long)m[1].memoryUsedBytes);
    p_freeDeviceMetrics(m, 2);
  }
  ExtendedDeviceMetrics *em = NULL;
  EXPECT_RC(p_getExtendedDeviceMetrics(uuids, 2, &em), RESULT_SUCCESS);
  if (em) {
    CHECK(em[0].nvlinkCount == 7 && em[0].nvlinkBandwidthMBps[0] == 4000, "XGMI links %zu",
          em[0].nvlinkCount);
    CHECK(em[0].pcieLinkCount == 1 && em[0].pcieBandwidthMBps[0] == 3, "PCIe %u MB/s",
          em[0].pcieLinkCount ? em[0].pcieBandwidthMBps[0] : 0);
    p_freeExtendedDeviceMetrics(em, 2);
  }

  /* Topology: fully XGMI-connected. */
  int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  ExtendedDeviceTopology topo;
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 8, &topo), RESULT_SUCCESS);
  CHECK(topo.deviceCount == 8 && strcmp(topo.topologyType, "XGMI") == 0 && topo.nvlinkBandwidthMBps == 64000,
        "topology %zu %s %u", topo.deviceCount, topo.topologyType, topo.nvlinkBandwidthMBps);
  for (size_t i = 0; i < topo.deviceCount; i++)
    CHECK(topo.devices[i].connectionCount == 7 && topo.devices[i].numaNode == (int)i / 4, "row %zu", i);
  p_freeExtendedDeviceTopology(&topo);

  /* Processes: AMD SMI's list, VRAM bytes; compute unmeasured. */
  const char *pids[] = {"4343"};
  MemoryUtilization *mu = NULL;
  size_t nmu = 0;
  EXPECT_RC(p_getProcessMemoryUtilization(uuids, 2, pids, 1, &mu, &nmu), RESULT_SUCCESS);
  CHECK(nmu == 1 && mu && strcmp(mu[0].processId, "4343") == 0 && mu[0].usedBytes == 2 * GIB &&
            strcmp(mu[0].deviceUUID, u[1]) == 0,
        "process memory %zu", nmu);
  p_freeMemoryUtilizations(mu, nmu);
  ComputeUtilization *cu = NULL;
  size_t ncu = 0;
  EXPECT_RC(p_getProcessComputeUtilization(uuids, 2, pids, 1, &cu, &ncu), RESULT_SUCCESS);
  CHECK(ncu == 1 && cu && cu[0].utilizationPercent == 0 && cu[0].totalSMs == 304, "process compute %zu", ncu);
  p_freeComputeUtilizations(cu, ncu);

  /* No checkpoint API in AMD SMI: the reason is given. */
  pid_t me = getpid();
  ProcessArray pa = {&me, 1, {0}};
  EXPECT_RC(p_snapshot(&pa), RESULT_ERROR_NOT_SUPPORTED);
  CHECK(strstr(err(), "CRIU") != NULL, "snapshot reason: %s", err());

  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, metrics_thread, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
}

static void scenario_mi210(void) {
  load();
  CHECK(count() == 2, "two MI210");
  char u[2][64];
  uuid210_of(0, u[0]);
  uuid210_of(1, u[1]);
  for (int i = 0; i < 2; i++) {
    ExtendedDeviceInfo info;
    memset(&info, 0, sizeof info);
    EXPECT_RC(p_getDeviceInfo(i, &info), RESULT_SUCCESS);
    CHECK(strcmp(info.basic.uuid, u[i]) == 0 && strcmp(info.basic.model, "AMD Instinct MI210") == 0,
          "MI210 %d: %s %s", i, info.basic.uuid, info.basic.model);
    CHECK(info.basic.totalComputeUnits == 104 && info.basic.totalMemoryBytes == 64 * GIB &&
              info.basic.pcieGen == 4,
          "MI210 facts");
    CHECK(!info.capabilities.supportsPartitioning && info.capabilities.maxPartitions == 0, "no partitions");
    CHECK(info.relatedDeviceCount == 1 && strcmp(info.relatedDevices[0].connectionType, "PCIe") == 0 &&
              info.relatedDevices[0].bandwidthMBps == 0,
          "PCIe peer");
    p_freeExtendedDeviceInfo(&info);
  }
  PartitionTemplate *t = NULL;
  size_t nt = 9;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 0, "a device that supports no mode has no templates (%zu)", nt);
  p_freePartitionTemplates(t, nt);
  CHECK(!assign("SPX", u[0], NULL), "no partition modes");
  CHECK(strstr(err(), "not supported") != NULL, "%s", err());
  int32_t idx[2] = {0, 1};
  ExtendedDeviceTopology topo;
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 2, &topo), RESULT_SUCCESS);
  CHECK(strcmp(topo.topologyType, "PCIe") == 0 && topo.nvlinkBandwidthMBps == 0, "topology %s",
        topo.topologyType);
  p_freeExtendedDeviceTopology(&topo);
  const char *uuids[] = {u[0], u[1]};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(uuids, 2, &m), RESULT_SUCCESS);
  CHECK(m && m[0].powerUsageWatts == 90 && m[0].memoryTotalBytes == 64 * GIB, "MI210 average power %f",
        m ? m[0].powerUsageWatts : -1);
  p_freeDeviceMetrics(m, 2);
  ExtendedDeviceMetrics *em = NULL;
  EXPECT_RC(p_getExtendedDeviceMetrics(uuids, 2, &em), RESULT_SUCCESS);
  CHECK(em && em[0].nvlinkCount == 0, "no XGMI links on PCIe MI210");
  p_freeExtendedDeviceMetrics(em, 2);
}

/* A GPU reset between calls: its handle goes stale. Calls on it are
 * NOT_FOUND; the other GPUs keep working; it comes back when AMD SMI
 * answers again. */
static void scenario_reset(void) {
  load();
  CHECK(count() == 8, "eight GPUs before the reset");
  char u0[64], u2[64];
  uuid_of(0, u0);
  uuid_of(2, u2);
  setenv("FAKE_AMDSMI_GONE", "2", 1);
  const char *gone[] = {u2};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(gone, 1, &m), RESULT_ERROR_NOT_FOUND);
  CHECK(strstr(err(), "amdsmi_get_") && strstr(err(), "reset"), "stale handle: %s", err());
  const char *live[] = {u0};
  m = NULL;
  EXPECT_RC(p_getDeviceMetrics(live, 1, &m), RESULT_SUCCESS);
  p_freeDeviceMetrics(m, 1);
  CHECK(!assign("CPX", u2, NULL), "no mode change on a reset GPU");
  int32_t idx[3] = {0, 1, 2};
  ExtendedDeviceTopology topo;
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 3, &topo), RESULT_ERROR_NOT_FOUND);
  p_freeExtendedDeviceTopology(&topo);
  /* Listing every GPU's processes leaves the reset one out. */
  CHECK(lists_pid(NULL, 0, "4343") == 1, "GPU 1's process still listed");
  unsetenv("FAKE_AMDSMI_GONE");
  m = NULL;
  EXPECT_RC(p_getDeviceMetrics(gone, 1, &m), RESULT_SUCCESS);
  p_freeDeviceMetrics(m, 1);
}

/* A GPU whose handle is stale at discovery is left out, not invented. */
static void scenario_gone_at_start(void) {
  load();
  CHECK(count() == 7, "seven GPUs (%zu)", count());
}

/* AMD SMI failing mid-list: the failing GPU's processes are left out of a
 * node-wide listing, and a mode change that cannot check for processes is
 * refused. */
static void scenario_procs_fail(void) {
  load();
  char u1[64], u3[64];
  uuid_of(1, u1);
  uuid_of(3, u3);
  CHECK(lists_pid(NULL, 0, "4343") == 0, "GPU 1's list failed: its process is not listed");
  const char *one[] = {u3};
  CHECK(lists_pid(one, 1, "4343") == 0, "other GPUs still list");
  setenv("FAKE_AMDSMI_FAIL_PROCS", "3", 1);
  CHECK(!assign("CPX", u3, NULL), "mode change without a process list");
  CHECK(strstr(err(), "amdsmi_get_gpu_process_list") != NULL, "reason: %s", err());
  unsetenv("FAKE_AMDSMI_FAIL_PROCS");
  CHECK(assign("CPX", u3, NULL), "with the list back: %s", err());
  CHECK(lists_pid(NULL, 0, "4343") == 1, "listed again");
}

/* Without the kernel's sysfs files: no render node, no compute modes; the
 * memory modes AMD SMI reports remain. */
static void scenario_no_sysfs(void) {
  load();
  PartitionTemplate *t = NULL;
  size_t nt = 0;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 2 && strcmp(t[0].templateId, "NPS1") == 0 && strcmp(t[1].templateId, "NPS4") == 0,
        "memory modes only (%zu)", nt);
  p_freePartitionTemplates(t, nt);
  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_SUCCESS);
  CHECK(info.capabilities.maxPartitions == 0 && info.capabilities.supportsPartitioning,
        "NPS only: partitioning, no compute partitions");
  p_freeExtendedDeviceInfo(&info);
}

static void scenario_no_library(void) {
  load();
  expect_no_devices("amd", "no libamd_smi.so");
}

static void scenario_init_fails(void) {
  load();
  expect_no_devices("amd", "amdsmi_init fails");
}

/* An AMD SMI version whose layouts this build does not know: refused at
 * discovery, its version and the supported ones in the reason. */
static void scenario_unknown_version(void) {
  load();
  expect_no_devices("amd", "AMD SMI 27.1.0");
  ExtendedDeviceInfo info;
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_ERROR_NOT_FOUND);
  const char *e = err();
  CHECK(strstr(e, "AMD SMI 27.1.0") && strstr(e, "24.x") && strstr(e, "26.x"), "reason: %s", e);
}

int main(int argc, char **argv) {
  if (argc != 2 || !getenv("ACCELERATOR_AMDSMI_PATH") || !getenv("ACCELERATOR_AMD_SYSFS")) {
    fprintf(stderr, "usage: ACCELERATOR_AMDSMI_PATH=fake ACCELERATOR_AMD_SYSFS=tree %s libaccelerator_amd.so\n",
            argv[0]);
    return 2;
  }
  suite_lib_path = argv[1];
  unsetenv("FAKE_AMDSMI_NODE");
  unsetenv("FAKE_AMDSMI_GONE");
  unsetenv("FAKE_AMDSMI_FAIL_PROCS");
  unsetenv("FAKE_AMDSMI_INIT_FAIL");
  unsetenv("FAKE_AMDSMI_VERSION");
  static const struct run runs[] = {
      {"mi300x", scenario_mi300x, {0}, 0, 0},
      {"mi210", scenario_mi210, {"FAKE_AMDSMI_NODE=mi210"}, 0, 0},
      {"gpu-reset", scenario_reset, {0}, 0, 0},
      {"gone-at-start", scenario_gone_at_start, {"FAKE_AMDSMI_GONE=3"}, 0, 0},
      {"procs-fail-mid-list", scenario_procs_fail, {"FAKE_AMDSMI_FAIL_PROCS=1"}, 0, 0},
      {"no-sysfs", scenario_no_sysfs, {"ACCELERATOR_AMD_SYSFS=/nonexistent"}, 0, 0},
      {"no-library", scenario_no_library, {"ACCELERATOR_AMDSMI_PATH=/nonexistent/libamd_smi.so"}, 0, 0},
      {"init-fails", scenario_init_fails, {"FAKE_AMDSMI_INIT_FAIL=1"}, 0, 0},
      {"unknown-version", scenario_unknown_version, {"FAKE_AMDSMI_VERSION=27.1.0"}, 0, 0},
  };
  return suite_run(runs, sizeof runs / sizeof runs[0], NULL);
}
