/* The memory-paths app (issue 35): each driver path that takes device
 * memory, reached one of five ways, under the hook with a worker limited to
 * L on device 0. The fake driver's own byte count (fake_cuda_mem) is the
 * truth: it must never exceed L (contexts reserve nothing here,
 * FAKE_CUDA_CTX_RESERVE=0), what the driver still holds must stay charged,
 * and the controls (host memory, address reservations, imports) uncharged.
 *
 * Usage: app_paths WAY SCENARIO L
 *   WAY      dlsym     dlopen + dlsym of each exported versioned name
 *            ptsz      the same, the per-thread-stream (_ptsz) names where
 *                      the driver has them
 *            gpa118    cuGetProcAddress (v1) at CUDA 11.8 (a name newer
 *                      than 11.8 at its own first version)
 *            gpa128pt  cuGetProcAddress_v2 at 12.8, per-thread default stream
 *            gpa130    cuGetProcAddress_v2 at 13.0
 *   SCENARIO vmm       cuMemCreate's memory lives until its last handle
 *                      reference, mapping and multicast binding end: release
 *                      while mapped, an extra retain, an export re-imported,
 *                      multicast bindings by handle and by address, a
 *                      host-located allocation and an address reservation
 *                      (uncharged), an import of another process's memory
 *                      (charged once, to that process)
 *            graph     graph memory: a graph's allocation nodes
 *                      (cuGraphAddMemAllocNode, a captured cuMemAllocAsync)
 *                      are charged when it is instantiated, stay charged
 *                      while the driver's graph pool keeps them (launches,
 *                      frees outside the graph, relaunches, auto-free on
 *                      launch, the exec destroyed) and are given back by
 *                      cuDeviceGraphMemTrim
 *            ctxlimit  cuCtxSetLimit: a raised stack size (per resident
 *                      thread), printf FIFO and malloc heap are charged
 *                      before the driver takes them, lowering gives back,
 *                      the context's end gives all back
 *            stream    cuMemAllocAsync on a stream of device 0 while device 1
 *                      is current is charged to device 0
 *            green     a green context retains its device's primary context:
 *                      the primary context's reservation is charged until
 *                      the green context is destroyed
 *            pools13   CUDA 13's location-based pool calls: device 0's pool,
 *                      got by its location while device 1 is current, is
 *                      charged to device 0
 *            module    a module's and a library's __device__ globals
 *                      (cuModuleLoad, cuModuleLoadData[Ex],
 *                      cuModuleLoadFatBinary, cuLibraryLoadData,
 *                      cuLibraryLoadFromFile) are charged before the driver
 *                      loads the image, given back at the unload or with
 *                      the context
 *            locality  CUDA 13.4's locality domains: cuMemCreate and a pool
 *                      (created, or got by location) on a locality domain of
 *                      device 0, while device 1 is current, are charged to
 *                      device 0
 *            localmem  the local memory a launch grows its context to (a
 *                      function's local size x resident threads) is charged
 *                      at the launch (refused: the launch fails with
 *                      CUDA_ERROR_OUT_OF_MEMORY before the driver), kept
 *                      until the context ends */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"
#include "images.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr, CUmemGenericAllocationHandle;
typedef void *CUcontext, *CUstream, *CUgraph, *CUgraphExec, *CUgraphNode;
typedef struct { unsigned type; int id; } CUmemLocation;
typedef struct { /* cuda.h */
  unsigned type, requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { CUmemLocation location; unsigned flags; } CUmemAccessDesc;
typedef struct {
  unsigned numDevices;
  size_t size;
  unsigned long long handleTypes, flags;
} CUmulticastObjectProp;
typedef struct { /* cuda.h, CUDA 12 */
  unsigned allocType, handleTypes;
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;
typedef struct { /* cuda.h */
  CUmemPoolProps poolProps;
  const CUmemAccessDesc *accessDescs;
  size_t accessDescCount;
  size_t bytesize;
  CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct { /* CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h); _v1 ends at extra */
  void *func;
  unsigned grid[3], block[3], shared;
  void **params, **extra;
  void *kern;
  CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
typedef struct { /* cuda.h */
  unsigned long long flags;
  CUstream hUploadStream;
  CUgraphNode hErrNode_out;
  int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

enum { /* cuda.h */
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CU_MEM_ALLOCATION_TYPE_PINNED = 1,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_LOCATION_TYPE_HOST = 2,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
  CU_MEM_HANDLE_TYPE_FABRIC = 8,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
  CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
  CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1,
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
};

#define MIB (1024ull * 1024ull)

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*MemGetInfo)(size_t *, size_t *);
  CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                        unsigned long long);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle);
  CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*MemAddressFree)(CUdeviceptr, size_t);
  CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                     unsigned long long);
  CUresult (*MemUnmap)(CUdeviceptr, size_t);
  CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
  CUresult (*MemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *,
                                                   CUmemGenericAllocationHandle);
  CUresult (*MemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int,
                                         unsigned long long);
  CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
  CUresult (*MulticastCreate)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
  CUresult (*MulticastAddDevice)(CUmemGenericAllocationHandle, CUdevice);
  CUresult (*MulticastBindMem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                               size_t, size_t, unsigned long long);
  CUresult (*MulticastBindAddr)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                                unsigned long long);
  CUresult (*MulticastUnbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSetLimit)(int, size_t);
  CUresult (*CtxGetLimit)(size_t *, int);
  CUresult (*PrimaryCtxReset)(CUdevice);
  CUresult (*PrimaryCtxRelease)(CUdevice);
  CUresult (*GreenCtxCreate)(void **, void *, CUdevice, unsigned);
  CUresult (*GreenCtxDestroy)(void *);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*MemGetDefaultMemPool)(void **, CUmemLocation *, int);
  CUresult (*MemGetMemPool)(void **, CUmemLocation *, int);
  CUresult (*MemSetMemPool)(CUmemLocation *, int, void *);
  CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, void *, CUstream);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*CtxSynchronize)(void);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamBeginCapture)(CUstream, int);
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphCreate)(CUgraph *, unsigned);
  CUresult (*GraphAddMemAllocNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   CUDA_MEM_ALLOC_NODE_PARAMS *);
  CUresult (*GraphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                 const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*GraphAddChildGraphNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     CUgraph);
  CUresult (*GraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                           const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*GraphExecUpdate)(CUgraphExec, CUgraph, void *);
  CUresult (*GraphAddMemFreeNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                  CUdeviceptr);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphInstantiateWithParams)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
  CUresult (*GraphUpload)(CUgraphExec, CUstream);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*DeviceGraphMemTrim)(CUdevice);
  CUresult (*ModuleLoad)(void **, const char *);
  CUresult (*ModuleLoadData)(void **, const void *);
  CUresult (*ModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
  CUresult (*ModuleLoadFatBinary)(void **, const void *);
  CUresult (*ModuleUnload)(void *);
  CUresult (*LibraryLoadData)(void **, const void *, int *, void **, unsigned, int *, void **,
                              unsigned);
  CUresult (*LibraryLoadFromFile)(void **, const char *, int *, void **, unsigned, int *,
                                  void **, unsigned);
  CUresult (*LibraryUnload)(void *);
  CUresult (*ModuleGetFunction)(void **, void *, const char *);
  CUresult (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*MemPoolCreate)(void **, const CUmemPoolProps *);
  CUresult (*MemPoolDestroy)(void *);
  CUresult (*LaunchKernelEx)(const void *, void *, void **, void **);
  CUresult (*LaunchCooperativeKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, CUstream, void **);
  CUresult (*PrimaryCtxSetFlags)(CUdevice, unsigned);
  int (*fake_mem)(int, unsigned long long *, unsigned long long *);
  unsigned long long (*fake_calls)(const char *);
} A;

/* ---- the five ways ---- */
static void *lib;
static const char *way;
typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);

/* `base` at `since` (its first CUDA version); `exported` is the versioned
 * name dlsym finds, `ptsz` its per-thread-stream name (NULL: none). */
static void *get(const char *base, int since, const char *exported, const char *ptsz) {
  void *p = NULL;
  int st = -1;
  CUresult r = CUDA_SUCCESS;
  if (strcmp(way, "dlsym") == 0) {
    p = dlsym(lib, exported);
  } else if (strcmp(way, "ptsz") == 0) {
    p = dlsym(lib, ptsz ? ptsz : exported);
  } else if (strcmp(way, "gpa118") == 0) {
    gpa1_t gpa = (gpa1_t)dlsym(lib, "cuGetProcAddress");
    r = gpa ? gpa(base, &p, since > 11080 ? since : 11080, 0) : -1;
  } else {
    gpa2_t gpa = (gpa2_t)dlsym(lib, "cuGetProcAddress_v2");
    int v = strcmp(way, "gpa130") == 0 ? 13000 : 12080;
    unsigned long long flags =
        strcmp(way, "gpa128pt") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
    r = gpa ? gpa(base, &p, since > v ? since : v, flags, &st) : -1;
  }
  if (r != CUDA_SUCCESS || !p) {
    fprintf(stderr, "%s: %s not found (%d)\n", way, base, r);
    exit(2);
  }
  return p;
}

static void resolve(void) {
  A.Init = get("cuInit", 2000, "cuInit", NULL);
  /* (cuCtxCreate's signature changes with the version asked: _v3, _v4.) */
  A.PrimaryCtxRetain = get("cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", NULL);
  A.MemGetInfo = get("cuMemGetInfo", 3020, "cuMemGetInfo_v2", NULL);
  A.MemGetAllocationGranularity =
      get("cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", NULL);
  A.MemCreate = get("cuMemCreate", 10020, "cuMemCreate", NULL);
  A.MemRelease = get("cuMemRelease", 10020, "cuMemRelease", NULL);
  A.MemAddressReserve = get("cuMemAddressReserve", 10020, "cuMemAddressReserve", NULL);
  A.MemAddressFree = get("cuMemAddressFree", 10020, "cuMemAddressFree", NULL);
  A.MemMap = get("cuMemMap", 10020, "cuMemMap", NULL);
  A.MemUnmap = get("cuMemUnmap", 10020, "cuMemUnmap", NULL);
  A.MemSetAccess = get("cuMemSetAccess", 10020, "cuMemSetAccess", NULL);
  A.MemRetainAllocationHandle =
      get("cuMemRetainAllocationHandle", 11000, "cuMemRetainAllocationHandle", NULL);
  A.MemGetAllocationPropertiesFromHandle = get("cuMemGetAllocationPropertiesFromHandle", 10020,
                                               "cuMemGetAllocationPropertiesFromHandle", NULL);
  A.MemExportToShareableHandle =
      get("cuMemExportToShareableHandle", 10020, "cuMemExportToShareableHandle", NULL);
  A.MemImportFromShareableHandle =
      get("cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle", NULL);
  A.MulticastCreate = get("cuMulticastCreate", 12010, "cuMulticastCreate", NULL);
  A.MulticastAddDevice = get("cuMulticastAddDevice", 12010, "cuMulticastAddDevice", NULL);
  A.MulticastBindMem = get("cuMulticastBindMem", 12010, "cuMulticastBindMem", NULL);
  A.MulticastBindAddr = get("cuMulticastBindAddr", 12010, "cuMulticastBindAddr", NULL);
  A.MulticastUnbind = get("cuMulticastUnbind", 12010, "cuMulticastUnbind", NULL);
  A.CtxSetCurrent = get("cuCtxSetCurrent", 4000, "cuCtxSetCurrent", NULL);
  A.CtxSetLimit = get("cuCtxSetLimit", 3010, "cuCtxSetLimit", NULL);
  A.CtxGetLimit = get("cuCtxGetLimit", 3010, "cuCtxGetLimit", NULL);
  A.PrimaryCtxReset = get("cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2", NULL);
  A.PrimaryCtxRelease =
      get("cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", NULL);
  A.GreenCtxCreate = get("cuGreenCtxCreate", 12040, "cuGreenCtxCreate", NULL);
  A.GreenCtxDestroy = get("cuGreenCtxDestroy", 12040, "cuGreenCtxDestroy", NULL);
  A.DeviceGetAttribute = get("cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", NULL);
  A.MemGetDefaultMemPool = get("cuMemGetDefaultMemPool", 13000, "cuMemGetDefaultMemPool", NULL);
  A.MemGetMemPool = get("cuMemGetMemPool", 13000, "cuMemGetMemPool", NULL);
  A.MemSetMemPool = get("cuMemSetMemPool", 13000, "cuMemSetMemPool", NULL);
  A.MemAllocFromPoolAsync = get("cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync",
                                "cuMemAllocFromPoolAsync_ptsz");
  A.MemAlloc = get("cuMemAlloc", 3020, "cuMemAlloc_v2", NULL);
  A.MemFree = get("cuMemFree", 3020, "cuMemFree_v2", NULL);
  A.MemAllocAsync = get("cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz");
  A.MemFreeAsync = get("cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz");
  A.CtxSynchronize = get("cuCtxSynchronize", 2000, "cuCtxSynchronize", NULL);
  A.StreamCreate = get("cuStreamCreate", 2000, "cuStreamCreate", NULL);
  A.StreamBeginCapture = get("cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", NULL);
  A.StreamEndCapture =
      get("cuStreamEndCapture", 10000, "cuStreamEndCapture", "cuStreamEndCapture_ptsz");
  A.GraphCreate = get("cuGraphCreate", 10000, "cuGraphCreate", NULL);
  A.GraphAddMemAllocNode = get("cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode", NULL);
  A.GraphAddKernelNode = get("cuGraphAddKernelNode", 10000, "cuGraphAddKernelNode_v2", NULL);
  A.GraphAddChildGraphNode =
      get("cuGraphAddChildGraphNode", 10000, "cuGraphAddChildGraphNode", NULL);
  A.GraphExecKernelNodeSetParams = get("cuGraphExecKernelNodeSetParams", 12000,
                                       "cuGraphExecKernelNodeSetParams_v2", NULL);
  A.GraphExecUpdate = get("cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2", NULL);
  A.GraphAddMemFreeNode = get("cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode", NULL);
  A.GraphInstantiateWithFlags =
      get("cuGraphInstantiateWithFlags", 11040, "cuGraphInstantiateWithFlags", NULL);
  A.GraphInstantiateWithParams = get("cuGraphInstantiateWithParams", 12000,
                                     "cuGraphInstantiateWithParams",
                                     "cuGraphInstantiateWithParams_ptsz");
  A.GraphUpload = get("cuGraphUpload", 11010, "cuGraphUpload", NULL);
  A.GraphLaunch = get("cuGraphLaunch", 10000, "cuGraphLaunch", "cuGraphLaunch_ptsz");
  A.GraphExecDestroy = get("cuGraphExecDestroy", 10000, "cuGraphExecDestroy", NULL);
  A.GraphDestroy = get("cuGraphDestroy", 10000, "cuGraphDestroy", NULL);
  A.DeviceGraphMemTrim = get("cuDeviceGraphMemTrim", 11040, "cuDeviceGraphMemTrim", NULL);
  A.ModuleLoad = get("cuModuleLoad", 2000, "cuModuleLoad", NULL);
  A.ModuleLoadData = get("cuModuleLoadData", 2000, "cuModuleLoadData", NULL);
  A.ModuleLoadDataEx = get("cuModuleLoadDataEx", 2010, "cuModuleLoadDataEx", NULL);
  A.ModuleLoadFatBinary = get("cuModuleLoadFatBinary", 2000, "cuModuleLoadFatBinary", NULL);
  A.ModuleUnload = get("cuModuleUnload", 2000, "cuModuleUnload", NULL);
  A.LibraryLoadData = get("cuLibraryLoadData", 12000, "cuLibraryLoadData", NULL);
  A.LibraryLoadFromFile = get("cuLibraryLoadFromFile", 12000, "cuLibraryLoadFromFile", NULL);
  A.LibraryUnload = get("cuLibraryUnload", 12000, "cuLibraryUnload", NULL);
  A.ModuleGetFunction = get("cuModuleGetFunction", 2000, "cuModuleGetFunction", NULL);
  A.LaunchKernel = get("cuLaunchKernel", 4000, "cuLaunchKernel", "cuLaunchKernel_ptsz");
  A.MemPoolCreate = get("cuMemPoolCreate", 11020, "cuMemPoolCreate", NULL);
  A.MemPoolDestroy = get("cuMemPoolDestroy", 11020, "cuMemPoolDestroy", NULL);
  A.LaunchKernelEx = get("cuLaunchKernelEx", 11060, "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz");
  A.LaunchCooperativeKernel = get("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel",
                                  "cuLaunchCooperativeKernel_ptsz");
  A.PrimaryCtxSetFlags =
      get("cuDevicePrimaryCtxSetFlags", 11000, "cuDevicePrimaryCtxSetFlags_v2", NULL);
  A.fake_mem = dlsym(lib, "fake_cuda_mem");
  A.fake_calls = dlsym(lib, "fake_cuda_calls");
  if (!A.fake_mem || !A.fake_calls) {
    fprintf(stderr, "not the fake driver\n");
    exit(2);
  }
}

/* ---- docs/hook.md's table of memory paths ----
 * One row per path, written (to $APP_PATHS_TABLE, tab-separated) only when
 * every check of this run has passed so far: test_paths assembles the table
 * from the rows each way produced. */
static void row(const char *path, const char *charged, const char *back, const char *approx) {
  const char *file = getenv("APP_PATHS_TABLE");
  FILE *f = file && atomic_load(&test_failed) == 0 ? fopen(file, "a") : NULL;
  if (f) {
    fprintf(f, "%s\t%s\t%s\t%s\n", path, charged, back, approx);
    fclose(f);
  }
}

/* ---- the books ---- */
static unsigned long long L, base_used;

static unsigned long long driver_allocs(void) {
  unsigned long long used, n;
  A.fake_mem(0, &used, &n);
  return n;
}
/* What the driver holds on device 0 beyond what it held at the start. */
static unsigned long long held(void) {
  unsigned long long used, n;
  A.fake_mem(0, &used, &n);
  return used - base_used;
}
/* What the worker's partition shows as used. */
static unsigned long long charged(void) {
  size_t f = 0, t = 0;
  CUresult r = A.MemGetInfo(&f, &t);
  CHECK(r == CUDA_SUCCESS && t == L, "cuMemGetInfo: %d, total %zu (limit %llu)", r, t, L);
  return L - f;
}
/* The driver holds `bytes`, all of them charged, never above the limit. */
#define HOLDS(bytes, what)                                                     \
  do {                                                                         \
    unsigned long long h_ = held(), c_ = charged();                            \
    CHECK(h_ == (bytes) && c_ == (bytes) && h_ <= L,                           \
          "%s %s: the driver holds %llu, charged %llu, expected %llu", way,    \
          what, h_, c_, (unsigned long long)(bytes));                          \
  } while (0)
/* OUT_OF_MEMORY, the driver never asked. */
#define REFUSED(call)                                                          \
  do {                                                                         \
    unsigned long long before_ = driver_allocs();                              \
    EXPECT(call, CUDA_ERROR_OUT_OF_MEMORY);                                    \
    CHECK(driver_allocs() == before_, "%s: %s reached the driver", way, #call);\
  } while (0)

/* The driver holds `h` and the worker is charged `c` (the charge may run
 * ahead of the driver, never behind it), neither above the limit. */
#define BOOKED(h, c, what)                                                     \
  do {                                                                         \
    unsigned long long h_ = held(), c_ = charged();                            \
    CHECK(h_ == (h) && c_ == (c) && h_ <= c_ && c_ <= L,                       \
          "%s %s: the driver holds %llu, charged %llu, expected %llu and %llu", \
          way, what, h_, c_, (unsigned long long)(h), (unsigned long long)(c)); \
  } while (0)

/* Device `dev`'s primary context, made current. */
static CUcontext context(int dev) {
  CUcontext c = NULL;
  EXPECT(A.PrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  return c;
}

static CUmemAllocationProp device_prop(unsigned handle_types) {
  CUmemAllocationProp p = {CU_MEM_ALLOCATION_TYPE_PINNED, handle_types,
                           {CU_MEM_LOCATION_TYPE_DEVICE, 0}, NULL, {0}};
  return p;
}

static void map_rw(CUdeviceptr va, size_t n, CUmemGenericAllocationHandle h) {
  CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT(A.MemMap(va, n, 0, h, 0), CUDA_SUCCESS);
  EXPECT(A.MemSetAccess(va, n, &rw, 1), CUDA_SUCCESS);
}

/* Another process (a forked child, its own process to the hook) creates
 * `n` bytes and exports them as a FABRIC handle; this one imports it. */
static void foreign_import(size_t n) {
  int to_parent[2], to_child[2];
  unsigned char fabric[64];
  CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0, "pipes");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    CUmemAllocationProp prop = device_prop(CU_MEM_HANDLE_TYPE_FABRIC);
    CUmemGenericAllocationHandle h = 0;
    char c;
    int ok = A.MemCreate(&h, n, &prop, 0) == CUDA_SUCCESS &&
             A.MemExportToShareableHandle(fabric, h, CU_MEM_HANDLE_TYPE_FABRIC, 0) ==
                 CUDA_SUCCESS;
    if (!ok)
      memset(fabric, 0, sizeof fabric);
    if (write(to_parent[1], fabric, sizeof fabric) != (ssize_t)sizeof fabric ||
        read(to_child[0], &c, 1) < 0)
      ok = 0;
    _exit(ok && A.MemRelease(h) == CUDA_SUCCESS ? 0 : 1);
  }
  CHECK(read(to_parent[0], fabric, sizeof fabric) == (ssize_t)sizeof fabric, "the fabric handle");
  /* The other process's bytes count in the worker's partition, not in this
   * process's driver. */
  unsigned long long before_charged = charged(), before_held = held();
  CHECK(before_charged == n, "%s: the other process's %zu bytes are the worker's (%llu)", way, n,
        before_charged);
  CUmemGenericAllocationHandle h = 0;
  EXPECT(A.MemImportFromShareableHandle(&h, fabric, CU_MEM_HANDLE_TYPE_FABRIC), CUDA_SUCCESS);
  CHECK(charged() == before_charged && held() == before_held,
        "%s: an import from another process is charged once, to it (%llu)", way, charged());
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  CHECK(write(to_child[1], "x", 1) == 1, "release the child");
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "%s: the exporting process ran", way);
  close(to_parent[0]);
  close(to_parent[1]);
  close(to_child[0]);
  close(to_child[1]);
  CHECK(charged() == 0, "%s: its bytes left with it (%llu)", way, charged());
  row("`cuMemImportFromShareableHandle` (another process's export)",
      "never here: charged once, to the exporting process", "–",
      "once the exporter has released it, the importer holds it uncharged");
}

static void scenario_vmm(void) {
  context(0);
  base_used = 0;
  base_used = held();
  size_t g = 0, half = (size_t)L / 2;
  CUmemAllocationProp prop = device_prop(0), fd_prop = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT(A.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  CHECK(g == 2 * MIB && L % g == 0, "granularity %zu", g);

  /* A reservation is address space only. */
  CUdeviceptr va = 0;
  EXPECT(A.MemAddressReserve(&va, 4 * L, 0, 0, 0), CUDA_SUCCESS);
  HOLDS(0, "an address reservation");
  row("`cuMemAddressReserve`", "never (address space, no memory)", "–", "–");

  /* Released right after mapping (the usual idiom): the mapping keeps it. */
  CUmemGenericAllocationHandle h = 0, h2 = 0, h3 = 0;
  EXPECT(A.MemCreate(&h, half, &prop, 0), CUDA_SUCCESS);
  map_rw(va, half, h);
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  HOLDS(half, "released while mapped");
  REFUSED(A.MemCreate(&h2, half + g, &prop, 0));
  CUmemAllocationProp got;
  EXPECT(A.MemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);
  /* An extra retain keeps it past the unmap. */
  EXPECT(A.MemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + g)), CUDA_SUCCESS);
  CHECK(h2 == h, "%s: the retained handle is the mapped one", way);
  EXPECT(A.MemGetAllocationPropertiesFromHandle(&got, h2), CUDA_SUCCESS);
  CHECK(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0, "its location");
  EXPECT(A.MemUnmap(va, half), CUDA_SUCCESS);
  HOLDS(half, "retained, unmapped");
  EXPECT(A.MemRelease(h2), CUDA_SUCCESS);
  HOLDS(0, "the last reference released");
  row("`cuMemCreate` (device)", "at the call, on the device its properties name",
      "with its last handle reference, mapping or multicast binding (`cuMemRelease`, "
      "`cuMemUnmap`, `cuMulticastUnbind`, the multicast object's release)",
      "–");
  row("`cuMemMap` / `cuMemUnmap`", "never (the memory is charged once)",
      "a mapping keeps its memory charged until unmapped", "–");
  row("`cuMemRetainAllocationHandle`", "never (a reference to charged memory)",
      "its `cuMemRelease` ends one reference", "–");

  /* An export re-imported: one allocation, charged once, alive while
   * either handle or a mapping is. */
  int fd = -1;
  EXPECT(A.MemCreate(&h, half, &fd_prop, 0), CUDA_SUCCESS);
  EXPECT(A.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_SUCCESS);
  EXPECT(A.MemImportFromShareableHandle(&h3, (void *)(intptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_SUCCESS);
  HOLDS(half, "exported and re-imported (charged once)");
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  HOLDS(half, "the original released, the import kept");
  REFUSED(A.MemCreate(&h2, half + g, &prop, 0));
  map_rw(va, half, h3);
  EXPECT(A.MemRelease(h3), CUDA_SUCCESS);
  HOLDS(half, "the import released while mapped");
  EXPECT(A.MemUnmap(va, half), CUDA_SUCCESS);
  HOLDS(0, "unmapped: nothing refers to it");
  row("`cuMemExportToShareableHandle` + `cuMemImportFromShareableHandle` (own export)",
      "never (the same memory, charged once)",
      "the imported handle is one more reference until its `cuMemRelease`",
      "an export is known by what the driver handed out (a descriptor's open file, whatever "
      "its number; a FABRIC handle's bytes)");
  close(fd);

  /* An export is its descriptor's file, not its number: the first export's
   * number made to name the second's file (dup2), the first reached
   * through a dup() of it; each import is its own export's reference. */
  CUmemGenericAllocationHandle ha = 0, hb = 0, ia = 0, ib = 0;
  int fa = -1, fb = -1, fa2 = -1;
  const size_t q = half / 2;
  EXPECT(A.MemCreate(&ha, q, &fd_prop, 0), CUDA_SUCCESS);
  EXPECT(A.MemCreate(&hb, q, &fd_prop, 0), CUDA_SUCCESS);
  EXPECT(A.MemExportToShareableHandle(&fa, ha, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_SUCCESS);
  EXPECT(A.MemExportToShareableHandle(&fb, hb, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_SUCCESS);
  fa2 = dup(fa);
  CHECK(fa2 >= 0 && dup2(fb, fa) == fa, "%s: dup, dup2", way);
  EXPECT(A.MemImportFromShareableHandle(&ib, (void *)(intptr_t)fa,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_SUCCESS);
  EXPECT(A.MemImportFromShareableHandle(&ia, (void *)(intptr_t)fa2,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_SUCCESS);
  EXPECT(A.MemRelease(ha), CUDA_SUCCESS);
  EXPECT(A.MemRelease(hb), CUDA_SUCCESS);
  HOLDS(2 * q, "both exports' memory kept by the imports through dup2'd and dup'd numbers");
  REFUSED(A.MemCreate(&h2, L - 2 * q + g, &prop, 0));
  EXPECT(A.MemRelease(ib), CUDA_SUCCESS);
  HOLDS(q, "the import of the second released");
  EXPECT(A.MemRelease(ia), CUDA_SUCCESS);
  HOLDS(0, "the import of the first released");
  close(fa);
  close(fa2);
  close(fb);

  /* Multicast: a binding keeps the memory. */
  CUmulticastObjectProp mp = {1, (size_t)L, 0, 0};
  CUmemGenericAllocationHandle mc = 0;
  EXPECT(A.MulticastCreate(&mc, &mp), CUDA_SUCCESS);
  EXPECT(A.MulticastAddDevice(mc, 0), CUDA_SUCCESS);
  HOLDS(0, "a multicast object");
  EXPECT(A.MemCreate(&h, half, &prop, 0), CUDA_SUCCESS);
  EXPECT(A.MulticastBindMem(mc, 0, h, 0, half, 0), CUDA_SUCCESS);
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  HOLDS(half, "bound by handle, released");
  REFUSED(A.MemCreate(&h2, half + g, &prop, 0));
  EXPECT(A.MulticastUnbind(mc, 0, 0, half), CUDA_SUCCESS);
  HOLDS(0, "unbound");
  EXPECT(A.MemCreate(&h, half, &prop, 0), CUDA_SUCCESS);
  map_rw(va, half, h);
  EXPECT(A.MulticastBindAddr(mc, half, va, half, 0), CUDA_SUCCESS);
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  EXPECT(A.MemUnmap(va, half), CUDA_SUCCESS);
  HOLDS(half, "bound by address, released and unmapped");
  EXPECT(A.MemRelease(mc), CUDA_SUCCESS);
  HOLDS(0, "the multicast object released");
  row("`cuMulticastBindMem[_v2]` / `cuMulticastBindAddr[_v2]`",
      "never (a reference to charged memory; a multicast object holds none of its own)",
      "with `cuMulticastUnbind` or the multicast object's last `cuMemRelease`", "–");

  /* Host memory is no device's. */
  CUmemAllocationProp host = {CU_MEM_ALLOCATION_TYPE_PINNED, 0, {CU_MEM_LOCATION_TYPE_HOST, 0},
                              NULL, {0}};
  EXPECT(A.MemCreate(&h, 2 * L, &host, 0), CUDA_SUCCESS);
  HOLDS(0, "host-located cuMemCreate");
  row("`cuMemCreate` (host location)", "never (host memory)", "–", "–");
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);

  /* Nothing of this process survives its handles and mappings: the whole
   * limit fits again. */
  EXPECT(A.MemCreate(&h, (size_t)L, &prop, 0), CUDA_SUCCESS);
  HOLDS(L, "the whole limit");
  REFUSED(A.MemCreate(&h2, g, &prop, 0));
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  EXPECT(A.MemAddressFree(va, 4 * L), CUDA_SUCCESS);
  HOLDS(0, "all given back");

  foreign_import(half);
}

/* A graph of one allocation node of `n` bytes on device 0 (its address in
 * *p), freed within the graph when `free_too`. */
static CUgraph alloc_graph(size_t n, CUdeviceptr *p, int free_too) {
  CUgraph g = NULL;
  CUgraphNode a = NULL, f = NULL;
  CUDA_MEM_ALLOC_NODE_PARAMS np;
  memset(&np, 0, sizeof np);
  np.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  np.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  np.bytesize = n;
  EXPECT(A.GraphCreate(&g, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddMemAllocNode(&a, g, NULL, 0, &np), CUDA_SUCCESS);
  *p = np.dptr;
  if (free_too)
    EXPECT(A.GraphAddMemFreeNode(&f, g, &a, 1, np.dptr), CUDA_SUCCESS);
  return g;
}

static void scenario_graph(void) {
  context(0);
  base_used = 0;
  base_used = held();
  size_t g = 2 * MIB, half = (size_t)L / 2;
  CUdeviceptr p = 0, q = 0, r = 0;
  CUgraphExec e = NULL, e2 = NULL;

  /* An allocation node: charged at instantiation, taken at upload/launch. */
  CUgraph gr = alloc_graph(half, &p, 0);
  EXPECT(A.GraphInstantiateWithFlags(&e, gr, 0), CUDA_SUCCESS);
  BOOKED(0, half, "a graph instantiated (charged up front)");
  EXPECT(A.GraphUpload(e, NULL), CUDA_SUCCESS);
  BOOKED(half, half, "uploaded");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  EXPECT(A.GraphLaunch(e, NULL), CUDA_ERROR_INVALID_VALUE); /* its allocation still live */
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
  BOOKED(half, half, "its allocation freed outside the graph (the pool keeps it)");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(half, half, "relaunched");
  REFUSED(A.MemAlloc(&q, half + g));
  /* A second graph the limit has no room for: refused before the driver. */
  CUgraph gr2 = alloc_graph(half + g, &q, 1);
  unsigned long long calls = A.fake_calls("cuGraphInstantiateWithFlags");
  EXPECT(A.GraphInstantiateWithFlags(&e2, gr2, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(A.fake_calls("cuGraphInstantiateWithFlags") == calls,
        "%s: the refused instantiation reached the driver", way);
  EXPECT(A.GraphDestroy(gr2), CUDA_SUCCESS);
  /* Destroyed, its allocation still live: the pool keeps both. */
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.DeviceGraphMemTrim(0), CUDA_SUCCESS);
  BOOKED(half, half, "the exec destroyed, its allocation live, trimmed");
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
  BOOKED(half, half, "the allocation freed: the pool still reserves it");
  EXPECT(A.DeviceGraphMemTrim(0), CUDA_SUCCESS);
  BOOKED(0, 0, "trimmed");
  EXPECT(A.GraphDestroy(gr), CUDA_SUCCESS);

  /* Auto-free on launch: relaunching frees the last launch's allocation. */
  gr = alloc_graph(half, &p, 0);
  CUDA_GRAPH_INSTANTIATE_PARAMS ip = {CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, NULL, NULL, 0};
  EXPECT(A.GraphInstantiateWithParams(&e, gr, &ip), CUDA_SUCCESS);
  for (int i = 0; i < 3; i++)
    EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(half, half, "auto-free on launch, launched 3 times");
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(gr), CUDA_SUCCESS);
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
  EXPECT(A.DeviceGraphMemTrim(0), CUDA_SUCCESS);
  BOOKED(0, 0, "destroyed, freed, trimmed");
  row("`cuGraphAddMemAllocNode`",
      "at instantiation (`cuGraphInstantiate*`), what the graph's allocation nodes need beyond "
      "the device's graph pool charge; refused there with `CUDA_ERROR_OUT_OF_MEMORY`",
      "by `cuDeviceGraphMemTrim`, down to what live graphs need or the driver still reserves "
      "(a destroyed graph's memory stays in the pool until then)",
      "charged before the driver takes it (at upload or first launch)");

  /* Captured from a stream, freed outside the graph, relaunched. */
  CUstream s = NULL;
  EXPECT(A.StreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT(A.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT(A.MemAllocAsync(&r, half / 2, s), CUDA_SUCCESS);
  BOOKED(0, half / 2, "captured (charged as an allocation while the capture lasts)");
  EXPECT(A.StreamEndCapture(s, &gr), CUDA_SUCCESS);
  BOOKED(0, 0, "the capture ended: a graph's allocation node, not an allocation");
  EXPECT(A.GraphInstantiateWithFlags(&e, gr, 0), CUDA_SUCCESS);
  BOOKED(0, half / 2, "instantiated");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(half / 2, half / 2, "instantiated and launched");
  EXPECT(A.MemFreeAsync(r, NULL), CUDA_SUCCESS);
  BOOKED(half / 2, half / 2, "freed outside the graph");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(half / 2, half / 2, "relaunched");
  EXPECT(A.MemFree(r), CUDA_SUCCESS);
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(gr), CUDA_SUCCESS);
  EXPECT(A.DeviceGraphMemTrim(0), CUDA_SUCCESS);
  BOOKED(0, 0, "all given back");
  row("`cuMemAllocAsync` captured into a graph",
      "as an allocation while the capture lasts (`cuStreamEndCapture` gives it back), then as "
      "the graph's allocation node at instantiation",
      "by `cuDeviceGraphMemTrim`, as the graph's allocation nodes",
      "charged before the driver takes it (at the graph's upload or first launch)");
}

static void scenario_pools13(void) {
  CUcontext c0 = context(0);
  base_used = 0;
  base_used = held();
  CUcontext c1 = context(1);
  size_t half = (size_t)L / 2, g = 2 * MIB;
  CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  void *pool = NULL, *current = NULL;
  CUdeviceptr p = 0, q = 0;
  /* Device 1 is current; device 0's pools are named by location. */
  EXPECT(A.MemGetDefaultMemPool(&pool, &dev0, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&p, half, pool, NULL), CUDA_SUCCESS);
  REFUSED(A.MemAllocFromPoolAsync(&q, half + g, pool, NULL));
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "device 0's default pool by location, from device 1");
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(p, NULL), CUDA_SUCCESS);
  EXPECT(A.MemSetMemPool(&dev0, CU_MEM_ALLOCATION_TYPE_PINNED, pool), CUDA_SUCCESS);
  EXPECT(A.MemGetMemPool(&current, &dev0, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_SUCCESS);
  CHECK(current == pool, "%s: the current pool of device 0", way);
  EXPECT(A.MemAllocFromPoolAsync(&p, half, current, NULL), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "device 0's current pool by location, from device 1");
  EXPECT(A.MemFreeAsync(p, NULL), CUDA_SUCCESS);
  BOOKED(half, half, "freed: the pool keeps it until a synchronization");
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  BOOKED(0, 0, "freed and synchronized");
  row("`cuMemGetDefaultMemPool` / `cuMemGetMemPool` / `cuMemSetMemPool` (CUDA 13, a location)",
      "allocations from the pool, on the device its location names (host locations: never)",
      "when the pool releases their frees (a synchronization, a trim)", "–");
}

static void scenario_ctxlimit(void) {
  enum { STACK = 0, FIFO = 1, HEAP = 2, PENDING = 4 }; /* CUlimit, cuda.h */
  context(0);
  base_used = 0;
  base_used = held();
  int sms = 0, per_sm = 0;
  EXPECT(A.DeviceGetAttribute(&sms, 16, 0), CUDA_SUCCESS);    /* MULTIPROCESSOR_COUNT */
  EXPECT(A.DeviceGetAttribute(&per_sm, 39, 0), CUDA_SUCCESS); /* MAX_THREADS_PER_MULTIPROCESSOR */
  unsigned long long threads = (unsigned long long)sms * (unsigned long long)per_sm;
  size_t stack = 0, fifo = 0, heap = 0, v = 0;
  EXPECT(A.CtxGetLimit(&stack, STACK), CUDA_SUCCESS);
  EXPECT(A.CtxGetLimit(&fifo, FIFO), CUDA_SUCCESS);
  EXPECT(A.CtxGetLimit(&heap, HEAP), CUDA_SUCCESS);
  /* A stack 1 KiB larger per thread: about half the limit on this device. */
  unsigned long long s = 1024 * threads, f = L / 8, h = L / 4;
  CHECK(s < L / 2 && s > L / 4, "%s: %llu resident threads", way, threads);
  EXPECT(A.CtxSetLimit(STACK, stack + 1024), CUDA_SUCCESS);
  BOOKED(s, s, "the stack size raised");
  unsigned long long calls = A.fake_calls("cuCtxSetLimit");
  EXPECT(A.CtxSetLimit(STACK, stack + 4096), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(A.fake_calls("cuCtxSetLimit") == calls, "%s: the refused limit reached the driver", way);
  EXPECT(A.CtxGetLimit(&v, STACK), CUDA_SUCCESS);
  CHECK(v == stack + 1024, "%s: the refused limit left the stack at %zu", way, v);
  EXPECT(A.CtxSetLimit(FIFO, fifo + f), CUDA_SUCCESS);
  EXPECT(A.CtxSetLimit(HEAP, heap + h), CUDA_SUCCESS);
  BOOKED(s + f + h, s + f + h, "the printf FIFO and the heap raised");
  EXPECT(A.CtxSetLimit(HEAP, heap + L / 2), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(A.CtxSetLimit(PENDING, 4096), CUDA_SUCCESS);
  BOOKED(s + f + h, s + f + h, "the pending launch count (not charged)");
  EXPECT(A.CtxSetLimit(STACK, stack), CUDA_SUCCESS);
  BOOKED(f + h, f + h, "the stack size lowered again");
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the context reset");
  EXPECT(A.CtxGetLimit(&v, HEAP), CUDA_SUCCESS);
  CHECK(v == heap, "%s: a new context starts at the default heap (%zu)", way, v);
  row("`cuCtxSetLimit` (stack size, printf FIFO, malloc heap)",
      "at the call, what the limit takes beyond the context's value before its first change "
      "(the stack per resident thread: SMs x maximum threads per SM); refused there with "
      "`CUDA_ERROR_OUT_OF_MEMORY`",
      "lowering gives the difference back; the context's destruction, reset or last release "
      "all of it",
      "the heap is charged at the call (the driver takes it when a module using `malloc` "
      "loads)");
  row("`cuCtxSetLimit` (pending launch count, sync depth, L2)", "never", "–",
      "the pending launches' buffer is not documented: not charged");
}

static void scenario_stream(void) {
  CUcontext c0 = context(0);
  base_used = 0;
  base_used = held();
  size_t half = (size_t)L / 2, g = 2 * MIB;
  CUstream s0 = NULL;
  CUdeviceptr p = 0, q = 0;
  EXPECT(A.StreamCreate(&s0, 0), CUDA_SUCCESS); /* device 0's */
  CUcontext c1 = context(1);
  EXPECT(A.MemAllocAsync(&p, half, s0), CUDA_SUCCESS);
  REFUSED(A.MemAllocAsync(&q, half + g, s0));
  EXPECT(A.MemAllocAsync(&q, half + g, NULL), CUDA_SUCCESS); /* device 1: no limit */
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "allocated on device 0's stream from device 1");
  EXPECT(A.MemFreeAsync(p, s0), CUDA_SUCCESS);
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS); /* the pool releases what it kept */
  BOOKED(0, 0, "freed and released by the pool");
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(q, NULL), CUDA_SUCCESS);
  row("`cuMemAllocAsync` on a stream of another device",
      "on the stream's device (`cuStreamGetDevice`; the default streams: the current context's)",
      "when its pool releases the free (a synchronization, a trim)", "–");
}

static void scenario_green(void) {
  /* Contexts reserve R here (the fake's reservation, measured through NVML). */
  const unsigned long long R = 64 * MIB;
  setenv("FAKE_CUDA_CTX_RESERVE", "67108864", 1);
  base_used = 0;
  base_used = held();
  void *g = NULL;
  EXPECT(A.GreenCtxCreate(&g, NULL, 0, 0), CUDA_SUCCESS);
  CHECK(held() == R, "%s: the green context retained the primary context (%llu)", way, held());
  context(0); /* a second reference: nothing new */
  BOOKED(R, R, "a green context and the primary context it retained");
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT(A.GreenCtxDestroy(g), CUDA_SUCCESS);
  CHECK(held() == 0, "%s: its destruction released the primary context (%llu)", way, held());
  context(0);
  BOOKED(R, R, "the primary context retained again: charged once");
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  row("`cuGreenCtxCreate`",
      "the device's primary context it retains: its reservation with the first reference (as "
      "for contexts)",
      "with the primary context's last reference (`cuGreenCtxDestroy` releases one)",
      "the reservation as measured through NVML (contexts)");
}

/* PTX whose __device__ globals take `bytes` (a byte array, as nvcc
 * declares them, and a 64-bit counter), in buf. */
static const char *ptx_with_globals(char *buf, size_t n, unsigned long long bytes) {
  snprintf(buf, n,
           ".version 8.0\n.target sm_80\n.address_size 64\n"
           ".global .align 4 .b8 table[%llu];\n"
           ".visible .global .align 8 .u64 counter;\n"
           ".extern .global .align 4 .b8 elsewhere[4096];\n"
           ".visible .entry k()\n{\n\tret;\n}\n",
           bytes - 8);
  return buf;
}

/* Cubins and fat binaries holding them (images.h): their globals charged
 * as the driver takes them, a crafted image refused before the driver. */
static void scenario_cubins(void) {
  static unsigned char elf[1024], elf_big[1024], fb[4096], bad[4096];
  const unsigned long long g = L / 4, init = 4096;
  size_t n = make_cubin(elf, sizeof elf, g - init, init);
  CHECK(n > 0 && make_cubin(elf_big, sizeof elf_big, L, 0) > 0, "cubins");
  void *m1 = NULL, *m2 = NULL, *m3 = NULL, *l1 = NULL, *none = NULL;
  unsigned long long base = charged();
  EXPECT(A.ModuleLoadData(&m1, elf), CUDA_SUCCESS);
  BOOKED(base + g, base + g, "a cubin's globals");
  REFUSED(A.ModuleLoadData(&none, elf_big));
  REFUSED(A.LibraryLoadData(&none, elf_big, NULL, NULL, 0, NULL, NULL, 0));
  /* A fat binary of a small PTX entry and the LZ4-compressed cubin: the
   * driver loads the cubin, the hook charges the largest entry. */
  char ptx[512];
  ptx_with_globals(ptx, sizeof ptx, 4096);
  size_t len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 1, STORED, ptx, strlen(ptx) + 1);
  len = fatbin_add(fb, len, sizeof fb, 2, LZ4, elf, n);
  CHECK(len > 0, "a fat binary of a PTX and a compressed cubin");
  EXPECT(A.ModuleLoadFatBinary(&m2, fb), CUDA_SUCCESS);
  BOOKED(base + 2 * g, base + 2 * g, "a compressed cubin's globals");
  EXPECT(A.LibraryLoadData(&l1, fb, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
  BOOKED(base + 3 * g, base + 3 * g, "a library's compressed cubin's globals");
  len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 2, LZ4, elf_big, n);
  REFUSED(A.ModuleLoadData(&none, fb));
  /* Zstandard-compressed (CUDA 12.8's --compress-mode=size, CUDA 13's
   * default): the uninitialized globals are read from the cubin inside
   * (its .nv.global takes no bytes of the small entry). */
  len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 1, STORED, ptx, strlen(ptx) + 1);
  len = fatbin_add(fb, len, sizeof fb, 2, ZSTD, elf, n);
  CHECK(len > 0, "a fat binary of a PTX and a Zstandard-compressed cubin");
  EXPECT(A.ModuleUnload(m1), CUDA_SUCCESS);
  EXPECT(A.ModuleLoadData(&m3, fb), CUDA_SUCCESS);
  BOOKED(base + 3 * g, base + 3 * g, "a Zstandard-compressed cubin's globals");
  len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 2, ZSTD, elf_big, n);
  REFUSED(A.ModuleLoadFatBinary(&none, fb));
  REFUSED(A.LibraryLoadData(&none, fb, NULL, NULL, 0, NULL, NULL, 0));
  /* Crafted: section headers far past the image, a fat binary longer
   * than its buffer, a compressed entry larger than it decompresses to. */
  memcpy(bad, elf, n);
  put_le(bad + 0x28, 1ull << 46, 8);
  unsigned long long before = driver_allocs();
  EXPECT(A.ModuleLoadData(&none, bad), CUDA_ERROR_INVALID_IMAGE);
  len = fatbin_add(bad, fatbin_begin(bad), sizeof bad, 2, STORED, elf, n);
  put_le(bad + 8, 1ull << 46, 8);
  EXPECT(A.ModuleLoadFatBinary(&none, bad), CUDA_ERROR_INVALID_IMAGE);
  len = fatbin_add(bad, fatbin_begin(bad), sizeof bad, 2, ZSTD, elf, n);
  put_le(bad + 16 + 64 + 5, n + 1, 8); /* the frame's own content size */
  EXPECT(A.ModuleLoadData(&none, bad), CUDA_ERROR_INVALID_IMAGE);
  len = fatbin_add(bad, fatbin_begin(bad), sizeof bad, 2, LZ4, elf, n);
  put_le(bad + 16 + 56, n + 1, 8);
  EXPECT(A.LibraryLoadData(&none, bad, NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_INVALID_IMAGE);
  CHECK(driver_allocs() == before, "%s: a crafted image reached the driver", way);
  /* From a file. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/app_paths_%d.cubin", (int)getpid());
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(elf_big, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
  REFUSED(A.ModuleLoad(&none, path));
  f = fopen(path, "wb");
  CHECK(f && fwrite(bad, 1, len, f) == len && fclose(f) == 0, "writing %s", path);
  EXPECT(A.LibraryLoadFromFile(&none, path, NULL, NULL, 0, NULL, NULL, 0),
         CUDA_ERROR_INVALID_IMAGE);
  unlink(path);
  EXPECT(A.ModuleUnload(m2), CUDA_SUCCESS);
  EXPECT(A.ModuleUnload(m3), CUDA_SUCCESS);
  EXPECT(A.LibraryUnload(l1), CUDA_SUCCESS);
  BOOKED(base, base, "the cubins unloaded");
}

static void scenario_module(void) {
  CUcontext c = context(0);
  (void)c;
  base_used = 0;
  base_used = held();
  const unsigned long long a = L / 4, b = L / 8;
  char ptx_a[512], ptx_b[512], big[512];
  ptx_with_globals(ptx_a, sizeof ptx_a, a);
  ptx_with_globals(ptx_b, sizeof ptx_b, b);
  ptx_with_globals(big, sizeof big, L);
  void *m1 = NULL, *m2 = NULL, *m3 = NULL, *m4 = NULL, *l1 = NULL, *l2 = NULL, *none = NULL;
  EXPECT(A.ModuleLoadData(&m1, ptx_a), CUDA_SUCCESS);
  BOOKED(a, a, "cuModuleLoadData's globals");
  EXPECT(A.ModuleLoadDataEx(&m2, ptx_b, 0, NULL, NULL), CUDA_SUCCESS);
  BOOKED(a + b, a + b, "cuModuleLoadDataEx's globals");
  REFUSED(A.ModuleLoadData(&none, big));
  REFUSED(A.ModuleLoadDataEx(&none, big, 0, NULL, NULL));
  /* A fat binary: its header, then a PTX entry. */
  static unsigned char fb[4096];
  size_t fb_len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 1, STORED, ptx_b, strlen(ptx_b) + 1);
  CHECK(fb_len > 0, "a fat binary");
  EXPECT(A.ModuleLoadFatBinary(&m3, fb), CUDA_SUCCESS);
  BOOKED(a + 2 * b, a + 2 * b, "cuModuleLoadFatBinary's globals");
  fb_len = fatbin_add(fb, fatbin_begin(fb), sizeof fb, 1, STORED, big, strlen(big) + 1);
  REFUSED(A.ModuleLoadFatBinary(&none, fb));
  EXPECT(A.ModuleUnload(m1), CUDA_SUCCESS);
  EXPECT(A.ModuleUnload(m3), CUDA_SUCCESS);
  BOOKED(b, b, "two modules unloaded");
  /* From files. */
  char path_b[64], path_big[64];
  snprintf(path_b, sizeof path_b, "/tmp/app_paths_%d_b.ptx", (int)getpid());
  snprintf(path_big, sizeof path_big, "/tmp/app_paths_%d_big.ptx", (int)getpid());
  FILE *f = fopen(path_b, "w");
  CHECK(f && fputs(ptx_b, f) >= 0 && fclose(f) == 0, "writing %s", path_b);
  f = fopen(path_big, "w");
  CHECK(f && fputs(big, f) >= 0 && fclose(f) == 0, "writing %s", path_big);
  EXPECT(A.ModuleLoad(&m4, path_b), CUDA_SUCCESS);
  BOOKED(2 * b, 2 * b, "cuModuleLoad's globals");
  REFUSED(A.ModuleLoad(&none, path_big));
  EXPECT(A.LibraryLoadData(&l1, ptx_a, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
  BOOKED(a + 2 * b, a + 2 * b, "cuLibraryLoadData's globals");
  REFUSED(A.LibraryLoadData(&none, big, NULL, NULL, 0, NULL, NULL, 0));
  EXPECT(A.LibraryLoadFromFile(&l2, path_b, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
  BOOKED(a + 3 * b, a + 3 * b, "cuLibraryLoadFromFile's globals");
  REFUSED(A.LibraryLoadFromFile(&none, path_big, NULL, NULL, 0, NULL, NULL, 0));
  EXPECT(A.LibraryUnload(l1), CUDA_SUCCESS);
  BOOKED(3 * b, 3 * b, "a library unloaded");
  unlink(path_b);
  unlink(path_big);
  /* The context's end frees the rest: modules m2, m4 and library l2. */
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the context reset");
  EXPECT(A.LibraryUnload(l2), CUDA_SUCCESS);
  BOOKED(0, 0, "a library unloaded after its context ended");
  scenario_cubins();
  row("`cuModuleLoad` / `cuModuleLoadData` / `cuModuleLoadDataEx` / `cuModuleLoadFatBinary`",
      "at the call, the image's `__device__` globals (PTX `.global` declarations, a cubin's "
      "`.nv.global` and `.nv.global.init` sections, a fat binary's largest entry, LZ4 and "
      "Zstandard entries decompressed), in the current context; refused there with `CUDA_ERROR_OUT_OF_MEMORY`, "
      "an image declaring parts it does not hold with `CUDA_ERROR_INVALID_IMAGE`",
      "`cuModuleUnload`, or the context's destruction, reset or last release",
      "the `malloc` heap a module using it takes is charged up front, at `cuCtxSetLimit` (its default is part of the "
      "context's reservation)");
  row("`cuLibraryLoadData` / `cuLibraryLoadFromFile`",
      "at the call, the image's `__device__` globals, in the current context (eager loading); "
      "refused there with `CUDA_ERROR_OUT_OF_MEMORY`",
      "`cuLibraryUnload`, or the context's destruction, reset or last release",
      "as for modules; a lazily loaded library's copies in other contexts are not charged");
}

/* A module's one function, whose threads take `local` bytes of local
 * memory each (nvcc's per-thread frame, __local_depot). */
static void *function_with_local(unsigned long long local) {
  char ptx[512];
  void *m = NULL, *f = NULL;
  snprintf(ptx, sizeof ptx,
           ".version 8.0\n.target sm_80\n.address_size 64\n"
           ".visible .entry k()\n{\n"
           "\t.local .align 8 .b8 __local_depot0[%llu];\n\tret;\n}\n",
           local);
  EXPECT(A.ModuleLoadData(&m, ptx), CUDA_SUCCESS);
  EXPECT(A.ModuleGetFunction(&f, m, "k"), CUDA_SUCCESS);
  return f;
}
/* `f` launched the scenario's way `how`: 0 cuLaunchKernel, 1
 * cuLaunchCooperativeKernel, 2 cuLaunchKernelEx. */
static CUresult launch_as(int how, void *f) {
  struct { /* CUlaunchConfig (cuda.h) */
    unsigned grid[3], block[3], shared;
    CUstream stream;
    void *attrs;
    unsigned nattrs;
  } config = {{1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, 0};
  if (how == 1)
    return A.LaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL);
  if (how == 2)
    return A.LaunchKernelEx(&config, f, NULL, NULL);
  return A.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
}
static CUresult launch(void *f) { return launch_as(0, f); }
static unsigned long long launches(void) {
  static const char *const names[] = {"cuLaunchKernel", "cuLaunchKernel_ptsz",
                                      "cuLaunchCooperativeKernel",
                                      "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernelEx",
                                      "cuLaunchKernelEx_ptsz"};
  unsigned long long n = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    n += A.fake_calls(names[i]);
  return n;
}

static void scenario_localmem(void) {
  enum { LMEM_RESIZE_TO_MAX = 0x10 }; /* CUctx_flags, cuda.h */
  int sms = 0, per_sm = 0;
  EXPECT(A.DeviceGetAttribute(&sms, 16, 0), CUDA_SUCCESS);    /* MULTIPROCESSOR_COUNT */
  EXPECT(A.DeviceGetAttribute(&per_sm, 39, 0), CUDA_SUCCESS); /* MAX_THREADS_PER_MULTIPROCESSOR */
  unsigned long long threads = (unsigned long long)sms * (unsigned long long)per_sm;
  /* 1 KiB a thread: about half the limit on this device. */
  const unsigned long long a = 1024 * threads, b = 512 * threads;
  CHECK(a < L / 2 && a > L / 4, "%s: %llu resident threads", way, threads);
  EXPECT(A.PrimaryCtxSetFlags(0, LMEM_RESIZE_TO_MAX), CUDA_SUCCESS);
  context(0);
  base_used = 0;
  base_used = held();
  void *fa = function_with_local(1024), *fb = function_with_local(512);
  void *fc = function_with_local(3072), *fd = function_with_local(1536);
  void *none = function_with_local(0);
  const unsigned long long d = 1536 * threads;
  EXPECT(launch(none), CUDA_SUCCESS);
  BOOKED(0, 0, "a launch without local memory");
  EXPECT(launch(fb), CUDA_SUCCESS);
  BOOKED(b, b, "cuLaunchKernel grew local memory");
  EXPECT(launch_as(1, fa), CUDA_SUCCESS);
  EXPECT(launch(fa), CUDA_SUCCESS);
  EXPECT(launch(fb), CUDA_SUCCESS);
  BOOKED(a, a, "cuLaunchCooperativeKernel grew it to the largest launch's");
  EXPECT(launch_as(2, fd), CUDA_SUCCESS);
  BOOKED(d, d, "cuLaunchKernelEx grew it");
  for (int how = 0; how < 3; how++) {
    unsigned long long calls = launches();
    REFUSED(launch_as(how, fc));
    CHECK(launches() == calls, "%s: the refused launch (%d) reached the driver", way, how);
  }
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  BOOKED(d, d, "kept after the launch (CU_CTX_LMEM_RESIZE_TO_MAX)");
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxSetFlags(0, 0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the context reset");
  /* Without the flag the driver reduces it after the launch; the charge
   * stays until the context ends (ahead of the driver, never behind). */
  fa = function_with_local(1024);
  EXPECT(launch(fa), CUDA_SUCCESS);
  BOOKED(a, a, "grown in a new context");
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  BOOKED(0, a, "reduced by the driver after the launch");
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the context reset again");
  /* A graph's kernel nodes: charged at instantiation (the driver grows the
   * context when the graph launches), refused there without reaching it. */
  fa = function_with_local(1024), fc = function_with_local(3072), fd = function_with_local(1536);
  CUDA_KERNEL_NODE_PARAMS kp = {fc, {1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, NULL, NULL};
  CUgraph g = NULL, captured = NULL;
  CUgraphExec e = NULL, e2 = NULL, refused = NULL;
  CUgraphNode node = NULL;
  CUstream st = NULL;
  EXPECT(A.GraphCreate(&g, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddKernelNode(&node, g, NULL, 0, &kp), CUDA_SUCCESS);
  unsigned long long calls = A.fake_calls("cuGraphInstantiateWithFlags");
  REFUSED(A.GraphInstantiateWithFlags(&refused, g, 0));
  CHECK(A.fake_calls("cuGraphInstantiateWithFlags") == calls,
        "%s: the refused instantiation reached the driver", way);
  EXPECT(A.GraphDestroy(g), CUDA_SUCCESS);
  kp.func = fa;
  EXPECT(A.GraphCreate(&g, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddKernelNode(&node, g, NULL, 0, &kp), CUDA_SUCCESS);
  EXPECT(A.GraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  BOOKED(0, a, "a kernel node's local memory at instantiation");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(a, a, "the graph launched");
  /* A captured launch is a kernel node too. */
  EXPECT(A.StreamCreate(&st, 0), CUDA_SUCCESS);
  EXPECT(A.StreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT(A.LaunchKernel(fd, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL), CUDA_SUCCESS);
  EXPECT(A.StreamEndCapture(st, &captured), CUDA_SUCCESS);
  EXPECT(A.GraphInstantiateWithFlags(&e2, captured, 0), CUDA_SUCCESS);
  BOOKED(a, d, "a captured kernel's local memory");
  EXPECT(A.GraphLaunch(e2, NULL), CUDA_SUCCESS);
  BOOKED(d, d, "the captured graph launched");
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.GraphExecDestroy(e2), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the graphs' context reset");
  /* A kernel inside a child graph node. */
  CUgraph child = NULL, parent = NULL;
  kp.func = fc;
  EXPECT(A.GraphCreate(&child, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddKernelNode(&node, child, NULL, 0, &kp), CUDA_SUCCESS);
  EXPECT(A.GraphCreate(&parent, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddChildGraphNode(&node, parent, NULL, 0, child), CUDA_SUCCESS);
  calls = A.fake_calls("cuGraphInstantiateWithFlags");
  REFUSED(A.GraphInstantiateWithFlags(&refused, parent, 0));
  CHECK(A.fake_calls("cuGraphInstantiateWithFlags") == calls,
        "%s: a child graph's kernel reached the driver", way);
  EXPECT(A.GraphDestroy(parent), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(child), CUDA_SUCCESS);
  /* Kernels set into an instantiated graph: charged first, refused there. */
  CUgraph small = NULL, large = NULL;
  CUgraphNode small_node = NULL;
  kp.func = fa;
  EXPECT(A.GraphCreate(&small, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddKernelNode(&small_node, small, NULL, 0, &kp), CUDA_SUCCESS);
  kp.func = fc;
  EXPECT(A.GraphCreate(&large, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddKernelNode(&node, large, NULL, 0, &kp), CUDA_SUCCESS);
  EXPECT(A.GraphInstantiateWithFlags(&e, small, 0), CUDA_SUCCESS);
  BOOKED(0, a, "instantiated with a small kernel");
  calls = A.fake_calls("cuGraphExecKernelNodeSetParams_v2") + A.fake_calls("cuGraphExecUpdate_v2");
  REFUSED(A.GraphExecKernelNodeSetParams(e, small_node, &kp));
  REFUSED(A.GraphExecUpdate(e, large, NULL));
  CHECK(A.fake_calls("cuGraphExecKernelNodeSetParams_v2") + A.fake_calls("cuGraphExecUpdate_v2") ==
            calls,
        "%s: a refused kernel reached the driver", way);
  kp.func = fd;
  EXPECT(A.GraphExecKernelNodeSetParams(e, small_node, &kp), CUDA_SUCCESS);
  BOOKED(0, d, "a larger kernel set into the instantiated graph");
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  BOOKED(d, d, "launched with it");
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(small), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(large), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  context(0);
  BOOKED(0, 0, "the updated graph's context reset");
  row("kernel launches (`cuLaunchKernel[Ex]`, `cuLaunchCooperativeKernel`): local memory",
      "at a function's first launch in a context, what its threads' local memory "
      "(`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES` x SMs x maximum threads per SM) takes beyond the "
      "context's largest so far; refused there: the launch fails with "
      "`CUDA_ERROR_OUT_OF_MEMORY` without running",
      "the context's destruction, reset or last release",
      "kept until the context ends also without `CU_CTX_LMEM_RESIZE_TO_MAX` (the driver may "
      "reduce it after the launch)");
  row("a graph's kernel nodes (`cuGraphAddKernelNode[_v2]`, a captured launch, in child graphs "
      "too): local memory",
      "at instantiation (`cuGraphInstantiate*`), in the current context, what its largest "
      "kernel's threads take beyond the context's largest so far; refused there with "
      "`CUDA_ERROR_OUT_OF_MEMORY`",
      "the context's destruction, reset or last release",
      "charged before the driver takes it (at the graph's launch), in the context current at "
      "instantiation also where the graph is launched in another");
  row("kernels set into an instantiated graph (`cuGraphExecKernelNodeSetParams[_v2]`, "
      "`cuGraphExecUpdate[_v2]`): local memory",
      "at the call, in the current context, as for a graph's kernel nodes; refused there with "
      "`CUDA_ERROR_OUT_OF_MEMORY`, the graph unchanged",
      "the context's destruction, reset or last release",
      "charged before the driver takes it (at the graph's launch)");
}

static void scenario_locality(void) {
  enum { LOCALITY_DOMAIN = 6 }; /* CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN (CUDA 13.4) */
  CUcontext c0 = context(0);
  base_used = 0;
  base_used = held();
  CUcontext c1 = context(1);
  size_t half = (size_t)L / 2, g = 2 * MIB;
  /* localized.deviceId = 0, localized.localityDomainId = 1 */
  CUmemLocation dom = {LOCALITY_DOMAIN, 1 << 8};
  CUmemAllocationProp prop = device_prop(0);
  prop.location = dom;
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  EXPECT(A.MemCreate(&h, half, &prop, 0), CUDA_SUCCESS);
  REFUSED(A.MemCreate(&h2, half + g, &prop, 0));
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "cuMemCreate on device 0's locality domain, from device 1");
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  BOOKED(0, 0, "released");
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  void *pool = NULL;
  CUdeviceptr p = 0, q = 0;
  EXPECT(A.MemGetDefaultMemPool(&pool, &dom, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&p, half, pool, NULL), CUDA_SUCCESS);
  REFUSED(A.MemAllocFromPoolAsync(&q, half + g, pool, NULL));
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "a locality domain's default pool, from device 1");
  EXPECT(A.MemFreeAsync(p, NULL), CUDA_SUCCESS);
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  BOOKED(0, 0, "freed and synchronized");
  /* A pool created on the locality domain. */
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = dom;
  void *created = NULL;
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT(A.MemPoolCreate(&created, &props), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&p, half, created, NULL), CUDA_SUCCESS);
  REFUSED(A.MemAllocFromPoolAsync(&q, half + g, created, NULL));
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "a pool created on a locality domain, from device 1");
  EXPECT(A.MemFreeAsync(p, NULL), CUDA_SUCCESS);
  EXPECT(A.MemPoolDestroy(created), CUDA_SUCCESS);
  BOOKED(0, 0, "freed, the pool destroyed");
  /* A graph's allocation nodes on the locality domain and on device 0,
   * added from device 1: device 0's graph pool, charged at instantiation. */
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS np;
  memset(&np, 0, sizeof np);
  np.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  np.poolProps.location = dom;
  np.bytesize = half / 2;
  CUgraph gr = NULL, big = NULL;
  CUgraphNode node = NULL;
  CUgraphExec e = NULL, refused = NULL;
  CUdeviceptr in_domain = 0, on_device = 0;
  EXPECT(A.GraphCreate(&gr, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddMemAllocNode(&node, gr, NULL, 0, &np), CUDA_SUCCESS);
  in_domain = np.dptr;
  np.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  np.poolProps.location.id = 0;
  EXPECT(A.GraphAddMemAllocNode(&node, gr, NULL, 0, &np), CUDA_SUCCESS);
  on_device = np.dptr;
  np.poolProps.location = dom;
  np.bytesize = half + g;
  EXPECT(A.GraphCreate(&big, 0), CUDA_SUCCESS);
  EXPECT(A.GraphAddMemAllocNode(&node, big, NULL, 0, &np), CUDA_SUCCESS);
  EXPECT(A.GraphInstantiateWithFlags(&e, gr, 0), CUDA_SUCCESS);
  unsigned long long calls = A.fake_calls("cuGraphInstantiateWithFlags");
  REFUSED(A.GraphInstantiateWithFlags(&refused, big, 0));
  CHECK(A.fake_calls("cuGraphInstantiateWithFlags") == calls,
        "%s: the refused instantiation reached the driver", way);
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(0, half, "graph allocation nodes on device 0 and its locality domain, from device 1");
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT(A.GraphLaunch(e, NULL), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  BOOKED(half, half, "the graph launched");
  EXPECT(A.MemFreeAsync(in_domain, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(on_device, NULL), CUDA_SUCCESS);
  EXPECT(A.GraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(gr), CUDA_SUCCESS);
  EXPECT(A.GraphDestroy(big), CUDA_SUCCESS);
  EXPECT(A.DeviceGraphMemTrim(0), CUDA_SUCCESS);
  BOOKED(0, 0, "freed, the graph destroyed, device 0's graph memory trimmed");
  row("`cuGraphAddMemAllocNode` on another device or a device locality domain",
      "at instantiation, on the device the node's location names (a locality domain: its "
      "`localized.deviceId`), whatever the current context; refused there with "
      "`CUDA_ERROR_OUT_OF_MEMORY`",
      "by that device's `cuDeviceGraphMemTrim`, as for the device's own", "as for the device's own");
  row("`cuMemCreate`, `cuMemPoolCreate`, `cuMemGetDefaultMemPool` / `cuMemGetMemPool` (a device "
      "locality domain, CUDA 13.4)",
      "on the device the location's `localized.deviceId` names, as for that device",
      "as for that device's `cuMemCreate` and pools", "–");
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s WAY SCENARIO LIMIT\n", argv[0]);
    return 2;
  }
  way = argv[1];
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  resolve();
  L = strtoull(argv[3], NULL, 0);
  EXPECT(A.Init(0), CUDA_SUCCESS);
  if (strcmp(argv[2], "vmm") == 0) {
    scenario_vmm();
  } else if (strcmp(argv[2], "graph") == 0) {
    scenario_graph();
  } else if (strcmp(argv[2], "ctxlimit") == 0) {
    scenario_ctxlimit();
  } else if (strcmp(argv[2], "stream") == 0) {
    scenario_stream();
  } else if (strcmp(argv[2], "green") == 0) {
    scenario_green();
  } else if (strcmp(argv[2], "pools13") == 0) {
    scenario_pools13();
  } else if (strcmp(argv[2], "module") == 0) {
    scenario_module();
  } else if (strcmp(argv[2], "locality") == 0) {
    scenario_locality();
  } else if (strcmp(argv[2], "localmem") == 0) {
    scenario_localmem();
  } else {
    fprintf(stderr, "unknown scenario %s\n", argv[2]);
    return 2;
  }
  return test_summary();
}
