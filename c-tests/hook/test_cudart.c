/* NVIDIA's CUDA runtimes (libcudart.so.12 and .so.13 from the PyPI wheels,
 * fetched by `make cudart`) on the fake driver, under the hook and without.
 * For a 13.x runtime the fake driver reports 13050 (FAKE_CUDA_DRIVER_VERSION):
 * that runtime refuses a driver below 13000.
 *
 * Usage: test_cudart LIBACCELERATOR HOOK LIBLIMITER LIBCUDART...
 * The environment (Makefile) picks the nvidia vendor on the fake NVML and
 * LD_LIBRARY_PATH for the fake libcuda.so.1.
 *
 * - limited: a worker with a 64 MiB limit (SetMemHardLimit through
 *   libaccelerator, as the hypervisor sets it) runs the runtime API:
 *   cudaMemGetInfo shows 64 MiB total, cudaMalloc fills exactly 64 MiB, the
 *   crossing request is cudaErrorMemoryAllocation and never reaches the
 *   driver (its allocation count and the driver trace), cudaFree gives back
 *   exactly, cudaDeviceReset gives back everything (limiterGetWorkerUsage 0);
 *   then cudaMallocManaged, cudaMallocPitch, cudaMallocAsync/cudaFreeAsync
 *   on the default pool and from a cudaMemPoolCreate pool, cudaMalloc3D,
 *   cudaMallocArray and cudaMalloc3DArray (freed by cudaFreeArray; both
 *   runtimes reach cuArray3DCreate_v2 for them), 8 threads: each
 *   fills the limit exactly, the crossing request is refused, the frees give
 *   back exactly; device 1 (no limit) is not charged to device 0; and
 *   cudaLaunchKernel of a registered fat binary reaches the driver once.
 * - unlimited: the same without the hook: the driver's total, no refusal.
 * - inert: with the hook and no worker, the driver sees exactly the calls
 *   it sees without the hook (FAKE_CUDA_TRACE). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"
#include "accelerator.h"

#define MIB (1024ull * 1024ull)
#define LIMIT (64 * MIB)
#define CHUNK (16 * MIB)
#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"
#define DRIVER_TOTAL 51539607552ULL
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };

/* The runtime API, as cuda_runtime_api.h declares it. */
static int (*cudaGetDeviceCount)(int *);
static int (*cudaSetDevice)(int);
static int (*cudaMalloc)(void **, size_t);
static int (*cudaFree)(void *);
static int (*cudaMemGetInfo)(size_t *, size_t *);
static int (*cudaDeviceReset)(void);
static int (*cudaMallocManaged)(void **, size_t, unsigned);
static int (*cudaMallocPitch)(void **, size_t *, size_t, size_t);
static int (*cudaMallocAsync)(void **, size_t, void *);
static int (*cudaFreeAsync)(void *, void *);
static int (*cudaStreamSynchronize)(void *);
static int (*cudaMemPoolCreate)(void **, const void *);
static int (*cudaMemPoolDestroy)(void *);
static int (*cudaMallocFromPoolAsync)(void **, size_t, void *, void *);
static void **(*registerFatBinary)(void *);
static void (*registerFatBinaryEnd)(void **);
static void (*registerFunction)(void **, const char *, char *, const char *, int, void *, void *,
                                void *, void *, int *);
typedef struct { unsigned x, y, z; } dim3;
static int (*cudaLaunchKernel)(const void *, dim3, dim3, void **, size_t, void *);
static int (*cudaDeviceSynchronize)(void);
static int (*cudaStreamCreate)(void **);
static int (*cudaStreamDestroy)(void *);
static int (*cudaStreamBeginCapture)(void *, int);
static int (*cudaStreamEndCapture)(void *, void **);
static int (*cudaGraphInstantiate)(void **, void *, unsigned long long);
static int (*cudaGraphLaunch)(void *, void *);
static int (*cudaGraphExecDestroy)(void *);
static int (*cudaGraphDestroy)(void *);
/* driver_types.h: cudaPitchedPtr, cudaExtent, cudaChannelFormatDesc. */
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };
struct cudaExtent { size_t width, height, depth; };
struct cudaChannelFormatDesc { int x, y, z, w, f; };
enum { cudaChannelFormatKindFloat = 2 };
static int (*cudaMalloc3D)(struct cudaPitchedPtr *, struct cudaExtent);
static int (*cudaMallocArray)(void **, const struct cudaChannelFormatDesc *, size_t, size_t,
                              unsigned);
static int (*cudaMalloc3DArray)(void **, const struct cudaChannelFormatDesc *, struct cudaExtent,
                                unsigned);
static int (*cudaFreeArray)(void *);
static int (*fake_cuda_mem)(int, unsigned long long *, unsigned long long *);
static unsigned long long (*fake_cuda_calls)(const char *);

static int bind(const char *libcudart) {
  void *rt = dlopen(libcudart, RTLD_NOW | RTLD_LOCAL);
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!rt || !drv) {
    fprintf(stderr, "dlopen %s: %s\n", libcudart, dlerror());
    return -1;
  }
  *(void **)&cudaGetDeviceCount = dlsym(rt, "cudaGetDeviceCount");
  *(void **)&cudaSetDevice = dlsym(rt, "cudaSetDevice");
  *(void **)&cudaMalloc = dlsym(rt, "cudaMalloc");
  *(void **)&cudaFree = dlsym(rt, "cudaFree");
  *(void **)&cudaMemGetInfo = dlsym(rt, "cudaMemGetInfo");
  *(void **)&cudaDeviceReset = dlsym(rt, "cudaDeviceReset");
  *(void **)&cudaMallocManaged = dlsym(rt, "cudaMallocManaged");
  *(void **)&cudaMallocPitch = dlsym(rt, "cudaMallocPitch");
  *(void **)&cudaMallocAsync = dlsym(rt, "cudaMallocAsync");
  *(void **)&cudaFreeAsync = dlsym(rt, "cudaFreeAsync");
  *(void **)&cudaStreamSynchronize = dlsym(rt, "cudaStreamSynchronize");
  *(void **)&cudaMemPoolCreate = dlsym(rt, "cudaMemPoolCreate");
  *(void **)&cudaMemPoolDestroy = dlsym(rt, "cudaMemPoolDestroy");
  *(void **)&cudaMallocFromPoolAsync = dlsym(rt, "cudaMallocFromPoolAsync");
  *(void **)&registerFatBinary = dlsym(rt, "__cudaRegisterFatBinary");
  *(void **)&registerFatBinaryEnd = dlsym(rt, "__cudaRegisterFatBinaryEnd");
  *(void **)&registerFunction = dlsym(rt, "__cudaRegisterFunction");
  *(void **)&cudaLaunchKernel = dlsym(rt, "cudaLaunchKernel");
  *(void **)&cudaDeviceSynchronize = dlsym(rt, "cudaDeviceSynchronize");
  *(void **)&cudaStreamCreate = dlsym(rt, "cudaStreamCreate");
  *(void **)&cudaStreamDestroy = dlsym(rt, "cudaStreamDestroy");
  *(void **)&cudaStreamBeginCapture = dlsym(rt, "cudaStreamBeginCapture");
  *(void **)&cudaStreamEndCapture = dlsym(rt, "cudaStreamEndCapture");
  *(void **)&cudaGraphInstantiate = dlsym(rt, "cudaGraphInstantiate");
  *(void **)&cudaGraphLaunch = dlsym(rt, "cudaGraphLaunch");
  *(void **)&cudaGraphExecDestroy = dlsym(rt, "cudaGraphExecDestroy");
  *(void **)&cudaGraphDestroy = dlsym(rt, "cudaGraphDestroy");
  *(void **)&cudaMalloc3D = dlsym(rt, "cudaMalloc3D");
  *(void **)&cudaMallocArray = dlsym(rt, "cudaMallocArray");
  *(void **)&cudaMalloc3DArray = dlsym(rt, "cudaMalloc3DArray");
  *(void **)&cudaFreeArray = dlsym(rt, "cudaFreeArray");
  *(void **)&fake_cuda_mem = dlsym(drv, "fake_cuda_mem");
  *(void **)&fake_cuda_calls = dlsym(drv, "fake_cuda_calls");
  return cudaGetDeviceCount && cudaSetDevice && cudaMalloc && cudaFree && cudaMemGetInfo &&
                 cudaDeviceReset && cudaMallocManaged && cudaMallocPitch && cudaMallocAsync &&
                 cudaFreeAsync && cudaStreamSynchronize && cudaMemPoolCreate &&
                 cudaMemPoolDestroy &&
                 cudaMallocFromPoolAsync && registerFatBinary && registerFatBinaryEnd &&
                 registerFunction && cudaLaunchKernel && cudaDeviceSynchronize && cudaStreamCreate &&
                 cudaStreamDestroy && cudaStreamBeginCapture && cudaStreamEndCapture &&
                 cudaGraphInstantiate && cudaGraphLaunch && cudaGraphExecDestroy &&
                 cudaGraphDestroy && cudaMalloc3D && cudaMallocArray && cudaMalloc3DArray &&
                 cudaFreeArray && fake_cuda_mem &&
                 fake_cuda_calls
             ? 0
             : -1;
}

static unsigned long long driver_allocations(void) {
  unsigned long long used, n;
  fake_cuda_mem(0, &used, &n);
  return n;
}

static size_t info_free(void) {
  size_t f = 0, t = 0;
  return cudaMemGetInfo(&f, &t) == cudaSuccess ? f : 0;
}
static void *alloc8(void *arg) {
  void **p = arg;
  for (int i = 0; i < 2; i++)
    if (cudaMalloc(&p[i], 4 * MIB) != cudaSuccess)
      p[i] = NULL;
  return NULL;
}

static unsigned long long driver_calls(const char *fn) {
  char ptsz[64];
  snprintf(ptsz, sizeof ptsz, "%s_ptsz", fn);
  return fake_cuda_calls(fn) + fake_cuda_calls(ptsz);
}

/* cudaMalloc3D: the runtime asks the driver for a pitched allocation of
 * height x depth rows; the hook charges pitch x rows. */
static void pitched_3d(int limited, size_t t0) {
  struct cudaPitchedPtr p = {0}, q = {0};
  struct cudaExtent e = {1000, 256, 4}, fill = {1024, 1024, 48}, over = {1024, 1024, 17};
  unsigned long long pitched = driver_calls("cuMemAllocPitch_v2");
  CHECK(cudaMalloc3D(&p, e) == cudaSuccess && p.ptr && p.pitch >= 1000 && p.xsize == 1000 &&
            p.ysize == 256,
        "cudaMalloc3D: pitch %zu, %zu x %zu", p.pitch, p.xsize, p.ysize);
  CHECK(info_free() == t0 - p.pitch * 256 * 4, "3D pitched: free %zu", info_free());
  CHECK(cudaFree(p.ptr) == cudaSuccess && info_free() == t0, "3D pitched freed: %zu",
        info_free());
  CHECK(cudaMalloc3D(&p, fill) == cudaSuccess && p.pitch == 1024, "cudaMalloc3D 48 MiB: pitch %zu",
        p.pitch);
  CHECK(info_free() == t0 - 48 * MIB, "3D 48 MiB: free %zu", info_free());
  unsigned long long before = driver_allocations();
  int r = cudaMalloc3D(&q, over);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "3D crossing: %d", r);
  if (limited)
    CHECK(driver_allocations() == before, "the refused cudaMalloc3D never reached the driver");
  if (r == cudaSuccess)
    cudaFree(q.ptr);
  CHECK(cudaFree(p.ptr) == cudaSuccess && info_free() == t0, "3D freed: %zu", info_free());
  CHECK(driver_calls("cuMemAllocPitch_v2") == pitched + 2 + !limited,
        "cudaMalloc3D reached cuMemAllocPitch_v2 (%llu calls)",
        driver_calls("cuMemAllocPitch_v2") - pitched);
}

static unsigned long long array_creations(void) {
  return driver_calls("cuArrayCreate_v2") + driver_calls("cuArray3DCreate_v2");
}

/* cudaMallocArray / cudaMalloc3DArray / cudaFreeArray: the runtime reaches
 * cuArrayCreate_v2 / cuArray3DCreate_v2 and cuArrayDestroy, which the hook
 * charges as width x height x depth x channels x channel bytes. */
static void arrays(int limited, size_t t0) {
  struct cudaChannelFormatDesc f1 = {32, 0, 0, 0, cudaChannelFormatKindFloat},
                               f4 = {32, 32, 32, 32, cudaChannelFormatKindFloat};
  void *a = NULL, *b = NULL;
  unsigned long long created = array_creations(), destroyed = driver_calls("cuArrayDestroy");
  CHECK(cudaMallocArray(&a, &f4, 1024, 0, 0) == cudaSuccess && a, "cudaMallocArray float4 1D");
  CHECK(info_free() == t0 - 1024 * 16, "float4 1D array: free %zu", info_free());
  CHECK(cudaFreeArray(a) == cudaSuccess && info_free() == t0, "1D array freed: %zu", info_free());
  struct cudaExtent e = {256, 256, 64};
  CHECK(cudaMalloc3DArray(&a, &f4, e, 0) == cudaSuccess && a, "cudaMalloc3DArray float4");
  CHECK(info_free() == t0 - 256 * 256 * 64 * 16, "3D array: free %zu", info_free());
  CHECK(cudaFreeArray(a) == cudaSuccess && info_free() == t0, "3D array freed: %zu",
        info_free());

  CHECK(cudaMallocArray(&a, &f1, 4096, 4096, 0) == cudaSuccess && a,
        "cudaMallocArray 4096 x 4096 float fills the limit");
  CHECK(info_free() == t0 - LIMIT, "2D array: free %zu", info_free());
  unsigned long long before = driver_allocations();
  int r = cudaMallocArray(&b, &f1, 1, 0, 0);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "array crossing: %d", r);
  if (limited)
    CHECK(driver_allocations() == before, "the refused cudaMallocArray never reached the driver");
  if (r == cudaSuccess)
    cudaFreeArray(b);
  CHECK(cudaFreeArray(a) == cudaSuccess && info_free() == t0, "2D array freed: %zu",
        info_free());
  CHECK(array_creations() == created + 3 + !limited &&
            driver_calls("cuArrayDestroy") == destroyed + 3 + !limited,
        "the arrays reached the driver's array creation and cuArrayDestroy (%llu, %llu calls)",
        array_creations() - created, driver_calls("cuArrayDestroy") - destroyed);
}

/* Managed, pitched and stream-ordered allocations (the default pool and a
 * created one), 8 threads, device 1 (no limit there). */
static void other_paths(int limited) {
  size_t t0 = info_free(), pitch = 0;
  void *m = NULL, *m2 = NULL, *a = NULL, *b = NULL;
  CHECK(cudaMallocManaged(&m, 32 * MIB, 1) == cudaSuccess, "cudaMallocManaged");
  CHECK(info_free() == t0 - 32 * MIB, "managed: free %zu", info_free());
  int r = cudaMallocManaged(&m2, 33 * MIB, 1);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "managed crossing: %d", r);
  if (r == cudaSuccess)
    cudaFree(m2);
  CHECK(cudaFree(m) == cudaSuccess && info_free() == t0, "managed freed: %zu", info_free());

  CHECK(cudaMallocPitch(&m, &pitch, 1000, 1024) == cudaSuccess && pitch >= 1000,
        "cudaMallocPitch: pitch %zu", pitch);
  CHECK(info_free() == t0 - pitch * 1024, "pitched: free %zu", info_free());
  CHECK(cudaFree(m) == cudaSuccess && info_free() == t0, "pitched freed: %zu", info_free());

  pitched_3d(limited, t0);
  arrays(limited, t0);

  CHECK(cudaMallocAsync(&a, 48 * MIB, NULL) == cudaSuccess, "cudaMallocAsync");
  r = cudaMallocAsync(&b, 17 * MIB, NULL);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "async crossing: %d", r);
  if (r == cudaSuccess)
    cudaFreeAsync(b, NULL);
  CHECK(cudaFreeAsync(a, NULL) == cudaSuccess && cudaStreamSynchronize(NULL) == cudaSuccess,
        "cudaFreeAsync");
  CHECK(info_free() == t0, "async freed: %zu", info_free());

  /* driver_types.h's cudaMemPoolProps: pinned, on device 0. */
  struct {
    int allocType, handleTypes;
    struct { int type, id; } location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
  } props = {1, 0, {1, 0}, NULL, 0, 0, {0}};
  void *pool = NULL;
  CHECK(cudaMemPoolCreate(&pool, &props) == cudaSuccess && pool, "cudaMemPoolCreate");
  CHECK(cudaMallocFromPoolAsync(&a, LIMIT, pool, NULL) == cudaSuccess, "a pool fills the limit");
  r = cudaMallocFromPoolAsync(&b, 1, pool, NULL);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "pool crossing: %d", r);
  if (r == cudaSuccess)
    cudaFreeAsync(b, NULL);
  CHECK(cudaFreeAsync(a, NULL) == cudaSuccess && cudaStreamSynchronize(NULL) == cudaSuccess &&
            cudaMemPoolDestroy(pool) == cudaSuccess,
        "pool freed and destroyed");
  CHECK(info_free() == t0, "pool given back: %zu", info_free());

  /* 8 threads (not in the traced runs: their calls interleave differently
   * on every run, with the hook or without). */
  if (getenv("FAKE_CUDA_TRACE"))
    goto device1;
  pthread_t th[8];
  void *p[8][2];
  for (int i = 0; i < 8; i++)
    pthread_create(&th[i], NULL, alloc8, p[i]);
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  int got = 0;
  for (int i = 0; i < 8; i++)
    got += (p[i][0] != NULL) + (p[i][1] != NULL);
  CHECK(got == 16 && info_free() == t0 - LIMIT, "8 threads: %d of 16 x 4 MiB", got);
  r = cudaMalloc(&a, 1);
  CHECK(limited ? r == cudaErrorMemoryAllocation : r == cudaSuccess, "after 8 threads: %d", r);
  if (r == cudaSuccess)
    cudaFree(a);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 2; j++)
      cudaFree(p[i][j]);
  CHECK(info_free() == t0, "threads freed: %zu", info_free());
device1:
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  CHECK(cudaMalloc(&a, 2 * LIMIT) == cudaSuccess, "device 1 has no limit: 128 MiB");
  CHECK(cudaSetDevice(0) == cudaSuccess && info_free() == t0, "device 0 untouched: %zu",
        info_free());
  CHECK(cudaSetDevice(1) == cudaSuccess && cudaFree(a) == cudaSuccess, "device 1 freed");
  CHECK(cudaSetDevice(0) == cudaSuccess, "back on device 0");
}

/* A fat binary as nvcc embeds one (fatbinary headers; one PTX entry), and
 * the host-side stub its kernel is registered under. */
static const char ptx[] = ".version 7.0\n.target sm_80\n.address_size 64\n"
                          ".visible .entry spin()\n{\n ret;\n}\n";
static struct {
  unsigned magic;
  unsigned short version, header_size;
  unsigned long long size;
  unsigned short kind, file_version;
  unsigned file_header_size, payload_size, unknown0, compressed_size, unknown1, unknown2;
  unsigned sm_version, bit_width, unknown3;
  unsigned long long flags, unknown5, uncompressed_payload;
  char text[(sizeof ptx + 7) & ~(size_t)7];
} __attribute__((aligned(8))) fatbin;
static struct {
  int magic, version;
  const void *data, *filename_or_fatbins;
} fatbin_wrapper;
static void spin_stub(void) {}

/* cudaLaunchKernel of a registered fat binary reaches the driver once; a
 * launch captured into a graph runs nothing, the graph launched 100 times
 * reaches cuGraphLaunch 100 times. */
static void launch(void) {
  fatbin.magic = 0xBA55ED50u, fatbin.version = 1, fatbin.header_size = 16;
  fatbin.size = sizeof fatbin - 16;
  fatbin.kind = 1 /* PTX */, fatbin.file_version = 0x0101, fatbin.file_header_size = 64;
  fatbin.payload_size = sizeof fatbin.text, fatbin.sm_version = 80, fatbin.bit_width = 64;
  fatbin.flags = 0x15; /* 64-bit, CUDA, Linux */
  memcpy(fatbin.text, ptx, sizeof ptx);
  fatbin_wrapper.magic = 0x466243b1, fatbin_wrapper.version = 1, fatbin_wrapper.data = &fatbin;
  void **handle = registerFatBinary(&fatbin_wrapper);
  registerFunction(handle, (const char *)spin_stub, "spin", "spin", -1, NULL, NULL, NULL, NULL,
                   NULL);
  registerFatBinaryEnd(handle);
  unsigned long long before = driver_calls("cuLaunchKernel");
  dim3 grid = {4, 1, 1}, block = {128, 1, 1};
  int r = cudaLaunchKernel((const void *)spin_stub, grid, block, NULL, 0, NULL);
  CHECK(r == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess, "cudaLaunchKernel: %d", r);
  CHECK(driver_calls("cuLaunchKernel") == before + 1, "the launch reached the driver once");

  void *stream = NULL, *graph = NULL, *exec = NULL;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess && stream, "cudaStreamCreate");
  CHECK(cudaStreamBeginCapture(stream, 0 /* global */) == cudaSuccess, "cudaStreamBeginCapture");
  CHECK(cudaLaunchKernel((const void *)spin_stub, grid, block, NULL, 0, stream) == cudaSuccess,
        "a launch into the capturing stream");
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph, "cudaStreamEndCapture");
  CHECK(driver_calls("cuLaunchKernel") == before + 1, "the captured launch ran nothing");
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && exec, "cudaGraphInstantiate");
  unsigned long long graphs = driver_calls("cuGraphLaunch");
  int failed = 0;
  for (int i = 0; i < 100; i++)
    failed += cudaGraphLaunch(exec, stream) != cudaSuccess;
  CHECK(failed == 0 && cudaStreamSynchronize(stream) == cudaSuccess, "100 cudaGraphLaunch");
  CHECK(driver_calls("cuGraphLaunch") == graphs + 100, "each reached cuGraphLaunch once: %llu",
        driver_calls("cuGraphLaunch") - graphs);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess &&
            cudaStreamDestroy(stream) == cudaSuccess,
        "graph, exec and stream destroyed");
}

/* The child: the runtime API as an application calls it. `limited`: the
 * hook holds it to LIMIT; `worker`/`liblimiter` read the worker's books. */
static int child(const char *libcudart, int limited, const char *liblimiter, const char *worker) {
  CHECK(bind(libcudart) == 0, "libcudart and the fake driver's test entry points bind");
  if (test_failed)
    return test_summary();
  int n = -1;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 2, "cudaGetDeviceCount: %d devices", n);
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  size_t f = 0, t = 0;
  CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess, "cudaMemGetInfo");
  CHECK(t == (limited ? LIMIT : DRIVER_TOTAL), "cudaMemGetInfo total %zu", t);
  CHECK(f == t, "cudaMemGetInfo free %zu of %zu", f, t);

  void *p[LIMIT / CHUNK] = {0};
  for (size_t i = 0; i < LIMIT / CHUNK; i++)
    CHECK(cudaMalloc(&p[i], CHUNK) == cudaSuccess && p[i], "cudaMalloc %zu of the limit", i);
  CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess && f == t - LIMIT, "filled: free %zu", f);
  unsigned long long before = driver_allocations();
  void *over = NULL;
  int r = cudaMalloc(&over, 1);
  if (limited) {
    CHECK(r == cudaErrorMemoryAllocation && !over, "the crossing cudaMalloc is refused: %d", r);
    CHECK(driver_allocations() == before, "the refused request never reached the driver");
  } else {
    CHECK(r == cudaSuccess && over, "without the hook the driver has room: %d", r);
    CHECK(cudaFree(over) == cudaSuccess, "cudaFree");
  }
  CHECK(cudaFree(p[0]) == cudaSuccess, "cudaFree");
  CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess && f == t - LIMIT + CHUNK,
        "cudaFree gave back exactly %llu: free %zu", CHUNK, f);
  if (limited) {
    CHECK(cudaMalloc(&p[0], CHUNK) == cudaSuccess, "the freed room is usable again");
    CHECK(cudaMalloc(&over, 1) == cudaErrorMemoryAllocation, "and the limit binds again");
  }

  CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset");
  unsigned long long used = 1, n_alloc;
  fake_cuda_mem(0, &used, &n_alloc);
  CHECK(used == 0, "the reset gave the driver back everything: %llu held", used);
  if (limited) {
    void *lim = dlopen(liblimiter, RTLD_NOW | RTLD_LOCAL);
    int (*usage)(const char *, const char *, uint64_t *, uint64_t *) =
        lim ? (int (*)(const char *, const char *, uint64_t *, uint64_t *))dlsym(
                  lim, "limiterGetWorkerUsage")
            : NULL;
    uint64_t u = 1, l = 0;
    CHECK(usage && usage(worker, UUID0, &u, &l) == 0, "limiterGetWorkerUsage(%s)", worker);
    CHECK(u == 0 && l == LIMIT, "after cudaDeviceReset the worker holds %llu of %llu",
          (unsigned long long)u, (unsigned long long)l);
  }
  /* The runtime starts again on the next call, with the whole room. */
  CHECK(cudaMemGetInfo(&f, &t) == cudaSuccess && f == t, "after the reset: free %zu of %zu", f,
        t);
  other_paths(limited);
  launch();
  return test_summary();
}

static const char *self, *hook, *liblimiter, *libcudart;
static void runtime(const char *lib, int (*set_limit)(const char *, const char *, uint64_t));

/* Run this program as a child: with the hook (or not), as `worker` (or
 * none), tracing the driver's calls into `trace` (or not). */
static int spawn(int with_hook, const char *worker, int limited, const char *trace) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (with_hook)
      setenv("LD_PRELOAD", hook, 1);
    else
      unsetenv("LD_PRELOAD");
    if (worker)
      setenv("ACCELERATOR_WORKER_ID", worker, 1);
    else
      unsetenv("ACCELERATOR_WORKER_ID");
    if (trace)
      setenv("FAKE_CUDA_TRACE", trace, 1);
    execl(self, self, "child", libcudart, limited ? "1" : "0", liblimiter, worker ? worker : "",
          (char *)NULL);
    _exit(127);
  }
  int st;
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "child") == 0)
    return child(argv[2], atoi(argv[3]), argv[4], argv[5]);
  if (argc < 5) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK LIBLIMITER LIBCUDART...\n", argv[0]);
    return 2;
  }
  self = argv[0], hook = argv[2], liblimiter = argv[3];
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  int (*set_limit)(const char *, const char *, uint64_t) =
      acc ? (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit") : NULL;
  if (!set_limit) {
    fprintf(stderr, "%s: no SetMemHardLimit\n", argv[1]);
    return 2;
  }
  /* Contexts reserve nothing: the limit is filled by cudaMalloc alone. */
  setenv("FAKE_CUDA_CTX_RESERVE", "0", 1);
  for (int i = 4; i < argc; i++)
    runtime(argv[i], set_limit);
  return test_summary();
}

/* One runtime: limited, unlimited, and the inert hook's driver trace. */
static void runtime(const char *lib, int (*set_limit)(const char *, const char *, uint64_t)) {
  char worker[64];
  int major = strstr(lib, "libcudart.so.13") ? 13 : 12;
  libcudart = lib;
  if (major >= 13)
    setenv("FAKE_CUDA_DRIVER_VERSION", "13050", 1);
  else
    unsetenv("FAKE_CUDA_DRIVER_VERSION");
  snprintf(worker, sizeof worker, "cudart%d-limited", major);
  CHECK(set_limit(worker, UUID0, LIMIT) == 0, "SetMemHardLimit(%s, 64 MiB)", worker);
  CHECK(spawn(1, worker, 1, NULL) == 0, "%s under the hook, 64 MiB worker", lib);
  CHECK(spawn(0, NULL, 0, NULL) == 0, "%s without the hook", lib);

  /* No worker: the hook is inert; the driver sees the same calls. */
  char plain[64], hooked[64];
  snprintf(plain, sizeof plain, "/tmp/cudart-trace-plain.%d", (int)getpid());
  snprintf(hooked, sizeof hooked, "/tmp/cudart-trace-hooked.%d", (int)getpid());
  unlink(plain), unlink(hooked);
  CHECK(spawn(0, NULL, 0, plain) == 0, "%s traced, without the hook", lib);
  CHECK(spawn(1, NULL, 0, hooked) == 0, "%s traced, under the hook with no worker", lib);
  size_t na = 0, nb = 0;
  char *a = slurp(plain, &na), *b = slurp(hooked, &nb);
  CHECK(a && b && na > 1000, "both traces were written (%zu, %zu bytes)", na, nb);
  CHECK(a && b && strcmp(a, b) == 0, "with no worker the driver sees exactly the same calls");
  if (a && b && strcmp(a, b) != 0) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "diff %s %s | head -20 >&2", plain, hooked);
    if (system(cmd) != 0)
      fprintf(stderr, "(diff failed)\n");
  }
  free(a), free(b);
  unlink(plain), unlink(hooked);
}
