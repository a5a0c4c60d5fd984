/* The C test suite of libaccelerator.so, run against the stub vendor.
 *
 *   test_accelerator <path/to/libaccelerator.so>
 *
 * The library is loaded with dlopen and every function resolved with dlsym,
 * so the suite needs no link-time dependency and can load/unload it in a
 * loop. Tests that need a fresh process (configuration read on first call,
 * state that outlives a process, crashes, races) re-execute this binary as
 * `test_accelerator --child MODE LIB ARGS...` with their own environment.
 *
 * Sections: loader, dataset (both calling styles, values), log, bad input,
 * hard limits, partitions, processes (utilization, snapshot/resume),
 * persistent state, configuration, concurrency and crashes. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accelerator.h"
#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* The API, resolved through dlsym                                           */
/* ------------------------------------------------------------------------ */

#define API_FUNCS(X)                                                           \
  X(GetDeviceCount) X(GetAllDevices) X(GetPartitionTemplates)                  \
  X(GetDeviceTopology) X(AssignPartition) X(RemovePartition)                   \
  X(SetMemHardLimit) X(SetComputeUnitHardLimit) X(Snapshot) X(Resume)          \
  X(SetComputeUnitRequest) X(SetWorkerPriority) X(GetWorkerShares)            \
  X(GetProcessComputeUtilization) X(GetProcessMemoryUtilization)               \
  X(GetDeviceMetrics) X(GetExtendedDeviceMetrics) X(Log)                       \
  X(acceleratorGetLastError) X(acceleratorGetLastErrorCode)                    \
  X(acceleratorSetLogCallback)                                                 \
  X(acceleratorAbiVersion) X(acceleratorVendorName) X(getDeviceCount)          \
  X(acceleratorVendorStatus) X(acceleratorGetPciDevices)                       \
  X(getDeviceInfo) X(freeExtendedDeviceInfo) X(getPartitionTemplates)          \
  X(freePartitionTemplates) X(getDeviceTopology)                               \
  X(freeExtendedDeviceTopology) X(assignPartition) X(removePartition)          \
  X(setMemHardLimit) X(setComputeUnitHardLimit) X(snapshot) X(resume)          \
  X(getProcessComputeUtilization) X(freeComputeUtilizations)                   \
  X(getProcessMemoryUtilization) X(freeMemoryUtilizations)                     \
  X(getDeviceMetrics) X(freeDeviceMetrics) X(getExtendedDeviceMetrics)         \
  X(freeExtendedDeviceMetrics)

struct api {
  void *handle;
#define X(name) __typeof__(&name) name;
  API_FUNCS(X)
#undef X
};

static struct api A;
static const char *LIB;  /* path of the library under test */
static const char *SELF; /* this binary, for re-execution */
static char STATE_DIR[PATH_MAX];

/* Open the library and resolve every export; false (with a FAIL) if any is missing. */
static bool load_api(struct api *a, const char *path) {
  memset(a, 0, sizeof *a);
  a->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(a->handle != NULL, "dlopen(%s): %s", path, dlerror());
  if (!a->handle)
    return false;
  bool ok = true;
#define X(name)                                                                \
  a->name = (__typeof__(a->name))dlsym(a->handle, #name);                      \
  if (!a->name) {                                                              \
    ok = false;                                                                \
    test_fail(__FILE__, __LINE__, "dlsym(%s) failed", #name);                  \
  }
  API_FUNCS(X)
#undef X
  CHECK(ok, "every export resolves");
  return ok;
}

/* ------------------------------------------------------------------------ */
/* Assertion helpers                                                         */
/* ------------------------------------------------------------------------ */

#define LE A.acceleratorGetLastError
static const char *lasterr(void) {
  const char *e = A.acceleratorGetLastError ? A.acceleratorGetLastError() : NULL;
  return e ? e : "(null)";
}

/* The code acceleratorGetLastErrorCode() must report for a kind of failure. */
static int code_of_kind(const char *kind) {
  static const struct {
    const char *kind;
    Result code;
  } kinds[] = {{"invalid parameter", RESULT_ERROR_INVALID_PARAM},
               {"not found", RESULT_ERROR_NOT_FOUND},
               {"not supported", RESULT_ERROR_NOT_SUPPORTED},
               {"resource exhausted", RESULT_ERROR_RESOURCE_EXHAUSTED},
               {"operation failed", RESULT_ERROR_OPERATION_FAILED},
               {"internal error", RESULT_ERROR_INTERNAL}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kind, kinds[i].kind) == 0)
      return (int)kinds[i].code;
  return -1; /* a message fragment, not a kind: the code is not checked */
}

#define EXPECT_OK(call)                                                        \
  do {                                                                         \
    EXPECT_RC_WITH(LE, call, RESULT_SUCCESS);                                  \
    CHECK(A.acceleratorGetLastErrorCode() == RESULT_SUCCESS,                   \
          "%s: last error code %d after a success", #call,                     \
          (int)A.acceleratorGetLastErrorCode());                               \
  } while (0)

/* A failure must come with the expected code and a non-empty last error. */
#define EXPECT_FAIL(call, code)                                                \
  do {                                                                         \
    EXPECT_RC_WITH(LE, call, code);                                            \
    CHECK(lasterr()[0] != '\0', "%s: empty last error after a failure", #call); \
    CHECK(A.acceleratorGetLastErrorCode() == (code),                           \
          "%s: last error code %d, expected %d", #call,                        \
          (int)A.acceleratorGetLastErrorCode(), (int)(code));                  \
  } while (0)

/* bool functions: false, and the last error names the kind of failure
 * ("invalid parameter", "not found", "resource exhausted", ...). */
#define EXPECT_FALSE(call, kind)                                               \
  do {                                                                         \
    bool b_ = (call);                                                          \
    const char *e_ = lasterr();                                                \
    CHECK(!b_, "%s returned true, expected false", #call);                     \
    CHECK(strstr(e_, kind) != NULL, "%s: last error \"%s\" lacks \"%s\"",      \
          #call, e_, kind);                                                    \
    int want_ = code_of_kind(kind);                                            \
    CHECK(want_ < 0 || (int)A.acceleratorGetLastErrorCode() == want_,          \
          "%s: last error code %d, expected %d", #call,                        \
          (int)A.acceleratorGetLastErrorCode(), want_);                        \
  } while (0)

#define EXPECT_TRUE(call)                                                      \
  do {                                                                         \
    bool b_ = (call);                                                          \
    CHECK(b_, "%s returned false (%s)", #call, lasterr());                     \
  } while (0)

/* A fixed char[N] field holds a NUL within N bytes and equals s. */
static bool fixed_eq(const char *field, size_t n, const char *s) {
  return memchr(field, 0, n) != NULL && strcmp(field, s) == 0;
}
#define FEQ(field, s) fixed_eq((field), sizeof(field), (s))
/* A fixed field is NUL-terminated and non-empty. */
#define FOK(field) (memchr((field), 0, sizeof(field)) != NULL && (field)[0] != '\0')

static const char *const UUIDS[4] = {"stub-device-0", "stub-device-1",
                                     "stub-device-2", "stub-device-3"};
static const char *const TPL_IDS[3] = {"mig-1g.7gb", "mig-2g.14gb", "mig-3g.21gb"};
static const unsigned TPL_SLICES[3] = {1, 2, 3};
#define N_DEV 4
#define SLICES 7

static PartitionTemplate TPL[3]; /* the reference templates, read once */
static uint64_t DEV_MEMORY;      /* totalMemoryBytes of every stub device */
static uint64_t OVERHEAD[3];     /* partitionOverheadBytes per template, as assigned */

static double absd(double x) { return x < 0 ? -x : x; }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static PartitionAssignment assignment(const char *tpl, const char *dev) {
  PartitionAssignment a;
  memset(&a, 0, sizeof a);
  snprintf(a.templateId, sizeof a.templateId, "%s", tpl);
  snprintf(a.deviceUUID, sizeof a.deviceUUID, "%s", dev);
  return a;
}

/* memoryUsedBytes of one device (caller style); UINT64_MAX on failure. */
static uint64_t mem_used(const char *dev) {
  const char *u[1] = {dev};
  DeviceMetrics m;
  Result rc = A.GetDeviceMetrics(u, 1, &m);
  CHECK(rc == RESULT_SUCCESS, "GetDeviceMetrics(%s) = %d (%s)", dev, rc, lasterr());
  return rc == RESULT_SUCCESS ? m.memoryUsedBytes : UINT64_MAX;
}

/* Remove every partition of a device; returns the slices removed. */
static unsigned remove_all(const char *dev) {
  unsigned slices = 0;
  for (int t = 0; t < 3; t++)
    while (A.RemovePartition(TPL_IDS[t], dev))
      slices += TPL_SLICES[t];
  return slices;
}

/* ------------------------------------------------------------------------ */
/* Child processes                                                           */
/* ------------------------------------------------------------------------ */

/* Re-execute this binary as `--child mode LIB a1 a2` with env changes
 * applied in the child first ({name, value} pairs; value NULL unsets). */
static pid_t spawn(const char *mode, const char *const env[][2], size_t nenv,
                   const char *a1, const char *a2, int close_fd) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (close_fd >= 0)
      close(close_fd);
    for (size_t i = 0; i < nenv; i++) {
      if (env[i][1])
        setenv(env[i][0], env[i][1], 1);
      else
        unsetenv(env[i][0]);
    }
    execl(SELF, SELF, "--child", mode, LIB, a1, a2, (char *)NULL);
    _exit(127);
  }
  CHECK(pid > 0, "fork: %s", strerror(errno));
  return pid;
}

/* Exit status of a child, or 128+signal. */
static int reap(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR)
      return -1;
  }
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

static void run_child(const char *what, const char *mode,
                      const char *const env[][2], size_t nenv, const char *a1,
                      const char *a2) {
  pid_t pid = spawn(mode, env, nenv, a1, a2, -1);
  int st = pid > 0 ? reap(pid) : -1;
  CHECK(st == 0, "child %s (%s) exited with %d", what, mode, st);
}

/* A pid that certainly does not exist: a child we created and reaped. */
static pid_t reaped_pid(void) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(0);
  reap(pid);
  return pid;
}

/* ------------------------------------------------------------------------ */
/* Loader: dlopen -> call -> dlclose, and loading starts no threads          */
/* ------------------------------------------------------------------------ */

static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

static void test_dlopen_loop(void) {
  int rounds = test_quick() ? 20 : 200;
  int bad = 0;
  for (int i = 0; i < rounds; i++) {
    int before = thread_count();
    void *h = dlopen(LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      CHECK(0, "dlopen round %d: %s", i, dlerror());
      return;
    }
    if (i == 0)
      CHECK(thread_count() == before, "loading the library started threads (%d -> %d)",
            before, thread_count());
    __typeof__(&GetDeviceCount) count = (__typeof__(count))dlsym(h, "GetDeviceCount");
    __typeof__(&acceleratorAbiVersion) ver =
        (__typeof__(ver))dlsym(h, "acceleratorAbiVersion");
    size_t n = 0;
    if (!count || !ver || count(&n) != RESULT_SUCCESS || n != N_DEV || ver() != 1)
      bad++;
    if (dlclose(h) != 0)
      bad++;
  }
  CHECK(bad == 0, "dlopen/call/dlclose: %d of %d rounds failed", bad, rounds);
}

/* ------------------------------------------------------------------------ */
/* The reference dataset, in both calling styles                            */
/* ------------------------------------------------------------------------ */

static void test_extensions(void) {
  CHECK(A.acceleratorAbiVersion() == 1, "acceleratorAbiVersion() == %u", A.acceleratorAbiVersion());
  CHECK(A.acceleratorAbiVersion() == ACCELERATOR_ABI_VERSION, "header and library agree on the ABI version");
  const char *v = A.acceleratorVendorName();
  CHECK(v && strcmp(v, "stub") == 0, "acceleratorVendorName() == \"%s\"", v ? v : "(null)");
  size_t n = 0;
  EXPECT_OK(A.GetDeviceCount(&n));
  CHECK(strcmp(lasterr(), "") == 0, "last error is \"\" after a success, got \"%s\"", lasterr());

  /* The vendor's status and the PCI view joined with its devices: the
   * stub's four appear as simulated rows whatever the machine's bus holds. */
  const char *status = A.acceleratorVendorStatus();
  CHECK(status && strncmp(status, "stub: 4 devices; PCI shows ", 27) == 0,
        "acceleratorVendorStatus() == \"%s\"", status ? status : "(null)");
  AcceleratorPciDevice rows[64];
  size_t got = 99;
  EXPECT_FAIL(A.acceleratorGetPciDevices(NULL, 64, &got), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.acceleratorGetPciDevices(rows, 0, &got), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.acceleratorGetPciDevices(rows, 64, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.acceleratorGetPciDevices(rows, 64, &got));
  int simulated = 0;
  for (size_t i = 0; i < got; i++) {
    if (strcmp(rows[i].state, "simulated") != 0)
      continue;
    CHECK(rows[i].deviceIndex == simulated && !rows[i].mismatch && rows[i].address[0] == 0,
          "PCI row %zu: stub device %d, no mismatch, no address", i, simulated);
    simulated++;
  }
  CHECK(simulated == 4, "acceleratorGetPciDevices: %d simulated rows of %zu", simulated, got);
  size_t one = 0;
  EXPECT_OK(A.acceleratorGetPciDevices(rows, 1, &one));
  CHECK(one == 1, "a 1-row buffer gets 1 row, got %zu", one);
}

static bool same_device(const ExtendedDeviceInfo *a, const ExtendedDeviceInfo *b) {
  const DeviceBasicInfo *x = &a->basic, *y = &b->basic;
  const DeviceProperties *p = &a->props, *q = &b->props;
  const DeviceCapabilities *c = &a->capabilities, *d = &b->capabilities;
  return strcmp(x->uuid, y->uuid) == 0 && strcmp(x->vendor, y->vendor) == 0 &&
         strcmp(x->model, y->model) == 0 && strcmp(x->driverVersion, y->driverVersion) == 0 &&
         strcmp(x->firmwareVersion, y->firmwareVersion) == 0 && x->index == y->index &&
         x->numaNode == y->numaNode && x->totalMemoryBytes == y->totalMemoryBytes &&
         x->totalComputeUnits == y->totalComputeUnits && x->maxTflops == y->maxTflops &&
         x->pcieGen == y->pcieGen && x->pcieWidth == y->pcieWidth &&
         p->clockGraphics == q->clockGraphics && p->clockSM == q->clockSM &&
         p->clockMem == q->clockMem && p->clockAI == q->clockAI &&
         p->powerLimit == q->powerLimit && p->temperatureThreshold == q->temperatureThreshold &&
         p->eccEnabled == q->eccEnabled && p->persistenceModeEnabled == q->persistenceModeEnabled &&
         strcmp(p->computeCapability, q->computeCapability) == 0 &&
         strcmp(p->chipType, q->chipType) == 0 &&
         c->supportsPartitioning == d->supportsPartitioning &&
         c->supportsSoftIsolation == d->supportsSoftIsolation &&
         c->supportsHardIsolation == d->supportsHardIsolation &&
         c->supportsSnapshot == d->supportsSnapshot && c->supportsMetrics == d->supportsMetrics &&
         c->maxPartitions == d->maxPartitions && c->maxWorkersPerDevice == d->maxWorkersPerDevice;
}

/* The peers of device i: the other three, each once, over 300 GB/s NVLink. */
static void check_links(const char *self, const RelatedDevice *r, size_t n, const char *what) {
  CHECK(n == N_DEV - 1, "%s of %s: %zu links, expected 3", what, self, n);
  bool seen[N_DEV] = {false};
  for (size_t k = 0; r && k < n; k++) {
    int j = -1;
    for (int d = 0; d < N_DEV; d++)
      if (FEQ(r[k].deviceUUID, UUIDS[d]))
        j = d;
    CHECK(j >= 0 && !seen[j] && strcmp(UUIDS[j], self) != 0,
          "%s of %s: unexpected or repeated peer %.64s", what, self, r[k].deviceUUID);
    if (j >= 0)
      seen[j] = true;
    CHECK(FEQ(r[k].connectionType, "NVLink"), "%s: connection type %.32s", what, r[k].connectionType);
    CHECK(r[k].bandwidthMBps == 300000, "%s: bandwidth %u MBps", what, r[k].bandwidthMBps);
    CHECK(r[k].latencyNs > 0, "%s: latency 0", what);
  }
}

static void test_devices(void) {
  size_t n1 = 0, n2 = 0;
  EXPECT_OK(A.GetDeviceCount(&n1));
  EXPECT_OK(A.getDeviceCount(&n2));
  CHECK(n1 == N_DEV && n2 == N_DEV, "device counts %zu / %zu, expected 4", n1, n2);

  ExtendedDeviceInfo all[8];
  memset(all, 0x5a, sizeof all); /* garbage the library must overwrite */
  size_t n = 0;
  EXPECT_OK(A.GetAllDevices(all, 8, &n));
  CHECK(n == N_DEV, "GetAllDevices returned %zu devices", n);
  for (int i = 0; i < N_DEV && (size_t)i < n; i++) {
    const DeviceBasicInfo *b = &all[i].basic;
    CHECK(FEQ(b->uuid, UUIDS[i]), "device %d uuid %.64s", i, b->uuid);
    CHECK(FEQ(b->vendor, "STUB"), "device %d vendor %.32s", i, b->vendor);
    CHECK(FOK(b->model) && FOK(b->driverVersion) && FOK(b->firmwareVersion),
          "device %d: empty model/driver/firmware", i);
    CHECK(b->index == i, "device %d index %d", i, b->index);
    CHECK(b->numaNode >= -1, "device %d numa %d", i, b->numaNode);
    CHECK(b->totalComputeUnits == 108, "device %d has %" PRIu64 " compute units", i,
          (uint64_t)b->totalComputeUnits);
    CHECK(b->maxTflops == 312.0, "device %d maxTflops %f", i, b->maxTflops);
    CHECK(b->totalMemoryBytes > 0, "device %d memory 0", i);
    CHECK(b->totalMemoryBytes == all[0].basic.totalMemoryBytes, "devices differ in memory");
    CHECK(b->pcieGen > 0 && b->pcieWidth > 0, "device %d pcie", i);
    CHECK(all[i].relatedDevices == NULL && all[i].relatedDeviceCount == 0,
          "caller style leaves relatedDevices NULL/0");
    CHECK(all[i].capabilities.supportsPartitioning && all[i].capabilities.maxPartitions == SLICES,
          "device %d: partitioning with 7 slices", i);
    CHECK(all[i].props.powerLimit > 0 && FOK(all[i].props.chipType) &&
              FOK(all[i].props.computeCapability),
          "device %d properties", i);

    /* The library-allocated style agrees and adds the related devices. */
    ExtendedDeviceInfo info;
    memset(&info, 0x5a, sizeof info);
    EXPECT_OK(A.getDeviceInfo(i, &info));
    CHECK(same_device(&info, &all[i]), "getDeviceInfo(%d) differs from GetAllDevices", i);
    check_links(UUIDS[i], info.relatedDevices, info.relatedDeviceCount, "relatedDevices");
    A.freeExtendedDeviceInfo(&info);
    CHECK(info.relatedDevices == NULL && info.relatedDeviceCount == 0, "free resets the struct");
    A.freeExtendedDeviceInfo(&info); /* a second free is harmless */
  }
  DEV_MEMORY = all[0].basic.totalMemoryBytes;

  /* A short buffer gets the first maxCount devices. */
  ExtendedDeviceInfo two[2];
  EXPECT_OK(A.GetAllDevices(two, 2, &n));
  CHECK(n == 2 && FEQ(two[0].basic.uuid, UUIDS[0]) && FEQ(two[1].basic.uuid, UUIDS[1]),
        "GetAllDevices(maxCount 2) returned %zu", n);
}

static bool same_template(const PartitionTemplate *a, const PartitionTemplate *b) {
  return strcmp(a->templateId, b->templateId) == 0 && strcmp(a->name, b->name) == 0 &&
         a->memoryBytes == b->memoryBytes && a->computeUnits == b->computeUnits &&
         a->tflops == b->tflops && a->sliceCount == b->sliceCount &&
         a->isDefault == b->isDefault && strcmp(a->description, b->description) == 0;
}

static void test_templates(void) {
  for (int d = 0; d < N_DEV; d++) {
    PartitionTemplate buf[8];
    size_t n = 0;
    EXPECT_OK(A.GetPartitionTemplates(d, buf, 8, &n));
    CHECK(n == 3, "device %d: %zu templates", d, n);
    PartitionTemplate *lib = NULL;
    size_t ln = 0;
    EXPECT_OK(A.getPartitionTemplates(d, &lib, &ln));
    CHECK(ln == n && lib != NULL, "styles disagree on the template count (%zu vs %zu)", ln, n);
    for (size_t t = 0; t < n && t < 3; t++) {
      const PartitionTemplate *p = &buf[t];
      CHECK(FEQ(p->templateId, TPL_IDS[t]), "template %zu id %.64s", t, p->templateId);
      CHECK(p->sliceCount == TPL_SLICES[t], "%s: %u slices", TPL_IDS[t], p->sliceCount);
      CHECK(p->isDefault == (t == 1), "%s isDefault %d", TPL_IDS[t], p->isDefault);
      CHECK(p->memoryBytes > 0 && p->computeUnits > 0 && p->tflops > 0,
            "%s: zero memory/compute", TPL_IDS[t]);
      /* Seven slices' worth must fit the device. */
      CHECK(p->memoryBytes / p->sliceCount * SLICES <= DEV_MEMORY, "%s memory does not fit", TPL_IDS[t]);
      CHECK(p->computeUnits / p->sliceCount * SLICES <= 108, "%s compute does not fit", TPL_IDS[t]);
      CHECK(p->tflops <= 312.0, "%s tflops %f", TPL_IDS[t], p->tflops);
      CHECK(FOK(p->name) && FOK(p->description), "%s: empty name/description", TPL_IDS[t]);
      if (lib && t < ln)
        CHECK(same_template(p, &lib[t]), "%s differs between styles", TPL_IDS[t]);
      if (d == 0)
        TPL[t] = *p;
    }
    A.freePartitionTemplates(lib, ln);
    /* Bigger templates are proportionally bigger. */
    CHECK(buf[1].memoryBytes == 2 * buf[0].memoryBytes && buf[2].memoryBytes == 3 * buf[0].memoryBytes,
          "template memory is not proportional to slices");
  }
  PartitionTemplate one[1];
  size_t n = 0;
  EXPECT_OK(A.GetPartitionTemplates(0, one, 1, &n));
  CHECK(n == 1 && FEQ(one[0].templateId, TPL_IDS[0]), "GetPartitionTemplates(maxCount 1) -> %zu", n);
}

static void test_topology(void) {
  int32_t idx[N_DEV] = {0, 1, 2, 3};
  ExtendedDeviceTopology lib;
  memset(&lib, 0, sizeof lib);
  EXPECT_OK(A.getDeviceTopology(idx, N_DEV, &lib));
  CHECK(lib.deviceCount == N_DEV && lib.devices != NULL, "getDeviceTopology: %zu devices", lib.deviceCount);
  CHECK(lib.nvlinkBandwidthMBps == 300000, "nvlinkBandwidthMBps %u", lib.nvlinkBandwidthMBps);
  CHECK(FOK(lib.topologyType), "empty topologyType");

  /* Caller style with room for every link. */
  RelatedDevice conns[N_DEV][8];
  DeviceTopology devs[N_DEV];
  ExtendedDeviceTopology own = {.devices = devs};
  for (int i = 0; i < N_DEV; i++)
    devs[i].connections = conns[i];
  EXPECT_OK(A.GetDeviceTopology(idx, N_DEV, &own, 8));
  CHECK(own.deviceCount == N_DEV, "GetDeviceTopology: %zu devices", own.deviceCount);
  CHECK(own.nvlinkBandwidthMBps == lib.nvlinkBandwidthMBps && own.ibNicCount == lib.ibNicCount &&
            strcmp(own.topologyType, lib.topologyType) == 0,
        "topology header differs between styles");
  for (size_t i = 0; i < N_DEV && i < lib.deviceCount && i < own.deviceCount; i++) {
    CHECK(FEQ(lib.devices[i].deviceUUID, UUIDS[i]), "topology device %zu: %.64s", i, lib.devices[i].deviceUUID);
    check_links(UUIDS[i], lib.devices[i].connections, lib.devices[i].connectionCount, "topology");
    check_links(UUIDS[i], devs[i].connections, devs[i].connectionCount, "GetDeviceTopology");
    CHECK(FEQ(devs[i].deviceUUID, UUIDS[i]) && devs[i].numaNode == lib.devices[i].numaNode,
          "topology device %zu differs between styles", i);
    for (size_t k = 0; k < devs[i].connectionCount && k < lib.devices[i].connectionCount; k++)
      CHECK(strcmp(devs[i].connections[k].deviceUUID, lib.devices[i].connections[k].deviceUUID) == 0,
            "topology link order differs between styles");
  }
  A.freeExtendedDeviceTopology(&lib);
  CHECK(lib.devices == NULL && lib.deviceCount == 0, "free resets the topology");
  A.freeExtendedDeviceTopology(&lib);

  /* A subset, in the caller's order, and link buffers that are too short. */
  int32_t sub[2] = {3, 1};
  own.devices = devs;
  EXPECT_OK(A.GetDeviceTopology(sub, 2, &own, 1));
  CHECK(own.deviceCount == 2 && FEQ(devs[0].deviceUUID, UUIDS[3]) && FEQ(devs[1].deviceUUID, UUIDS[1]),
        "topology of {3,1} in order");
  CHECK(devs[0].connectionCount == 1 && devs[1].connectionCount == 1, "links truncated to 1");
  /* No link storage at all is allowed when the capacity is 0. */
  devs[0].connections = NULL;
  EXPECT_OK(A.GetDeviceTopology(sub, 1, &own, 0));
  CHECK(own.deviceCount == 1 && devs[0].connectionCount == 0, "capacity 0 -> no links");
}

static bool same_metrics(const DeviceMetrics *a, const DeviceMetrics *b) {
  return strcmp(a->deviceUUID, b->deviceUUID) == 0 && a->powerUsageWatts == b->powerUsageWatts &&
         a->temperatureCelsius == b->temperatureCelsius && a->pcieRxBytes == b->pcieRxBytes &&
         a->pcieTxBytes == b->pcieTxBytes && a->smActivePercent == b->smActivePercent &&
         a->tensorCoreUsagePercent == b->tensorCoreUsagePercent &&
         a->memoryUsedBytes == b->memoryUsedBytes && a->memoryTotalBytes == b->memoryTotalBytes;
}

static void test_metrics(void) {
  DeviceMetrics m1[N_DEV], m2[N_DEV];
  DeviceMetrics *lib = NULL;
  EXPECT_OK(A.GetDeviceMetrics((const char **)UUIDS, N_DEV, m1));
  EXPECT_OK(A.GetDeviceMetrics((const char **)UUIDS, N_DEV, m2));
  EXPECT_OK(A.getDeviceMetrics((const char **)UUIDS, N_DEV, &lib));
  CHECK(lib != NULL, "getDeviceMetrics returned NULL");
  for (int i = 0; i < N_DEV; i++) {
    CHECK(FEQ(m1[i].deviceUUID, UUIDS[i]), "metrics %d uuid %.64s", i, m1[i].deviceUUID);
    CHECK(m1[i].memoryTotalBytes == DEV_MEMORY, "metrics %d total memory", i);
    CHECK(m1[i].memoryUsedBytes <= m1[i].memoryTotalBytes, "metrics %d used > total", i);
    CHECK(m1[i].powerUsageWatts > 0 && m1[i].temperatureCelsius > 0, "metrics %d power/temperature", i);
    CHECK(m1[i].smActivePercent <= 100 && m1[i].tensorCoreUsagePercent <= 100, "metrics %d percent", i);
    CHECK(same_metrics(&m1[i], &m2[i]), "metrics %d changed between two calls", i);
    if (lib)
      CHECK(same_metrics(&m1[i], &lib[i]), "metrics %d differ between styles", i);
  }
  A.freeDeviceMetrics(lib, N_DEV);

  /* The same device twice is answered twice. */
  const char *twice[2] = {UUIDS[2], UUIDS[2]};
  EXPECT_OK(A.GetDeviceMetrics(twice, 2, m2));
  CHECK(same_metrics(&m2[0], &m1[2]) && same_metrics(&m2[1], &m1[2]), "repeated uuid");

  /* Extended metrics: one NVLink per peer, two IB NICs, one PCIe link. */
  ExtendedDeviceMetrics *xl = NULL;
  EXPECT_OK(A.getExtendedDeviceMetrics((const char **)UUIDS, N_DEV, &xl));
  uint32_t nv[N_DEV][8], pc[N_DEV][4];
  uint64_t ib[N_DEV][4];
  ExtendedDeviceMetrics xc[N_DEV];
  for (int i = 0; i < N_DEV; i++)
    xc[i] = (ExtendedDeviceMetrics){.nvlinkBandwidthMBps = nv[i], .ibNicBandwidthMBps = ib[i],
                                    .pcieBandwidthMBps = pc[i]};
  EXPECT_OK(A.GetExtendedDeviceMetrics((const char **)UUIDS, N_DEV, xc, 8, 4, 4));
  for (int i = 0; xl && i < N_DEV; i++) {
    CHECK(FEQ(xl[i].deviceUUID, UUIDS[i]) && FEQ(xc[i].deviceUUID, UUIDS[i]), "extended metrics %d uuid", i);
    CHECK(xl[i].nvlinkCount == N_DEV - 1 && xl[i].ibNicCount == 2 && xl[i].pcieLinkCount == 1,
          "extended metrics %d counts %zu/%zu/%zu", i, xl[i].nvlinkCount, xl[i].ibNicCount,
          xl[i].pcieLinkCount);
    CHECK(xc[i].nvlinkCount == xl[i].nvlinkCount && xc[i].ibNicCount == xl[i].ibNicCount &&
              xc[i].pcieLinkCount == xl[i].pcieLinkCount,
          "extended metrics %d counts differ between styles", i);
    bool same = true;
    for (size_t k = 0; k < xc[i].nvlinkCount && k < xl[i].nvlinkCount; k++)
      same &= xc[i].nvlinkBandwidthMBps[k] == xl[i].nvlinkBandwidthMBps[k] &&
              xl[i].nvlinkBandwidthMBps[k] <= 300000;
    for (size_t k = 0; k < xc[i].ibNicCount && k < xl[i].ibNicCount; k++)
      same &= xc[i].ibNicBandwidthMBps[k] == xl[i].ibNicBandwidthMBps[k];
    for (size_t k = 0; k < xc[i].pcieLinkCount && k < xl[i].pcieLinkCount; k++)
      same &= xc[i].pcieBandwidthMBps[k] == xl[i].pcieBandwidthMBps[k];
    CHECK(same, "extended metrics %d values differ between styles (or exceed NVLink)", i);
  }
  A.freeExtendedDeviceMetrics(xl, N_DEV);

  /* Short buffers: values beyond the capacities are dropped; 0 allows NULL. */
  ExtendedDeviceMetrics small = {.nvlinkBandwidthMBps = nv[0], .ibNicBandwidthMBps = NULL,
                                 .pcieBandwidthMBps = pc[0]};
  EXPECT_OK(A.GetExtendedDeviceMetrics((const char **)UUIDS, 1, &small, 1, 0, 1));
  CHECK(small.nvlinkCount == 1 && small.ibNicCount == 0 && small.pcieLinkCount == 1,
        "short extended buffers: %zu/%zu/%zu", small.nvlinkCount, small.ibNicCount, small.pcieLinkCount);
}

/* ------------------------------------------------------------------------ */
/* Log and its callback                                                      */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8][512];
static AcceleratorLogLevel log_level[8];
static int log_n;

static void log_cb(AcceleratorLogLevel level, const char *message) {
  pthread_mutex_lock(&log_mu);
  snprintf(log_text[log_n % 8], sizeof log_text[0], "%s", message ? message : "(null)");
  log_level[log_n % 8] = level;
  log_n++;
  pthread_mutex_unlock(&log_mu);
}

/* Whether a message containing `needle` arrived at `level` since `from`. */
static bool log_seen(int from, AcceleratorLogLevel level, const char *needle) {
  bool found = false;
  pthread_mutex_lock(&log_mu);
  for (int i = from; i < log_n; i++)
    if (i >= log_n - 8 && log_level[i % 8] == level && strstr(log_text[i % 8], needle))
      found = true;
  pthread_mutex_unlock(&log_mu);
  return found;
}

static int log_mark(void) {
  pthread_mutex_lock(&log_mu);
  int n = log_n;
  pthread_mutex_unlock(&log_mu);
  return n;
}

static void test_log(void) {
  A.acceleratorSetLogCallback(log_cb);
  int mark = log_mark();
  EXPECT_OK(A.Log("error", "c-test error marker"));
  CHECK(log_seen(mark, ACCELERATOR_LOG_LEVEL_ERROR, "c-test error marker"),
        "Log(error) did not reach the callback");
  if (!getenv("ACCELERATOR_LOG")) { /* default threshold: warn */
    mark = log_mark();
    EXPECT_OK(A.Log("warn", "c-test warn marker"));
    EXPECT_OK(A.Log("info", "c-test info marker"));
    CHECK(log_seen(mark, ACCELERATOR_LOG_LEVEL_WARN, "c-test warn marker"), "Log(warn) not delivered");
    CHECK(!log_seen(mark, ACCELERATOR_LOG_LEVEL_INFO, "c-test info marker"),
          "Log(info) delivered below the default warn threshold");
  }
  const char *levels[] = {"error", "warn", "warning", "info", "debug", "trace", "ERROR"};
  for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
    EXPECT_OK(A.Log(levels[i], "c-test level check"));
  EXPECT_FAIL(A.Log("verbose", "x"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.Log("", "x"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.Log(NULL, "x"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.Log("error", NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.Log("\xff\xfe", "x"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.Log("error", "\xff\xfe"), RESULT_ERROR_INVALID_PARAM);
  /* NULL restores stderr: the callback hears nothing more. */
  A.acceleratorSetLogCallback(NULL);
  mark = log_mark();
  int saved = dup(STDERR_FILENO), devnull = open("/dev/null", O_WRONLY);
  if (saved >= 0 && devnull >= 0)
    dup2(devnull, STDERR_FILENO); /* keep the suite's output clean */
  EXPECT_OK(A.Log("error", "c-test after reset"));
  if (saved >= 0 && devnull >= 0) {
    dup2(saved, STDERR_FILENO);
  }
  if (saved >= 0)
    close(saved);
  if (devnull >= 0)
    close(devnull);
  CHECK(log_mark() == mark, "callback still called after acceleratorSetLogCallback(NULL)");
}

/* ------------------------------------------------------------------------ */
/* Bad input: every pointer NULL, zero/huge counts, bad indices and strings  */
/* ------------------------------------------------------------------------ */

static void *lasterr_thread(void *arg) {
  const char **out = arg;
  const char *e = A.acceleratorGetLastError();
  out[0] = (e && e[0] == '\0') ? "empty" : "non-empty";
  A.GetDeviceCount(NULL); /* fails on this thread only */
  e = A.acceleratorGetLastError();
  out[1] = (e && strstr(e, "GetDeviceCount")) ? "named" : "missing";
  return NULL;
}

static void test_bad_devices(void) {
  size_t n = 7;
  EXPECT_FAIL(A.GetDeviceCount(NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceCount(NULL), RESULT_ERROR_INVALID_PARAM);

  /* The last error is per thread: another thread starts clean and its
   * failure does not overwrite ours. */
  A.getDeviceInfo(-5, NULL);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", lasterr());
  const char *seen[2] = {NULL, NULL};
  pthread_t t;
  if (pthread_create(&t, NULL, lasterr_thread, seen) == 0) {
    pthread_join(t, NULL);
    CHECK(seen[0] && strcmp(seen[0], "empty") == 0, "a new thread's last error is not empty");
    CHECK(seen[1] && strcmp(seen[1], "named") == 0, "thread's last error does not name its call");
    CHECK(strcmp(mine, lasterr()) == 0, "another thread changed this thread's last error");
  }

  ExtendedDeviceInfo buf[4];
  EXPECT_FAIL(A.GetAllDevices(NULL, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetAllDevices(buf, 0, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetAllDevices(buf, 4, NULL), RESULT_ERROR_INVALID_PARAM);

  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_FAIL(A.getDeviceInfo(0, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceInfo(-1, &info), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceInfo(INT32_MIN, &info), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceInfo(99, &info), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getDeviceInfo(N_DEV, &info), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getDeviceInfo(INT32_MAX, &info), RESULT_ERROR_NOT_FOUND);
  CHECK(info.relatedDevices == NULL && info.relatedDeviceCount == 0, "failed getDeviceInfo leaves no array");
  A.freeExtendedDeviceInfo(&info);

  PartitionTemplate tb[4], *tp = (PartitionTemplate *)&n;
  EXPECT_FAIL(A.GetPartitionTemplates(0, NULL, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetPartitionTemplates(0, tb, 0, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetPartitionTemplates(0, tb, 4, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetPartitionTemplates(-1, tb, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetPartitionTemplates(99, tb, 4, &n), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getPartitionTemplates(0, NULL, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getPartitionTemplates(0, &tp, NULL), RESULT_ERROR_INVALID_PARAM);
  n = 5;
  EXPECT_FAIL(A.getPartitionTemplates(-1, &tp, &n), RESULT_ERROR_INVALID_PARAM);
  CHECK(tp == NULL && n == 0, "failed getPartitionTemplates resets its outputs");
  EXPECT_FAIL(A.getPartitionTemplates(99, &tp, &n), RESULT_ERROR_NOT_FOUND);
  A.freePartitionTemplates(tp, n);

  /* Topology, both styles. */
  int32_t idx[1] = {0}, neg[1] = {-1}, unk[1] = {99}, mixed[2] = {0, 99};
  RelatedDevice conns[8];
  DeviceTopology devs[2] = {{.connections = conns}, {.connections = conns}};
  ExtendedDeviceTopology own = {.devices = devs}, lib;
  memset(&lib, 0, sizeof lib);
  EXPECT_FAIL(A.GetDeviceTopology(NULL, 1, &own, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceTopology(idx, 0, &own, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceTopology(idx, SIZE_MAX, &own, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceTopology(idx, 1, NULL, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceTopology(neg, 1, &own, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceTopology(unk, 1, &own, 8), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.GetDeviceTopology(mixed, 2, &own, 8), RESULT_ERROR_NOT_FOUND);
  ExtendedDeviceTopology nodevs = {.devices = NULL};
  EXPECT_FAIL(A.GetDeviceTopology(idx, 1, &nodevs, 8), RESULT_ERROR_INVALID_PARAM);
  devs[0].connections = NULL;
  EXPECT_FAIL(A.GetDeviceTopology(idx, 1, &own, 8), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(NULL, 1, &lib), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(idx, 0, &lib), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(idx, SIZE_MAX, &lib), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(idx, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(neg, 1, &lib), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceTopology(unk, 1, &lib), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getDeviceTopology(mixed, 2, &lib), RESULT_ERROR_NOT_FOUND);
  CHECK(lib.devices == NULL && lib.deviceCount == 0, "failed getDeviceTopology leaves no array");
  A.freeExtendedDeviceTopology(&lib);
}

static void test_bad_partitions(void) {
  const char *dev = UUIDS[0];
  EXPECT_FALSE(A.AssignPartition(NULL), "invalid parameter");
  EXPECT_FALSE(A.assignPartition(NULL), "invalid parameter");
  PartitionAssignment a = assignment(TPL_IDS[0], dev);
  memset(a.templateId, 'A', sizeof a.templateId); /* unterminated */
  EXPECT_FALSE(A.AssignPartition(&a), "invalid parameter");
  EXPECT_FALSE(A.assignPartition(&a), "invalid parameter");
  a = assignment(TPL_IDS[0], dev);
  memset(a.deviceUUID, 'A', sizeof a.deviceUUID);
  EXPECT_FALSE(A.AssignPartition(&a), "invalid parameter");
  a = assignment("", dev);
  EXPECT_FALSE(A.AssignPartition(&a), "invalid parameter");
  a = assignment(TPL_IDS[0], "");
  EXPECT_FALSE(A.assignPartition(&a), "invalid parameter");
  a = assignment("\xff\xfe", dev);
  EXPECT_FALSE(A.AssignPartition(&a), "invalid parameter");
  a = assignment(TPL_IDS[0], "\xff\xfe");
  EXPECT_FALSE(A.assignPartition(&a), "invalid parameter");
  a = assignment("mig-9g.63gb", dev);
  EXPECT_FALSE(A.AssignPartition(&a), "not found");
  EXPECT_FALSE(A.assignPartition(&a), "not found");
  a = assignment(TPL_IDS[0], "stub-device-99");
  EXPECT_FALSE(A.AssignPartition(&a), "not found");
  EXPECT_FALSE(A.assignPartition(&a), "not found");

  __typeof__(A.RemovePartition) rm[2] = {A.RemovePartition, A.removePartition};
  for (int s = 0; s < 2; s++) {
    EXPECT_FALSE(rm[s](NULL, dev), "invalid parameter");
    EXPECT_FALSE(rm[s](TPL_IDS[0], NULL), "invalid parameter");
    EXPECT_FALSE(rm[s]("", dev), "invalid parameter");
    EXPECT_FALSE(rm[s](TPL_IDS[0], ""), "invalid parameter");
    EXPECT_FALSE(rm[s]("\xff\xfe", dev), "invalid parameter");
    EXPECT_FALSE(rm[s](TPL_IDS[0], "\xff\xfe"), "invalid parameter");
    EXPECT_FALSE(rm[s]("mig-9g.63gb", dev), "not found");
    EXPECT_FALSE(rm[s](TPL_IDS[0], "stub-device-99"), "not found");
    EXPECT_FALSE(rm[s]("stub-mig-nosuch", dev), "not found"); /* unknown partition UUID */
  }
}

static void test_bad_limits(void) {
  const char *dev = UUIDS[0];
  char longid[200];
  memset(longid, 'w', sizeof longid - 1);
  longid[sizeof longid - 1] = '\0';
  __typeof__(A.SetMemHardLimit) mem[2] = {A.SetMemHardLimit, A.setMemHardLimit};
  __typeof__(A.SetComputeUnitHardLimit) cu[2] = {A.SetComputeUnitHardLimit, A.setComputeUnitHardLimit};
  for (int s = 0; s < 2; s++) {
    EXPECT_FAIL(mem[s](NULL, dev, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("bad-w", NULL, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("", dev, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("bad-w", "", 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("\xff\xfe", dev, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("bad-w", "\xff\xfe", 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s](longid, dev, 1 << 20), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s]("bad-w", "stub-device-99", 1 << 20), RESULT_ERROR_NOT_FOUND);
    EXPECT_FAIL(cu[s](NULL, dev, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("bad-w", NULL, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("", dev, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("bad-w", "", 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("\xff\xfe", dev, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("bad-w", "\xff\xfe", 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s](longid, dev, 50), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s]("bad-w", "stub-device-99", 50), RESULT_ERROR_NOT_FOUND);
  }
}

static void test_bad_processes(void) {
  pid_t me = getpid(), gone = reaped_pid(), zero = 0, negative = -1;
  pid_t two[2] = {me, gone};
  __typeof__(A.Snapshot) fn[4] = {A.Snapshot, A.Resume, A.snapshot, A.resume};
  for (int s = 0; s < 4; s++) {
    EXPECT_FAIL(fn[s](NULL), RESULT_ERROR_INVALID_PARAM);
    ProcessArray p = {.processIds = NULL, .processCount = 1};
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    p = (ProcessArray){.processIds = &me, .processCount = 0};
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    p.processCount = SIZE_MAX;
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    p.processCount = 1;
    memset(p.deviceUUID, 'A', sizeof p.deviceUUID); /* unterminated */
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    snprintf(p.deviceUUID, sizeof p.deviceUUID, "\xff\xfe");
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    snprintf(p.deviceUUID, sizeof p.deviceUUID, "stub-device-99");
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_NOT_FOUND);
    memset(p.deviceUUID, 0, sizeof p.deviceUUID);
    p.processIds = &zero;
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    p.processIds = &negative;
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_INVALID_PARAM);
    p.processIds = &gone;
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_NOT_FOUND);
    /* All or none: a dead pid among live ones changes nothing. */
    p = (ProcessArray){.processIds = two, .processCount = 2};
    EXPECT_FAIL(fn[s](&p), RESULT_ERROR_NOT_FOUND);
  }

  /* Caller-allocated utilization lists. */
  ComputeUtilization cb[4];
  MemoryUtilization mb[4];
  size_t n;
  EXPECT_FAIL(A.GetProcessComputeUtilization(NULL, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetProcessComputeUtilization(cb, 0, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetProcessComputeUtilization(cb, 4, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetProcessMemoryUtilization(NULL, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetProcessMemoryUtilization(mb, 0, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetProcessMemoryUtilization(mb, 4, NULL), RESULT_ERROR_INVALID_PARAM);

  /* Library-allocated utilization queries: the same matrix for both kinds. */
  const char *devs[1] = {UUIDS[0]}, *pids[1] = {"4242"};
  const char *empty[1] = {""}, *bad8[1] = {"\xff\xfe"}, *unknown[1] = {"stub-device-99"},
             *nul[1] = {NULL};
  for (int kind = 0; kind < 2; kind++) {
    ComputeUtilization *cu = NULL;
    MemoryUtilization *mu = NULL;
#define UTIL(d, dn, p, pn, out, cnt)                                           \
  (kind == 0 ? A.getProcessComputeUtilization(d, dn, p, pn, (out) ? &cu : NULL, cnt) \
             : A.getProcessMemoryUtilization(d, dn, p, pn, (out) ? &mu : NULL, cnt))
    EXPECT_FAIL(UTIL(NULL, 1, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 0, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, SIZE_MAX, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, NULL, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, pids, 0, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, pids, SIZE_MAX, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, pids, 1, 0, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, pids, 1, 1, NULL), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(empty, 1, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(bad8, 1, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(nul, 1, pids, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, empty, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, bad8, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(UTIL(devs, 1, nul, 1, 1, &n), RESULT_ERROR_INVALID_PARAM);
    n = 9;
    EXPECT_FAIL(UTIL(unknown, 1, pids, 1, 1, &n), RESULT_ERROR_NOT_FOUND);
    CHECK(cu == NULL && mu == NULL && n == 0, "failed utilization query resets its outputs");
#undef UTIL
    A.freeComputeUtilizations(cu, 0);
    A.freeMemoryUtilizations(mu, 0);
  }
}

static void test_bad_metrics(void) {
  const char *devs[1] = {UUIDS[0]}, *empty[1] = {""}, *bad8[1] = {"\xff\xfe"},
             *unknown[1] = {"stub-device-99"}, *nul[1] = {NULL},
             *mixed[2] = {UUIDS[0], "stub-device-99"};
  DeviceMetrics m[2], *mp = NULL;
  EXPECT_FAIL(A.GetDeviceMetrics(NULL, 1, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(devs, 0, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(devs, SIZE_MAX, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(devs, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(empty, 1, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(bad8, 1, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(nul, 1, m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetDeviceMetrics(unknown, 1, m), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.GetDeviceMetrics(mixed, 2, m), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getDeviceMetrics(NULL, 1, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(devs, 0, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(devs, SIZE_MAX, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(devs, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(empty, 1, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(bad8, 1, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(nul, 1, &mp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getDeviceMetrics(unknown, 1, &mp), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getDeviceMetrics(mixed, 2, &mp), RESULT_ERROR_NOT_FOUND);
  CHECK(mp == NULL, "failed getDeviceMetrics leaves no array");
  A.freeDeviceMetrics(mp, 0);

  uint32_t nv[8], pc[4];
  uint64_t ib[4];
  ExtendedDeviceMetrics x[2] = {{.nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = ib, .pcieBandwidthMBps = pc},
                                {.nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = ib, .pcieBandwidthMBps = pc}};
  ExtendedDeviceMetrics *xp = NULL;
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(NULL, 1, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(devs, 0, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(devs, SIZE_MAX, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(devs, 1, NULL, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(empty, 1, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(bad8, 1, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(nul, 1, x, 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(unknown, 1, x, 8, 4, 4), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.GetExtendedDeviceMetrics(mixed, 2, x, 8, 4, 4), RESULT_ERROR_NOT_FOUND);
  ExtendedDeviceMetrics holes[3] = {
      {.nvlinkBandwidthMBps = NULL, .ibNicBandwidthMBps = ib, .pcieBandwidthMBps = pc},
      {.nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = NULL, .pcieBandwidthMBps = pc},
      {.nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = ib, .pcieBandwidthMBps = NULL}};
  for (int i = 0; i < 3; i++)
    EXPECT_FAIL(A.GetExtendedDeviceMetrics(devs, 1, &holes[i], 8, 4, 4), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(NULL, 1, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(devs, 0, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(devs, SIZE_MAX, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(devs, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(empty, 1, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(bad8, 1, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(nul, 1, &xp), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(unknown, 1, &xp), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.getExtendedDeviceMetrics(mixed, 2, &xp), RESULT_ERROR_NOT_FOUND);
  CHECK(xp == NULL, "failed getExtendedDeviceMetrics leaves no array");
  A.freeExtendedDeviceMetrics(xp, 0);
}

/* The free functions accept NULL, zeroed structs and counts of 0. */
static void test_free_functions(void) {
  ExtendedDeviceInfo info;
  ExtendedDeviceTopology topo;
  memset(&info, 0, sizeof info);
  memset(&topo, 0, sizeof topo);
  A.freeExtendedDeviceInfo(NULL);
  A.freeExtendedDeviceInfo(&info);
  A.freePartitionTemplates(NULL, 0);
  A.freePartitionTemplates(NULL, 3);
  A.freeExtendedDeviceTopology(NULL);
  A.freeExtendedDeviceTopology(&topo);
  A.freeComputeUtilizations(NULL, 0);
  A.freeComputeUtilizations(NULL, 5);
  A.freeMemoryUtilizations(NULL, 0);
  A.freeMemoryUtilizations(NULL, 5);
  A.freeDeviceMetrics(NULL, 0);
  A.freeDeviceMetrics(NULL, 5);
  A.freeExtendedDeviceMetrics(NULL, 0);
  A.freeExtendedDeviceMetrics(NULL, 5);
  CHECK(info.relatedDevices == NULL && topo.devices == NULL, "zeroed structs stay zeroed");
  /* Freeing a zero-count result of a real call is fine too. */
  DeviceMetrics *m = NULL;
  EXPECT_OK(A.getDeviceMetrics((const char **)UUIDS, 1, &m));
  A.freeDeviceMetrics(m, 0);
}

/* ------------------------------------------------------------------------ */
/* Hard limits: one-time per worker and device                               */
/* ------------------------------------------------------------------------ */

static void test_hard_limits(void) {
  const char *dev = UUIDS[0];
  uint64_t gib = 1ull << 30;
  __typeof__(A.SetMemHardLimit) mem[2] = {A.SetMemHardLimit, A.setMemHardLimit};
  __typeof__(A.SetComputeUnitHardLimit) cu[2] = {A.SetComputeUnitHardLimit, A.setComputeUnitHardLimit};
  const char *worker[2] = {"c-test-worker-caller", "c-test-worker-lib"};
  for (int s = 0; s < 2; s++) {
    const char *w = worker[s];
    EXPECT_FAIL(mem[s](w, dev, 0), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s](w, dev, DEV_MEMORY + 1), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(mem[s](w, dev, UINT64_MAX), RESULT_ERROR_INVALID_PARAM);
    EXPECT_OK(mem[s](w, dev, 2 * gib));
    EXPECT_OK(mem[s](w, dev, 2 * gib));
    EXPECT_FAIL(mem[s](w, dev, 3 * gib), RESULT_ERROR_OPERATION_FAILED);
    EXPECT_OK(mem[s](w, dev, 2 * gib)); /* the refused change left it as it was */
    EXPECT_OK(mem[s](w, UUIDS[1], 3 * gib)); /* per device */

    EXPECT_FAIL(cu[s](w, dev, 0), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s](w, dev, 101), RESULT_ERROR_INVALID_PARAM);
    EXPECT_FAIL(cu[s](w, dev, UINT32_MAX), RESULT_ERROR_INVALID_PARAM);
    EXPECT_OK(cu[s](w, dev, 50));
    EXPECT_OK(cu[s](w, dev, 50));
    EXPECT_FAIL(cu[s](w, dev, 60), RESULT_ERROR_OPERATION_FAILED);
    EXPECT_OK(cu[s](w, UUIDS[1], 60));
  }
  /* The bounds themselves are valid. */
  EXPECT_OK(A.SetMemHardLimit("c-test-worker-max", dev, DEV_MEMORY));
  EXPECT_OK(A.SetMemHardLimit("c-test-worker-min", dev, 1));
  EXPECT_OK(A.SetComputeUnitHardLimit("c-test-worker-max", dev, 100));
  EXPECT_OK(A.SetComputeUnitHardLimit("c-test-worker-min", dev, 1));
  /* Limits are shared between the styles: the same worker and device. */
  EXPECT_FAIL(A.setMemHardLimit(worker[0], dev, 4 * gib), RESULT_ERROR_OPERATION_FAILED);
  EXPECT_OK(A.setMemHardLimit(worker[0], dev, 2 * gib));
  EXPECT_FAIL(A.SetComputeUnitHardLimit(worker[1], dev, 70), RESULT_ERROR_OPERATION_FAILED);
}

/* Soft mode's words (issue 34): a request (0..=100, never above the hard
 * limit, may be set again) and a priority (1..=100, may be set again).
 * Bad input: INVALID_PARAM with a reason, and nothing changes. */
static void test_soft_limits(void) {
  const char *dev = UUIDS[0];
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-1", dev, 101), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-1", dev, UINT32_MAX), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-1", "no-such-device", 10), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetComputeUnitRequest(NULL, dev, 10), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-1", NULL, 10), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetWorkerPriority("c-soft-1", 0), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetWorkerPriority("c-soft-1", 101), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetWorkerPriority(NULL, 50), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.SetWorkerPriority("", 50), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.SetWorkerPriority("c-soft-1", 1));
  EXPECT_OK(A.SetWorkerPriority("c-soft-1", 100));
  /* A request first: a hard limit below it is refused and not set (the
   * one-time limit is still free for 60). */
  EXPECT_OK(A.SetComputeUnitRequest("c-soft-1", dev, 40));
  EXPECT_OK(A.SetComputeUnitRequest("c-soft-1", dev, 40));
  EXPECT_FAIL(A.SetComputeUnitHardLimit("c-soft-1", dev, 30), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.SetComputeUnitHardLimit("c-soft-1", dev, 60));
  /* Then never above the limit; up to it, or best-effort, any number of times. */
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-1", dev, 61), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.SetComputeUnitRequest("c-soft-1", dev, 60));
  EXPECT_OK(A.SetComputeUnitRequest("c-soft-1", dev, 0));
  /* Per device: no limit on the other one. */
  EXPECT_OK(A.SetComputeUnitRequest("c-soft-1", UUIDS[1], 100));
  /* A refused request changed nothing: had 170 been kept, a limit of 1
   * would be below it. */
  EXPECT_FAIL(A.SetComputeUnitRequest("c-soft-2", dev, 170), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.SetComputeUnitHardLimit("c-soft-2", dev, 1));

  /* GetWorkerShares: the words as set (no sampler on the stub: no grant,
   * no process: no device time). */
  size_t n = 0;
  EXPECT_FAIL(A.GetWorkerShares(NULL, 0, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_FAIL(A.GetWorkerShares(NULL, 4, &n), RESULT_ERROR_INVALID_PARAM);
  EXPECT_OK(A.GetWorkerShares(NULL, 0, &n));
  CHECK(n >= 3, "c-soft-1 on two devices and c-soft-2: %zu", n);
  WorkerShare *w = calloc(n, sizeof *w);
  size_t got = 0;
  EXPECT_OK(A.GetWorkerShares(w, n, &got));
  CHECK(got == n, "%zu of %zu", got, n);
  int seen = 0;
  for (size_t i = 0; i < got; i++) {
    if (strcmp(w[i].workerId, "c-soft-1") == 0 && strcmp(w[i].deviceUUID, dev) == 0) {
      seen |= 1;
      CHECK(w[i].requestPercent == 0 && w[i].limitPercent == 60 && w[i].priority == 100 &&
                w[i].grantedBasisPoints == 0 && w[i].usedNs == 0,
            "c-soft-1: request %u limit %u priority %u granted %u used %llu", w[i].requestPercent,
            w[i].limitPercent, w[i].priority, w[i].grantedBasisPoints,
            (unsigned long long)w[i].usedNs);
    }
    if (strcmp(w[i].workerId, "c-soft-1") == 0 && strcmp(w[i].deviceUUID, UUIDS[1]) == 0) {
      seen |= 2;
      CHECK(w[i].requestPercent == 100 && w[i].limitPercent == 0, "c-soft-1 on %s", UUIDS[1]);
    }
  }
  CHECK(seen == 3, "both of c-soft-1's rows listed (%d)", seen);
  /* Fewer slots than entries: as many as fit. */
  EXPECT_OK(A.GetWorkerShares(w, 1, &got));
  CHECK(got == 1, "one slot: %zu", got);
  free(w);
}

/* ------------------------------------------------------------------------ */
/* Partitions: the 7-slice budget and memory accounting                     */
/* ------------------------------------------------------------------------ */

static void test_partitions(void) {
  const char *dev = UUIDS[1];
  uint64_t base = mem_used(dev);
  uint64_t other = mem_used(UUIDS[2]);

  PartitionAssignment p1 = assignment(TPL_IDS[2], dev);
  EXPECT_TRUE(A.AssignPartition(&p1));
  CHECK(strncmp(p1.partitionUUID, "stub-mig-", 9) == 0 && FOK(p1.partitionUUID),
        "partition UUID \"%.64s\"", p1.partitionUUID);
  CHECK(p1.partitionOverheadBytes > 0, "partition overhead 0");
  CHECK(strcmp(lasterr(), "") == 0, "last error not cleared by a success");
  uint64_t after1 = mem_used(dev);
  CHECK(after1 == base + TPL[2].memoryBytes + p1.partitionOverheadBytes,
        "memoryUsed grew by %" PRIu64 ", expected %" PRIu64, after1 - base,
        (uint64_t)(TPL[2].memoryBytes + p1.partitionOverheadBytes));
  CHECK(mem_used(UUIDS[2]) == other, "another device's memory changed");

  PartitionAssignment p2 = assignment(TPL_IDS[2], dev);
  EXPECT_TRUE(A.assignPartition(&p2));
  CHECK(strcmp(p1.partitionUUID, p2.partitionUUID) != 0 && FOK(p2.partitionUUID),
        "partition UUIDs are not unique");
  CHECK(mem_used(dev) == after1 + TPL[2].memoryBytes + p2.partitionOverheadBytes,
        "memoryUsed after the second partition");

  /* 6 of 7 slices used: 2 slices do not fit, 1 does, then nothing. */
  PartitionAssignment p3 = assignment(TPL_IDS[1], dev);
  EXPECT_FALSE(A.AssignPartition(&p3), "resource exhausted");
  EXPECT_FALSE(A.assignPartition(&p3), "resource exhausted");
  PartitionAssignment p4 = assignment(TPL_IDS[0], dev);
  EXPECT_TRUE(A.AssignPartition(&p4));
  uint64_t full = mem_used(dev);
  PartitionAssignment p5 = assignment(TPL_IDS[0], dev);
  EXPECT_FALSE(A.assignPartition(&p5), "resource exhausted");
  CHECK(mem_used(dev) == full, "a refused partition changed memoryUsed");
  /* Other devices have their own budgets. */
  PartitionAssignment q = assignment(TPL_IDS[2], UUIDS[2]);
  EXPECT_TRUE(A.AssignPartition(&q));
  EXPECT_TRUE(A.RemovePartition(q.partitionUUID, UUIDS[2]));

  /* Removing what does not exist. */
  EXPECT_FALSE(A.RemovePartition(TPL_IDS[1], dev), "not found");
  EXPECT_FALSE(A.removePartition(TPL_IDS[1], dev), "not found");
  EXPECT_FALSE(A.RemovePartition(p1.partitionUUID, UUIDS[2]), "not found"); /* wrong device */
  EXPECT_FALSE(A.RemovePartition("stub-mig-stub-device-1-999999", dev), "not found");

  /* Removing by partition UUID frees exactly that partition's memory and slices. */
  EXPECT_TRUE(A.RemovePartition(p1.partitionUUID, dev));
  CHECK(mem_used(dev) == full - TPL[2].memoryBytes - p1.partitionOverheadBytes,
        "memoryUsed after removing a partition");
  EXPECT_FALSE(A.RemovePartition(p1.partitionUUID, dev), "not found");
  PartitionAssignment p6 = assignment(TPL_IDS[1], dev);
  EXPECT_TRUE(A.assignPartition(&p6)); /* 3 freed slices: 2 fit now */
  CHECK(p6.partitionOverheadBytes > 0, "overhead of the 2-slice partition");
  OVERHEAD[0] = p4.partitionOverheadBytes;
  OVERHEAD[1] = p6.partitionOverheadBytes;
  OVERHEAD[2] = p1.partitionOverheadBytes;
  /* The stub charges overhead per slice, so every slice costs the same. */
  CHECK(OVERHEAD[1] == 2 * OVERHEAD[0] && OVERHEAD[2] == 3 * OVERHEAD[0] &&
            p2.partitionOverheadBytes == OVERHEAD[2],
        "overheads %" PRIu64 "/%" PRIu64 "/%" PRIu64 " are not proportional to slices", OVERHEAD[0],
        OVERHEAD[1], OVERHEAD[2]);

  /* Remove by template (library style), then by UUID. */
  EXPECT_TRUE(A.removePartition(TPL_IDS[1], dev));
  EXPECT_TRUE(A.removePartition(p2.partitionUUID, dev));
  EXPECT_TRUE(A.RemovePartition(TPL_IDS[0], dev));
  CHECK(mem_used(dev) == base, "memoryUsed back to the baseline after removing everything");
  CHECK(remove_all(dev) == 0, "partitions left behind");
}

/* ------------------------------------------------------------------------ */
/* Processes: utilization and snapshot/resume                               */
/* ------------------------------------------------------------------------ */

static const MemoryUtilization *find_mem(const MemoryUtilization *u, size_t n, const char *pid,
                                         const char *dev) {
  for (size_t i = 0; u && i < n; i++)
    if (FEQ(u[i].processId, pid) && FEQ(u[i].deviceUUID, dev))
      return &u[i];
  return NULL;
}

static const ComputeUtilization *find_cu(const ComputeUtilization *u, size_t n, const char *pid,
                                         const char *dev) {
  for (size_t i = 0; u && i < n; i++)
    if (FEQ(u[i].processId, pid) && FEQ(u[i].deviceUUID, dev))
      return &u[i];
  return NULL;
}

static size_t count_pid(const MemoryUtilization *u, size_t n, const char *pid) {
  size_t c = 0;
  for (size_t i = 0; u && i < n; i++)
    c += FEQ(u[i].processId, pid);
  return c;
}

static void check_running_mem(const MemoryUtilization *m, const char *what) {
  CHECK(m != NULL, "%s: no memory entry", what);
  if (!m)
    return;
  uint64_t step = 256ull << 20;
  CHECK(m->usedBytes >= step && m->usedBytes <= 16 * step && m->usedBytes % step == 0,
        "%s: usedBytes %" PRIu64, what, (uint64_t)m->usedBytes);
  CHECK(m->reservedBytes == m->usedBytes + step, "%s: reservedBytes %" PRIu64, what,
        (uint64_t)m->reservedBytes);
  CHECK(absd(m->utilizationPercent - (double)m->usedBytes * 100.0 / (double)DEV_MEMORY) < 1e-9,
        "%s: utilizationPercent %f", what, m->utilizationPercent);
}

static void check_running_cu(const ComputeUtilization *c, const char *what) {
  CHECK(c != NULL, "%s: no compute entry", what);
  if (!c)
    return;
  CHECK(c->utilizationPercent >= 5 && c->utilizationPercent <= 40, "%s: utilization %f", what,
        c->utilizationPercent);
  CHECK(c->totalSMs == 108, "%s: totalSMs %" PRIu64, what, (uint64_t)c->totalSMs);
  CHECK(c->activeSMs == (uint64_t)(c->utilizationPercent / 100.0 * 108 + 0.5),
        "%s: activeSMs %" PRIu64, what, (uint64_t)c->activeSMs);
  CHECK(absd(c->tflopsUsed - c->utilizationPercent / 100.0 * 312.0) < 1e-6, "%s: tflopsUsed %f",
        what, c->tflopsUsed);
}

/* Processes named in the call are reported on each requested device. */
static void test_named_utilization(void) {
  const char *devs[2] = {UUIDS[0], UUIDS[1]}, *pids[2] = {"4242", "4343"};
  MemoryUtilization *m1 = NULL, *m2 = NULL;
  ComputeUtilization *c1 = NULL;
  size_t n1 = 0, n2 = 0, nc = 0;
  EXPECT_OK(A.getProcessMemoryUtilization(devs, 2, pids, 2, &m1, &n1));
  EXPECT_OK(A.getProcessMemoryUtilization(devs, 2, pids, 2, &m2, &n2));
  EXPECT_OK(A.getProcessComputeUtilization(devs, 2, pids, 2, &c1, &nc));
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 2; p++) {
      char what[64];
      snprintf(what, sizeof what, "process %s on %s", pids[p], devs[d]);
      const MemoryUtilization *a = find_mem(m1, n1, pids[p], devs[d]),
                              *b = find_mem(m2, n2, pids[p], devs[d]);
      check_running_mem(a, what);
      CHECK(a && b && a->usedBytes == b->usedBytes && a->reservedBytes == b->reservedBytes,
            "%s: memory differs between two calls", what);
      check_running_cu(find_cu(c1, nc, pids[p], devs[d]), what);
    }
  CHECK(count_pid(m1, n1, "4242") == 2, "4242 reported %zu times on 2 devices", count_pid(m1, n1, "4242"));
  for (size_t i = 0; i < n1; i++)
    CHECK(FEQ(m1[i].deviceUUID, UUIDS[0]) || FEQ(m1[i].deviceUUID, UUIDS[1]),
          "entry for a device not requested: %.64s", m1[i].deviceUUID);
  A.freeMemoryUtilizations(m1, n1);
  A.freeMemoryUtilizations(m2, n2);
  A.freeComputeUtilizations(c1, nc);
}

/* The tracked process `pid` on `dev`, as each query sees it. */
struct seen {
  MemoryUtilization lib_m, own_m;
  ComputeUtilization lib_c, own_c;
  bool in_lib, in_own, in_lib_c, in_own_c;
  size_t lib_count;
};

static struct seen observe(const char *pidstr, const char *dev) {
  struct seen s;
  memset(&s, 0, sizeof s);
  const char *devs[1] = {dev}, *named[1] = {"4242"};
  MemoryUtilization *m = NULL;
  ComputeUtilization *c = NULL;
  size_t n = 0, nc = 0;
  EXPECT_OK(A.getProcessMemoryUtilization(devs, 1, named, 1, &m, &n));
  EXPECT_OK(A.getProcessComputeUtilization(devs, 1, named, 1, &c, &nc));
  const MemoryUtilization *pm = find_mem(m, n, pidstr, dev);
  const ComputeUtilization *pc = find_cu(c, nc, pidstr, dev);
  s.lib_count = count_pid(m, n, pidstr);
  if ((s.in_lib = pm != NULL))
    s.lib_m = *pm;
  if ((s.in_lib_c = pc != NULL))
    s.lib_c = *pc;
  A.freeMemoryUtilizations(m, n);
  A.freeComputeUtilizations(c, nc);

  MemoryUtilization mb[64];
  ComputeUtilization cb[64];
  EXPECT_OK(A.GetProcessMemoryUtilization(mb, 64, &n));
  EXPECT_OK(A.GetProcessComputeUtilization(cb, 64, &nc));
  pm = find_mem(mb, n, pidstr, dev);
  pc = find_cu(cb, nc, pidstr, dev);
  if ((s.in_own = pm != NULL))
    s.own_m = *pm;
  if ((s.in_own_c = pc != NULL))
    s.own_c = *pc;
  return s;
}

static void test_snapshot_resume(void) {
  const char *dev = UUIDS[2];
  uint64_t base = mem_used(dev);
  pid_t child = fork();
  if (child == 0) {
    for (;;)
      pause();
  }
  CHECK(child > 0, "fork");
  if (child <= 0)
    return;
  char pidstr[32];
  snprintf(pidstr, sizeof pidstr, "%d", (int)child);
  ProcessArray pa = {.processIds = &child, .processCount = 1};
  snprintf(pa.deviceUUID, sizeof pa.deviceUUID, "%s", dev);

  /* Untracked until the library is told about it. */
  struct seen s = observe(pidstr, dev);
  CHECK(!s.in_lib && !s.in_own, "an unknown process is reported");

  EXPECT_OK(A.Snapshot(&pa));
  EXPECT_FAIL(A.Snapshot(&pa), RESULT_ERROR_OPERATION_FAILED);
  EXPECT_FAIL(A.snapshot(&pa), RESULT_ERROR_OPERATION_FAILED);
  s = observe(pidstr, dev);
  CHECK(s.in_lib && s.lib_count == 1 && s.lib_m.usedBytes == 0 && s.lib_m.reservedBytes == 0,
        "snapshotted process: tracked once with 0 bytes used (count %zu, used %" PRIu64 ")",
        s.lib_count, (uint64_t)s.lib_m.usedBytes);
  CHECK(s.in_lib_c && s.lib_c.utilizationPercent == 0 && s.lib_c.activeSMs == 0,
        "snapshotted process: 0%% compute");
  CHECK(s.in_own && s.own_m.usedBytes == 0, "GetProcessMemoryUtilization lists the tracked process");
  CHECK(s.in_own_c && s.own_c.utilizationPercent == 0, "GetProcessComputeUtilization lists it");
  CHECK(mem_used(dev) == base, "a snapshotted process holds no device memory");

  EXPECT_OK(A.Resume(&pa));
  EXPECT_FAIL(A.Resume(&pa), RESULT_ERROR_OPERATION_FAILED);
  EXPECT_FAIL(A.resume(&pa), RESULT_ERROR_OPERATION_FAILED);
  s = observe(pidstr, dev);
  check_running_mem(s.in_lib ? &s.lib_m : NULL, "resumed process");
  check_running_cu(s.in_lib_c ? &s.lib_c : NULL, "resumed process");
  CHECK(s.in_own && s.own_m.usedBytes == s.lib_m.usedBytes && s.own_m.reservedBytes == s.lib_m.reservedBytes,
        "styles disagree on the resumed process's memory");
  CHECK(s.in_own_c && s.own_c.utilizationPercent == s.lib_c.utilizationPercent,
        "styles disagree on the resumed process's compute");
  CHECK(mem_used(dev) == base + s.lib_m.usedBytes, "device memoryUsed includes the running process");
  /* A tracked process is reported only for the devices asked about. */
  s = observe(pidstr, UUIDS[0]);
  CHECK(!s.in_lib && s.lib_count == 0, "process on %s reported for %s", dev, UUIDS[0]);

  /* The library style works on the same records. */
  EXPECT_OK(A.snapshot(&pa));
  s = observe(pidstr, dev);
  CHECK(s.in_lib && s.lib_m.usedBytes == 0, "snapshot() zeroes the process's memory");
  EXPECT_OK(A.resume(&pa));
  s = observe(pidstr, dev);
  CHECK(s.in_lib && s.lib_m.usedBytes > 0, "resume() restores the process's memory");

  /* A process that has exited is forgotten and cannot be snapshotted. */
  kill(child, SIGKILL);
  reap(child);
  EXPECT_FAIL(A.Snapshot(&pa), RESULT_ERROR_NOT_FOUND);
  EXPECT_FAIL(A.resume(&pa), RESULT_ERROR_NOT_FOUND);
  s = observe(pidstr, dev);
  CHECK(!s.in_own, "an exited process is still reported");
  CHECK(mem_used(dev) == base, "an exited process still holds memory");
}

/* ------------------------------------------------------------------------ */
/* State that outlives a process; state file hardening                      */
/* ------------------------------------------------------------------------ */

static void state_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", STATE_DIR, name);
}

static void test_persistent_state(void) {
  const char *dev = UUIDS[0];
  uint64_t base = mem_used(dev);
  const char *const env[1][2] = {{"ACCELERATOR_LOG", NULL}};
  run_child("assign and exit", "assign", env, 0, dev, TPL_IDS[1]);
  CHECK(mem_used(dev) == base + TPL[1].memoryBytes + OVERHEAD[1],
        "the exited child's partition is not charged (used %" PRIu64 ", base %" PRIu64 ")",
        mem_used(dev), base);
  EXPECT_TRUE(A.RemovePartition(TPL_IDS[1], dev));
  CHECK(mem_used(dev) == base, "memoryUsed after removing the child's partition");

  /* Files are private to the user (a worker's books, workers/<worker>/, too). */
  const char *files[] = {"stub-state", "workers/c-test-worker-max/limiter.shm"};
  for (size_t i = 0; i < 2; i++) {
    char p[PATH_MAX + 32];
    struct stat st;
    state_path(p, sizeof p, files[i]);
    CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
          "%s: mode %o, expected a regular file 0600", p, (unsigned)(st.st_mode & 0777));
  }

  char path[PATH_MAX + 32], aside[PATH_MAX + 32];
  state_path(path, sizeof path, "stub-state");
  state_path(aside, sizeof aside, "stub-state.c-test-aside");
  CHECK(rename(path, aside) == 0, "move the state file aside: %s", strerror(errno));

  /* A planted symlink is refused; its target is untouched. */
  struct stat before, after;
  stat("/etc/passwd", &before);
  CHECK(symlink("/etc/passwd", path) == 0, "symlink: %s", strerror(errno));
  PartitionAssignment a = assignment(TPL_IDS[0], dev);
  EXPECT_FALSE(A.AssignPartition(&a), "symlink");
  EXPECT_FALSE(A.RemovePartition(TPL_IDS[0], dev), "symlink");
  const char *u[1] = {dev};
  DeviceMetrics m;
  EXPECT_FAIL(A.GetDeviceMetrics(u, 1, &m), RESULT_ERROR_OPERATION_FAILED);
  CHECK(strstr(lasterr(), "symlink") != NULL, "metrics error mentions the symlink: %s", lasterr());
  stat("/etc/passwd", &after);
  CHECK(before.st_size == after.st_size && before.st_mtime == after.st_mtime, "/etc/passwd changed");
  struct stat lst;
  CHECK(lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode), "the symlink was replaced");
  unlink(path);

  /* A corrupt file is reported, not misread or overwritten. */
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("garbage\n", f);
    fclose(f);
  }
  chmod(path, 0600);
  EXPECT_FALSE(A.AssignPartition(&a), "corrupt");
  EXPECT_FAIL(A.GetDeviceMetrics(u, 1, &m), RESULT_ERROR_OPERATION_FAILED);
  CHECK(strstr(lasterr(), "corrupt") != NULL, "metrics error mentions corruption: %s", lasterr());
  DeviceMetrics *mp = NULL;
  EXPECT_FAIL(A.getDeviceMetrics(u, 1, &mp), RESULT_ERROR_OPERATION_FAILED);
  A.freeDeviceMetrics(mp, 1);
  char text[64] = {0};
  f = fopen(path, "r");
  if (f) {
    size_t r = fread(text, 1, sizeof text - 1, f);
    text[r] = '\0';
    fclose(f);
  }
  CHECK(strcmp(text, "garbage\n") == 0, "the corrupt file was modified");
  unlink(path);
  CHECK(rename(aside, path) == 0, "restore the state file: %s", strerror(errno));
  CHECK(mem_used(dev) == base, "state restored");
}

/* ------------------------------------------------------------------------ */
/* Configuration: each in a fresh process with its own environment          */
/* ------------------------------------------------------------------------ */

static void test_configuration(void) {
  const char *const two[2][2] = {{"ACCELERATOR_STUB_DEVICES", "2"}, {"ACCELERATOR_VENDOR", NULL}};
  run_child("2 devices", "count", two, 2, "2", NULL);
  const char *const many[2][2] = {{"ACCELERATOR_STUB_DEVICES", "64"}, {"ACCELERATOR_VENDOR", NULL}};
  run_child("64 devices", "count", many, 2, "64", NULL);
  const char *const stub[2][2] = {{"ACCELERATOR_STUB_DEVICES", NULL}, {"ACCELERATOR_VENDOR", "stub"}};
  run_child("vendor named stub", "count", stub, 2, "4", NULL);
  const char *bad[] = {"0", "65", "abc", "", "-1", "4x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const char *const env[2][2] = {{"ACCELERATOR_STUB_DEVICES", bad[i]}, {"ACCELERATOR_VENDOR", NULL}};
    run_child(bad[i], "badcfg", env, 2, "ACCELERATOR_STUB_DEVICES", NULL);
  }
  const char *const nosuch[2][2] = {{"ACCELERATOR_VENDOR", "nosuch"}, {"ACCELERATOR_STUB_DEVICES", NULL}};
  run_child("vendor nosuch", "badcfg", nosuch, 2, "ACCELERATOR_VENDOR", NULL);
  /* Debug logging reaches the callback, including the reason of a failure. */
  const char *const dbg[1][2] = {{"ACCELERATOR_LOG", "debug"}};
  run_child("debug log", "logdebug", dbg, 1, NULL, NULL);
}

/* Child: the configured device count is reported consistently. */
static int child_count(size_t expected) {
  size_t n = 0;
  EXPECT_OK(A.GetDeviceCount(&n));
  CHECK(n == expected, "GetDeviceCount = %zu, expected %zu", n, expected);
  ExtendedDeviceInfo *all = calloc(expected + 1, sizeof *all);
  EXPECT_OK(A.GetAllDevices(all, expected + 1, &n));
  CHECK(n == expected, "GetAllDevices = %zu", n);
  char last[64];
  snprintf(last, sizeof last, "stub-device-%zu", expected - 1);
  CHECK(n > 0 && FEQ(all[n - 1].basic.uuid, last), "last device %.64s", n ? all[n - 1].basic.uuid : "");
  free(all);
  ExtendedDeviceInfo info;
  EXPECT_OK(A.getDeviceInfo((int32_t)expected - 1, &info));
  CHECK(info.relatedDeviceCount == expected - 1, "related devices %zu", info.relatedDeviceCount);
  A.freeExtendedDeviceInfo(&info);
  EXPECT_FAIL(A.getDeviceInfo((int32_t)expected, &info), RESULT_ERROR_NOT_FOUND);
  const char *u[1] = {last};
  ExtendedDeviceMetrics *x = NULL;
  EXPECT_OK(A.getExtendedDeviceMetrics(u, 1, &x));
  CHECK(x && x->nvlinkCount == expected - 1, "nvlink count %zu", x ? x->nvlinkCount : 0);
  A.freeExtendedDeviceMetrics(x, 1);
  const char *v = A.acceleratorVendorName();
  CHECK(v && strcmp(v, "stub") == 0, "vendor %s", v ? v : "(null)");
  return 0;
}

/* Child: a bad configuration fails every vendor call with INVALID_PARAM. */
static int child_badcfg(const char *needle) {
#define BAD(call)                                                              \
  do {                                                                         \
    EXPECT_RC_WITH(LE, call, RESULT_ERROR_INVALID_PARAM);                      \
    CHECK(strstr(lasterr(), needle) != NULL, "%s: last error \"%s\" lacks %s", \
          #call, lasterr(), needle);                                           \
  } while (0)
  size_t n;
  ExtendedDeviceInfo buf[2], info;
  PartitionTemplate tb[4], *tp;
  int32_t idx[1] = {0};
  ExtendedDeviceTopology topo;
  const char *u[1] = {"stub-device-0"}, *pids[1] = {"4242"};
  DeviceMetrics m, *mp;
  ExtendedDeviceMetrics *xp;
  MemoryUtilization mb[2], *mu;
  ComputeUtilization cb[2], *cu;
  pid_t me = getpid();
  ProcessArray pa = {.processIds = &me, .processCount = 1};
  BAD(A.GetDeviceCount(&n));
  BAD(A.getDeviceCount(&n));
  BAD(A.GetAllDevices(buf, 2, &n));
  BAD(A.getDeviceInfo(0, &info));
  BAD(A.GetPartitionTemplates(0, tb, 4, &n));
  BAD(A.getPartitionTemplates(0, &tp, &n));
  BAD(A.getDeviceTopology(idx, 1, &topo));
  BAD(A.GetDeviceMetrics(u, 1, &m));
  BAD(A.getDeviceMetrics(u, 1, &mp));
  BAD(A.getExtendedDeviceMetrics(u, 1, &xp));
  BAD(A.SetMemHardLimit("w", u[0], 1));
  BAD(A.setComputeUnitHardLimit("w", u[0], 1));
  BAD(A.Snapshot(&pa));
  BAD(A.resume(&pa));
  BAD(A.GetProcessMemoryUtilization(mb, 2, &n));
  BAD(A.GetProcessComputeUtilization(cb, 2, &n));
  BAD(A.getProcessMemoryUtilization(u, 1, pids, 1, &mu, &n));
  BAD(A.getProcessComputeUtilization(u, 1, pids, 1, &cu, &n));
  PartitionAssignment a = assignment("mig-1g.7gb", u[0]);
  EXPECT_FALSE(A.AssignPartition(&a), needle);
  EXPECT_FALSE(A.removePartition("mig-1g.7gb", u[0]), needle);
  const char *v = A.acceleratorVendorName();
  CHECK(v && v[0] == '\0', "vendor name \"%s\" under a bad configuration", v ? v : "(null)");
  CHECK(strstr(lasterr(), needle) != NULL, "acceleratorVendorName leaves the reason: %s", lasterr());
  CHECK(A.acceleratorAbiVersion() == 1, "ABI version needs no vendor");
#undef BAD
  return 0;
}

/* Child (ACCELERATOR_LOG=debug): failures are logged at debug level. */
static int child_logdebug(void) {
  A.acceleratorSetLogCallback(log_cb);
  int mark = log_mark();
  EXPECT_FAIL(A.GetDeviceCount(NULL), RESULT_ERROR_INVALID_PARAM);
  CHECK(log_seen(mark, ACCELERATOR_LOG_LEVEL_DEBUG, "deviceCount"),
        "the failure was not logged at debug level");
  mark = log_mark();
  EXPECT_OK(A.Log("debug", "c-test debug marker"));
  CHECK(log_seen(mark, ACCELERATOR_LOG_LEVEL_DEBUG, "c-test debug marker"), "Log(debug) not delivered");
  mark = log_mark();
  EXPECT_OK(A.Log("trace", "c-test trace marker"));
  CHECK(!log_seen(mark, ACCELERATOR_LOG_LEVEL_TRACE, "c-test trace marker"),
        "Log(trace) delivered above the debug threshold");
  A.acceleratorSetLogCallback(NULL);
  return 0;
}

/* Child: assign one partition and exit without removing it. */
static int child_assign(const char *dev, const char *tpl) {
  PartitionAssignment a = assignment(tpl, dev);
  EXPECT_TRUE(A.AssignPartition(&a));
  return 0;
}

/* Child: assign and remove forever, until killed. */
static int child_churn(const char *dev) {
  unsigned seed = (unsigned)getpid();
  for (;;) {
    PartitionAssignment a = assignment(TPL_IDS[rand_r(&seed) % 3], dev);
    if (A.AssignPartition(&a))
      A.RemovePartition(a.partitionUUID, dev);
  }
  return 0; /* not reached */
}

/* Child: wait for the start signal (EOF on fd), then take 1-slice
 * partitions until refused; exit status = partitions taken (100 on error). */
static int child_race(const char *dev, int fd) {
  char c;
  while (read(fd, &c, 1) < 0 && errno == EINTR) {
  }
  int got = 0;
  for (;;) {
    PartitionAssignment a = assignment(TPL_IDS[0], dev);
    if (!A.AssignPartition(&a))
      break;
    got++;
  }
  if (!strstr(lasterr(), "resource exhausted")) {
    fprintf(stderr, "race child: unexpected failure: %s\n", lasterr());
    return 100;
  }
  return got;
}

/* ------------------------------------------------------------------------ */
/* Concurrency, fork, races and crashes                                     */
/* ------------------------------------------------------------------------ */

struct worker {
  int id, iterations, errors;
  char first[256];
};

#define WCHECK(w, cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if ((w)->errors++ == 0)                                                  \
        snprintf((w)->first, sizeof (w)->first, __VA_ARGS__);                  \
    }                                                                          \
  } while (0)

static void *worker_main(void *arg) {
  struct worker *w = arg;
  for (int i = 0; i < w->iterations; i++) {
    int d = (i + w->id) % N_DEV;
    switch ((i * 7 + w->id) % 10) {
    case 0: {
      size_t n = 0;
      WCHECK(w, A.GetDeviceCount(&n) == RESULT_SUCCESS && n == N_DEV, "GetDeviceCount %zu", n);
      break;
    }
    case 1: {
      ExtendedDeviceInfo all[N_DEV];
      size_t n = 0;
      Result rc = A.GetAllDevices(all, N_DEV, &n);
      WCHECK(w, rc == RESULT_SUCCESS && n == N_DEV && FEQ(all[d].basic.uuid, UUIDS[d]) &&
                    all[d].basic.totalComputeUnits == 108,
             "GetAllDevices rc %d n %zu", rc, n);
      break;
    }
    case 2: {
      ExtendedDeviceInfo info;
      Result rc = A.getDeviceInfo(d, &info);
      WCHECK(w, rc == RESULT_SUCCESS && FEQ(info.basic.uuid, UUIDS[d]) && info.relatedDeviceCount == 3 &&
                    info.relatedDevices && info.relatedDevices[0].bandwidthMBps == 300000,
             "getDeviceInfo(%d) rc %d", d, rc);
      A.freeExtendedDeviceInfo(&info);
      break;
    }
    case 3: {
      DeviceMetrics m[N_DEV];
      Result rc = A.GetDeviceMetrics((const char **)UUIDS, N_DEV, m);
      WCHECK(w, rc == RESULT_SUCCESS && FEQ(m[d].deviceUUID, UUIDS[d]) &&
                    m[d].memoryTotalBytes == DEV_MEMORY && m[d].memoryUsedBytes <= DEV_MEMORY,
             "GetDeviceMetrics rc %d (%s)", rc, lasterr());
      break;
    }
    case 4: {
      PartitionTemplate *t = NULL;
      size_t n = 0;
      Result rc = A.getPartitionTemplates(d, &t, &n);
      WCHECK(w, rc == RESULT_SUCCESS && n == 3 && t && FEQ(t[1].templateId, TPL_IDS[1]) &&
                    t[1].isDefault && t[2].sliceCount == 3,
             "getPartitionTemplates rc %d n %zu", rc, n);
      A.freePartitionTemplates(t, n);
      break;
    }
    case 5: {
      int32_t idx[1] = {d};
      ExtendedDeviceTopology topo;
      Result rc = A.getDeviceTopology(idx, 1, &topo);
      WCHECK(w, rc == RESULT_SUCCESS && topo.deviceCount == 1 && FEQ(topo.devices[0].deviceUUID, UUIDS[d]) &&
                    topo.devices[0].connectionCount == 3,
             "getDeviceTopology rc %d", rc);
      A.freeExtendedDeviceTopology(&topo);
      break;
    }
    case 6: {
      Result rc = A.GetDeviceCount(NULL);
      const char *e = lasterr();
      WCHECK(w, rc == RESULT_ERROR_INVALID_PARAM && strncmp(e, "GetDeviceCount", 14) == 0,
             "GetDeviceCount(NULL) rc %d error \"%s\"", rc, e);
      break;
    }
    case 7: {
      ExtendedDeviceInfo info;
      Result rc = A.getDeviceInfo(99, &info);
      const char *e = lasterr();
      WCHECK(w, rc == RESULT_ERROR_NOT_FOUND && strncmp(e, "getDeviceInfo", 13) == 0,
             "getDeviceInfo(99) rc %d error \"%s\"", rc, e);
      PartitionTemplate tb[3];
      size_t n;
      rc = A.GetPartitionTemplates(-1, tb, 3, &n);
      WCHECK(w, rc == RESULT_ERROR_INVALID_PARAM && strstr(lasterr(), "negative"),
             "GetPartitionTemplates(-1) rc %d", rc);
      break;
    }
    case 8: {
      uint32_t nv[4], pc[2];
      uint64_t ib[4];
      ExtendedDeviceMetrics x = {.nvlinkBandwidthMBps = nv, .ibNicBandwidthMBps = ib,
                                 .pcieBandwidthMBps = pc};
      const char *u[1] = {UUIDS[d]};
      Result rc = A.GetExtendedDeviceMetrics(u, 1, &x, 4, 4, 2);
      WCHECK(w, rc == RESULT_SUCCESS && x.nvlinkCount == 3 && x.ibNicCount == 2 && x.pcieLinkCount == 1,
             "GetExtendedDeviceMetrics rc %d", rc);
      break;
    }
    default: {
      PartitionTemplate tb[3];
      size_t n = 0;
      Result rc = A.GetPartitionTemplates(d, tb, 3, &n);
      WCHECK(w, rc == RESULT_SUCCESS && n == 3 && tb[0].sliceCount == 1 && FEQ(tb[0].templateId, TPL_IDS[0]),
             "GetPartitionTemplates rc %d", rc);
      break;
    }
    }
  }
  return NULL;
}

static void test_threads(void) {
  int threads = test_quick() ? 4 : 16, iterations = test_quick() ? 200 : 10000;
  struct worker w[16];
  pthread_t t[16];
  for (int i = 0; i < threads; i++) {
    w[i] = (struct worker){.id = i, .iterations = iterations};
    CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].errors == 0, "thread %d: %d of %d calls wrong; first: %s", i, w[i].errors, iterations,
          w[i].first);
  }
}

/* Calls in a forked child of a process that has used the library. */
static void test_fork(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    size_t n = 0;
    ExtendedDeviceInfo info;
    bool ok = A.GetDeviceCount(&n) == RESULT_SUCCESS && n == N_DEV;
    ok = ok && A.getDeviceInfo(3, &info) == RESULT_SUCCESS && FEQ(info.basic.uuid, UUIDS[3]);
    if (ok)
      A.freeExtendedDeviceInfo(&info);
    PartitionAssignment a = assignment(TPL_IDS[0], UUIDS[3]);
    ok = ok && A.AssignPartition(&a) && A.RemovePartition(a.partitionUUID, UUIDS[3]);
    ok = ok && A.GetDeviceCount(NULL) == RESULT_ERROR_INVALID_PARAM && lasterr()[0];
    _exit(ok ? 0 : 1);
  }
  int st = pid > 0 ? reap(pid) : -1;
  CHECK(st == 0, "calls in a forked child failed (status %d)", st);
}

/* Two processes race for one device's 7 slices: exactly 7 are granted. */
static void test_race(void) {
  const char *dev = UUIDS[0];
  CHECK(remove_all(dev) == 0, "device 0 not empty before the race");
  uint64_t base = mem_used(dev);
  int fds[2];
  if (pipe(fds) != 0) {
    CHECK(0, "pipe");
    return;
  }
  char rfd[16];
  snprintf(rfd, sizeof rfd, "%d", fds[0]);
  pid_t a = spawn("race", NULL, 0, dev, rfd, fds[1]);
  pid_t b = spawn("race", NULL, 0, dev, rfd, fds[1]);
  close(fds[0]);
  close(fds[1]); /* EOF: both start */
  int sa = reap(a), sb = reap(b);
  CHECK(sa >= 0 && sa <= 7 && sb >= 0 && sb <= 7 && sa + sb == SLICES,
        "race: %d + %d partitions granted, expected 7 in total", sa, sb);
  CHECK(mem_used(dev) == base + SLICES * (TPL[0].memoryBytes + OVERHEAD[0]),
        "memoryUsed after the race");
  unsigned removed = 0;
  for (int i = 0; i < SLICES; i++)
    removed += A.RemovePartition(TPL_IDS[0], dev);
  CHECK(removed == SLICES, "removed %u of the 7 raced partitions", removed);
  EXPECT_FALSE(A.RemovePartition(TPL_IDS[0], dev), "not found");
  CHECK(mem_used(dev) == base, "memoryUsed after cleaning up the race");
}

/* Processes killed with SIGKILL mid-update never corrupt the state. */
static void test_kill9(void) {
  const char *dev = UUIDS[3];
  uint64_t base = mem_used(dev);
  int rounds = test_quick() ? 2 : 5, n = 4;
  unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int r = 0; r < rounds; r++) {
    pid_t kids[4];
    for (int i = 0; i < n; i++)
      kids[i] = spawn("churn", NULL, 0, dev, NULL, -1);
    sleep_ms(30 + rand_r(&seed) % 70);
    for (int i = 0; i < n; i++) {
      sleep_ms(rand_r(&seed) % 8);
      if (kids[i] > 0)
        kill(kids[i], SIGKILL);
    }
    for (int i = 0; i < n; i++)
      if (kids[i] > 0)
        CHECK(reap(kids[i]) == 128 + SIGKILL, "churn child did not die of SIGKILL");
  }
  /* The state still parses, and memory and slices tell the same story. */
  uint64_t used = mem_used(dev);
  uint64_t slice_cost = TPL[0].memoryBytes + OVERHEAD[0];
  CHECK(used != UINT64_MAX && used >= base && (used - base) % slice_cost == 0,
        "memoryUsed %" PRIu64 " is not a whole number of slices", used);
  unsigned held = used == UINT64_MAX ? 0 : (unsigned)((used - base) / slice_cost);
  CHECK(held <= SLICES, "%u slices held, more than 7", held);
  unsigned filled = 0;
  for (;;) {
    PartitionAssignment a = assignment(TPL_IDS[0], dev);
    if (!A.AssignPartition(&a))
      break;
    filled++;
  }
  CHECK(strstr(lasterr(), "resource exhausted") != NULL, "filling stopped for another reason: %s", lasterr());
  CHECK(held + filled == SLICES, "%u slices held + %u free != 7", held, filled);
  unsigned removed = remove_all(dev);
  CHECK(removed == SLICES, "removed %u slices, expected 7", removed);
  CHECK(mem_used(dev) == base, "memoryUsed after cleanup");
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

static int child_main(int argc, char **argv) {
  /* test_accelerator --child MODE LIB [A1 [A2]] */
  if (argc < 4)
    return 2;
  const char *mode = argv[2];
  LIB = argv[3];
  const char *a1 = argc > 4 ? argv[4] : NULL, *a2 = argc > 5 ? argv[5] : NULL;
  if (!load_api(&A, LIB))
    return 3;
  int rc = 2;
  if (strcmp(mode, "count") == 0 && a1)
    rc = child_count(strtoul(a1, NULL, 10));
  else if (strcmp(mode, "badcfg") == 0 && a1)
    rc = child_badcfg(a1);
  else if (strcmp(mode, "logdebug") == 0)
    rc = child_logdebug();
  else if (strcmp(mode, "assign") == 0 && a1 && a2)
    rc = child_assign(a1, a2);
  else if (strcmp(mode, "churn") == 0 && a1)
    rc = child_churn(a1);
  else if (strcmp(mode, "race") == 0 && a1 && a2)
    return child_race(a1, atoi(a2));
  int failed = atomic_load(&test_failed);
  if (failed)
    fprintf(stderr, "[child %s %s] %d checks failed\n", mode, a1 ? a1 : "", failed);
  return failed ? 1 : rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--child") == 0)
    return child_main(argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/libaccelerator.so\n", argv[0]);
    return 2;
  }
  LIB = argv[1];
  static char self[PATH_MAX];
  if (!realpath(argv[0], self)) {
    ssize_t r = readlink("/proc/self/exe", self, sizeof self - 1);
    self[r > 0 ? r : 0] = '\0';
  }
  SELF = self;
  /* Every run needs a private state directory (the Makefile provides one). */
  const char *sd = getenv("ACCELERATOR_STATE_DIR");
  if (sd && sd[0]) {
    snprintf(STATE_DIR, sizeof STATE_DIR, "%s", sd);
  } else {
    snprintf(STATE_DIR, sizeof STATE_DIR, "/tmp/accelerator-c-test.XXXXXX");
    if (!mkdtemp(STATE_DIR)) {
      perror("mkdtemp");
      return 2;
    }
    setenv("ACCELERATOR_STATE_DIR", STATE_DIR, 1);
  }
  unsetenv("ACCELERATOR_STUB_DEVICES");

  test_dlopen_loop();
  if (!load_api(&A, LIB))
    return test_summary();

  test_extensions();
  test_devices();
  test_templates();
  test_topology();
  test_metrics();
  test_log();

  test_bad_devices();
  test_bad_partitions();
  test_bad_limits();
  test_bad_processes();
  test_bad_metrics();
  test_free_functions();

  test_hard_limits();
  test_soft_limits();
  test_partitions();
  test_named_utilization();
  test_snapshot_resume();
  test_persistent_state();
  test_configuration();

  test_threads();
  test_fork();
  test_race();
  test_kill9();

  dlclose(A.handle);
  return test_summary();
}
