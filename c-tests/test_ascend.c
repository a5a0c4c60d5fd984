/* The Ascend vendor against the fake libdcmi.so (c-tests/fakes/dcmi.c),
 * through the C ABI.
 *
 * usage: test_ascend build/libaccelerator_ascend.so build/fakes/ascend
 *
 * Every DCMI configuration runs in a fresh forked child (vendor_suite.h):
 * the child sets its environment, dlopens the library, checks, and reports
 * its counts through a pipe. */
#include "vendor_suite.h"

#include <pthread.h>
#include <sys/stat.h>

static const char *fake_dir;
static char fake_path[4096];

static __typeof__(&GetDeviceCount) p_GetDeviceCount;

/* Device index 0 is card 4 (DCMI logical ID 0), index 1 is card 1. */
#define UUID910_0 "ascend-a5c3d91000c0ffee1234567c0badf00d00000002"
#define UUID910_1 "ascend-a5c3d91000c0ffee123456790badf00d00000001"
#define UUID310_0 "ascend-a5c3d31000c0ffee1234567c0badf00d00000002"

static void load(const char *fake) {
  if (fake) {
    snprintf(fake_path, sizeof fake_path, "%s/%s", fake_dir, fake);
    setenv("ACCELERATOR_DCMI_PATH", fake_path, 1);
  }
  suite_load("ascend");
  p_GetDeviceCount = (__typeof__(p_GetDeviceCount))dlsym(lib, "GetDeviceCount");
}

/* dcmi_create_vdevice calls that reached the fake driver. */
static int create_calls(void) {
  void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return -1;
  int (*f)(void) = (int (*)(void))dlsym(h, "fake_dcmi_create_calls");
  int n = f ? f() : -1;
  dlclose(h);
  return n;
}

/* ------------------------------------------------------------ scenarios */

static void *metrics_thread(void *arg) {
  (void)arg;
  const char *uuids[] = {UUID910_0, UUID910_1};
  for (int i = 0; i < (test_quick() ? 5 : 200); i++) {
    DeviceMetrics *m = NULL;
    EXPECT_RC(p_getDeviceMetrics(uuids, 2, &m), RESULT_SUCCESS);
    CHECK(m && m[0].temperatureCelsius == 46.0, "concurrent metrics");
    p_freeDeviceMetrics(m, 2);
  }
  return NULL;
}

static void scenario_910(void) {
  load("libdcmi.so");
  CHECK(count() == 2, "two 910 chips");
  size_t n2 = 0;
  EXPECT_RC(p_GetDeviceCount(&n2), RESULT_SUCCESS);
  CHECK(n2 == 2, "GetDeviceCount %zu", n2);

  const char *want[2] = {UUID910_0, UUID910_1};
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 2; i++) {
      ExtendedDeviceInfo info;
      memset(&info, 0, sizeof info);
      EXPECT_RC(p_getDeviceInfo(i, &info), RESULT_SUCCESS);
      DeviceBasicInfo *b = &info.basic;
      CHECK(strcmp(b->uuid, want[i]) == 0, "uuid %d = %s", i, b->uuid);
      CHECK(strcmp(b->vendor, "Huawei") == 0, "vendor %s", b->vendor);
      CHECK(strcmp(b->model, "Ascend 910ProB") == 0, "model %s", b->model);
      CHECK(strcmp(b->driverVersion, "23.0.3-fake") == 0, "driver %s",
            b->driverVersion);
      CHECK(b->index == i, "index");
      CHECK(b->totalComputeUnits == 32, "AI cores %llu",
            (unsigned long long)b->totalComputeUnits);
      CHECK(b->totalMemoryBytes == 32 * GIB, "memory %llu",
            (unsigned long long)b->totalMemoryBytes);
      CHECK(b->maxTflops == 0.0, "no invented TFLOPS");
      CHECK(strcmp(info.props.chipType, "910") == 0, "chip %s",
            info.props.chipType);
      CHECK(info.props.clockAI == 1000, "AI clock %u", info.props.clockAI);
      CHECK(info.capabilities.supportsPartitioning, "partitioning");
      CHECK(!info.capabilities.supportsSnapshot, "no snapshot");
      CHECK(info.capabilities.supportsMetrics, "metrics");
      CHECK(info.capabilities.maxPartitions == 16, "max partitions %u",
            info.capabilities.maxPartitions);
      CHECK(info.relatedDeviceCount == 1 &&
                strcmp(info.relatedDevices[0].deviceUUID, want[1 - i]) == 0 &&
                strcmp(info.relatedDevices[0].connectionType, "HCCS") == 0,
            "HCCS peer of %d", i);
      p_freeExtendedDeviceInfo(&info);
    }
  }

  /* Templates. */
  PartitionTemplate *t = NULL;
  size_t nt = 0;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 4, "910 templates %zu", nt);
  int seen = 0;
  for (size_t i = 0; i < nt; i++) {
    if (strcmp(t[i].templateId, "vir16") == 0) {
      seen++;
      CHECK(t[i].computeUnits == 16 && t[i].memoryBytes == 16 * GIB,
            "vir16 %llu cores %llu bytes", (unsigned long long)t[i].computeUnits,
            (unsigned long long)t[i].memoryBytes);
    }
    if (strcmp(t[i].templateId, "vir02") == 0) {
      seen++;
      CHECK(t[i].computeUnits == 2 && t[i].memoryBytes == 2 * GIB, "vir02");
    }
  }
  CHECK(seen == 2, "vir02 and vir16 listed");
  p_freePartitionTemplates(t, nt);
  EXPECT_RC(p_getPartitionTemplates(-1, &t, &nt), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(p_getPartitionTemplates(7, &t, &nt), RESULT_ERROR_NOT_FOUND);

  /* vNPUs: two vir16 fill the 32 AI cores; a third is refused before the
   * driver is asked. */
  char p1[64], p2[64];
  CHECK(assign("vir16", UUID910_0, p1), "vir16 #1: %s", err());
  CHECK(strcmp(p1, UUID910_0 "-vnpu-100") == 0, "partition uuid %s", p1);
  CHECK(assign("vir16", UUID910_0, p2), "vir16 #2: %s", err());
  CHECK(create_calls() == 2, "create calls %d", create_calls());
  CHECK(!assign("vir02", UUID910_0, NULL), "vir02 over capacity");
  CHECK(strstr(err(), "resource exhausted") != NULL, "exhausted: %s", err());
  CHECK(create_calls() == 2, "refused before the driver: %d", create_calls());
  /* The other chip is untouched. */
  CHECK(assign("vir08", UUID910_1, NULL), "vir08 on chip 1: %s", err());
  CHECK(!assign("vir99", UUID910_0, NULL), "unknown template");
  CHECK(strstr(err(), "not found") != NULL, "unknown template: %s", err());
  CHECK(!assign("vir02", "ascend-nope", NULL), "unknown device");
  CHECK(strstr(err(), "not found") != NULL, "unknown device: %s", err());
  CHECK(!p_assignPartition(NULL), "NULL assignment");
  CHECK(p_removePartition(p1, UUID910_0), "remove by uuid: %s", err());
  CHECK(p_removePartition("vir16", UUID910_0), "remove by template: %s", err());
  CHECK(!p_removePartition("vir16", UUID910_0), "nothing left to remove");
  CHECK(strstr(err(), "not found") != NULL, "remove missing: %s", err());
  CHECK(p_removePartition("vir08", UUID910_1), "remove vir08: %s", err());
  CHECK(!p_removePartition(NULL, UUID910_1), "NULL template");

  /* Metrics (device 0 is the fake's second chip). */
  const char *uuids[] = {UUID910_0, UUID910_1};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(uuids, 2, &m), RESULT_SUCCESS);
  if (m) {
    CHECK(m[0].powerUsageWatts > 72.59 && m[0].powerUsageWatts < 72.61,
          "power %f", m[0].powerUsageWatts);
    CHECK(m[0].temperatureCelsius == 46.0, "temp %f", m[0].temperatureCelsius);
    CHECK(m[0].smActivePercent == 38, "AI core %u", m[0].smActivePercent);
    CHECK(m[0].memoryUsedBytes == 2 * GIB, "used %llu",
          (unsigned long long)m[0].memoryUsedBytes);
    CHECK(m[0].memoryTotalBytes == 32 * GIB, "total");
    CHECK(m[1].powerUsageWatts > 72.49 && m[1].powerUsageWatts < 72.51,
          "power 1 %f", m[1].powerUsageWatts);
    CHECK(m[1].memoryUsedBytes == 1 * GIB, "used 1");
    p_freeDeviceMetrics(m, 2);
  }
  const char *bad[] = {"ascend-missing"};
  m = NULL;
  EXPECT_RC(p_getDeviceMetrics(bad, 1, &m), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(p_getDeviceMetrics(NULL, 1, &m), RESULT_ERROR_INVALID_PARAM);

  ExtendedDeviceMetrics *em = NULL;
  EXPECT_RC(p_getExtendedDeviceMetrics(uuids, 2, &em), RESULT_SUCCESS);
  p_freeExtendedDeviceMetrics(em, 2);

  /* Topology. */
  int32_t idx[2] = {0, 1};
  ExtendedDeviceTopology topo;
  memset(&topo, 0, sizeof topo);
  EXPECT_RC(p_getDeviceTopology(idx, 2, &topo), RESULT_SUCCESS);
  CHECK(topo.deviceCount == 2 && strcmp(topo.topologyType, "HCCS") == 0,
        "topology %zu %s", topo.deviceCount, topo.topologyType);
  p_freeExtendedDeviceTopology(&topo);

  /* Processes: driver data only. */
  const char *pids[] = {"4242"};
  MemoryUtilization *mu = NULL;
  size_t nmu = 0;
  EXPECT_RC(p_getProcessMemoryUtilization(uuids, 2, pids, 1, &mu, &nmu),
            RESULT_SUCCESS);
  CHECK(nmu == 1 && mu && strcmp(mu[0].processId, "4242") == 0 &&
            mu[0].usedBytes == 512 * MIB &&
            strcmp(mu[0].deviceUUID, UUID910_1) == 0,
        "process memory %zu", nmu);
  p_freeMemoryUtilizations(mu, nmu);
  ComputeUtilization *cu = NULL;
  size_t ncu = 5;
  EXPECT_RC(p_getProcessComputeUtilization(uuids, 2, pids, 1, &cu, &ncu),
            RESULT_SUCCESS);
  p_freeComputeUtilizations(cu, ncu);

  /* No checkpoint API in DCMI. */
  pid_t me = getpid();
  ProcessArray pa = {&me, 1, {0}};
  EXPECT_RC(p_snapshot(&pa), RESULT_ERROR_NOT_SUPPORTED);

  ExtendedDeviceInfo info;
  EXPECT_RC(p_getDeviceInfo(-1, &info), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(p_getDeviceInfo(2, &info), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(p_getDeviceInfo(0, NULL), RESULT_ERROR_INVALID_PARAM);

  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, metrics_thread, NULL);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
}

/* The vNPU state lives in the fake "driver": a second process finds it. */
static void scenario_restart_a(void) {
  load("libdcmi.so");
  char p[64];
  CHECK(assign("vir08", UUID910_1, p), "vir08 before restart: %s", err());
}

static void scenario_restart_b(void) {
  load("libdcmi.so");
  CHECK(assign("vir16", UUID910_1, NULL), "vir16 after restart: %s", err());
  CHECK(!assign("vir16", UUID910_1, NULL), "8+16+16 > 32 AI cores");
  CHECK(strstr(err(), "resource exhausted") != NULL, "after restart: %s",
        err());
  CHECK(create_calls() == 1, "refused before the driver %d", create_calls());
  CHECK(p_removePartition("vir08", UUID910_1), "remove the old vir08: %s",
        err());
  CHECK(p_removePartition("vir16", UUID910_1), "remove vir16: %s", err());
}

static void scenario_310p(void) {
  setenv("FAKE_DCMI_CHIP", "310P", 1);
  load("libdcmi.so");
  CHECK(count() == 2, "two 310P chips");
  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_SUCCESS);
  CHECK(strcmp(info.basic.uuid, UUID310_0) == 0, "uuid %s", info.basic.uuid);
  CHECK(strcmp(info.basic.model, "Ascend 310P3") == 0, "model %s",
        info.basic.model);
  CHECK(info.basic.totalComputeUnits == 8, "8 AI cores");
  CHECK(info.basic.totalMemoryBytes == 24 * GIB, "24 GiB DDR");
  CHECK(info.relatedDeviceCount == 0, "no topology on 310P");
  CHECK(info.capabilities.maxPartitions == 8, "max %u",
        info.capabilities.maxPartitions);
  p_freeExtendedDeviceInfo(&info);

  const char *names[] = {"vir01",    "vir02",          "vir02_1c",
                         "vir04",    "vir04_3c",       "vir04_3c_ndvpp",
                         "vir04_4c_dvpp"};
  PartitionTemplate *t = NULL;
  size_t nt = 0;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 7, "310P templates %zu", nt);
  for (size_t i = 0; i < nt && i < 7; i++) {
    CHECK(strcmp(t[i].templateId, names[i]) == 0, "template %zu %s", i,
          t[i].templateId);
    CHECK(t[i].memoryBytes == 3 * GIB * t[i].computeUnits, "memory of %s",
          t[i].templateId);
  }
  p_freePartitionTemplates(t, nt);

  CHECK(assign("vir04", UUID310_0, NULL), "vir04: %s", err());
  CHECK(assign("vir04_3c", UUID310_0, NULL), "vir04_3c: %s", err());
  CHECK(!assign("vir01", UUID310_0, NULL), "no AI core left");
  CHECK(create_calls() == 2, "create calls %d", create_calls());
  CHECK(p_removePartition("vir04", UUID310_0), "remove: %s", err());
  CHECK(assign("vir02_1c", UUID310_0, NULL), "vir02_1c: %s", err());

  const char *u[] = {UUID310_0};
  DeviceMetrics *m = NULL;
  EXPECT_RC(p_getDeviceMetrics(u, 1, &m), RESULT_SUCCESS);
  if (m) {
    CHECK(m[0].memoryUsedBytes == 4 * GIB, "DDR used %llu",
          (unsigned long long)m[0].memoryUsedBytes);
    CHECK(m[0].memoryTotalBytes == 24 * GIB, "DDR total");
    CHECK(m[0].powerUsageWatts > 15.09 && m[0].powerUsageWatts < 15.11,
          "power %f", m[0].powerUsageWatts);
  }
  p_freeDeviceMetrics(m, 1);
}

static void scenario_no_library(void) {
  setenv("ACCELERATOR_DCMI_PATH", "/nonexistent/libdcmi.so", 1);
  load(NULL);
  expect_no_devices("ascend", "missing libdcmi.so");
}

static void scenario_init_fails(void) {
  setenv("FAKE_DCMI_FAIL_INIT", "1", 1);
  load("libdcmi.so");
  expect_no_devices("ascend", "dcmi_init fails");
}

static void scenario_no_required(void) {
  load("libdcmi_noreq.so");
  expect_no_devices("ascend", "dcmi_get_device_chip_info missing");
}

/* Drivers before DCMI V2 export only dcmi_get_card_num_list. */
static void scenario_v1_card_list(void) {
  load("libdcmi_v1.so");
  CHECK(count() == 2, "old driver: cards through dcmi_get_card_num_list");
}

/* The V2 name is looked up first: a failing V1 entry point is never called
 * where dcmi_get_card_list exists. */
static void scenario_v2_card_list_first(void) {
  load("libdcmi.so");
  CHECK(count() == 2, "dcmi_get_card_list used, not the failing V1 name");
}

static void scenario_v1_card_list_fails(void) {
  load("libdcmi_v1.so");
  expect_no_devices("ascend", "old driver: dcmi_get_card_num_list fails");
}

static void scenario_no_optional(void) {
  load("libdcmi_noopt.so");
  CHECK(count() == 2, "devices without dcmi_create_vdevice");
  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_SUCCESS);
  CHECK(!info.capabilities.supportsPartitioning, "no partitioning claimed");
  CHECK(info.capabilities.maxPartitions == 0, "max partitions 0");
  CHECK(info.capabilities.supportsMetrics, "metrics still there");
  p_freeExtendedDeviceInfo(&info);
  PartitionTemplate *t = NULL;
  size_t nt = 9;
  EXPECT_RC(p_getPartitionTemplates(0, &t, &nt), RESULT_SUCCESS);
  CHECK(nt == 0, "no templates without vNPU support");
  p_freePartitionTemplates(t, nt);
  CHECK(!assign("vir02", UUID910_0, NULL), "assign unsupported");
  CHECK(strstr(err(), "not supported") != NULL, "unsupported: %s", err());
}

/* One injected DCMI failure: FAKE_DCMI_FAIL is set by the parent. */
static int metrics_rc(void) {
  const char *u[] = {UUID910_0};
  DeviceMetrics *m = NULL;
  int rc = p_getDeviceMetrics(u, 1, &m);
  p_freeDeviceMetrics(m, rc == RESULT_SUCCESS ? 1 : 0);
  return rc;
}

static void scenario_fail(const char *what) {
  load("libdcmi.so");
  if (strcmp(what, "cardlist") == 0) {
    expect_no_devices("ascend", "dcmi_get_card_list fails");
  } else if (strcmp(what, "power-inner") == 0) {
    EXPECT_RC(metrics_rc(), RESULT_ERROR_OPERATION_FAILED);
  } else if (strcmp(what, "power-nodev") == 0) {
    EXPECT_RC(metrics_rc(), RESULT_ERROR_NOT_FOUND);
  } else if (strcmp(what, "power-unsupported") == 0) {
    const char *u[] = {UUID910_0};
    DeviceMetrics *m = NULL;
    EXPECT_RC(p_getDeviceMetrics(u, 1, &m), RESULT_SUCCESS);
    CHECK(m && m[0].powerUsageWatts == 0.0 && m[0].temperatureCelsius == 46.0,
          "unsupported power reads 0, the rest is there");
    p_freeDeviceMetrics(m, 1);
  } else if (strcmp(what, "temp-param") == 0) {
    EXPECT_RC(metrics_rc(), RESULT_ERROR_INVALID_PARAM);
  } else if (strcmp(what, "vdev-query") == 0) {
    CHECK(!assign("vir02", UUID910_0, NULL), "query fails");
    CHECK(strstr(err(), "operation failed") != NULL, "query: %s", err());
    CHECK(create_calls() == 0, "driver not asked");
  } else if (strcmp(what, "refuse") == 0) {
    CHECK(!assign("vir02", UUID910_0, NULL), "driver refuses");
    CHECK(strstr(err(), "operation failed") != NULL, "refused: %s", err());
    CHECK(create_calls() == 1, "driver asked once");
  } else if (strcmp(what, "refuse-occupied") == 0) {
    CHECK(!assign("vir02", UUID910_0, NULL), "driver says occupied");
    CHECK(strstr(err(), "resource exhausted") != NULL, "occupied: %s", err());
  } else if (strcmp(what, "destroy") == 0) {
    CHECK(assign("vir02", UUID910_0, NULL), "assign: %s", err());
    CHECK(!p_removePartition("vir02", UUID910_0), "destroy fails");
    CHECK(strstr(err(), "operation failed") != NULL, "destroy: %s", err());
  } else if (strcmp(what, "procs") == 0) {
    MemoryUtilization *mu = NULL;
    size_t n = 0;
    const char *u[] = {UUID910_1};
    const char *pids[] = {"4242"};
    EXPECT_RC(p_getProcessMemoryUtilization(u, 1, pids, 1, &mu, &n),
              RESULT_ERROR_NOT_FOUND);
    p_freeMemoryUtilizations(mu, n);
  } else if (strcmp(what, "topo") == 0) {
    int32_t idx[2] = {0, 1};
    ExtendedDeviceTopology topo;
    memset(&topo, 0, sizeof topo);
    EXPECT_RC(p_getDeviceTopology(idx, 2, &topo),
              RESULT_ERROR_OPERATION_FAILED);
    p_freeExtendedDeviceTopology(&topo);
  } else if (strcmp(what, "die") == 0) {
    ExtendedDeviceInfo info;
    memset(&info, 0, sizeof info);
    EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_SUCCESS);
    CHECK(strcmp(info.basic.uuid, "ascend-pci-0000-86-00-0") == 0,
          "PCIe fallback uuid %s", info.basic.uuid);
    p_freeExtendedDeviceInfo(&info);
  } else if (strcmp(what, "hbm") == 0) {
    CHECK(count() == 2, "hbm failure at discovery");
    EXPECT_RC(metrics_rc(), RESULT_SUCCESS);
  }
}

/* ------------------------------------------------------------ driver */

static char vnpus_path[64];

/* Each scenario but the restart pair starts with no vNPUs. */
static void fresh_vnpus(const struct run *r) {
  if (strcmp(r->name, "restart-b") != 0)
    unlink(vnpus_path);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s libaccelerator_ascend.so fakes-dir\n", argv[0]);
    return 2;
  }
  suite_lib_path = argv[1];
  fake_dir = argv[2];
  unsetenv("ACCELERATOR_DCMI_PATH");
  unsetenv("FAKE_DCMI_FAIL");
  unsetenv("FAKE_DCMI_CHIP");
  unsetenv("FAKE_DCMI_FAIL_INIT");
  unsetenv("FAKE_DCMI_REFUSE_VDEV");

  char state[] = "/tmp/fake-dcmi.XXXXXX";
  if (!mkdtemp(state)) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(vnpus_path, sizeof vnpus_path, "%s/vnpus", state);

  static const struct run runs[] = {
      {"910", scenario_910, {0}, 0, 0},
      {"restart-a", scenario_restart_a, {0}, 0, 0},
      {"restart-b", scenario_restart_b, {0}, 0, 0},
      {"310P", scenario_310p, {0}, 0, 0},
      {"no-library", scenario_no_library, {0}, 0, 0},
      {"init-fails", scenario_init_fails, {0}, 0, 0},
      {"no-required-symbol", scenario_no_required, {0}, 0, 0},
      {"no-optional-symbol", scenario_no_optional, {0}, 0, 0},
      {"v1-card-list", scenario_v1_card_list, {0}, 0, 0},
      {"v2-card-list-first", scenario_v2_card_list_first,
       {"FAKE_DCMI_FAIL=dcmi_get_card_num_list:-8005"}, 0, 0},
      {"v1-card-list-fails", scenario_v1_card_list_fails,
       {"FAKE_DCMI_FAIL=dcmi_get_card_num_list:-8005"}, 0, 0},
      {"fail-cardlist", 0, {"FAKE_DCMI_FAIL=dcmi_get_card_list:-8005"}, scenario_fail, "cardlist"},
      {"fail-power-inner", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_power_info:-8005"}, scenario_fail, "power-inner"},
      {"fail-power-nodev", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_power_info:-8008"}, scenario_fail, "power-nodev"},
      {"fail-power-unsupported", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_power_info:-8255"}, scenario_fail, "power-unsupported"},
      {"fail-temp-param", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_temperature:-8001"}, scenario_fail, "temp-param"},
      {"fail-vdev-query", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_info:-8005"}, scenario_fail, "vdev-query"},
      {"refuse-vdev", 0, {"FAKE_DCMI_REFUSE_VDEV=-8002"}, scenario_fail, "refuse"},
      {"refuse-vdev-occupied", 0, {"FAKE_DCMI_REFUSE_VDEV=-8020"}, scenario_fail, "refuse-occupied"},
      {"fail-destroy", 0, {"FAKE_DCMI_FAIL=dcmi_set_destroy_vdevice:-8005"}, scenario_fail, "destroy"},
      {"fail-procs", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_resource_info:-8007"}, scenario_fail, "procs"},
      {"fail-topo", 0, {"FAKE_DCMI_FAIL=dcmi_get_topo_info_by_device_id:-8005"}, scenario_fail, "topo"},
      {"fail-die", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_die_v2:-8005"}, scenario_fail, "die"},
      {"fail-hbm", 0, {"FAKE_DCMI_FAIL=dcmi_get_device_hbm_info:-8005"}, scenario_fail, "hbm"},
  };
  setenv("FAKE_DCMI_STATE", state, 1);
  int rc = suite_run(runs, sizeof runs / sizeof runs[0], fresh_vnpus);
  unlink(vnpus_path);
  rmdir(state);
  return rc;
}
