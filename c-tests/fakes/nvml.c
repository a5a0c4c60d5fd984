/* A scripted fake of libnvidia-ml.so.1 for the nvidia vendor's tests.
 *
 * Two GPUs:
 *   0  "NVIDIA H100 80GB HBM3": Hopper, 132 SMs, MIG supported and on
 *      (H100 GPU-instance profiles), GPM supported, NUMA node 0;
 *   1  "NVIDIA A40": Ampere GA102, 84 SMs, no MIG, no GPM, NUMA unsupported.
 * They are joined by 4 NVLinks (version 4 seen from GPU 0, 3 from GPU 1) and
 * share a host bridge. Only the symbols the vendor uses are exported (and
 * three first versions HAMi-core calls, for `make hami-bench`); the vendor
 * treats any other as "not supported".
 *
 * Scripting (read on every call):
 *   FAKE_NVML_FAIL=<function>  that function returns NVML_ERROR_UNKNOWN
 *   FAKE_NVML_PROCS=pid:gpu:bytes:smutil,...  running compute processes
 *   FAKE_NVML_GRAPHICS_PROCS, FAKE_NVML_MPS_PROCS  (same form) graphics and
 *                              MPS compute processes
 *   FAKE_NVML_MIG_OFF=1        MIG mode reads as off on GPU 0
 *   FAKE_NVML_NVLINKS=n        GPU 0 has n NVLinks (up to 36) instead of 4
 *
 * fake_nvml_create_instances() plays an administrator creating a GPU
 * instance and a compute instance outside the library (nvidia-smi mig).
 * Ranges follow nvml.h 13.x: GPU-instance profile ids 0..0x11, compute-
 * instance profiles 0..8, NVML_NVLINK_MAX_LINKS 36, NVML_GPM_METRIC_MAX 333.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_UNKNOWN = 999,
};

enum kind { KIND_GPU = 1, KIND_MIG = 2, KIND_GI = 3, KIND_CI = 4 };

typedef struct {
  int kind;
  const char *uuid, *name, *vbios, *bus_id;
  int numa; /* -1: NOT_SUPPORTED */
  unsigned long long mem_total, mem_used;
  unsigned cores, cc_major, cc_minor, clk_gfx, clk_sm, clk_mem;
  unsigned pcie_gen, pcie_width, power_limit_mw, slowdown_c;
  unsigned ecc, persistence, arch, mig_supported, gpm;
  /* nvlink_version: an nvmlNvlinkVersion_t code (NVML_NVLINK_VERSION_3_0 = 4,
     4_0 = 6), as nvmlDeviceGetNvLinkVersion returns, not a generation. */
  unsigned nvlinks, nvlink_version, peer;
  unsigned power_mw, temp_c, util_gpu, pcie_tx_kbps, pcie_rx_kbps;
  unsigned long long pcie_tx_bytes, pcie_rx_bytes;
} gpu_t;

static gpu_t gpus[2] = {
    {KIND_GPU, "GPU-00000000-0000-0000-0000-0000000000h1", "NVIDIA H100 80GB HBM3",
     "96.00.99.00.01", "00000000:18:00.0", 0, 85899345920ULL, 1073741824ULL,
     16896, 9, 0, 1980, 1980, 2619, 5, 16, 700000, 87, 1, 1, 9, 1, 1, 4, 6, 1,
     312500, 45, 40, 1200, 3400, 2000000ULL, 1000000ULL},
    {KIND_GPU, "GPU-11111111-1111-1111-1111-1111111111a4", "NVIDIA A40",
     "94.02.5C.00.02", "00000000:3B:00.0", -1, 51539607552ULL, 2147483648ULL,
     10752, 8, 6, 1740, 1740, 7251, 4, 16, 300000, 88, 0, 0, 7, 0, 0, 4, 4, 0,
     150250, 61, 55, 500, 700, 4000000ULL, 3000000ULL},
};

/* ---- MIG: H100 80GB GPU-instance profiles ---- */
typedef struct {
  int id; /* NVML_GPU_INSTANCE_PROFILE_* */
  const char *name;
  unsigned slices, instances, sms;
  unsigned long long mem_mb;
} profile_t;

static const profile_t profiles[] = {
    {0, "MIG 1g.10gb", 1, 7, 16, 9856},     {1, "MIG 2g.20gb", 2, 3, 32, 19968},
    {2, "MIG 3g.40gb", 3, 2, 60, 40192},    {3, "MIG 4g.40gb", 4, 1, 64, 40192},
    {4, "MIG 7g.80gb", 7, 1, 132, 80896},   {7, "MIG 1g.10gb+me", 1, 1, 16, 9856},
    {9, "MIG 1g.20gb", 1, 4, 16, 19968},
    /* The highest id nvml.h 13.x defines (NVML_GPU_INSTANCE_PROFILE_COUNT is
     * 0x12); name and sizes are this fake's, so that a library probing only
     * the ids of older headers misses it. */
    {0x11, "MIG 2g.24gb", 2, 3, 32, 24576},
};
#define NPROFILES (sizeof profiles / sizeof profiles[0])
#define SLICES 7
#define MAX_GI 7
/* What a MIG device offers less than its profile: the fake's "overhead". */
#define MIG_OVERHEAD (32ULL << 20)

typedef struct {
  int kind; /* KIND_GI */
  int used;
  unsigned id;
  const profile_t *p;
  struct { int kind; int used; unsigned prof; } ci; /* KIND_CI, at most one per GI */
  struct { int kind; unsigned gi; } mig; /* KIND_MIG */
} gi_t;

static gi_t gis[MAX_GI];
static unsigned next_gi_id = 1;
static int init_count;

#include "trace.h"

static int failing(const char *fn) {
  const char *f = getenv("FAKE_NVML_FAIL");
  return f && strcmp(f, fn) == 0;
}

#define ENTER()                                                                \
  do {                                                                         \
    fake_trace("FAKE_NVML_TRACE", __func__);                                   \
    if (failing(__func__))                                                     \
      return NVML_ERROR_UNKNOWN;                                               \
    if (init_count <= 0)                                                       \
      return NVML_ERROR_UNINITIALIZED;                                         \
  } while (0)

static gpu_t *gpu(void *h) {
  gpu_t *g = h;
  return (g == &gpus[0] || g == &gpus[1]) ? g : NULL;
}

#define GPU(h)                                                                 \
  gpu_t *g = gpu(h);                                                           \
  if (!g)                                                                      \
    return NVML_ERROR_INVALID_ARGUMENT

static void copy(char *dst, unsigned len, const char *src) {
  snprintf(dst, len, "%s", src);
}

static int mig_on(gpu_t *g) {
  return g->mig_supported && !getenv("FAKE_NVML_MIG_OFF");
}

/* NVML_NVLINK_MAX_LINKS of nvml.h 13.x. */
#define MAX_NVLINKS 36
static unsigned nvlinks(const gpu_t *g) {
  const char *n = getenv("FAKE_NVML_NVLINKS");
  if (g == &gpus[0] && n && *n) {
    unsigned v = (unsigned)atoi(n);
    return v > MAX_NVLINKS ? MAX_NVLINKS : v;
  }
  return g->nvlinks;
}

/* ---- init ---- */
nvmlReturn_t nvmlInit_v2(void) {
  if (failing(__func__))
    return NVML_ERROR_UNKNOWN;
  init_count++;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlShutdown(void) {
  if (init_count <= 0)
    return NVML_ERROR_UNINITIALIZED;
  init_count--;
  return NVML_SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t r) {
  return r == NVML_SUCCESS ? "Success" : "Fake NVML error";
}
/* For the test: how many nvmlInit_v2 are not yet shut down. */
int fake_nvml_init_count(void) { return init_count; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned len) {
  ENTER();
  copy(v, len, "570.124.06");
  return NVML_SUCCESS;
}
/* The CUDA version the driver supports (1000 * major + 10 * minor): the
 * fake driver's (FAKE_CUDA_DRIVER_VERSION, default 12080, as its r570). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
  ENTER();
  if (!v)
    return NVML_ERROR_INVALID_ARGUMENT;
  const char *e = getenv("FAKE_CUDA_DRIVER_VERSION");
  *v = e && *e ? atoi(e) : 12080;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) {
  ENTER();
  *n = 2;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
  ENTER();
  if (i >= 2)
    return NVML_ERROR_INVALID_ARGUMENT;
  *h = &gpus[i];
  return NVML_SUCCESS;
}
/* nvml.h's first versions, still exported (NVML_NO_UNVERSIONED_FUNC_DEFS
 * declares them) and still called by hooks built with that macro, such as
 * HAMi-core (tools/hami-bench.sh). They differ from _v2 only on a GPU the
 * process may not access, which the fake has none of. */
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlDeviceGetCount(unsigned *n) { return nvmlDeviceGetCount_v2(n); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, void **h) {
  return nvmlDeviceGetHandleByIndex_v2(i, h);
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **h) {
  ENTER();
  for (int i = 0; i < 2; i++)
    if (strcmp(uuid, gpus[i].uuid) == 0) {
      *h = &gpus[i];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}

/* ---- static facts ---- */
static void mig_uuid(char *buf, unsigned len, unsigned gi) {
  snprintf(buf, len, "MIG-00000000-0000-0000-0000-%012u", gi);
}
nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
  ENTER();
  if (h && *(int *)h == KIND_MIG) {
    mig_uuid(buf, len, ((gi_t *)((char *)h - offsetof(gi_t, mig)))->id);
    return NVML_SUCCESS;
  }
  GPU(h);
  copy(buf, len, g->uuid);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned len) {
  ENTER();
  GPU(h);
  copy(buf, len, g->name);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetVbiosVersion(void *h, char *buf, unsigned len) {
  ENTER();
  GPU(h);
  copy(buf, len, g->vbios);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned *i) {
  ENTER();
  GPU(h);
  *i = (unsigned)(g - gpus);
  return NVML_SUCCESS;
}
/* The minor of /dev/nvidia<N>: the fake numbers GPUs by their index. */
nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned *n) {
  ENTER();
  GPU(h);
  *n = (unsigned)(g - gpus);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumaNodeId(void *h, unsigned *n) {
  ENTER();
  GPU(h);
  if (g->numa < 0)
    return NVML_ERROR_NOT_SUPPORTED;
  *n = (unsigned)g->numa;
  return NVML_SUCCESS;
}
/* Device memory the fake driver holds on `g` when this process has loaded
 * it (libcuda.so.1's fake_cuda_used_on): a real NVML sees the driver's
 * allocations and contexts in its used memory. */
static int is_cuda(struct dl_phdr_info *info, size_t size, void *path) {
  (void)size;
  const char *slash = strrchr(info->dlpi_name, '/');
  if (strcmp(slash ? slash + 1 : info->dlpi_name, "libcuda.so.1") != 0)
    return 0;
  *(const char **)path = info->dlpi_name;
  return 1;
}
static unsigned long long driver_used(const gpu_t *g) {
  /* Looked up once the driver is loaded, through the in-memory list of
   * loaded objects (a dlopen by soname would search the disk on every
   * query while the driver is absent), so a memory query stays as cheap as
   * a real NVML's for the benchmarks that time it. */
  static unsigned long long (*_Atomic used)(const char *);
  if (!used) {
    const char *path = NULL;
    if (!dl_iterate_phdr(is_cuda, &path) || !path)
      return 0;
    void *cuda = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!cuda)
      return 0;
    used = (unsigned long long (*)(const char *))dlsym(cuda, "fake_cuda_used_on");
    if (!used)
      dlclose(cuda);
  }
  return used ? used(g->uuid) : 0;
}
typedef struct {
  unsigned version;
  unsigned long long total, reserved, free, used;
} mem_v2_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, mem_v2_t *m) {
  ENTER();
  GPU(h);
  if (m->version != (sizeof(mem_v2_t) | (2u << 24)))
    return NVML_ERROR_INVALID_ARGUMENT;
  m->total = g->mem_total;
  m->reserved = 0;
  m->used = g->mem_used + driver_used(g);
  m->free = g->mem_total - m->used;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, unsigned long long m[3]) {
  ENTER();
  if (h && *(int *)h == KIND_MIG) {
    gi_t *gi = (gi_t *)((char *)h - offsetof(gi_t, mig));
    m[0] = gi->p->mem_mb * (1ULL << 20) - MIG_OVERHEAD;
    m[1] = m[0];
    m[2] = 0;
    return NVML_SUCCESS;
  }
  GPU(h);
  m[0] = g->mem_total;
  m[2] = g->mem_used + driver_used(g);
  m[1] = g->mem_total - m[2];
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumGpuCores(void *h, unsigned *n) {
  ENTER();
  GPU(h);
  *n = g->cores;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
  ENTER();
  GPU(h);
  *major = (int)g->cc_major;
  *minor = (int)g->cc_minor;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz) {
  ENTER();
  GPU(h);
  switch (type) {
  case 0: *mhz = g->clk_gfx; return NVML_SUCCESS;
  case 1: *mhz = g->clk_sm; return NVML_SUCCESS;
  case 2: *mhz = g->clk_mem; return NVML_SUCCESS;
  default: return NVML_ERROR_NOT_SUPPORTED;
  }
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v) {
  ENTER();
  GPU(h);
  *v = g->pcie_gen;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v) {
  ENTER();
  GPU(h);
  *v = g->pcie_width;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *mw) {
  ENTER();
  GPU(h);
  *mw = g->power_limit_mw;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(void *h, int type, unsigned *c) {
  ENTER();
  GPU(h);
  if (type != 1) /* NVML_TEMPERATURE_THRESHOLD_SLOWDOWN */
    return NVML_ERROR_NOT_SUPPORTED;
  *c = g->slowdown_c;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEccMode(void *h, int *cur, int *pend) {
  ENTER();
  GPU(h);
  *cur = *pend = (int)g->ecc;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(void *h, int *mode) {
  ENTER();
  GPU(h);
  *mode = (int)g->persistence;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetArchitecture(void *h, unsigned *arch) {
  ENTER();
  GPU(h);
  *arch = g->arch;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) {
  ENTER();
  GPU(h);
  if (!g->mig_supported)
    return NVML_ERROR_NOT_SUPPORTED;
  *cur = *pend = (unsigned)mig_on(g);
  return NVML_SUCCESS;
}
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} pci_t;
static void fill_pci(pci_t *p, const gpu_t *g) {
  memset(p, 0, sizeof *p);
  copy(p->busId, sizeof p->busId, g->bus_id);
  copy(p->busIdLegacy, sizeof p->busIdLegacy, g->bus_id + 4);
  p->pciDeviceId = 0x233010de;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, pci_t *p) {
  ENTER();
  GPU(h);
  fill_pci(p, g);
  return NVML_SUCCESS;
}

/* A bus id in the forms nvml.h gives nvmlDeviceGetHandleByPciBusId_v2,
 * hexadecimal in either case: "domain:bus:device.function",
 * "domain:bus:device" and "bus:device.function" (cudaDeviceGetPCIBusId's
 * "0000:3b:00.0" names the A40). */
static int parse_bus_id(const char *s, unsigned v[4]) {
  int n = 0;
  if (sscanf(s, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && !s[n])
    return 1;
  v[3] = 0;
  if (sscanf(s, "%x:%x:%x%n", &v[0], &v[1], &v[2], &n) == 3 && !s[n])
    return 1;
  v[0] = 0;
  return sscanf(s, "%x:%x.%x%n", &v[1], &v[2], &v[3], &n) == 3 && !s[n];
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **h) {
  ENTER();
  unsigned want[4], have[4];
  if (!bus_id || !h || !parse_bus_id(bus_id, want))
    return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < 2; i++)
    if (parse_bus_id(gpus[i].bus_id, have) && memcmp(want, have, sizeof want) == 0) {
      *h = &gpus[i];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}

/* ---- topology ---- */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level) {
  ENTER();
  if (!gpu(a) || !gpu(b))
    return NVML_ERROR_INVALID_ARGUMENT;
  *level = a == b ? 0 : 30; /* NVML_TOPOLOGY_HOSTBRIDGE */
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned link, int *active) {
  ENTER();
  GPU(h);
  if (nvlinks(g) == 0)
    return NVML_ERROR_NOT_SUPPORTED;
  if (link >= nvlinks(g))
    return NVML_ERROR_INVALID_ARGUMENT;
  *active = 1;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkVersion(void *h, unsigned link, unsigned *v) {
  ENTER();
  GPU(h);
  if (link >= nvlinks(g))
    return NVML_ERROR_INVALID_ARGUMENT;
  *v = g->nvlink_version;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned link, pci_t *p) {
  ENTER();
  GPU(h);
  if (link >= nvlinks(g))
    return NVML_ERROR_INVALID_ARGUMENT;
  fill_pci(p, &gpus[g->peer]);
  return NVML_SUCCESS;
}

/* nvmlIntNvLinkDeviceType_t: the far end of every link is the other GPU
 * (NVML_NVLINK_DEVICE_TYPE_GPU, 0). */
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned link, int *type) {
  ENTER();
  GPU(h);
  if (!type || link >= nvlinks(g))
    return NVML_ERROR_INVALID_ARGUMENT;
  *type = 0;
  return NVML_SUCCESS;
}

/* ---- metrics ---- */
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned *mw) {
  ENTER();
  GPU(h);
  *mw = g->power_mw;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(void *h, int sensor, unsigned *c) {
  ENTER();
  GPU(h);
  if (sensor != 0)
    return NVML_ERROR_NOT_SUPPORTED;
  *c = g->temp_c;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, unsigned u[2]) {
  ENTER();
  GPU(h);
  u[0] = g->util_gpu;
  u[1] = g->util_gpu / 2;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned *kbps) {
  ENTER();
  GPU(h);
  *kbps = counter == 0 ? g->pcie_tx_kbps : g->pcie_rx_kbps;
  return NVML_SUCCESS;
}
typedef struct {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  unsigned long long value;
} field_t;
static unsigned long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000 + (unsigned long long)t.tv_nsec / 1000000;
}
nvmlReturn_t nvmlDeviceGetFieldValues(void *h, int n, field_t *v) {
  ENTER();
  GPU(h);
  for (int i = 0; i < n; i++) {
    v[i].nvmlReturn = NVML_SUCCESS;
    v[i].valueType = 3; /* unsigned long long */
    switch (v[i].fieldId) {
    case 197: v[i].value = g->pcie_tx_bytes; break;
    case 198: v[i].value = g->pcie_rx_bytes; break;
    case 138: case 139: /* NVLink data KiB: 100 KiB per ms each way */
      if (v[i].scopeId >= nvlinks(g))
        v[i].nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
      else
        v[i].value = now_ms() * 100;
      break;
    default: v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  return NVML_SUCCESS;
}

/* ---- processes: FAKE_NVML_PROCS=pid:gpu:bytes:smutil,... the compute
 * ones; FAKE_NVML_GRAPHICS_PROCS and FAKE_NVML_MPS_PROCS (same form) the
 * graphics and MPS compute ones. Each list in every version of nvml.h:
 * nvmlProcessInfo_v1_t (pid, usedGpuMemory) for the unsuffixed function,
 * nvmlProcessInfo_v2_t for _v2, nvmlProcessInfo_t (the v2 layout) for _v3;
 * not on MIG, so both instance ids are 0xFFFFFFFF. ---- */
typedef struct {
  unsigned pid, gpu;
  unsigned long long bytes;
  unsigned sm;
} proc_t;
static unsigned procs_of(const char *var, proc_t *out, unsigned max, unsigned gpu_index) {
  const char *s = getenv(var);
  unsigned n = 0;
  while (s && *s && n < max) {
    proc_t p;
    int used = 0;
    if (sscanf(s, "%u:%u:%llu:%u%n", &p.pid, &p.gpu, &p.bytes, &p.sm, &used) != 4)
      break;
    if (p.gpu == gpu_index)
      out[n++] = p;
    s += used;
    if (*s == ',')
      s++;
  }
  return n;
}
static unsigned procs(proc_t *out, unsigned max, unsigned gpu_index) {
  return procs_of("FAKE_NVML_PROCS", out, max, gpu_index);
}
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
} pinfo_v1_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} pinfo_t;
/* The size query (NULL or too small a buffer) answers the count with
 * NVML_ERROR_INSUFFICIENT_SIZE, or NVML_SUCCESS when there is none. */
#define PROCESS_LIST(fn, var, info_t, more)                                      \
  nvmlReturn_t fn(void *h, unsigned *count, info_t *infos) {                     \
    ENTER();                                                                     \
    GPU(h);                                                                      \
    if (!count)                                                                  \
      return NVML_ERROR_INVALID_ARGUMENT;                                        \
    proc_t p[64];                                                                \
    unsigned n = procs_of(var, p, 64, (unsigned)(g - gpus));                     \
    if (!infos || *count < n) {                                                  \
      *count = n;                                                                \
      return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;                    \
    }                                                                            \
    for (unsigned i = 0; i < n; i++) {                                           \
      infos[i].pid = p[i].pid;                                                   \
      infos[i].usedGpuMemory = p[i].bytes;                                       \
      more;                                                                      \
    }                                                                            \
    *count = n;                                                                  \
    return NVML_SUCCESS;                                                         \
  }
#define NOT_MIG infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, "FAKE_NVML_PROCS", pinfo_v1_t, (void)0)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, "FAKE_NVML_PROCS", pinfo_t, NOT_MIG)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, "FAKE_NVML_PROCS", pinfo_t, NOT_MIG)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, "FAKE_NVML_GRAPHICS_PROCS", pinfo_v1_t, (void)0)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, "FAKE_NVML_GRAPHICS_PROCS", pinfo_t, NOT_MIG)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, "FAKE_NVML_GRAPHICS_PROCS", pinfo_t, NOT_MIG)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, "FAKE_NVML_MPS_PROCS", pinfo_v1_t, (void)0)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, "FAKE_NVML_MPS_PROCS", pinfo_t, NOT_MIG)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, "FAKE_NVML_MPS_PROCS", pinfo_t, NOT_MIG)
typedef struct {
  unsigned pid;
  unsigned long long timeStamp;
  unsigned smUtil, memUtil, encUtil, decUtil;
} psample_t;
#include "timeline.h"
/* With FAKE_GPU_TIMELINE (timeline.h), the A40 (the fake driver's device 0)
 * reports per-process samples from the simulated device, named by the pid
 * the fake driver recorded (the host pid, as real NVML), as NVML documents
 * them: the driver samples every P ms (FAKE_NVML_SAMPLE_MS, default 100;
 * real drivers: every 1/6 s to 1 s) whether or not anyone asks, and "one
 * utilization sample structure is returned per process running, that had
 * some non-zero utilization during the last sample period": each sample is
 * the process's share of the device over its one period, timeStamp the
 * period's end (CLOCK_MONOTONIC µs); a process idle over a period has no
 * sample for it, and a device idle over a period none at all. A thread of
 * the process (started by its first call; again in a forked child) takes
 * the readings at each multiple of P into a buffer of the last SAMPLES
 * samples (one reading late by k periods records k samples of the share
 * over them). A call returns those newer than lastSeenTimeStamp; a size
 * query (NULL buffer, or one too small) answers
 * NVML_ERROR_INSUFFICIENT_SIZE with the count and changes nothing; nothing
 * newer: NVML_ERROR_NOT_FOUND. */
#define SAMPLES 4096
static struct {
  psample_t buf[SAMPLES];
  unsigned long long n; /* samples ever recorded */
  unsigned long long at_ns, period_ns;
  unsigned pid[TL_PIDS];
  unsigned long long busy[TL_PIDS];
  pid_t owner;
  struct tl_dev *dev;
} drv;
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

/* One reading at `now`: a sample per process that ran since the last, for
 * each of the `k` periods ended since (the same share in each). */
static void drv_read(unsigned long long now, unsigned long long k) {
  unsigned long long span = now - drv.at_ns, end = now / drv.period_ns;
  for (int i = 0; i < TL_PIDS; i++) {
    unsigned pid = __atomic_load_n(&drv.dev->procs[i].pid, __ATOMIC_ACQUIRE);
    unsigned long long busy = pid ? tl_busy(&drv.dev->procs[i], now) : 0;
    int same = drv.pid[i] == pid;
    unsigned long long before = same ? drv.busy[i] : 0;
    unsigned long long ran = busy > before ? busy - before : 0;
    /* A reading below an earlier one is no progress (timeline.h). */
    if (!same || busy > before)
      drv.busy[i] = busy;
    drv.pid[i] = pid;
    if (!pid || !ran || !span)
      continue;
    unsigned util = (unsigned)(ran >= span ? 100 : (ran * 100 + span / 2) / span);
    for (unsigned long long j = k > 64 ? k - 64 : 0; j < k && util; j++) {
      psample_t *s = &drv.buf[drv.n++ % SAMPLES];
      memset(s, 0, sizeof *s);
      s->pid = pid;
      s->timeStamp = (end - (k - 1 - j)) * drv.period_ns / 1000;
      s->smUtil = util;
    }
  }
  drv.at_ns = now;
}

static void *drv_sampler(void *arg) {
  (void)arg;
  for (;;) {
    unsigned long long next = (tl_now() / drv.period_ns + 1) * drv.period_ns;
    struct timespec ts = {(time_t)(next / 1000000000ULL), (long)(next % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    pthread_mutex_lock(&drv_lock);
    unsigned long long now = tl_now();
    if (now / drv.period_ns > drv.at_ns / drv.period_ns)
      drv_read(now, now / drv.period_ns - drv.at_ns / drv.period_ns);
    pthread_mutex_unlock(&drv_lock);
  }
  return NULL;
}

static nvmlReturn_t timeline_util(struct tl_dev *d, psample_t *s, unsigned *count,
                                  unsigned long long last) {
  if (drv.owner != getpid()) {
    /* First call here (or in a forked child, whose parent's thread is gone). */
    pthread_mutex_init(&drv_lock, NULL);
    const char *ms = getenv("FAKE_NVML_SAMPLE_MS");
    drv.period_ns = (ms && atoi(ms) > 0 ? (unsigned long long)atoi(ms) : 100) * 1000000ULL;
    drv.dev = d;
    drv.n = 0;
    memset(drv.pid, 0, sizeof drv.pid);
    drv.at_ns = tl_now();
    drv_read(drv.at_ns, 0);
    drv.owner = getpid();
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_create(&t, &a, drv_sampler, NULL);
    pthread_attr_destroy(&a);
  }
  pthread_mutex_lock(&drv_lock);
  unsigned long long first = drv.n > SAMPLES ? drv.n - SAMPLES : 0;
  unsigned n = 0;
  for (unsigned long long i = first; i < drv.n; i++)
    n += drv.buf[i % SAMPLES].timeStamp > last;
  nvmlReturn_t r = NVML_SUCCESS;
  if (!n) {
    r = NVML_ERROR_NOT_FOUND;
  } else if (!s || *count < n) {
    r = NVML_ERROR_INSUFFICIENT_SIZE;
  } else {
    unsigned k = 0;
    for (unsigned long long i = first; i < drv.n; i++)
      if (drv.buf[i % SAMPLES].timeStamp > last)
        s[k++] = drv.buf[i % SAMPLES];
  }
  *count = n;
  pthread_mutex_unlock(&drv_lock);
  return r;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(void *h, psample_t *s, unsigned *count,
                                             unsigned long long last) {
  ENTER();
  GPU(h);
  struct timeline *t = tl_map();
  if (t && g == &gpus[1])
    return timeline_util(&t->dev[0], s, count, last);
  proc_t p[64];
  unsigned n = procs(p, 64, (unsigned)(g - gpus));
  if (!s || *count < n) {
    *count = n;
    return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
  }
  for (unsigned i = 0; i < n; i++) {
    memset(&s[i], 0, sizeof s[i]);
    s[i].pid = p[i].pid;
    s[i].timeStamp = 1000 + i;
    s[i].smUtil = p[i].sm;
  }
  *count = n;
  return NVML_SUCCESS;
}

/* ---- GPM (GPU 0 only): SM util 37.5 %, any-tensor 12 % ---- */
typedef struct { unsigned version, isSupportedDevice; } gpm_support_t;
typedef struct {
  unsigned metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct { char *shortName, *longName, *unit; } metricInfo;
} gpm_metric_t;
typedef struct {
  unsigned version, numMetrics;
  void *sample1, *sample2;
  gpm_metric_t metrics[333]; /* NVML_GPM_METRIC_MAX, nvml.h 12.4-13.x */
} gpm_get_t;
#define GPM_METRIC_MAX (sizeof ((gpm_get_t *)0)->metrics / sizeof(gpm_metric_t))
nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, gpm_support_t *s) {
  ENTER();
  GPU(h);
  if (s->version != 1)
    return NVML_ERROR_INVALID_ARGUMENT;
  s->isSupportedDevice = g->gpm;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleAlloc(void **s) {
  ENTER();
  *s = calloc(1, sizeof(void *));
  return *s ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlGpmSampleFree(void *s) {
  free(s);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(void *h, void *s) {
  ENTER();
  GPU(h);
  if (!g->gpm)
    return NVML_ERROR_NOT_SUPPORTED;
  *(void **)s = g;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmMetricsGet(gpm_get_t *m) {
  ENTER();
  if (m->version != 1 || m->numMetrics > GPM_METRIC_MAX || !m->sample1 || !m->sample2)
    return NVML_ERROR_INVALID_ARGUMENT;
  /* The caller's struct is the header's, all NVML_GPM_METRIC_MAX entries:
   * touch every one, so a caller with a shorter array is caught (valgrind). */
  for (unsigned i = m->numMetrics; i < GPM_METRIC_MAX; i++)
    m->metrics[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
  for (unsigned i = 0; i < m->numMetrics; i++) {
    m->metrics[i].nvmlReturn = NVML_SUCCESS;
    switch (m->metrics[i].metricId) {
    case 2: m->metrics[i].value = 37.5; break;
    case 5: m->metrics[i].value = 12.0; break;
    default: m->metrics[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  return NVML_SUCCESS;
}

/* ---- MIG instances (GPU 0) ---- */
typedef struct {
  unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
      copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
  char name[96];
} gi_profile_v2_t;
static const profile_t *find_profile(unsigned id) {
  for (size_t i = 0; i < NPROFILES; i++)
    if (profiles[i].id == (int)id)
      return &profiles[i];
  return NULL;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(void *h, unsigned id, gi_profile_v2_t *info) {
  ENTER();
  GPU(h);
  if (info->version != (sizeof(gi_profile_v2_t) | (2u << 24)))
    return NVML_ERROR_INVALID_ARGUMENT;
  if (!mig_on(g))
    return NVML_ERROR_NOT_SUPPORTED;
  if (id >= 0x12) /* NVML_GPU_INSTANCE_PROFILE_COUNT, nvml.h 13.x */
    return NVML_ERROR_INVALID_ARGUMENT;
  const profile_t *p = find_profile(id);
  if (!p)
    return NVML_ERROR_NOT_SUPPORTED;
  memset((char *)info + sizeof info->version, 0, sizeof *info - sizeof info->version);
  info->id = id;
  info->sliceCount = p->slices;
  info->instanceCount = p->instances;
  info->multiprocessorCount = p->sms;
  info->memorySizeMB = p->mem_mb;
  copy(info->name, sizeof info->name, p->name);
  return NVML_SUCCESS;
}
static unsigned used_slices(void) {
  unsigned n = 0;
  for (int i = 0; i < MAX_GI; i++)
    if (gis[i].used)
      n += gis[i].p->slices;
  return n;
}
static unsigned count_of(const profile_t *p) {
  unsigned n = 0;
  for (int i = 0; i < MAX_GI; i++)
    n += gis[i].used && gis[i].p == p;
  return n;
}
nvmlReturn_t nvmlDeviceCreateGpuInstance(void *h, unsigned id, void **out) {
  ENTER();
  GPU(h);
  if (!mig_on(g))
    return NVML_ERROR_NOT_SUPPORTED;
  const profile_t *p = find_profile(id);
  if (!p)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (used_slices() + p->slices > SLICES || count_of(p) >= p->instances)
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  for (int i = 0; i < MAX_GI; i++)
    if (!gis[i].used) {
      memset(&gis[i], 0, sizeof gis[i]);
      gis[i].kind = KIND_GI;
      gis[i].used = 1;
      gis[i].id = next_gi_id++;
      gis[i].p = p;
      gis[i].ci.kind = KIND_CI;
      gis[i].mig.kind = KIND_MIG;
      gis[i].mig.gi = gis[i].id;
      *out = &gis[i];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_INSUFFICIENT_RESOURCES;
}
static gi_t *as_gi(void *h) {
  for (int i = 0; i < MAX_GI; i++)
    if (h == &gis[i] && gis[i].used)
      return &gis[i];
  return NULL;
}
nvmlReturn_t nvmlGpuInstanceDestroy(void *h) {
  ENTER();
  gi_t *gi = as_gi(h);
  if (!gi)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (gi->ci.used)
    return NVML_ERROR_IN_USE;
  gi->used = 0;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstances(void *h, unsigned id, void **out, unsigned *count) {
  ENTER();
  GPU(h);
  if (!mig_on(g))
    return NVML_ERROR_NOT_SUPPORTED;
  const profile_t *p = find_profile(id);
  if (!p)
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (int i = 0; i < MAX_GI; i++)
    if (gis[i].used && gis[i].p == p)
      out[n++] = &gis[i]; /* caller sized the array to the profile's instance count */
  *count = n;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceById(void *h, unsigned id, void **out) {
  ENTER();
  GPU(h);
  for (int i = 0; i < MAX_GI; i++)
    if (gis[i].used && gis[i].id == id) {
      *out = &gis[i];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}
typedef struct {
  void *device;
  unsigned id, profileId, start, size;
} gi_info_t;
nvmlReturn_t nvmlGpuInstanceGetInfo(void *h, gi_info_t *info) {
  ENTER();
  gi_t *gi = as_gi(h);
  if (!gi)
    return NVML_ERROR_INVALID_ARGUMENT;
  info->device = &gpus[0];
  info->id = gi->id;
  info->profileId = (unsigned)gi->p->id;
  info->start = 0;
  info->size = gi->p->slices;
  return NVML_SUCCESS;
}
typedef struct {
  unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} ci_profile_t;
/* Only compute-instance profiles spanning the whole GPU instance: 0..6 by
 * slice count, 7 the 1-slice REV1, 8 (nvml.h 13.x) a second 7-slice one. */
#define CI_PROFILE_COUNT 9
static int ci_profile_slices(unsigned ci) {
  static const int s[CI_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1, 7};
  return ci < CI_PROFILE_COUNT ? s[ci] : -1;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(void *h, unsigned prof, unsigned eng,
                                                          ci_profile_t *info) {
  ENTER();
  gi_t *gi = as_gi(h);
  if (!gi || eng != 0 || prof >= CI_PROFILE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (ci_profile_slices(prof) != (int)gi->p->slices)
    return NVML_ERROR_NOT_SUPPORTED;
  memset(info, 0, sizeof *info);
  info->id = prof;
  info->sliceCount = gi->p->slices;
  info->instanceCount = 1;
  info->multiprocessorCount = gi->p->sms;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(void *h, unsigned prof, void **out) {
  ENTER();
  gi_t *gi = as_gi(h);
  if (!gi)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (ci_profile_slices(prof) != (int)gi->p->slices)
    return NVML_ERROR_NOT_SUPPORTED;
  if (gi->ci.used)
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  gi->ci.used = 1;
  gi->ci.prof = prof;
  *out = &gi->ci;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(void *h, unsigned prof, void **out, unsigned *count) {
  ENTER();
  gi_t *gi = as_gi(h);
  if (!gi)
    return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  if (gi->ci.used && gi->ci.prof == prof) {
    out[0] = &gi->ci;
    *count = 1;
  }
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlComputeInstanceDestroy(void *h) {
  ENTER();
  for (int i = 0; i < MAX_GI; i++)
    if (h == &gis[i].ci && gis[i].used && gis[i].ci.used) {
      gis[i].ci.used = 0;
      return NVML_SUCCESS;
    }
  return NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *n) {
  ENTER();
  GPU(h);
  *n = g->mig_supported ? MAX_GI : 0;
  return NVML_SUCCESS;
}
/* MIG devices exist for GPU instances with a compute instance, densely indexed. */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned index, void **out) {
  ENTER();
  GPU(h);
  if (!mig_on(g))
    return NVML_ERROR_NOT_SUPPORTED;
  unsigned k = 0;
  for (int i = 0; i < MAX_GI; i++)
    if (gis[i].used && gis[i].ci.used && k++ == index) {
      *out = &gis[i].mig;
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
  ENTER();
  if (!h || *(int *)h != KIND_MIG)
    return NVML_ERROR_NOT_SUPPORTED;
  *id = ((gi_t *)((char *)h - offsetof(gi_t, mig)))->id;
  return NVML_SUCCESS;
}

/* An administrator's GPU instance of profile `gi_profile` holding one compute
 * instance of profile `ci_profile` on GPU 0: the GPU instance id, or -1. */
int fake_nvml_create_instances(unsigned gi_profile, unsigned ci_profile) {
  void *gi = NULL, *ci = NULL;
  init_count++;
  int ok = nvmlDeviceCreateGpuInstance(&gpus[0], gi_profile, &gi) == NVML_SUCCESS &&
           nvmlGpuInstanceCreateComputeInstance(gi, ci_profile, &ci) == NVML_SUCCESS;
  if (!ok && gi)
    nvmlGpuInstanceDestroy(gi);
  init_count--;
  return ok ? (int)((gi_t *)gi)->id : -1;
}
