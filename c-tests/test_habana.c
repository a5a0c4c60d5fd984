/* The habana vendor against the fake libhlml.so (c-tests/fakes/hlml.c),
 * through the C ABI.
 *
 * usage: test_habana build/libaccelerator_habana.so
 * with ACCELERATOR_HLML_PATH (the fake), ACCELERATOR_HABANA_SYSFS (its
 * sysfs tree) and FAKE_HLML_MINOR (the release the fake is built as) set,
 * as vendors/habana/vendor.mk does.
 *
 * Every configuration runs in a fresh forked child (vendor_suite.h). The
 * fake reads its fault variables on every call, so a scenario can lose a
 * device between two calls. */
#include "vendor_suite.h"

#include <pthread.h>

/* The fake's devices in HLML's index order: their buses, module ids. */
static const unsigned bus_of[8] = {0x33, 0x9a, 0x19, 0xb3, 0x1a, 0x4d, 0xb4, 0x34};
static const unsigned module_of[8] = {2, 5, 0, 6, 1, 3, 7, 4};

static unsigned bus_rank(int i) {
  unsigned r = 0;
  for (int j = 0; j < 8; j++)
    r += bus_of[j] < bus_of[i];
  return r;
}

static void uuid_of(int i, bool gaudi3, char out[64]) {
  snprintf(out, 64, "01P%d-HL%s-15-TN%04X-0%u-07-0%u", gaudi3 ? 3 : 4, gaudi3 ? "3090A0" : "2080A0",
           0xa62 + bus_of[i], module_of[i], bus_rank(i));
}

static int minor_release(void) { return atoi(getenv("FAKE_HLML_MINOR")); }

static void load(void) { suite_load("habana"); }

static void *metrics_thread(void *arg) {
  (void)arg;
  char u1[64];
  uuid_of(1, false, u1);
  const char *uuids[] = {u1};
  for (int i = 0; i < (test_quick() ? 5 : 200); i++) {
    DeviceMetrics *m = NULL;
    EXPECT_RC(p_getDeviceMetrics(uuids, 1, &m), RESULT_SUCCESS);
    CHECK(m && m[0].smActivePercent == 87, "concurrent metrics");
    p_freeDeviceMetrics(m, 1);
  }
  return NULL;
}

/* What every device of a node says; `g3` the Gaudi 3 node. */
static void node(bool g3) {
  load();
  CHECK(strcmp(p_acceleratorVendorName(), "habana") == 0, "vendor %s", p_acceleratorVendorName());
  CHECK(count() == 8, "eight devices");
  char want[80];
  for (int i = 0; i < 8; i++) {
    ExtendedDeviceInfo info;
    memset(&info, 0, sizeof info);
    EXPECT_RC(p_getDeviceInfo(i, &info), RESULT_SUCCESS);
    DeviceBasicInfo *b = &info.basic;
    char u[64];
    uuid_of(i, g3, u);
    CHECK(strcmp(b->uuid, u) == 0, "uuid %d = %s, want %s", i, b->uuid, u);
    CHECK(strcmp(b->vendor, "Habana") == 0, "vendor %s", b->vendor);
    CHECK(strcmp(b->model, g3 ? "HL-325L" : "HL-225") == 0, "model %s", b->model);
    snprintf(want, sizeof want, "1.%d.0-7c61dbc", minor_release());
    CHECK(strcmp(b->driverVersion, want) == 0, "driver %s", b->driverVersion);
    snprintf(want, sizeof want, "hl-gaudi%d-1.%d.0-fw-61.3.2-sec-%d", g3 ? 3 : 2, minor_release(), g3 ? 3 : 9);
    CHECK(strcmp(b->firmwareVersion, want) == 0, "firmware %s", b->firmwareVersion);
    CHECK(b->index == i && b->numaNode == (bus_rank(i) < 4 ? 0 : 1), "index %d numa %d", b->index, b->numaNode);
    CHECK(b->totalMemoryBytes == (g3 ? 131072 : 98304) * MIB, "memory %llu",
          (unsigned long long)b->totalMemoryBytes);
    CHECK(b->totalComputeUnits == 0 && b->maxTflops == 0.0, "no invented compute figures");
    CHECK(b->pcieGen == (g3 ? 5u : 4u) && b->pcieWidth == 16, "PCIe Gen%u x%u", b->pcieGen, b->pcieWidth);
    CHECK(info.props.powerLimit == (g3 ? 900u : 600u) && info.props.clockAI == (g3 ? 1600u : 1800u) &&
              info.props.eccEnabled,
          "power %u W, SoC %u MHz, ECC %d", info.props.powerLimit, info.props.clockAI, info.props.eccEnabled);
    CHECK(!info.capabilities.supportsPartitioning && !info.capabilities.supportsSoftIsolation &&
              !info.capabilities.supportsHardIsolation && !info.capabilities.supportsSnapshot &&
              info.capabilities.supportsMetrics && info.capabilities.maxPartitions == 0,
          "caps of %d", i);
    CHECK(info.relatedDeviceCount == 0, "no link HLML can tell (%zu)", info.relatedDeviceCount);
    p_freeExtendedDeviceInfo(&info);
  }

  PartitionTemplate *t = NULL;
  size_t nt = 9;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 0, "no templates (%zu)", nt);
  p_freePartitionTemplates(t, nt);
  EXPECT_RC(p_getPartitionTemplates(8, &t, &nt), RESULT_ERROR_NOT_FOUND);
  char u0[64], u1[64], u7[64];
  uuid_of(0, g3, u0);
  uuid_of(1, g3, u1);
  uuid_of(7, g3, u7);
  CHECK(!assign("any", u0, NULL), "no partitions");
  CHECK(strstr(err(), "no partitions") != NULL, "reason: %s", err());
  CHECK(!assign("any", "no-such-device", NULL), "unknown device");
  CHECK(strstr(err(), "not found") != NULL, "unknown device: %s", err());
  CHECK(!p_removePartition("any", u0), "nothing to remove");

  /* Metrics: mW -> W, bytes; the AIP's utilization. */
  const char *uuids[] = {u0, u1, u7};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(uuids, 3, &m), RESULT_SUCCESS);
  if (m) {
    double idle = g3 ? 162 : 98;
    CHECK(m[0].powerUsageWatts == idle && m[0].temperatureCelsius == 31 && m[0].smActivePercent == 0,
          "idle: %f W %f C", m[0].powerUsageWatts, m[0].temperatureCelsius);
    CHECK(m[1].powerUsageWatts == idle + 348 && m[1].temperatureCelsius == 52 && m[1].smActivePercent == 87,
          "busy: %f W %f C %u %%", m[1].powerUsageWatts, m[1].temperatureCelsius, m[1].smActivePercent);
    CHECK(m[1].memoryUsedBytes == 41984 * MIB && m[1].memoryTotalBytes == (g3 ? 131072 : 98304) * MIB,
          "memory %llu", (unsigned long long)m[1].memoryUsedBytes);
    CHECK(m[2].memoryUsedBytes == 96000 * MIB && m[2].smActivePercent == 100, "device 7");
    CHECK(m[0].pcieRxBytes == 0 && m[0].pcieTxBytes == 0 && m[0].tensorCoreUsagePercent == 0,
          "no figure without a unit");
    p_freeDeviceMetrics(m, 3);
  }
  ExtendedDeviceMetrics *em = NULL;
  EXPECT_RC(p_getExtendedDeviceMetrics(uuids, 1, &em), RESULT_SUCCESS);
  CHECK(em && em[0].nvlinkCount == 0 && em[0].pcieLinkCount == 0, "no per-link rates");
  p_freeExtendedDeviceMetrics(em, 1);

  /* Topology: NUMA nodes known, links not. */
  int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  ExtendedDeviceTopology topo;
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 8, &topo), RESULT_SUCCESS);
  CHECK(topo.deviceCount == 8 && strcmp(topo.topologyType, "Unknown") == 0 && topo.nvlinkBandwidthMBps == 0,
        "topology %zu %s", topo.deviceCount, topo.topologyType);
  for (size_t i = 0; i < topo.deviceCount; i++)
    CHECK(topo.devices[i].connectionCount == 0 && topo.devices[i].numaNode == (bus_rank((int)i) < 4 ? 0 : 1),
          "row %zu", i);
  p_freeExtendedDeviceTopology(&topo);
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 1, &topo), RESULT_SUCCESS);
  CHECK(strcmp(topo.topologyType, "Single") == 0, "one device: %s", topo.topologyType);
  p_freeExtendedDeviceTopology(&topo);

  /* HLML lists no processes: none without the limiter's records. */
  const char *pids[] = {"4343"};
  MemoryUtilization *mu = NULL;
  size_t nmu = 9;
  EXPECT_RC(p_getProcessMemoryUtilization(uuids, 3, pids, 1, &mu, &nmu), RESULT_SUCCESS);
  CHECK(nmu == 0, "no processes (%zu)", nmu);
  p_freeMemoryUtilizations(mu, nmu);
  ComputeUtilization *cu = NULL;
  size_t ncu = 9;
  EXPECT_RC(p_getProcessComputeUtilization(uuids, 3, pids, 1, &cu, &ncu), RESULT_SUCCESS);
  CHECK(ncu == 0, "no processes (%zu)", ncu);
  p_freeComputeUtilizations(cu, ncu);

  pid_t me = getpid();
  ProcessArray pa = {&me, 1, {0}};
  EXPECT_RC(p_snapshot(&pa), RESULT_ERROR_NOT_SUPPORTED);
  CHECK(strstr(err(), "HLML") != NULL, "snapshot reason: %s", err());
}

static void scenario_gaudi2(void) {
  node(false);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, metrics_thread, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
}

static void scenario_gaudi3(void) { node(true); }

/* A device lost between calls (a fatal error): calls on it are NOT_FOUND,
 * the others keep working, it answers again once HLML does. */
static void scenario_lost(void) {
  load();
  CHECK(count() == 8, "eight devices before the loss");
  char u0[64], u2[64];
  uuid_of(0, false, u0);
  uuid_of(2, false, u2);
  setenv("FAKE_HLML_GONE", "2", 1);
  const char *gone[] = {u2}, *live[] = {u0};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(gone, 1, &m), RESULT_ERROR_NOT_FOUND);
  CHECK(strstr(err(), "hlml_device_get_") && strstr(err(), "lost"), "lost device: %s", err());
  m = NULL;
  EXPECT_RC(p_getDeviceMetrics(live, 1, &m), RESULT_SUCCESS);
  p_freeDeviceMetrics(m, 1);
  unsetenv("FAKE_HLML_GONE");
  m = NULL;
  EXPECT_RC(p_getDeviceMetrics(gone, 1, &m), RESULT_SUCCESS);
  p_freeDeviceMetrics(m, 1);
}

/* A device lost at discovery is left out, not invented. */
static void scenario_gone_at_start(void) {
  load();
  CHECK(count() == 7, "seven devices (%zu)", count());
}

static void scenario_no_library(void) {
  load();
  expect_no_devices("habana", "no libhlml.so");
  ExtendedDeviceInfo info;
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_ERROR_NOT_FOUND);
  CHECK(strstr(err(), "libhlml.so") != NULL, "reason: %s", err());
}

static void scenario_init_fails(void) {
  load();
  expect_no_devices("habana", "hlml_init fails");
  ExtendedDeviceInfo info;
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_ERROR_NOT_FOUND);
  CHECK(strstr(err(), "hlml_init") && strstr(err(), "driver not loaded"), "reason: %s", err());
}

/* An HLML release whose layouts this build does not know: refused at
 * discovery, its version and the supported ones in the reason. */
static void scenario_unknown_version(void) {
  load();
  expect_no_devices("habana", "HLML 1.25.0");
  ExtendedDeviceInfo info;
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_ERROR_NOT_FOUND);
  CHECK(strstr(err(), "1.25.0") && strstr(err(), "1.10 to 1.24"), "reason: %s", err());
}

int main(int argc, char **argv) {
  if (argc != 2 || !getenv("ACCELERATOR_HLML_PATH") || !getenv("FAKE_HLML_MINOR")) {
    fprintf(stderr, "usage: ACCELERATOR_HLML_PATH=fake FAKE_HLML_MINOR=n %s libaccelerator_habana.so\n", argv[0]);
    return 2;
  }
  suite_lib_path = argv[1];
  unsetenv("FAKE_HLML_NODE");
  unsetenv("FAKE_HLML_GONE");
  unsetenv("FAKE_HLML_INIT_FAIL");
  unsetenv("FAKE_HLML_VERSION");
  static const struct run runs[] = {
      {"gaudi2", scenario_gaudi2, {0}, 0, 0},
      {"gaudi3", scenario_gaudi3, {"FAKE_HLML_NODE=gaudi3"}, 0, 0},
      {"device-lost", scenario_lost, {0}, 0, 0},
      {"gone-at-start", scenario_gone_at_start, {"FAKE_HLML_GONE=3"}, 0, 0},
      {"no-library", scenario_no_library, {"ACCELERATOR_HLML_PATH=/nonexistent/libhlml.so"}, 0, 0},
      {"init-fails", scenario_init_fails, {"FAKE_HLML_INIT_FAIL=1"}, 0, 0},
      {"unknown-version", scenario_unknown_version, {"FAKE_HLML_VERSION=1.25.0"}, 0, 0},
  };
  return suite_run(runs, sizeof runs / sizeof runs[0], NULL);
}
