/* The three test apps of the hook library share their scenarios: each app
 * reaches the (fake) driver its own way, fills an `api`, and calls
 * app_main. Run under LD_PRELOAD=libcuda_limiter.so with
 * ACCELERATOR_WORKER_ID set; the worker's limit on device 0 is argv[2].
 *
 *   limit L            allocations up to L succeed, the next is refused with
 *                      the driver never asked, frees give back exactly, and
 *                      cuMemGetInfo_v2 / cuDeviceTotalMem_v2 show the partition
 *   paths L            the same for every allocation entry point
 *   multi L            device 1 (no limit) is not held to device 0's limit
 *   null L             NULL out-pointers reach the driver as they came
 *   try L B RC FREE    allocate B: expect RC, then cuMemGetInfo free == FREE
 *   hold L B           allocate B, print "held <getpid()>", wait for EOF on stdin
 *   threads L          16 threads allocate and free at random: never above L
 *   fork L             a forked child is a process of its own
 *   nvml L             nvmlDeviceGetMemoryInfo[_v2] show the partition
 *   dual L LIBLIMITER  liblimiter.so in the same process counts it once
 *   context L R        contexts (R bytes each, FAKE_CUDA_CTX_RESERVE) are
 *                      charged while they exist, primary ones once; one
 *                      the limit has no room for fails with OUT_OF_MEMORY
 *   lifecycle L R      contexts (R bytes each) created and destroyed 100 times;
 *                      a destroyed context's live allocations are no longer
 *                      charged; primary contexts retained/released/reset
 *   pools L            a pool's allocations are charged to the pool's device;
 *                      what is freed into a pool stays charged until it
 *                      releases it (a synchronization, past a raised
 *                      release threshold only by a trim)
 *   views L            1000 rounds of cuMemGetInfo_v2, cuDeviceTotalMem_v2 and
 *                      nvmlDeviceGetMemoryInfo between two marker writes
 *                      (write(-1, "views-begin"/"views-end")): the test
 *                      counts the system calls between them under strace
 *   plain L            every kind of call once, asserting only the driver's
 *                      success (the inert test compares the driver's and
 *                      NVML's traces of it with the hook and without)
 */
#ifndef HOOK_APP_H
#define HOOK_APP_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUcontext, *CUstream, *CUmemoryPool, *CUarray, *CUmipmappedArray;
typedef struct { size_t Width, Height; unsigned Format, NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct {
  size_t Width, Height, Depth;
  unsigned Format, NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct {
  unsigned type, requestedHandleTypes;
  struct { unsigned type; int id; } location;
  void *win32HandleMetaData;
  unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { /* cuda.h, CUDA 12 */
  unsigned allocType, handleTypes;
  struct { unsigned type; int id; } location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CU_AD_FORMAT_FLOAT = 0x20,
  CU_MEM_ALLOCATION_TYPE_PINNED = 1,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_ATTACH_GLOBAL = 1,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4, /* CUmemPool_attribute */
};

typedef struct {
  CUresult (*Init)(unsigned);
  CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxDestroy)(CUcontext);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*PrimaryCtxRelease)(CUdevice);
  CUresult (*PrimaryCtxReset)(CUdevice);
  CUresult (*MemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
  CUresult (*MemPoolDestroy)(CUmemoryPool);
  CUresult (*DeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
  CUresult (*DeviceGetMemPool)(CUmemoryPool *, CUdevice);
  CUresult (*DeviceSetMemPool)(CUdevice, CUmemoryPool);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t *, size_t *);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
  CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemPoolTrimTo)(CUmemoryPool, size_t);
  CUresult (*MemPoolSetAttribute)(CUmemoryPool, int, void *);
  CUresult (*MemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                        unsigned long long);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle);
  CUresult (*ArrayCreate)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
  CUresult (*Array3DCreate)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
  CUresult (*ArrayDestroy)(CUarray);
  CUresult (*MipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                                   unsigned);
  CUresult (*MipmappedArrayDestroy)(CUmipmappedArray);
  /* The fake driver's own books. */
  unsigned long long (*fake_calls)(const char *);
  int (*fake_mem)(int, unsigned long long *, unsigned long long *);
  /* The name of the async allocation the fake should see ("cuMemAllocAsync_ptsz"
   * when the app asked for per-thread-stream variants). */
  const char *async_name;
} api_t;

static api_t A;

#define MIB (1024ull * 1024ull)

static unsigned long long driver_allocs(void) {
  unsigned long long used, n;
  A.fake_mem(0, &used, &n);
  return n;
}

static unsigned long long driver_used(int dev) {
  unsigned long long used, n;
  A.fake_mem(dev, &used, &n);
  return used;
}

static size_t info_free(void) {
  size_t f = 0, t = 0;
  CUresult r = A.MemGetInfo(&f, &t);
  CHECK(r == CUDA_SUCCESS, "cuMemGetInfo_v2: %d", r);
  return f;
}

static void context(int dev) {
  CUcontext c;
  EXPECT(A.CtxCreate(&c, 0, dev), CUDA_SUCCESS);
}

/* A refused allocation: OUT_OF_MEMORY with the driver never asked. */
#define REFUSED(call)                                                          \
  do {                                                                         \
    unsigned long long before_ = driver_allocs();                              \
    EXPECT(call, CUDA_ERROR_OUT_OF_MEMORY);                      \
    CHECK(driver_allocs() == before_, "%s reached the driver", #call);         \
  } while (0)

static void scenario_limit(unsigned long long L) {
  context(0);
  size_t f = 0, t = 0;
  EXPECT(A.MemGetInfo(&f, &t), CUDA_SUCCESS);
  CHECK(t == L && f == L, "partition before: free %zu total %zu (limit %llu)", f, t, L);
  EXPECT(A.DeviceTotalMem(&t, 0), CUDA_SUCCESS);
  CHECK(t == L, "cuDeviceTotalMem_v2 %zu, limit %llu", t, L);
  EXPECT(A.DeviceTotalMem(&t, 1), CUDA_SUCCESS);
  CHECK(t == 25769803776ULL, "device 1 (no limit) keeps its total: %zu", t);

  CUdeviceptr p[4];
  unsigned long long base = driver_used(0);
  for (int i = 0; i < 4; i++)
    EXPECT(A.MemAlloc(&p[i], L / 4), CUDA_SUCCESS);
  CHECK(driver_used(0) - base == L, "the driver holds the limit: %llu", driver_used(0) - base);
  CHECK(info_free() == 0, "free at the limit: %zu", info_free());
  CUdeviceptr q;
  REFUSED(A.MemAlloc(&q, 1));
  EXPECT(A.MemFree(p[2]), CUDA_SUCCESS);
  CHECK(info_free() == L / 4, "a free gives back exactly: %zu", info_free());
  REFUSED(A.MemAlloc(&q, L / 4 + 1));
  EXPECT(A.MemAlloc(&p[2], L / 4), CUDA_SUCCESS);
  for (int i = 0; i < 4; i++)
    EXPECT(A.MemFree(p[i]), CUDA_SUCCESS);
  CHECK(info_free() == L, "all freed: free %zu", info_free());
  CHECK(driver_used(0) == base, "the driver's books agree");
  /* A driver failure gives the charge back. */
  EXPECT(A.MemAllocManaged(&q, L / 2, 7), CUDA_ERROR_INVALID_VALUE);
  CHECK(info_free() == L, "a failed allocation costs nothing: %zu", info_free());
  EXPECT(A.MemFree(p[0]), CUDA_ERROR_INVALID_VALUE);
  CHECK(info_free() == L, "a failed free changes nothing: %zu", info_free());
}

/* Allocate `n` through one entry point: one fits, a second does not. */
#define PATH(name, alloc1, alloc2, release)                                    \
  do {                                                                         \
    unsigned long long before_ = driver_used(0);                               \
    EXPECT(alloc1, CUDA_SUCCESS);                                \
    CHECK(info_free() == L - (driver_used(0) - before_),                       \
          name ": the partition shows what the driver took (%zu)", info_free());\
    REFUSED(alloc2);                                                           \
    EXPECT(release, CUDA_SUCCESS);                               \
    CHECK(info_free() == L, name ": the free gave back exactly (%zu)", info_free());\
  } while (0)

/* Free a pool's allocation with `f`: the pool keeps its bytes, still
 * charged, until a synchronization releases them (a default pool's release
 * threshold is 0). */
static CUresult pool_free(CUresult (*f)(CUdeviceptr, CUstream), CUdeviceptr p) {
  size_t before = info_free();
  CUresult r = f(p, NULL);
  CHECK(info_free() == before, "the pool keeps what is freed into it, charged: free %zu",
        info_free());
  CUresult s = A.CtxSynchronize();
  return r != CUDA_SUCCESS ? r : s;
}
static CUresult mem_free(CUdeviceptr p, CUstream s) {
  (void)s;
  return A.MemFree(p);
}

static void scenario_paths(unsigned long long L) {
  context(0);
  size_t n = (size_t)(L * 3 / 4), pitch = 0;
  CUdeviceptr p, q;
  CUmemGenericAllocationHandle h, h2;
  CUarray a, a2;
  CUmipmappedArray m, m2;
  CUmemoryPool pool;
  EXPECT(A.DeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop = {CU_MEM_ALLOCATION_TYPE_PINNED, 0, {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                              NULL, {0}};
  CUDA_ARRAY_DESCRIPTOR ad = {n / 4, 0, CU_AD_FORMAT_FLOAT, 1};
  CUDA_ARRAY3D_DESCRIPTOR a3 = {n / 16 / 4, 4, 4, CU_AD_FORMAT_FLOAT, 1, 0};
  /* Three levels of W x 4 floats: 16W + 4W + W bytes. */
  CUDA_ARRAY3D_DESCRIPTOR mm = {n / 21, 4, 0, CU_AD_FORMAT_FLOAT, 1, 0};
  PATH("cuMemAlloc_v2", A.MemAlloc(&p, n), A.MemAlloc(&q, n), A.MemFree(p));
  PATH("cuMemAllocManaged", A.MemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL),
       A.MemAllocManaged(&q, n, CU_MEM_ATTACH_GLOBAL), A.MemFree(p));
  unsigned long long async_before = A.fake_calls(A.async_name);
  PATH("cuMemAllocAsync", A.MemAllocAsync(&p, n, NULL), A.MemAllocAsync(&q, n, NULL),
       pool_free(A.MemFreeAsync, p));
  CHECK(A.fake_calls(A.async_name) == async_before + 1, "the driver ran %s once", A.async_name);
  PATH("cuMemAllocFromPoolAsync", A.MemAllocFromPoolAsync(&p, n, pool, NULL),
       A.MemAllocFromPoolAsync(&q, n, pool, NULL), pool_free(mem_free, p));
  PATH("cuMemAllocPitch_v2", A.MemAllocPitch(&p, &pitch, 1000, n / 1024, 4),
       A.MemAllocPitch(&q, &pitch, 1000, n / 1024, 4), A.MemFree(p));
  CHECK(pitch == 1024, "the driver's pitch: %zu", pitch);
  PATH("cuMemCreate", A.MemCreate(&h, n, &prop, 0), A.MemCreate(&h2, n, &prop, 0),
       A.MemRelease(h));
  PATH("cuArrayCreate_v2", A.ArrayCreate(&a, &ad), A.ArrayCreate(&a2, &ad), A.ArrayDestroy(a));
  PATH("cuArray3DCreate_v2", A.Array3DCreate(&a, &a3), A.Array3DCreate(&a2, &a3),
       A.ArrayDestroy(a));
  PATH("cuMipmappedArrayCreate", A.MipmappedArrayCreate(&m, &mm, 3),
       A.MipmappedArrayCreate(&m2, &mm, 3), A.MipmappedArrayDestroy(m));
}

static void scenario_multi(unsigned long long L) {
  CUcontext c0, c1;
  CUdeviceptr p0, p1, q;
  EXPECT(A.CtxCreate(&c0, 0, 0), CUDA_SUCCESS);
  EXPECT(A.CtxCreate(&c1, 0, 1), CUDA_SUCCESS);
  /* Device 1 is current: no limit there. */
  EXPECT(A.MemAlloc(&p1, 2 * L), CUDA_SUCCESS);
  size_t f, t;
  EXPECT(A.MemGetInfo(&f, &t), CUDA_SUCCESS);
  CHECK(t == 25769803776ULL, "device 1 shows the driver's total: %zu", t);
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  REFUSED(A.MemAlloc(&q, L + 1));
  EXPECT(A.MemAlloc(&p0, L), CUDA_SUCCESS);
  CHECK(info_free() == 0, "device 0 is full: %zu", info_free());
  /* cuMemCreate names its device: device 1 from a device-0 context. */
  CUmemAllocationProp prop = {CU_MEM_ALLOCATION_TYPE_PINNED, 0, {CU_MEM_LOCATION_TYPE_DEVICE, 1},
                              NULL, {0}};
  CUmemGenericAllocationHandle h;
  EXPECT(A.MemCreate(&h, L, &prop, 0), CUDA_SUCCESS);
  EXPECT(A.MemRelease(h), CUDA_SUCCESS);
  EXPECT(A.MemFree(p0), CUDA_SUCCESS);
  EXPECT(A.MemFree(p1), CUDA_SUCCESS);
  CHECK(info_free() == L, "all given back: %zu", info_free());
}

static void scenario_null(unsigned long long L) {
  context(0);
  size_t f;
  EXPECT(A.MemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.MemAlloc(NULL, 2 * L), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.MemGetInfo(NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.MemGetInfo(&f, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.DeviceTotalMem(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.ArrayCreate(NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.MemCreate(NULL, 16, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK(info_free() == L, "nothing was charged: %zu", info_free());
}

static void scenario_try(unsigned long long bytes, int want_rc, unsigned long long want_free) {
  context(0);
  CUdeviceptr p;
  EXPECT(A.MemAlloc(&p, bytes), want_rc);
  CHECK(info_free() == want_free, "free %zu, expected %llu", info_free(), want_free);
  if (want_rc == CUDA_SUCCESS)
    EXPECT(A.MemFree(p), CUDA_SUCCESS);
}

static void scenario_hold(unsigned long long bytes) {
  context(0);
  CUdeviceptr p;
  EXPECT(A.MemAlloc(&p, bytes), CUDA_SUCCESS);
  printf("held %d\n", (int)getpid());
  fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof buf) > 0) {
  }
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
}

/* ---- threads ---- */
static unsigned long long T_limit, T_base;
static _Atomic unsigned long long T_held, T_refused, T_over;
static CUcontext T_ctx;

static void *thread_main(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  CUdeviceptr live[8];
  unsigned long long size[8];
  int n = 0, rounds = test_quick() ? 200 : 2000;
  A.CtxSetCurrent(T_ctx);
  for (int i = 0; i < rounds; i++) {
    seed = seed * 1103515245u + 12345u;
    if (n < 8 && (n == 0 || (seed >> 16) % 3 != 0)) {
      unsigned long long s = (1 + (seed >> 8) % 64) * (T_limit / 256);
      CUresult r = A.MemAlloc(&live[n], s);
      if (r == CUDA_SUCCESS) {
        unsigned long long h = atomic_fetch_add(&T_held, s) + s;
        if (h > T_limit || driver_used(0) - T_base > T_limit)
          atomic_fetch_add(&T_over, 1);
        size[n++] = s;
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        atomic_fetch_add(&T_refused, 1);
      } else {
        CHECK(0, "cuMemAlloc_v2 in a thread: %d", r);
      }
    } else {
      int k = (int)((seed >> 4) % (unsigned)n);
      /* Subtract before the free: the bytes may be taken again at once. */
      atomic_fetch_sub(&T_held, size[k]);
      CHECK(A.MemFree(live[k]) == CUDA_SUCCESS, "cuMemFree_v2 in a thread");
      live[k] = live[--n];
      size[k] = size[n];
    }
  }
  while (n > 0) {
    atomic_fetch_sub(&T_held, size[n - 1]);
    CHECK(A.MemFree(live[--n]) == CUDA_SUCCESS, "cuMemFree_v2 in a thread");
  }
  return NULL;
}

static void scenario_threads(unsigned long long L) {
  pthread_t t[16];
  T_limit = L;
  EXPECT(A.CtxCreate(&T_ctx, 0, 0), CUDA_SUCCESS);
  T_base = driver_used(0);
  for (int i = 0; i < 16; i++)
    pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < 16; i++)
    pthread_join(t[i], NULL);
  CHECK(atomic_load(&T_over) == 0, "the threads held more than the limit %llu times",
        (unsigned long long)atomic_load(&T_over));
  CHECK(atomic_load(&T_refused) > 0, "the limit was reached (%llu refusals)",
        (unsigned long long)atomic_load(&T_refused));
  CHECK(info_free() == L, "everything given back: free %zu of %llu", info_free(), L);
}

static _Atomic int F_stop;
static CUcontext F_ctx;

/* Allocates and frees while the main thread forks. */
static void *busy(void *arg) {
  (void)arg;
  CUdeviceptr p;
  A.CtxSetCurrent(F_ctx);
  while (!atomic_load(&F_stop))
    if (A.MemAlloc(&p, 4096) == CUDA_SUCCESS)
      A.MemFree(p);
  return NULL;
}

static void scenario_fork(unsigned long long L) {
  CUdeviceptr p, q;
  EXPECT(A.CtxCreate(&F_ctx, 0, 0), CUDA_SUCCESS);
  EXPECT(A.MemAlloc(&p, L / 2), CUDA_SUCCESS);
  pthread_t t;
  pthread_create(&t, NULL, busy, NULL);
  usleep(1000);
  fflush(NULL);
  pid_t child = fork();
  if (child != 0) {
    atomic_store(&F_stop, 1);
    pthread_join(t, NULL);
  }
  if (child == 0) {
    /* Its own process (forked from a thread in the middle of allocating):
     * its allocations are its own, its parent's stay. */
    /* The parent's busy thread, still running, has 4 KiB out or not. */
    size_t f = info_free();
    CHECK(f == L / 2 || f == L / 2 - 4096, "the child sees its worker's usage: %zu", f);
    EXPECT(A.MemAlloc(&q, L / 4), CUDA_SUCCESS);
    REFUSED(A.MemAlloc(&q, L / 2));
    /* The parent's pointer is not the child's to give back. */
    A.MemFree(p);
    f = info_free();
    CHECK(f == L / 4 || f == L / 4 - 4096, "the child's books: %zu", f);
    _exit(test_summary());
  }
  int st;
  waitpid(child, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's checks passed");
  /* The child died holding L/4: its worker gets it back when needed (the
   * limiter sweeps a worker's dead processes at most once a millisecond,
   * and the child's refusal just did). */
  usleep(2000);
  EXPECT(A.MemAlloc(&q, L / 2), CUDA_SUCCESS);
  EXPECT(A.MemFree(q), CUDA_SUCCESS);
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
  CHECK(info_free() == L, "all given back: %zu", info_free());
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef int (*nvml_info_t)(void *, nvmlMemory_t *);

/* The fake NVML, initialised: its nvmlDeviceGetMemoryInfo and the handle
 * of its device `index` (1: the fake driver's device 0). NULL if absent. */
static nvml_info_t nvml_open(unsigned index, void **dev) {
  void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(nv != NULL, "dlopen libnvidia-ml.so.1: %s", dlerror());
  if (!nv)
    return NULL;
  int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
  int (*by_index)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(
      nv, "nvmlDeviceGetHandleByIndex_v2");
  nvml_info_t info = (nvml_info_t)dlsym(nv, "nvmlDeviceGetMemoryInfo");
  int ok = init && by_index && info && init() == 0 && by_index(index, dev) == 0;
  CHECK(ok, "the fake NVML");
  return ok ? info : NULL;
}

/* NVML's memory info shows the partition too (nvidia-smi, pynvml). The fake
 * NVML's device 1 is the fake driver's device 0. */
static void scenario_nvml(unsigned long long L) {
  typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
  context(0);
  void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(nv != NULL, "dlopen libnvidia-ml.so.1: %s", dlerror());
  if (!nv)
    return;
  int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
  int (*by_index)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(
      nv, "nvmlDeviceGetHandleByIndex_v2");
  int (*info)(void *, nvmlMemory_t *) = (int (*)(void *, nvmlMemory_t *))dlsym(
      nv, "nvmlDeviceGetMemoryInfo");
  int (*info2)(void *, nvmlMemory_v2_t *) = (int (*)(void *, nvmlMemory_v2_t *))dlsym(
      nv, "nvmlDeviceGetMemoryInfo_v2");
  void *a40, *h100;
  CHECK(init && by_index && info && info2 && init() == 0 && by_index(1, &a40) == 0 &&
            by_index(0, &h100) == 0,
        "the fake NVML");
  CUdeviceptr p;
  EXPECT(A.MemAlloc(&p, L / 4), CUDA_SUCCESS);
  nvmlMemory_t m;
  nvmlMemory_v2_t m2 = {(unsigned)sizeof(nvmlMemory_v2_t) | 2u << 24, 0, 0, 0, 0};
  CHECK(info(a40, &m) == 0 && m.total == L && m.free == L - L / 4 && m.used == L / 4,
        "nvmlDeviceGetMemoryInfo: total %llu free %llu used %llu", m.total, m.free, m.used);
  CHECK(info2(a40, &m2) == 0 && m2.total == L && m2.free == L - L / 4 &&
            m2.used + m2.reserved == L / 4,
        "nvmlDeviceGetMemoryInfo_v2: total %llu free %llu used %llu", m2.total, m2.free, m2.used);
  CHECK(info(h100, &m) == 0 && m.total == 85899345920ULL,
        "a device without a limit keeps the driver's figures (%llu)", m.total);
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
}

/* liblimiter.so loaded beside the hook: one process in the limiter's books. */
static void scenario_dual(unsigned long long L, const char *liblimiter) {
  typedef struct {
    char deviceUUID[64];
    int64_t bytesDiff;
    _Bool shouldBlock;
    uint64_t availableBytes;
  } MemoryOpRecord;
  context(0);
  void *lim = dlopen(liblimiter, RTLD_NOW | RTLD_LOCAL);
  CHECK(lim != NULL, "dlopen %s: %s", liblimiter, dlerror());
  if (!lim)
    return;
  int (*record)(const char *, const char *, int64_t, MemoryOpRecord *) =
      (int (*)(const char *, const char *, int64_t, MemoryOpRecord *))dlsym(
          lim, "CheckAndRecordMemoryOps");
  CUdeviceptr p;
  EXPECT(A.MemAlloc(&p, L / 2), CUDA_SUCCESS);
  /* Had liblimiter registered this process again, this slot would hold 0
   * bytes and the free below would be refused as an overdraft. */
  char me[32];
  MemoryOpRecord rec;
  snprintf(me, sizeof me, "%d", (int)getpid());
  CHECK(record(me, "GPU-11111111-1111-1111-1111-1111111111a4", -(int64_t)(L / 2), &rec) == 0,
        "liblimiter sees the hook's bytes under this process");
  CHECK(info_free() == L, "the worker's usage moved once: %zu", info_free());
  CHECK(record(me, "GPU-11111111-1111-1111-1111-1111111111a4", (int64_t)(L / 2), &rec) == 0 &&
            !rec.shouldBlock,
        "and back");
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
  CHECK(info_free() == L, "all given back: %zu", info_free());
}

/* Contexts reserve R bytes each in the fake driver: the hook charges them
 * (measured through NVML) while they exist. */
static void scenario_context(unsigned long long L, unsigned long long R) {
  CUcontext c, c2, p, p2, extra[8];
  CUdeviceptr q, big;
  EXPECT(A.CtxCreate(&c, 0, 0), CUDA_SUCCESS);
  CHECK(driver_used(0) == R, "the driver reserved %llu for the context", driver_used(0));
  CHECK(info_free() == L - R, "the partition shows the context's reservation: %zu", info_free());
  EXPECT(A.MemAlloc(&big, L - R), CUDA_SUCCESS);
  REFUSED(A.MemAlloc(&q, 1));
  EXPECT(A.MemFree(big), CUDA_SUCCESS);

  EXPECT(A.CtxCreate(&c2, 0, 0), CUDA_SUCCESS);
  CHECK(info_free() == L - 2 * R, "a second context is charged too: %zu", info_free());
  EXPECT(A.CtxDestroy(c2), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == L - R, "its destruction gives it back: %zu", info_free());

  /* The primary context: charged at the first retain, given back at the last release. */
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  CHECK(info_free() == L - 2 * R, "the primary context is charged: %zu", info_free());
  EXPECT(A.PrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  CHECK(p2 == p && info_free() == L - 2 * R, "once: %zu", info_free());
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK(info_free() == L - 2 * R, "while a reference is left it stays: %zu", info_free());
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == L - R, "the last release gives it back: %zu", info_free());

  /* Contexts up to the limit; the next is destroyed again and refused. */
  int n = 0;
  while (n < 8 && (n + 2) * R <= L) {
    EXPECT(A.CtxCreate(&extra[n], 0, 0), CUDA_SUCCESS);
    n++;
  }
  unsigned long long before = driver_used(0);
  CUcontext over = NULL;
  EXPECT(A.CtxCreate(&over, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(driver_used(0) == before, "the refused context was destroyed again (%llu, %llu)",
        driver_used(0), before);
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(driver_used(0) == before, "the refused primary context was released again");
  while (n > 0)
    EXPECT(A.CtxDestroy(extra[--n]), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == L - R, "every context given back: %zu", info_free());
  EXPECT(A.CtxDestroy(c), CUDA_SUCCESS);
  CHECK(driver_used(0) == 0, "the driver holds nothing: %llu", driver_used(0));
}

/* Contexts come and go (R bytes each, more than the limit holds 100 of):
 * each destruction gives back its reservation and what was still allocated
 * in it (the driver frees that with the context); a primary context is
 * charged once however often it is retained, given back at its last
 * release, and at once by a reset. */
static void scenario_lifecycle(unsigned long long L, unsigned long long R) {
  CUcontext c, x, p, p2;
  CUdeviceptr keep, left, q, big;
  CUarray arr;
  CUDA_ARRAY_DESCRIPTOR ad = {L / 64, 0, CU_AD_FORMAT_FLOAT, 1}; /* L/16 bytes */
  CHECK(R > 0 && 100 * R > L, "100 contexts' reservations (%llu) exceed the limit", 100 * R);
  EXPECT(A.CtxCreate(&c, 0, 0), CUDA_SUCCESS);
  const unsigned long long base = L - R - L / 8;
  EXPECT(A.MemAlloc(&keep, L / 8), CUDA_SUCCESS);
  CHECK(info_free() == base, "a context and L/8: free %zu", info_free());

  int failed = 0;
  for (int i = 0; i < 100; i++) {
    CUresult r1 = A.CtxCreate(&x, 0, 0), r2 = r1 == CUDA_SUCCESS ? A.CtxDestroy(x) : r1;
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS) {
      failed++;
      fprintf(stderr, "context %d: create %d destroy %d\n", i, r1, r2);
    }
  }
  CHECK(failed == 0, "100 contexts created and destroyed, %llu fit the limit: %d failed", L / R,
        failed);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == base, "the worker's usage is back where it was: free %zu", info_free());
  CHECK(driver_used(0) == R + L / 8, "the driver's too: %llu", driver_used(0));

  /* A context destroyed with allocations still live in it. */
  EXPECT(A.CtxCreate(&x, 0, 0), CUDA_SUCCESS);
  EXPECT(A.MemAlloc(&left, L / 4), CUDA_SUCCESS);
  EXPECT(A.ArrayCreate(&arr, &ad), CUDA_SUCCESS);
  CHECK(info_free() == base - R - L / 4 - L / 16, "its reservation, L/4 and an array: %zu",
        info_free());
  EXPECT(A.CtxDestroy(x), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(driver_used(0) == R + L / 8, "the driver freed them with the context: %llu",
        driver_used(0));
  CHECK(info_free() == base, "and they are no longer charged: free %zu", info_free());
  EXPECT(A.MemAlloc(&big, base), CUDA_SUCCESS);
  REFUSED(A.MemAlloc(&q, 1));
  EXPECT(A.MemFree(big), CUDA_SUCCESS);
  EXPECT(A.MemFree(left), CUDA_ERROR_INVALID_VALUE);
  EXPECT(A.ArrayDestroy(arr), CUDA_ERROR_INVALID_VALUE);
  CHECK(info_free() == base, "frees of what went with it change nothing: %zu", info_free());

  /* The primary context: two retains, two releases. */
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  CHECK(p == p2 && info_free() == base - R, "two retains, one reservation: %zu", info_free());
  CHECK(driver_used(0) == 2 * R + L / 8, "the driver's too: %llu", driver_used(0));
  EXPECT(A.CtxSetCurrent(p), CUDA_SUCCESS);
  EXPECT(A.MemAlloc(&left, L / 4), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK(info_free() == base - R - L / 4,
        "one reference left: its reservation and allocation stay: %zu", info_free());
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == base, "the last release gives back both: %zu", info_free());
  CHECK(driver_used(0) == R + L / 8, "the driver's too: %llu", driver_used(0));

  /* A reset: regardless of references. */
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(p), CUDA_SUCCESS);
  EXPECT(A.MemAlloc(&left, L / 4), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == base, "a reset gives everything back at once: %zu", info_free());
  CHECK(driver_used(0) == R + L / 8, "the driver's too: %llu", driver_used(0));
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  CHECK(info_free() == base - R, "after it a retain is charged anew: %zu", info_free());
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c), CUDA_SUCCESS);
  CHECK(info_free() == base, "and released: %zu", info_free());

  EXPECT(A.MemFree(keep), CUDA_SUCCESS);
  EXPECT(A.CtxDestroy(c), CUDA_SUCCESS);
  CHECK(driver_used(0) == 0, "the driver holds nothing: %llu", driver_used(0));
}

/* cuMemAllocFromPoolAsync takes from the pool's device, whichever device
 * is current; pools outlive the contexts their allocations came from. */
static void scenario_pools(unsigned long long L) {
  CUcontext c0, c1;
  CUmemoryPool pool1, cur1, got, def0;
  CUdeviceptr p, q, r;
  CUmemPoolProps props = {CU_MEM_ALLOCATION_TYPE_PINNED, 0, {CU_MEM_LOCATION_TYPE_DEVICE, 1},
                          NULL, 0, 0, {0}};
  EXPECT(A.CtxCreate(&c1, 0, 1), CUDA_SUCCESS);
  EXPECT(A.CtxCreate(&c0, 0, 0), CUDA_SUCCESS);
  EXPECT(A.MemPoolCreate(&pool1, &props), CUDA_SUCCESS);
  unsigned long long used1 = driver_used(1);
  EXPECT(A.MemAllocFromPoolAsync(&p, 2 * L, pool1, NULL), CUDA_SUCCESS);
  CHECK(driver_used(1) == used1 + 2 * L, "a created pool of device 1 takes from device 1");
  CHECK(info_free() == L, "device 0, current, is not charged: free %zu", info_free());
  /* Device 1's current pool, known to the hook only from cuDeviceGetMemPool. */
  EXPECT(A.DeviceGetMemPool(&cur1, 1), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&q, 2 * L, cur1, NULL), CUDA_SUCCESS);
  CHECK(info_free() == L, "device 1's current pool is not device 0's: free %zu", info_free());
  EXPECT(A.DeviceSetMemPool(1, pool1), CUDA_SUCCESS);
  EXPECT(A.DeviceGetMemPool(&got, 1), CUDA_SUCCESS);
  CHECK(got == pool1, "cuDeviceSetMemPool made pool1 device 1's current pool");
  /* Device 0's default pool from a device-1 context: device 0's limit holds. */
  EXPECT(A.DeviceGetDefaultMemPool(&def0, 0), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c1), CUDA_SUCCESS);
  REFUSED(A.MemAllocFromPoolAsync(&r, L + 1, def0, NULL));
  EXPECT(A.MemAllocFromPoolAsync(&r, L / 2, def0, NULL), CUDA_SUCCESS);
  EXPECT(A.CtxDestroy(c1), CUDA_SUCCESS);
  EXPECT(A.CtxSetCurrent(c0), CUDA_SUCCESS);
  CHECK(driver_used(0) == L / 2 && info_free() == L / 2,
        "device 0's pool took from device 0, and outlived the context (used %llu, free %zu)",
        driver_used(0), info_free());
  EXPECT(A.MemFreeAsync(r, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(q, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(p, NULL), CUDA_SUCCESS);
  CHECK(info_free() == L / 2, "the pools keep what was freed into them: free %zu", info_free());
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  CHECK(info_free() == L && driver_used(1) == used1, "all given back: free %zu", info_free());
  /* A pool whose release threshold is raised keeps its freed bytes past a
   * synchronization, charged: another allocation cannot take them; its
   * own next allocation is served from them; a trim gives them back. */
  unsigned long long most = ~0ULL, zero = 0, used0 = driver_used(0);
  EXPECT(A.MemPoolSetAttribute(def0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &most), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&r, L / 2, def0, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(r, NULL), CUDA_SUCCESS);
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  CHECK(info_free() == L / 2 && driver_used(0) == used0 + L / 2,
        "past the threshold's synchronization the pool keeps L/2, charged: free %zu",
        info_free());
  REFUSED(A.MemAlloc(&r, L / 2 + 1));
  unsigned long long allocs = driver_allocs();
  EXPECT(A.MemAllocFromPoolAsync(&r, L / 4, def0, NULL), CUDA_SUCCESS);
  CHECK(info_free() == L / 2 && driver_allocs() == allocs + 1,
        "the pool's next allocation is served from what it keeps: free %zu", info_free());
  EXPECT(A.MemFreeAsync(r, NULL), CUDA_SUCCESS);
  EXPECT(A.MemPoolTrimTo(def0, L / 8), CUDA_SUCCESS);
  CHECK(info_free() == L - L / 8 && driver_used(0) == used0 + L / 8,
        "a trim gives back all but what it keeps: free %zu", info_free());
  EXPECT(A.MemPoolSetAttribute(def0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero), CUDA_SUCCESS);
  EXPECT(A.CtxSynchronize(), CUDA_SUCCESS);
  CHECK(info_free() == L && driver_used(0) == used0, "the threshold back at 0: all given back");
  EXPECT(A.DeviceSetMemPool(1, cur1), CUDA_SUCCESS);
  EXPECT(A.MemPoolDestroy(pool1), CUDA_SUCCESS);
  EXPECT(A.CtxDestroy(c0), CUDA_SUCCESS);
}

/* The view, 1000 times each way, between two markers for strace. */
static void scenario_views(unsigned long long L) {
  context(0);
  CUdeviceptr p;
  EXPECT(A.MemAlloc(&p, L / 4), CUDA_SUCCESS);
  void *a40;
  nvml_info_t info = nvml_open(1, &a40);
  nvmlMemory_t m;
  size_t f = 0, t = 0, total = 0;
  if (!info)
    return;
  CHECK(info(a40, &m) == 0 && A.MemGetInfo(&f, &t) == 0 && A.DeviceTotalMem(&total, 0) == 0,
        "the first view (device names learned)");
  if (write(-1, "views-begin", 11) != -1)
    return;
  /* The context's reservation (FAKE_CUDA_CTX_RESERVE) and L/4 are charged. */
  const size_t f0 = f;
  int bad = f0 > L - L / 4;
  for (int i = 0; i < 1000; i++) {
    bad += A.MemGetInfo(&f, &t) != CUDA_SUCCESS || f != f0 || t != L;
    bad += A.DeviceTotalMem(&total, 0) != CUDA_SUCCESS || total != L;
    bad += info(a40, &m) != 0 || m.total != L || m.free != f0;
  }
  if (write(-1, "views-end", 9) != -1)
    return;
  CHECK(bad == 0,
        "1000 rounds of views show the partition (%d wrong; last: free %zu total %zu, "
        "device total %zu, NVML total %llu free %llu)",
        bad, f, t, total, m.total, m.free);
  EXPECT(A.MemFree(p), CUDA_SUCCESS);
}

/* Every kind of call the hook wraps, once each, NVML's memory info too. */
static void scenario_plain(void) {
  CUcontext c, p;
  CUdeviceptr d, q;
  CUarray arr;
  CUmemoryPool pool;
  size_t f, t, pitch;
  CUDA_ARRAY_DESCRIPTOR ad = {64, 0, CU_AD_FORMAT_FLOAT, 1};
  EXPECT(A.CtxCreate(&c, 0, 0), CUDA_SUCCESS);
  EXPECT(A.MemAlloc(&d, MIB), CUDA_SUCCESS);
  EXPECT(A.MemGetInfo(&f, &t), CUDA_SUCCESS);
  EXPECT(A.DeviceTotalMem(&t, 0), CUDA_SUCCESS);
  EXPECT(A.MemAllocPitch(&q, &pitch, 100, 10, 4), CUDA_SUCCESS);
  EXPECT(A.MemFree(q), CUDA_SUCCESS);
  EXPECT(A.MemAllocManaged(&q, MIB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT(A.MemFree(q), CUDA_SUCCESS);
  EXPECT(A.ArrayCreate(&arr, &ad), CUDA_SUCCESS);
  EXPECT(A.ArrayDestroy(arr), CUDA_SUCCESS);
  EXPECT(A.MemAllocAsync(&q, MIB, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(q, NULL), CUDA_SUCCESS);
  EXPECT(A.DeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  EXPECT(A.MemAllocFromPoolAsync(&q, MIB, pool, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFreeAsync(q, NULL), CUDA_SUCCESS);
  EXPECT(A.MemFree(d), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxRetain(&p, 0), CUDA_SUCCESS);
  EXPECT(A.PrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT(A.CtxDestroy(c), CUDA_SUCCESS);
  void *dev;
  nvmlMemory_t m;
  nvml_info_t info = nvml_open(1, &dev);
  CHECK(info && info(dev, &m) == 0, "the fake NVML's memory info");
}

static int app_main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SCENARIO LIMIT [ARGS]\n", argv[0]);
    return 2;
  }
  unsigned long long L = strtoull(argv[2], NULL, 0);
  EXPECT(A.Init(0), CUDA_SUCCESS);
  const char *s = argv[1];
  if (strcmp(s, "limit") == 0)
    scenario_limit(L);
  else if (strcmp(s, "paths") == 0)
    scenario_paths(L);
  else if (strcmp(s, "multi") == 0)
    scenario_multi(L);
  else if (strcmp(s, "null") == 0)
    scenario_null(L);
  else if (strcmp(s, "try") == 0 && argc == 6)
    scenario_try(strtoull(argv[3], NULL, 0), atoi(argv[4]), strtoull(argv[5], NULL, 0));
  else if (strcmp(s, "hold") == 0 && argc == 4)
    scenario_hold(strtoull(argv[3], NULL, 0));
  else if (strcmp(s, "threads") == 0)
    scenario_threads(L);
  else if (strcmp(s, "fork") == 0)
    scenario_fork(L);
  else if (strcmp(s, "nvml") == 0)
    scenario_nvml(L);
  else if (strcmp(s, "dual") == 0 && argc == 4)
    scenario_dual(L, argv[3]);
  else if (strcmp(s, "context") == 0 && argc == 4)
    scenario_context(L, strtoull(argv[3], NULL, 0));
  else if (strcmp(s, "lifecycle") == 0 && argc == 4)
    scenario_lifecycle(L, strtoull(argv[3], NULL, 0));
  else if (strcmp(s, "pools") == 0)
    scenario_pools(L);
  else if (strcmp(s, "views") == 0)
    scenario_views(L);
  else if (strcmp(s, "plain") == 0)
    scenario_plain();
  else {
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
  }
  return test_summary();
}

#endif
