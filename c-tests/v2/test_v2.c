/* The v2 (Accel*) ABI through dlopen(RTLD_NOW | RTLD_GLOBAL), as the
 * hypervisor loads it: every function's semantics and its bad-input
 * matrix (NULL, zero counts, unterminated and non-UTF-8 strings, unknown
 * UUIDs, oversize values). Run for the stub and, on their fakes, the
 * NVIDIA and Ascend builds; under valgrind in `make test`.
 *
 * Usage: test_v2 LIB VENDOR TEMPLATE
 *   VENDOR   stub | nvidia | ascend | amd (what the library must report)
 *   TEMPLATE a partition template of device 0
 * The environment selects the fakes (see c-tests/v2/v2.mk). */
#include "accelerator.h"
#include "../test_util.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define F(name) static __typeof__(&name) p_##name;
F(AccelInit)
F(AccelShutdown)
F(AccelGetDeviceCount)
F(AccelGetAllDevices)
F(AccelGetAllDevicesTopology)
F(AccelAssignPartition)
F(AccelRemovePartition)
F(AccelSetMemHardLimit)
F(AccelSetComputeUnitHardLimit)
F(AccelSetComputeUnitRequest)
F(AccelSetWorkerPriority)
F(AccelSnapshot)
F(AccelResume)
F(AccelGetProcessInformation)
F(AccelGetDeviceMetrics)
F(AccelGetVendorMountLibs)
F(AccelRegisterLogCallback)
static const char *(*last_error)(void);
#define EXPECT_RC(call, expected) EXPECT_RC_WITH(last_error, call, expected)

static const char *vendor, *template_id;

/* Whether the vendor under test has partitions (a template to assign). */
static bool partitions(void) { return strcmp(template_id, "-") != 0; }
static char bad_utf8[] = "\xff\xfe-not-utf8";
static char *unterminated; /* 8 KiB of 'A' with no NUL */
static char oversize[200]; /* 199 'u' characters: longer than any UUID */

static void *load(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
  return lib;
}

static void bind(void *lib) {
#define B(name)                                                                      \
  p_##name = (__typeof__(&name))dlsym(lib, #name);                                   \
  CHECK(p_##name != NULL, "symbol " #name);                                          \
  if (!p_##name)                                                                     \
    exit(2);
  B(AccelInit) B(AccelShutdown) B(AccelGetDeviceCount) B(AccelGetAllDevices)
  B(AccelGetAllDevicesTopology) B(AccelAssignPartition) B(AccelRemovePartition)
  B(AccelSetMemHardLimit) B(AccelSetComputeUnitHardLimit) B(AccelSnapshot) B(AccelResume)
  B(AccelGetProcessInformation) B(AccelGetDeviceMetrics) B(AccelGetVendorMountLibs)
  B(AccelRegisterLogCallback) B(AccelSetComputeUnitRequest) B(AccelSetWorkerPriority)
#undef B
  last_error = (const char *(*)(void))dlsym(lib, "acceleratorGetLastError");
}

/* ---- log callback: only the four levels the hypervisor knows ---- */
static atomic_int log_lines, log_bad_levels, log_debug, log_error;
static void on_log(const char *level, const char *message) {
  atomic_fetch_add(&log_lines, 1);
  if (strcmp(level, "DEBUG") == 0)
    atomic_fetch_add(&log_debug, 1);
  else if (strcmp(level, "ERROR") == 0)
    atomic_fetch_add(&log_error, 1);
  else if (strcmp(level, "INFO") != 0 && strcmp(level, "WARN") != 0 &&
           strcmp(level, "ERROR") != 0)
    atomic_fetch_add(&log_bad_levels, 1);
  (void)message;
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i])
      return 0;
  return 1;
}

static size_t n_devices;
static ExtendedDeviceInfo devices[64];

static void test_init_and_discovery(void) {
  EXPECT_RC(p_AccelRegisterLogCallback(on_log), ACCEL_SUCCESS);
  for (int i = 0; i < 3; i++)
    EXPECT_RC(p_AccelInit(), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelShutdown(), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelShutdown(), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelInit(), ACCEL_SUCCESS);

  EXPECT_RC(p_AccelGetDeviceCount(NULL), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetDeviceCount(&n_devices), ACCEL_SUCCESS);
  CHECK(n_devices > 0 && n_devices <= 64, "%s: %zu devices", vendor, n_devices);

  size_t got = 99;
  EXPECT_RC(p_AccelGetAllDevices(NULL, 64, &got), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetAllDevices(devices, 0, &got), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetAllDevices(devices, 64, NULL), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetAllDevices(devices, 1, &got), ACCEL_SUCCESS);
  CHECK(got == 1, "maxCount 1 gives %zu", got);
  EXPECT_RC(p_AccelGetAllDevices(devices, n_devices < 64 ? n_devices : 64, &got), ACCEL_SUCCESS);
  CHECK(got == n_devices, "all devices: %zu of %zu", got, n_devices);
  for (size_t i = 0; i < got; i++) {
    DeviceBasicInfo *b = &devices[i].basic;
    CHECK(b->uuid[0] && memchr(b->uuid, 0, sizeof b->uuid), "device %zu uuid", i);
    CHECK(b->index == (int32_t)i, "device %zu index %d", i, b->index);
    CHECK(b->totalMemoryBytes > 0, "device %zu memory", i);
    DeviceProperties *p = &devices[i].props;
    CHECK(p->count > 0 && p->count <= MAX_DEVICE_PROPERTIES, "device %zu: %zu props", i, p->count);
    int ecc = 0;
    for (size_t k = 0; k < p->count; k++) {
      CHECK(p->properties[k].key[0] && memchr(p->properties[k].value, 0, 256), "prop %zu", k);
      if (strcmp(p->properties[k].key, "ecc.enabled") == 0)
        ecc = strcmp(p->properties[k].value, "true") == 0 || strcmp(p->properties[k].value, "false") == 0;
    }
    CHECK(ecc, "device %zu: ecc.enabled is true/false", i);
    CHECK(all_zero(&p->properties[p->count], (MAX_DEVICE_PROPERTIES - p->count) * sizeof(DevicePropertyKV)),
          "unused property slots are zero");
    if (strcmp(vendor, "nvidia") == 0)
      CHECK(strncmp(b->deviceNode, "/dev/nvidia", 11) == 0, "node %s", b->deviceNode);
    if (strcmp(vendor, "ascend") == 0)
      CHECK(strncmp(b->deviceNode, "/dev/davinci", 12) == 0, "node %s", b->deviceNode);
    if (strcmp(vendor, "amd") == 0)
      CHECK(strncmp(b->deviceNode, "/dev/dri/renderD", 16) == 0, "node %s", b->deviceNode);
    if (strcmp(vendor, "habana") == 0)
      CHECK(strncmp(b->deviceNode, "/dev/accel/accel", 16) == 0, "node %s", b->deviceNode);
  }
}

static void test_topology(void) {
  EXPECT_RC(p_AccelGetAllDevicesTopology(NULL), ACCEL_ERROR_INVALID_PARAM);
  ExtendedDeviceTopology *t = malloc(sizeof *t);
  memset(t, 0xab, sizeof *t);
  EXPECT_RC(p_AccelGetAllDevicesTopology(t), ACCEL_SUCCESS);
  CHECK(t->deviceCount == n_devices, "topology rows %zu", t->deviceCount);
  for (size_t i = 0; i < t->deviceCount && i < 64; i++) {
    DeviceTopologyInfo *r = &t->devices[i];
    CHECK(strcmp(r->deviceUUID, devices[i].basic.uuid) == 0, "row %zu uuid", i);
    CHECK(r->deviceIndex == (int32_t)i, "row %zu index", i);
    CHECK(r->peerCount <= n_devices - 1, "row %zu: %zu peers", i, r->peerCount);
    if (strcmp(vendor, "habana") == 0) /* HLML names no link */
      CHECK(r->peerCount == 0, "row %zu: no peer HLML can tell (%zu)", i, r->peerCount);
    else if (strcmp(vendor, "ascend") != 0)
      CHECK(r->peerCount == n_devices - 1, "row %zu: a peer per other device", i);
    for (size_t k = 0; k < r->peerCount; k++) {
      DeviceTopoNode *n = &r->peers[k];
      CHECK(strcmp(n->peerUUID, r->deviceUUID) != 0 && n->peerUUID[0], "peer is another device");
      CHECK(n->peerIndex >= 0 && (size_t)n->peerIndex < n_devices, "peer index %d", n->peerIndex);
      CHECK(n->topoLevel <= TOPO_LEVEL_UNKNOWN && n->topoLevel != TOPO_LEVEL_SELF, "level %d",
            n->topoLevel);
      if (strcmp(vendor, "stub") == 0)
        CHECK(n->topoLevel == TOPO_LEVEL_INTERNAL && n->bandwidthBytesPerSec == 300000000000LL,
              "stub NVLink peer: level %d bw %lld", n->topoLevel, (long long)n->bandwidthBytesPerSec);
      if (strcmp(vendor, "nvidia") == 0) /* 4 links of NVLink 4.0 (code 6) / 3.0 (code 4) */
        CHECK(n->topoLevel == TOPO_LEVEL_INTERNAL && n->bandwidthBytesPerSec == 200000000000LL,
              "nvidia NVLink peer: level %d bw %lld", n->topoLevel, (long long)n->bandwidthBytesPerSec);
      if (strcmp(vendor, "ascend") == 0)
        CHECK(n->bandwidthBytesPerSec == 0, "ascend: DCMI gives no bandwidth");
      if (strcmp(vendor, "amd") == 0) /* the fake's XGMI maximum: 64000 MB/s */
        CHECK(n->topoLevel == TOPO_LEVEL_INTERNAL && n->bandwidthBytesPerSec == 64000000000LL,
              "amd XGMI peer: level %d bw %lld", n->topoLevel, (long long)n->bandwidthBytesPerSec);
    }
    CHECK(all_zero(&r->peers[r->peerCount], (64 - r->peerCount) * sizeof(DeviceTopoNode)),
          "row %zu: unused peers zero", i);
  }
  CHECK(all_zero(&t->devices[t->deviceCount], (64 - t->deviceCount) * sizeof(DeviceTopologyInfo)),
        "unused rows zero");
  free(t);
}

/* Every v2 string argument position, fed each bad string. */
static void bad_strings(const char *what, int (*call)(const char *)) {
  CHECK(call(NULL) == ACCEL_ERROR_INVALID_PARAM, "%s: NULL", what);
  CHECK(call("") == ACCEL_ERROR_INVALID_PARAM, "%s: empty", what);
  CHECK(call(bad_utf8) == ACCEL_ERROR_INVALID_PARAM, "%s: non-UTF-8", what);
  CHECK(call(unterminated) == ACCEL_ERROR_INVALID_PARAM, "%s: unterminated", what);
  CHECK(call(oversize) == ACCEL_ERROR_INVALID_PARAM, "%s: oversize", what);
}

static PartitionResult pr;
static int assign_tpl(const char *s) { return p_AccelAssignPartition(s, devices[0].basic.uuid, &pr); }
static int assign_dev(const char *s) { return p_AccelAssignPartition(template_id, s, &pr); }
static int remove_id(const char *s) { return p_AccelRemovePartition(s, devices[0].basic.uuid); }
static int remove_dev(const char *s) { return p_AccelRemovePartition(template_id, s); }
static int mem_dev(const char *s) { return p_AccelSetMemHardLimit(s, 1 << 20); }
static int cu_dev(const char *s) { return p_AccelSetComputeUnitHardLimit(s, 50); }
static int req_dev(const char *s) { return p_AccelSetComputeUnitRequest(s, 10); }
static int snap_dev(const char *s) {
  SnapshotContext c = {NULL, 0, s};
  return s ? p_AccelSnapshot(&c) : ACCEL_ERROR_INVALID_PARAM;
}
static int resume_dev(const char *s) {
  SnapshotContext c = {NULL, 0, s};
  return s ? p_AccelResume(&c) : ACCEL_ERROR_INVALID_PARAM;
}

static void test_bad_strings(void) {
  bad_strings("AssignPartition templateId", assign_tpl);
  bad_strings("AssignPartition deviceUUID", assign_dev);
  bad_strings("RemovePartition templateId", remove_id);
  bad_strings("RemovePartition deviceUUID", remove_dev);
  bad_strings("SetMemHardLimit deviceUUID", mem_dev);
  bad_strings("SetComputeUnitHardLimit deviceUUID", cu_dev);
  bad_strings("SetComputeUnitRequest deviceUUID", req_dev);
  bad_strings("Snapshot deviceUUID", snap_dev);
  bad_strings("Resume deviceUUID", resume_dev);
  /* Unknown UUIDs. */
  const char *nobody = "no-such-device";
  EXPECT_RC(p_AccelAssignPartition(template_id, nobody, &pr), ACCEL_ERROR_NOT_FOUND);
  EXPECT_RC(p_AccelRemovePartition(template_id, nobody), ACCEL_ERROR_NOT_FOUND);
  EXPECT_RC(p_AccelSetMemHardLimit(nobody, 1 << 20), ACCEL_ERROR_NOT_FOUND);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(nobody, 50), ACCEL_ERROR_NOT_FOUND);
  /* Soft mode's calls (issue 34) take an unknown device for a bad argument. */
  EXPECT_RC(p_AccelSetComputeUnitRequest(nobody, 10), ACCEL_ERROR_INVALID_PARAM);
  CHECK(snap_dev(nobody) == ACCEL_ERROR_NOT_FOUND, "Snapshot of an unknown device");
  CHECK(resume_dev(nobody) == ACCEL_ERROR_NOT_FOUND, "Resume of an unknown device");
  EXPECT_RC(p_AccelAssignPartition("no-such-template", devices[0].basic.uuid, &pr),
            partitions() ? ACCEL_ERROR_NOT_FOUND : ACCEL_ERROR_NOT_SUPPORTED);
  EXPECT_RC(p_AccelAssignPartition(template_id, devices[0].basic.uuid, NULL),
            ACCEL_ERROR_INVALID_PARAM);
}

/* A vendor without partitions (Habana) is run with the template "-": its
 * partition calls are NOT_SUPPORTED, and a UUID that names nothing stands
 * for the partition in the metrics batch. */
static void assign_for_metrics(const char *dev0, char part[64]) {
  memset(&pr, 0x5a, sizeof pr);
  if (!partitions()) {
    EXPECT_RC(p_AccelAssignPartition(template_id, dev0, &pr), ACCEL_ERROR_NOT_SUPPORTED);
    EXPECT_RC(p_AccelRemovePartition(template_id, dev0), ACCEL_ERROR_NOT_SUPPORTED);
    snprintf(part, 64, "%s-no-partition", vendor);
    return;
  }
  EXPECT_RC(p_AccelAssignPartition(template_id, dev0, &pr), ACCEL_SUCCESS);
  snprintf(part, 64, "%s", pr.deviceUUID);
  CHECK(part[0] && strcmp(part, dev0) != 0, "partition uuid %s", part);
  char want[320];
  if (strcmp(vendor, "stub") == 0) {
    snprintf(want, sizeof want, "ACCELERATOR_STUB_PARTITION=%s", part);
    CHECK(strcmp(pr.envVars[0], want) == 0, "stub env %s", pr.envVars[0]);
    CHECK(pr.type == PARTITION_TYPE_ENVIRONMENT_VARIABLE && pr.deviceNodes[0][0] == 0, "stub: env only");
  } else if (strcmp(vendor, "nvidia") == 0) {
    snprintf(want, sizeof want, "NVIDIA_VISIBLE_DEVICES=%s", part);
    CHECK(strcmp(pr.envVars[0], want) == 0, "MIG env %s", pr.envVars[0]);
    CHECK(pr.type == PARTITION_TYPE_DEVICE_NODE, "MIG: device nodes");
    CHECK(strcmp(pr.deviceNodes[0], "/dev/nvidia0=/dev/nvidia0") == 0, "GPU node %s", pr.deviceNodes[0]);
    /* The test's capabilities dir gives GI g minor 100+g and its CI 0 minor 200+g. */
    unsigned gi = 0, ci = 0;
    CHECK(sscanf(pr.deviceNodes[1], "/dev/nvidia-caps/nvidia-cap%u=", &gi) == 1 && gi >= 100 && gi < 200,
          "GI cap node %s", pr.deviceNodes[1]);
    CHECK(sscanf(pr.deviceNodes[2], "/dev/nvidia-caps/nvidia-cap%u=", &ci) == 1 && ci == gi + 100,
          "CI cap node %s", pr.deviceNodes[2]);
  } else if (strcmp(vendor, "amd") == 0) {
    /* A device-wide mode: the GPU as the ROCm container toolkit names it. */
    CHECK(strcmp(pr.envVars[0], "AMD_VISIBLE_DEVICES=0") == 0, "amd env %s", pr.envVars[0]);
    snprintf(want, sizeof want, "%s=%s", devices[0].basic.deviceNode, devices[0].basic.deviceNode);
    CHECK(pr.type == PARTITION_TYPE_DEVICE_NODE && strcmp(pr.deviceNodes[0], "/dev/kfd=/dev/kfd") == 0 &&
              strcmp(pr.deviceNodes[1], want) == 0,
          "amd nodes %s %s", pr.deviceNodes[0], pr.deviceNodes[1]);
  } else {
    unsigned vdev = 0;
    CHECK(sscanf(pr.envVars[0], "ASCEND_VISIBLE_DEVICES=%u", &vdev) == 1, "vNPU env %s", pr.envVars[0]);
    snprintf(want, sizeof want, "/dev/vdavinci%u=/dev/vdavinci%u", vdev, vdev);
    CHECK(pr.type == PARTITION_TYPE_DEVICE_NODE && strcmp(pr.deviceNodes[0], want) == 0,
          "vNPU node %s", pr.deviceNodes[0]);
  }
  int nenv = 0;
  while (nenv < 16 && pr.envVars[nenv][0])
    nenv++;
  CHECK(all_zero(pr.envVars[nenv], (16 - nenv) * sizeof pr.envVars[0]), "unused envs zero");
  int nnodes = 0;
  while (nnodes < 16 && pr.deviceNodes[nnodes][0])
    nnodes++;
  CHECK(all_zero(pr.deviceNodes[nnodes], (16 - nnodes) * sizeof pr.deviceNodes[0]), "unused nodes zero");
}

static void test_partition_and_metrics(void) {
  const char *dev0 = devices[0].basic.uuid;
  char part[64];
  assign_for_metrics(dev0, part);

  /* A batch that mixes live devices, the partition, and text that names nothing. */
  char long_uuid[100];
  memset(long_uuid, 'x', sizeof long_uuid - 1);
  long_uuid[sizeof long_uuid - 1] = 0;
  const char *batch[] = {dev0, part, "", "no-such-device", long_uuid, bad_utf8,
                         devices[n_devices - 1].basic.uuid};
  size_t nb = sizeof batch / sizeof batch[0];
  DeviceMetrics *m = calloc(nb, sizeof *m);
  EXPECT_RC(p_AccelGetDeviceMetrics(NULL, 1, m), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetDeviceMetrics(batch, 0, m), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetDeviceMetrics(batch, 1, NULL), ACCEL_ERROR_INVALID_PARAM);
  const char *with_null[] = {dev0, NULL};
  EXPECT_RC(p_AccelGetDeviceMetrics(with_null, 2, m), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetDeviceMetrics(batch, nb, m), ACCEL_SUCCESS);
  CHECK(strcmp(m[0].deviceUUID, dev0) == 0 && m[0].temperatureCelsius > 0 && m[0].extraMetricsCount > 0,
        "live device metrics");
  CHECK(strcmp(m[6].deviceUUID, batch[6]) == 0 && m[6].temperatureCelsius > 0, "last device metrics");
  CHECK(strcmp(m[1].deviceUUID, part) == 0, "partition echoed");
  if (strcmp(vendor, "nvidia") == 0) {
    /* What NVML says of the MIG device: its memory (the fake's 1g.10gb MIG
     * device has 9856 MiB less 32 MiB, none used); GPU-wide figures stay 0. */
    double total = -1;
    for (size_t k = 0; k < m[1].extraMetricsCount; k++)
      if (strcmp(m[1].extraMetrics[k].key, "memory_total_bytes") == 0)
        total = m[1].extraMetrics[k].value;
    CHECK(total == (double)((9856ull - 32) << 20) && m[1].temperatureCelsius == 0,
          "MIG partition metrics: memory_total_bytes %.0f", total);
  }
  for (size_t i = 2; i < 6; i++) {
    /* Echoed as given, cut to 63 bytes (non-UTF-8 bytes replaced). */
    CHECK(memchr(m[i].deviceUUID, 0, 64) &&
              (i == 5 ? m[i].deviceUUID[0] != 0 : strncmp(m[i].deviceUUID, batch[i], 63) == 0),
          "entry %zu echoed", i);
    CHECK(m[i].powerUsageWatts == 0 && m[i].temperatureCelsius == 0 && m[i].memoryUsedBytes == 0 &&
              m[i].utilizationPercent == 0 && m[i].extraMetricsCount == 0,
          "entry %zu all zeros", i);
  }
  CHECK(strlen(m[4].deviceUUID) == 63, "long UUID cut to fit");

  /* The hypervisor lowercases every UUID it reads ("GPU-…" → "gpu-…"). */
  char lower[64];
  for (size_t i = 0; i < sizeof lower; i++)
    lower[i] = (char)((dev0[i] >= 'A' && dev0[i] <= 'Z') ? dev0[i] - 'A' + 'a' : dev0[i]);
  const char *lowered[] = {lower};
  EXPECT_RC(p_AccelGetDeviceMetrics(lowered, 1, m), ACCEL_SUCCESS);
  CHECK(strcmp(m[0].deviceUUID, lower) == 0 && m[0].temperatureCelsius > 0, "lowercased UUID: metrics");
  setenv("ACCELERATOR_WORKER_ID", "test-v2-lowercase", 1);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(lower, 30), ACCEL_SUCCESS);
  /* Soft mode (issue 34): the worker's request, never above its limit,
   * and its priority, 1..=100; both may be set again. */
  EXPECT_RC(p_AccelSetComputeUnitRequest(lower, 20), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetComputeUnitRequest(lower, 30), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetComputeUnitRequest(lower, 31), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetComputeUnitRequest(lower, 101), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetWorkerPriority(90), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetWorkerPriority(0), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetWorkerPriority(101), ACCEL_ERROR_INVALID_PARAM);
  unsetenv("ACCELERATOR_WORKER_ID");

  /* Removal by the partition UUID, as the hypervisor does; then it is stale. */
  if (partitions())
    EXPECT_RC(p_AccelRemovePartition(part, dev0), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelRemovePartition(part, dev0), partitions() ? ACCEL_ERROR_NOT_FOUND : ACCEL_ERROR_NOT_SUPPORTED);
  EXPECT_RC(p_AccelGetDeviceMetrics(batch, 2, m), ACCEL_SUCCESS);
  CHECK(strcmp(m[1].deviceUUID, part) == 0 && m[1].memoryUsedBytes == 0 && m[1].powerUsageWatts == 0,
        "removed partition: echoed, zeros");
  CHECK(m[0].temperatureCelsius > 0, "live device beside it");
  free(m);
}

static void test_limits(void) {
  const char *dev0 = devices[0].basic.uuid;
  uint64_t total = devices[0].basic.totalMemoryBytes;
  setenv("ACCELERATOR_WORKER_ID", "test-v2-worker", 1);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, 0), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, total + 1), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 0), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 101), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, total / 2), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, total / 2), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, total / 4), ACCEL_ERROR_OPERATION_FAILED);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 40), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 41), ACCEL_ERROR_OPERATION_FAILED);
  setenv("ACCELERATOR_WORKER_ID", oversize, 1);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, total / 2), ACCEL_ERROR_INVALID_PARAM);
  unsetenv("ACCELERATOR_WORKER_ID");
}

/* NVIDIA fake: this process runs on GPU 0 (FAKE_NVML_PROCS, read on every
 * call) and is a CUDA process (FAKE_CUDA_PIDS): it is listed with compute
 * and memory in one entry, and a device-level snapshot of GPU 0
 * checkpoints it (the fake driver's state machine says so). */
static void test_nvidia_processes(void) {
  char env[128];
  snprintf(env, sizeof env, "%d:0:1073741824:30", (int)getpid());
  setenv("FAKE_NVML_PROCS", env, 1);
  snprintf(env, sizeof env, "%d", (int)getpid());
  setenv("FAKE_CUDA_PIDS", env, 1);
  ProcessInformation infos[8];
  size_t n = 0;
  EXPECT_RC(p_AccelGetProcessInformation(infos, 8, &n), ACCEL_SUCCESS);
  CHECK(n == 1 && strcmp(infos[0].processId, env) == 0 &&
            strcmp(infos[0].deviceUUID, devices[0].basic.uuid) == 0 &&
            infos[0].memoryUsedBytes == 1073741824ull && infos[0].computeUtilizationPercent > 0,
        "GPU 0 process: %zu entries, %s %llu bytes %.1f%%", n, n ? infos[0].processId : "",
        n ? (unsigned long long)infos[0].memoryUsedBytes : 0ull,
        n ? infos[0].computeUtilizationPercent : 0.0);
  void *cuda = dlopen(getenv("ACCELERATOR_CUDA_PATH"), RTLD_NOW | RTLD_NOLOAD);
  int (*state)(int) = cuda ? (int (*)(int))dlsym(cuda, "fake_cuda_state") : NULL;
  CHECK(state != NULL, "fake_cuda_state");
  SnapshotContext device = {NULL, 0, devices[0].basic.uuid};
  EXPECT_RC(p_AccelSnapshot(&device), ACCEL_SUCCESS);
  CHECK(state && state(getpid()) == 2, "device-level snapshot checkpointed this process");
  EXPECT_RC(p_AccelResume(&device), ACCEL_SUCCESS);
  CHECK(state && state(getpid()) == 0, "device-level resume: running again");
  if (cuda)
    dlclose(cuda);
  unsetenv("FAKE_NVML_PROCS");
  unsetenv("FAKE_CUDA_PIDS");
}

static void test_snapshot(void) {
  const char *dev0 = devices[0].basic.uuid;
  EXPECT_RC(p_AccelSnapshot(NULL), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelResume(NULL), ACCEL_ERROR_INVALID_PARAM);
  SnapshotContext none = {NULL, 0, NULL};
  EXPECT_RC(p_AccelSnapshot(&none), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelResume(&none), ACCEL_ERROR_INVALID_PARAM);
  pid_t pids[2] = {-1, 0};
  SnapshotContext null_pids = {NULL, 1, NULL};
  EXPECT_RC(p_AccelSnapshot(&null_pids), ACCEL_ERROR_INVALID_PARAM);
  SnapshotContext zero = {pids, 0, NULL};
  EXPECT_RC(p_AccelSnapshot(&zero), ACCEL_ERROR_INVALID_PARAM);
  SnapshotContext negative = {pids, 1, NULL};
  EXPECT_RC(p_AccelSnapshot(&negative), ACCEL_ERROR_INVALID_PARAM);
  SnapshotContext huge = {pids, SIZE_MAX, NULL};
  EXPECT_RC(p_AccelSnapshot(&huge), ACCEL_ERROR_INVALID_PARAM);
  pids[0] = 0x3ffffff0; /* above pid_max: no such process */
  SnapshotContext gone = {pids, 1, NULL};
  EXPECT_RC(p_AccelSnapshot(&gone), ACCEL_ERROR_NOT_FOUND);
  EXPECT_RC(p_AccelResume(&gone), ACCEL_ERROR_NOT_FOUND);
  /* Device-level on a fresh node: no process uses the device. */
  SnapshotContext device = {NULL, 0, dev0};
  EXPECT_RC(p_AccelSnapshot(&device), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelResume(&device), ACCEL_SUCCESS);
  pids[0] = getpid();
  SnapshotContext self = {pids, 1, dev0};
  if (strcmp(vendor, "stub") == 0) {
    EXPECT_RC(p_AccelSnapshot(&self), ACCEL_SUCCESS);
    EXPECT_RC(p_AccelResume(&self), ACCEL_SUCCESS);
  } else if (strcmp(vendor, "ascend") == 0 || strcmp(vendor, "amd") == 0 || strcmp(vendor, "habana") == 0) {
    EXPECT_RC(p_AccelSnapshot(&self), ACCEL_ERROR_NOT_SUPPORTED);
  } else {
    test_nvidia_processes();
  }
}

/* What the drivers report on a fresh node: nothing, except the Ascend
 * fake's one process (pid 4242, 512 MiB on its first NPU) and the AMD
 * fake's (pid 4343, 2 GiB on GPU 1). */
static size_t driver_processes(void) {
  return strcmp(vendor, "ascend") == 0 || strcmp(vendor, "amd") == 0 ? 1 : 0;
}

static atomic_int thread_failures;
static void *list_processes(void *arg) {
  (void)arg;
  ProcessInformation *infos = calloc(MAX_PROCESSES, sizeof *infos);
  for (int i = 0; i < (test_quick() ? 5 : 50); i++) {
    size_t n = 99;
    if (p_AccelGetProcessInformation(infos, MAX_PROCESSES, &n) != ACCEL_SUCCESS ||
        n != driver_processes())
      atomic_fetch_add(&thread_failures, 1);
  }
  free(infos);
  return NULL;
}

static void test_processes(void) {
  ProcessInformation infos[4];
  size_t n = 99;
  EXPECT_RC(p_AccelGetProcessInformation(NULL, 4, &n), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetProcessInformation(infos, 0, &n), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetProcessInformation(infos, 4, NULL), ACCEL_ERROR_INVALID_PARAM);
  /* Loading the library and setting limits does not make a process appear. */
  EXPECT_RC(p_AccelGetProcessInformation(infos, 4, &n), ACCEL_SUCCESS);
  CHECK(n == driver_processes(), "fresh node lists %zu processes", n);
  if (n == 1 && strcmp(vendor, "ascend") == 0)
    CHECK(strcmp(infos[0].processId, "4242") == 0 && infos[0].memoryUsedBytes == 512ull << 20 &&
              strncmp(infos[0].deviceUUID, "ascend-", 7) == 0,
          "the driver's process: %s %llu", infos[0].processId,
          (unsigned long long)infos[0].memoryUsedBytes);
  if (n == 1 && strcmp(vendor, "amd") == 0)
    CHECK(strcmp(infos[0].processId, "4343") == 0 && infos[0].memoryUsedBytes == 2048ull << 20 &&
              strcmp(infos[0].deviceUUID, devices[1].basic.uuid) == 0,
          "the driver's process: %s %llu", infos[0].processId,
          (unsigned long long)infos[0].memoryUsedBytes);
  pthread_t t[8];
  for (int i = 0; i < 8; i++)
    pthread_create(&t[i], NULL, list_processes, NULL);
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
  CHECK(atomic_load(&thread_failures) == 0, "8 threads: %d failures", atomic_load(&thread_failures));
}

static int has_mount(const MountPath *m, size_t n, const char *host_suffix) {
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(m[i].hostPath), s = strlen(host_suffix);
    if (l >= s && strcmp(m[i].hostPath + l - s, host_suffix) == 0)
      return 1;
  }
  return 0;
}

static void test_mounts(const char *lib_path) {
  MountPath m[32];
  size_t n = 99;
  EXPECT_RC(p_AccelGetVendorMountLibs(NULL, 32, &n), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetVendorMountLibs(m, 0, &n), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetVendorMountLibs(m, 32, NULL), ACCEL_ERROR_INVALID_PARAM);
  EXPECT_RC(p_AccelGetVendorMountLibs(m, 32, &n), ACCEL_SUCCESS);
  if (strcmp(vendor, "nvidia") == 0)
    CHECK(has_mount(m, n, "/libnvidia-ml.so.1") && has_mount(m, n, "/libcuda.so.1"),
          "NVML and libcuda from the loaded driver dir (%zu mounts)", n);
  else if (strcmp(vendor, "ascend") == 0)
    CHECK(has_mount(m, n, "/libdcmi.so"), "libdcmi.so (%zu mounts)", n);
  else if (strcmp(vendor, "amd") == 0)
    CHECK(has_mount(m, n, "/libamd_smi.so"), "libamd_smi.so (%zu mounts)", n);
  else if (strcmp(vendor, "habana") == 0)
    CHECK(has_mount(m, n, "/libhlml.so"), "libhlml.so (%zu mounts)", n);
  else /* the stub has no driver: at most the preload library beside it (build/ has one) */
    CHECK(n == 0 || (n == 1 && has_mount(m, n, "/libcuda_limiter.so")),
          "stub: nothing but the preload library to mount, %zu", n);
  for (size_t i = 0; i < n; i++)
    CHECK(m[i].hostPath[0] == '/' && m[i].guestPath[0] == '/', "mount %zu paths", i);

  /* The preload library beside a copy of this library is listed (the CUDA
   * hook: not for Ascend or AMD). */
  char dir[] = "/tmp/accelerator-v2-mount.XXXXXX";
  if (!mkdtemp(dir))
    return;
  char copy[512], preload[512], cmd[1200];
  snprintf(copy, sizeof copy, "%s/libaccelerator_copy.so", dir);
  snprintf(preload, sizeof preload, "%s/libcuda_limiter.so", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && : > '%s'", lib_path, copy, preload);
  CHECK(system(cmd) == 0, "copy library");
  void *lib2 = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
  CHECK(lib2 != NULL, "dlopen copy: %s", dlerror());
  if (lib2) {
    __typeof__(&AccelGetVendorMountLibs) f =
        (__typeof__(&AccelGetVendorMountLibs))dlsym(lib2, "AccelGetVendorMountLibs");
    n = 0;
    CHECK(f && f(m, 32, &n) == ACCEL_SUCCESS, "mounts of the copy");
    int listed = 0;
    for (size_t i = 0; i < n; i++)
      if (strcmp(m[i].hostPath, preload) == 0)
        listed = strcmp(m[i].guestPath, "/usr/local/lib/accelerator/libcuda_limiter.so") == 0;
    CHECK(listed == (strcmp(vendor, "stub") == 0 || strcmp(vendor, "nvidia") == 0),
          "%s: preload library listed: %d", vendor, listed);
    /* Not dlclosed: the library's chosen vendor is a process-lifetime
     * static, which an unload does not free (valgrind would see it lost). */
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup");
}

/* In a child, before the library picks a vendor: a configuration naming no
 * compiled-in vendor makes AccelInit fail, with the reason logged at ERROR. */
static void test_init_failure(const char *path) {
  pid_t c = fork();
  if (c == 0) {
    setenv("ACCELERATOR_VENDOR", "no-such-vendor", 1);
    void *lib = load(path);
    bind(lib);
    int rc = p_AccelRegisterLogCallback(on_log);
    int init = p_AccelInit();
    _exit(rc == ACCEL_SUCCESS && init == ACCEL_ERROR_INVALID_PARAM && atomic_load(&log_error) > 0 ? 0 : 1);
  }
  int st = 0;
  waitpid(c, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unusable configuration: AccelInit fails, logged");
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s LIB VENDOR TEMPLATE (- for a vendor without partitions)\n", argv[0]);
    return 2;
  }
  vendor = argv[2];
  template_id = argv[3];
  unterminated = malloc(8192);
  memset(unterminated, 'A', 8192);
  memset(oversize, 'u', sizeof oversize - 1);
  setenv("ACCELERATOR_LOG", "debug", 1);
  test_init_failure(argv[1]);
  void *lib = load(argv[1]);
  bind(lib);
  test_init_and_discovery();
  test_topology();
  test_bad_strings();
  test_partition_and_metrics();
  test_limits();
  test_processes(); /* before test_snapshot: the stub tracks what it snapshots */
  test_snapshot();
  test_mounts(argv[1]);

  /* Calls after shutdown still work. */
  EXPECT_RC(p_AccelShutdown(), ACCEL_SUCCESS);
  size_t n = 0;
  EXPECT_RC(p_AccelGetDeviceCount(&n), ACCEL_SUCCESS);
  CHECK(n == n_devices, "after shutdown: %zu devices", n);
  CHECK(atomic_load(&log_lines) > 0 && atomic_load(&log_debug) > 0, "log callback got %d lines",
        atomic_load(&log_lines));
  CHECK(atomic_load(&log_bad_levels) == 0, "%d lines with an unknown level", atomic_load(&log_bad_levels));
  EXPECT_RC(p_AccelRegisterLogCallback(NULL), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelInit(), ACCEL_SUCCESS);
  printf("test_v2 %s: ", vendor);
  free(unterminated);
  dlclose(lib);
  return test_summary();
}
