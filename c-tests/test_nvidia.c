/* The nvidia vendor against the fake NVML and CUDA driver (c-tests/fakes).
 *
 * Usage: test_nvidia <libaccelerator_nvidia.so> <fake dir>
 * The fakes script two GPUs (an H100 with MIG on and a non-MIG A40, joined
 * by 4 NVLinks), a checkpoint state machine and injectable failures. */
#include "accelerator.h"
#include "test_util.h"
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GPU0 "GPU-00000000-0000-0000-0000-0000000000h1"
#define GPU1 "GPU-11111111-1111-1111-1111-1111111111a4"
#define GIB (1ULL << 30)
#define MIB (1ULL << 20)

static void *lib;
static const char *(*last_error)(void);
#define SYM(name) __typeof__(&name) p_##name = (__typeof__(&name))dlsym(lib, #name)
#define EXPECT_RC(call, expected) EXPECT_RC_WITH(last_error, call, expected)
#define NEAR(a, b) (fabs((double)(a) - (double)(b)) < 1e-6 * (fabs((double)(b)) + 1))

static char nvml_path[4096], cuda_path[4096];

static void *open_lib(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
  return h;
}

/* In a child (fresh library state): a broken driver reports 0 devices. */
static int no_driver_child(const char *path, const char *nvml, const char *fail) {
  pid_t c = fork();
  if (c == 0) {
    setenv("ACCELERATOR_NVML_PATH", nvml, 1);
    if (fail)
      setenv("FAKE_NVML_FAIL", fail, 1);
    lib = open_lib(path);
    last_error = (const char *(*)(void))dlsym(lib, "acceleratorGetLastError");
    SYM(GetDeviceCount);
    SYM(GetDeviceMetrics);
    size_t n = 99;
    EXPECT_RC(p_GetDeviceCount(&n), RESULT_SUCCESS);
    CHECK(n == 0, "no driver: %zu devices", n);
    const char *u[] = {GPU0};
    DeviceMetrics m;
    EXPECT_RC(p_GetDeviceMetrics(u, 1, &m), RESULT_ERROR_NOT_FOUND);
    dlclose(lib);
    _exit(atomic_load(&test_failed) ? 1 : 0);
  }
  int st = 0;
  waitpid(c, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* In a child: a GPU with NVML_NVLINK_MAX_LINKS (36, nvml.h 13.x) links
 * reports every one of them. */
static int nvlinks36_child(const char *path) {
  pid_t c = fork();
  if (c == 0) {
    setenv("FAKE_NVML_NVLINKS", "36", 1);
    lib = open_lib(path);
    last_error = (const char *(*)(void))dlsym(lib, "acceleratorGetLastError");
    SYM(GetExtendedDeviceMetrics);
    const char *u[] = {GPU0};
    uint32_t nv[40], pcie[2];
    uint64_t ib[2];
    ExtendedDeviceMetrics em = {
        .nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = ib, .pcieBandwidthMBps = pcie};
    EXPECT_RC(p_GetExtendedDeviceMetrics(u, 1, &em, 40, 2, 2), RESULT_SUCCESS);
    CHECK(em.nvlinkCount == 36, "36 NVLinks: %zu reported", em.nvlinkCount);
    dlclose(lib);
    _exit(atomic_load(&test_failed) ? 1 : 0);
  }
  int st = 0;
  waitpid(c, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static pid_t sleeper(void) {
  pid_t c = fork();
  if (c == 0) {
    for (;;)
      pause();
  }
  return c;
}

static void *hammer(void *arg) {
  SYM(GetAllDevices);
  ExtendedDeviceInfo d[4];
  int loops = test_quick() ? 20 : 2000;
  for (int i = 0; i < loops; i++) {
    size_t n = 0;
    if (p_GetAllDevices(d, 4, &n) != RESULT_SUCCESS || n != 2)
      atomic_fetch_add((atomic_int *)arg, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <libaccelerator_nvidia.so> <fake dir>\n", argv[0]);
    return 2;
  }
  snprintf(nvml_path, sizeof nvml_path, "%s/libnvidia-ml.so.1", argv[2]);
  snprintf(cuda_path, sizeof cuda_path, "%s/libcuda.so.1", argv[2]);
  setenv("ACCELERATOR_VENDOR", "nvidia", 1);

  /* ---- missing or broken driver ---- */
  CHECK(no_driver_child(argv[1], "/nonexistent/libnvidia-ml.so.1", NULL),
        "missing NVML must give 0 devices with success");
  CHECK(no_driver_child(argv[1], nvml_path, "nvmlInit_v2"),
        "failing nvmlInit must give 0 devices with success");

  /* ---- the fakes ---- */
  setenv("ACCELERATOR_NVML_PATH", nvml_path, 1);
  setenv("ACCELERATOR_CUDA_PATH", cuda_path, 1);
  CHECK(nvlinks36_child(argv[1]), "links up to NVML_NVLINK_MAX_LINKS (36) are discovered");
  void *fake_cuda = open_lib(cuda_path);
  void *fake_nvml = open_lib(nvml_path);
  int (*nvml_inits)(void) = (int (*)(void))dlsym(fake_nvml, "fake_nvml_init_count");
  int (*cuda_state)(int) = (int (*)(int))dlsym(fake_cuda, "fake_cuda_state");
  lib = open_lib(argv[1]);
  last_error = (const char *(*)(void))dlsym(lib, "acceleratorGetLastError");
  SYM(GetDeviceCount);
  SYM(GetAllDevices);
  SYM(getDeviceInfo);
  SYM(freeExtendedDeviceInfo);
  SYM(GetPartitionTemplates);
  SYM(GetDeviceTopology);
  SYM(AssignPartition);
  SYM(RemovePartition);
  SYM(Snapshot);
  SYM(Resume);
  SYM(GetDeviceMetrics);
  SYM(GetExtendedDeviceMetrics);
  SYM(GetProcessComputeUtilization);
  SYM(GetProcessMemoryUtilization);
  SYM(acceleratorVendorName);

  /* ---- discovery ---- */
  size_t n = 0;
  EXPECT_RC(p_GetDeviceCount(NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(p_GetDeviceCount(&n), RESULT_SUCCESS);
  CHECK(n == 2, "device count %zu", n);
  CHECK(strcmp(p_acceleratorVendorName(), "nvidia") == 0, "vendor %s", p_acceleratorVendorName());
  ExtendedDeviceInfo d[4];
  memset(d, 0, sizeof d);
  EXPECT_RC(p_GetAllDevices(d, 4, &n), RESULT_SUCCESS);
  CHECK(n == 2, "GetAllDevices %zu", n);
  DeviceBasicInfo *b0 = &d[0].basic, *b1 = &d[1].basic;
  CHECK(strcmp(b0->uuid, GPU0) == 0 && strcmp(b1->uuid, GPU1) == 0, "uuids %s %s", b0->uuid, b1->uuid);
  CHECK(strcmp(b0->vendor, "NVIDIA") == 0, "vendor %s", b0->vendor);
  CHECK(strcmp(b0->model, "NVIDIA H100 80GB HBM3") == 0, "model %s", b0->model);
  CHECK(strcmp(b1->model, "NVIDIA A40") == 0, "model %s", b1->model);
  CHECK(strcmp(b0->driverVersion, "570.124.06") == 0, "driver %s", b0->driverVersion);
  CHECK(strcmp(b0->firmwareVersion, "96.00.99.00.01") == 0, "vbios %s", b0->firmwareVersion);
  CHECK(b0->index == 0 && b1->index == 1, "indices");
  CHECK(b0->numaNode == 0 && b1->numaNode == -1, "numa %d %d", b0->numaNode, b1->numaNode);
  CHECK(b0->totalMemoryBytes == 80 * GIB && b1->totalMemoryBytes == 48 * GIB, "memory");
  CHECK(b0->totalComputeUnits == 132, "H100 SMs from the 7g profile: %llu",
        (unsigned long long)b0->totalComputeUnits);
  CHECK(b1->totalComputeUnits == 84, "A40 SMs from cores/128: %llu",
        (unsigned long long)b1->totalComputeUnits);
  CHECK(NEAR(b0->maxTflops, 132 * 1980e6 * 4096 / 1e12), "H100 TFLOPS %f", b0->maxTflops);
  CHECK(NEAR(b1->maxTflops, 84 * 1740e6 * 1024 / 1e12), "A40 TFLOPS %f", b1->maxTflops);
  CHECK(b0->pcieGen == 5 && b0->pcieWidth == 16 && b1->pcieGen == 4, "pcie");
  DeviceProperties *p0 = &d[0].props, *p1 = &d[1].props;
  CHECK(p0->clockGraphics == 1980 && p0->clockSM == 1980 && p0->clockMem == 2619 && p0->clockAI == 0,
        "clocks");
  CHECK(p0->powerLimit == 700 && p1->powerLimit == 300, "power limit %u", p0->powerLimit);
  CHECK(p0->temperatureThreshold == 87, "slowdown %u", p0->temperatureThreshold);
  CHECK(p0->eccEnabled && !p1->eccEnabled, "ecc");
  CHECK(p0->persistenceModeEnabled && !p1->persistenceModeEnabled, "persistence");
  CHECK(strcmp(p0->computeCapability, "9.0") == 0 && strcmp(p1->computeCapability, "8.6") == 0,
        "cc %s %s", p0->computeCapability, p1->computeCapability);
  CHECK(strcmp(p0->chipType, "Hopper") == 0 && strcmp(p1->chipType, "Ampere") == 0,
        "chip %s %s", p0->chipType, p1->chipType);
  CHECK(d[0].capabilities.supportsPartitioning && !d[1].capabilities.supportsPartitioning,
        "partitioning only on the MIG GPU");
  CHECK(d[0].capabilities.maxPartitions == 7 && d[1].capabilities.maxPartitions == 0,
        "max partitions %u", d[0].capabilities.maxPartitions);
  CHECK(d[0].capabilities.supportsSnapshot && d[1].capabilities.supportsSnapshot,
        "snapshot through the checkpoint API");
  CHECK(d[0].relatedDevices == NULL && d[0].relatedDeviceCount == 0, "no related here");

  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_SUCCESS);
  CHECK(info.relatedDeviceCount == 1 && strcmp(info.relatedDevices[0].deviceUUID, GPU1) == 0 &&
            strcmp(info.relatedDevices[0].connectionType, "NVLink") == 0 &&
            info.relatedDevices[0].bandwidthMBps == 200000,
        "NVLink peer of GPU0");
  p_freeExtendedDeviceInfo(&info);
  EXPECT_RC(p_getDeviceInfo(2, &info), RESULT_ERROR_NOT_FOUND);

  /* cached discovery is thread safe (its speed is measured by `make bench`) */
  atomic_int bad = 0;
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, hammer, &bad);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  CHECK(atomic_load(&bad) == 0, "%d failures from concurrent calls", atomic_load(&bad));

  /* ---- MIG templates ---- */
  PartitionTemplate t[16];
  size_t tn = 0;
  EXPECT_RC(p_GetPartitionTemplates(0, t, 16, &tn), RESULT_SUCCESS);
  /* 2g.24gb is the fake's GPU-instance profile 0x11, the last id of nvml.h 13.x */
  const char *names[] = {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb",
                         "2g.24gb"};
  CHECK(tn == 8, "%zu templates", tn);
  int defaults = 0;
  for (size_t i = 0; i < tn && i < 8; i++) {
    CHECK(strcmp(t[i].templateId, names[i]) == 0 && strcmp(t[i].name, names[i]) == 0,
          "template %zu is %s", i, t[i].templateId);
    CHECK(t[i].memoryBytes > 0 && t[i].computeUnits > 0 && t[i].sliceCount > 0, "template %zu sizes", i);
    CHECK(NEAR(t[i].tflops, b0->maxTflops * (double)t[i].computeUnits / 132), "template %zu tflops", i);
    defaults += t[i].isDefault;
  }
  CHECK(defaults == 1 && t[0].isDefault, "one default, the smallest");
  CHECK(t[0].memoryBytes == 9856 * MIB && t[0].computeUnits == 16 && t[0].sliceCount == 1, "1g.10gb");
  CHECK(t[4].computeUnits == 132 && t[4].sliceCount == 7, "7g.80gb");
  EXPECT_RC(p_GetPartitionTemplates(1, t, 16, &tn), RESULT_ERROR_NOT_SUPPORTED);
  EXPECT_RC(p_GetPartitionTemplates(2, t, 16, &tn), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(p_GetPartitionTemplates(-1, t, 16, &tn), RESULT_ERROR_INVALID_PARAM);

  /* ---- MIG partitions ---- */
  PartitionAssignment a;
  memset(&a, 0, sizeof a);
  strcpy(a.templateId, "1g.10gb");
  strcpy(a.deviceUUID, GPU0);
  CHECK(p_AssignPartition(&a), "assign 1g.10gb: %s", last_error());
  CHECK(strncmp(a.partitionUUID, "MIG-", 4) == 0, "MIG uuid %s", a.partitionUUID);
  CHECK(a.partitionOverheadBytes == 32 * MIB, "overhead %llu", (unsigned long long)a.partitionOverheadBytes);
  char first[64];
  strcpy(first, a.partitionUUID);
  strcpy(a.templateId, "7g.80gb");
  CHECK(!p_AssignPartition(&a), "7g.80gb cannot fit beside 1g.10gb");
  CHECK(strstr(last_error(), "resource exhausted") != NULL, "reason: %s", last_error());
  strcpy(a.templateId, "3g.40gb");
  CHECK(p_AssignPartition(&a), "assign 3g.40gb #1: %s", last_error());
  char second[64];
  strcpy(second, a.partitionUUID);
  CHECK(p_AssignPartition(&a), "assign 3g.40gb #2: %s", last_error());
  CHECK(strcmp(second, a.partitionUUID) != 0, "distinct MIG uuids");
  CHECK(p_RemovePartition("3g.40gb", GPU0), "remove newest 3g.40gb: %s", last_error());
  CHECK(p_RemovePartition(first, GPU0), "remove by MIG uuid: %s", last_error());
  CHECK(!p_RemovePartition(first, GPU0), "removed twice");
  CHECK(strstr(last_error(), "not found") != NULL, "reason: %s", last_error());
  CHECK(p_RemovePartition(second, GPU0), "remove the older 3g.40gb (by uuid, it is the one left): %s",
        last_error());
  CHECK(!p_RemovePartition("3g.40gb", GPU0), "no 3g.40gb left");
  /* a failing compute-instance creation leaves no GPU instance behind */
  setenv("FAKE_NVML_FAIL", "nvmlGpuInstanceCreateComputeInstance", 1);
  strcpy(a.templateId, "7g.80gb");
  CHECK(!p_AssignPartition(&a), "injected failure");
  CHECK(strstr(last_error(), "operation failed") != NULL, "reason: %s", last_error());
  unsetenv("FAKE_NVML_FAIL");
  CHECK(p_AssignPartition(&a), "7g.80gb fits after the rollback: %s", last_error());
  CHECK(p_RemovePartition("7g.80gb", GPU0), "remove 7g.80gb: %s", last_error());
  /* nvml.h 13.x ranges: GPU-instance profile 0x11 works like any other, and a
   * GPU instance holding a compute instance of profile 8 (made by an
   * administrator) is removed with it, leaving its slices free. */
  strcpy(a.templateId, "2g.24gb");
  CHECK(p_AssignPartition(&a), "assign profile 0x11: %s", last_error());
  CHECK(p_RemovePartition("2g.24gb", GPU0), "remove profile 0x11: %s", last_error());
  int (*admin_create)(unsigned, unsigned) =
      (int (*)(unsigned, unsigned))dlsym(fake_nvml, "fake_nvml_create_instances");
  CHECK(admin_create && admin_create(4, 8) > 0, "administrator's 7g.80gb, compute-instance profile 8");
  CHECK(p_RemovePartition("7g.80gb", GPU0), "remove a GPU instance with a profile-8 compute instance: %s",
        last_error());
  strcpy(a.templateId, "7g.80gb");
  CHECK(p_AssignPartition(&a), "its slices are free again: %s", last_error());
  CHECK(p_RemovePartition("7g.80gb", GPU0), "remove 7g.80gb again: %s", last_error());
  strcpy(a.templateId, "no-such");
  CHECK(!p_AssignPartition(&a), "unknown template");
  CHECK(strstr(last_error(), "not found") != NULL, "reason: %s", last_error());
  strcpy(a.templateId, "1g.10gb");
  strcpy(a.deviceUUID, GPU1);
  CHECK(!p_AssignPartition(&a), "no MIG on GPU1");
  CHECK(strstr(last_error(), "not supported") != NULL, "reason: %s", last_error());
  setenv("FAKE_NVML_MIG_OFF", "1", 1);
  strcpy(a.deviceUUID, GPU0);
  CHECK(!p_AssignPartition(&a), "MIG mode off");
  CHECK(strstr(last_error(), "MIG mode is off") != NULL, "reason: %s", last_error());
  unsetenv("FAKE_NVML_MIG_OFF");
  CHECK(!p_AssignPartition(NULL), "NULL assignment");
  CHECK(!p_RemovePartition("1g.10gb", "GPU-nope"), "unknown device");

  /* ---- topology ---- */
  int32_t idx[2] = {0, 1};
  RelatedDevice conns[2][4];
  DeviceTopology dt[2] = {{.connections = conns[0]}, {.connections = conns[1]}};
  ExtendedDeviceTopology topo = {.devices = dt};
  EXPECT_RC(p_GetDeviceTopology(idx, 2, &topo, 4), RESULT_SUCCESS);
  CHECK(topo.deviceCount == 2, "topology devices %zu", topo.deviceCount);
  CHECK(dt[0].connectionCount == 1 && strcmp(dt[0].connections[0].deviceUUID, GPU1) == 0 &&
            strcmp(dt[0].connections[0].connectionType, "NVLink") == 0 &&
            dt[0].connections[0].bandwidthMBps == 200000,
        "NVLink pair: 4 links x 50 GB/s");
  CHECK(dt[1].connectionCount == 1 && dt[1].connections[0].bandwidthMBps == 200000, "and back");
  CHECK(topo.nvlinkBandwidthMBps == 200000, "nvlink bw %u", topo.nvlinkBandwidthMBps);
  CHECK(strcmp(topo.topologyType, "NVLink") == 0, "type %s", topo.topologyType);
  CHECK(dt[0].numaNode == 0 && dt[1].numaNode == -1, "topology numa");
  EXPECT_RC(p_GetDeviceTopology(idx, 1, &topo, 4), RESULT_SUCCESS);
  CHECK(dt[0].connectionCount == 0, "one device has no connections");
  idx[1] = 7;
  EXPECT_RC(p_GetDeviceTopology(idx, 2, &topo, 4), RESULT_ERROR_NOT_FOUND);

  /* ---- snapshot / resume ---- */
  pid_t c[3] = {sleeper(), sleeper(), sleeper()};
  pid_t gone = fork();
  if (gone == 0)
    _exit(0);
  waitpid(gone, NULL, 0);
  char pids[128];
  snprintf(pids, sizeof pids, "%d,%d,%d", c[0], c[1], c[2]);
  setenv("FAKE_CUDA_PIDS", pids, 1);
  ProcessArray pa = {.processIds = c, .processCount = 2};
  EXPECT_RC(p_Snapshot(&pa), RESULT_SUCCESS);
  CHECK(cuda_state(c[0]) == 2 && cuda_state(c[1]) == 2 && cuda_state(c[2]) == 0, "checkpointed");
  EXPECT_RC(p_Snapshot(&pa), RESULT_ERROR_OPERATION_FAILED); /* wrong state */
  CHECK(cuda_state(c[0]) == 2 && cuda_state(c[1]) == 2, "unchanged by the failed snapshot");
  EXPECT_RC(p_Resume(&pa), RESULT_SUCCESS);
  CHECK(cuda_state(c[0]) == 0 && cuda_state(c[1]) == 0, "running again");
  EXPECT_RC(p_Resume(&pa), RESULT_ERROR_OPERATION_FAILED); /* not checkpointed */
  /* the 3rd process fails: the first two are rolled back */
  char fail[32];
  snprintf(fail, sizeof fail, "%d", c[2]);
  setenv("FAKE_CUDA_FAIL_PID", fail, 1);
  pa.processCount = 3;
  EXPECT_RC(p_Snapshot(&pa), RESULT_ERROR_OPERATION_FAILED);
  CHECK(strstr(last_error(), "CUDA_ERROR_TIMEOUT") != NULL, "reason: %s", last_error());
  CHECK(cuda_state(c[0]) == 0 && cuda_state(c[1]) == 0 && cuda_state(c[2]) == 0, "rolled back");
  unsetenv("FAKE_CUDA_FAIL_PID");
  /* a failed resume re-checkpoints the ones already resumed */
  pa.processCount = 1;
  EXPECT_RC(p_Snapshot(&pa), RESULT_SUCCESS);
  pid_t mixed[2] = {c[0], c[1]};
  ProcessArray pm = {.processIds = mixed, .processCount = 2};
  EXPECT_RC(p_Resume(&pm), RESULT_ERROR_OPERATION_FAILED);
  CHECK(cuda_state(c[0]) == 2 && cuda_state(c[1]) == 0, "resume rolled back");
  EXPECT_RC(p_Resume(&pa), RESULT_SUCCESS);
  pid_t self = getpid();
  ProcessArray ps = {.processIds = &self, .processCount = 1};
  EXPECT_RC(p_Snapshot(&ps), RESULT_ERROR_NOT_FOUND); /* not a CUDA process */
  ProcessArray pg = {.processIds = &gone, .processCount = 1};
  EXPECT_RC(p_Snapshot(&pg), RESULT_ERROR_NOT_FOUND); /* no such process */
  pa.processCount = 0;
  EXPECT_RC(p_Snapshot(&pa), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(p_Snapshot(NULL), RESULT_ERROR_INVALID_PARAM);

  /* ---- metrics ---- */
  const char *uu[2] = {GPU0, GPU1};
  DeviceMetrics m[2];
  EXPECT_RC(p_GetDeviceMetrics(uu, 2, m), RESULT_SUCCESS);
  CHECK(NEAR(m[0].powerUsageWatts, 312.5) && NEAR(m[1].powerUsageWatts, 150.25), "power");
  CHECK(NEAR(m[0].temperatureCelsius, 45) && NEAR(m[1].temperatureCelsius, 61), "temperature");
  CHECK(m[0].pcieRxBytes == 1000000 && m[0].pcieTxBytes == 2000000 && m[1].pcieRxBytes == 3000000,
        "pcie counters");
  /* GPM needs two samples: the first call on a device reports the
   * utilization rate (40 %, no tensor figure) and keeps its sample; a call
   * at least 100 ms later measures GPM between the two; a call sooner than
   * that repeats the last reading rather than measuring a tiny interval. */
  CHECK(m[0].smActivePercent == 40 && m[0].tensorCoreUsagePercent == 0, "first reading %u %u",
        m[0].smActivePercent, m[0].tensorCoreUsagePercent);
  usleep(120 * 1000);
  EXPECT_RC(p_GetDeviceMetrics(uu, 2, m), RESULT_SUCCESS);
  CHECK(m[0].smActivePercent == 38 && m[0].tensorCoreUsagePercent == 12, "GPM %u %u",
        m[0].smActivePercent, m[0].tensorCoreUsagePercent);
  EXPECT_RC(p_GetDeviceMetrics(uu, 2, m), RESULT_SUCCESS);
  CHECK(m[0].smActivePercent == 38 && m[0].tensorCoreUsagePercent == 12, "GPM repeated %u %u",
        m[0].smActivePercent, m[0].tensorCoreUsagePercent);
  CHECK(m[1].smActivePercent == 55 && m[1].tensorCoreUsagePercent == 0, "utilization rates");
  CHECK(m[0].memoryUsedBytes == GIB && m[0].memoryTotalBytes == 80 * GIB, "memory");
  const char *unknown[1] = {"GPU-nope"};
  EXPECT_RC(p_GetDeviceMetrics(unknown, 1, m), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(p_GetDeviceMetrics(uu, 0, m), RESULT_ERROR_INVALID_PARAM);

  uint32_t nv[2][8], pcie[2][2];
  uint64_t ib[2][2];
  ExtendedDeviceMetrics em[2] = {
      {.nvlinkBandwidthMBps = nv[0], .ibNicBandwidthMBps = ib[0], .pcieBandwidthMBps = pcie[0]},
      {.nvlinkBandwidthMBps = nv[1], .ibNicBandwidthMBps = ib[1], .pcieBandwidthMBps = pcie[1]}};
  EXPECT_RC(p_GetExtendedDeviceMetrics(uu, 2, em, 8, 2, 2), RESULT_SUCCESS);
  CHECK(em[0].nvlinkCount == 4 && em[1].nvlinkCount == 4, "nvlink counts %zu", em[0].nvlinkCount);
  for (size_t i = 0; i < em[0].nvlinkCount && i < 8; i++)
    CHECK(nv[0][i] >= 100 && nv[0][i] <= 400, "link %zu: %u MB/s (fake: 204.8)", i, nv[0][i]);
  CHECK(em[0].ibNicCount == 0, "no IB NICs from NVML");
  CHECK(em[0].pcieLinkCount == 1 && pcie[0][0] == 4 && pcie[1][0] == 1, "pcie MB/s %u %u", pcie[0][0],
        pcie[1][0]);

  /* ---- per process ---- */
  char procs[128];
  snprintf(procs, sizeof procs, "%d:0:1073741824:25,%d:1:536870912:60", c[0], c[1]);
  setenv("FAKE_NVML_PROCS", procs, 1);
  ComputeUtilization cu[16];
  MemoryUtilization mu[16];
  size_t cn = 0, mn = 0;
  EXPECT_RC(p_GetProcessComputeUtilization(cu, 16, &cn), RESULT_SUCCESS);
  EXPECT_RC(p_GetProcessMemoryUtilization(mu, 16, &mn), RESULT_SUCCESS);
  char id0[32], id1[32];
  snprintf(id0, sizeof id0, "%d", c[0]);
  snprintf(id1, sizeof id1, "%d", c[1]);
  int seen = 0;
  for (size_t i = 0; i < cn; i++) {
    if (strcmp(cu[i].processId, id0) == 0 && strcmp(cu[i].deviceUUID, GPU0) == 0) {
      seen++;
      CHECK(NEAR(cu[i].utilizationPercent, 25) && cu[i].activeSMs == 33 && cu[i].totalSMs == 132,
            "compute of %s", id0);
    }
    if (strcmp(cu[i].processId, id1) == 0 && strcmp(cu[i].deviceUUID, GPU1) == 0) {
      seen++;
      CHECK(NEAR(cu[i].utilizationPercent, 60) && cu[i].activeSMs == 50, "compute of %s", id1);
    }
  }
  for (size_t i = 0; i < mn; i++) {
    if (strcmp(mu[i].processId, id0) == 0 && strcmp(mu[i].deviceUUID, GPU0) == 0) {
      seen++;
      CHECK(mu[i].usedBytes == GIB && NEAR(mu[i].utilizationPercent, 1.25), "memory of %s", id0);
    }
  }
  CHECK(seen == 3, "processes seen %d (compute %zu, memory %zu)", seen, cn, mn);

  for (int i = 0; i < 3; i++) {
    kill(c[i], SIGKILL);
    waitpid(c[i], NULL, 0);
  }
  CHECK(nvml_inits() == 1, "NVML initialised once: %d", nvml_inits());
  /* NVML is shut down by the library's ELF destructor: at dlclose where the
   * library is really unloaded, else at exit (after this program's checks). */
  dlclose(lib);
  dlclose(fake_nvml);
  dlclose(fake_cuda);
  return test_summary();
}
