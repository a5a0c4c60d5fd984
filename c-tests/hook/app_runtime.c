/* The runtime-like app: like libcudart (and so PyTorch), it takes only
 * cuGetProcAddress_v2 from the driver (dlopen + dlsym) and asks it for
 * everything else by base name, a CUDA version and flags; the async
 * allocations with the per-thread-default-stream flag. Scenarios in
 * hook_app.h, plus `entry L`: what the hook hands out through
 * cuGetProcAddress_v2 and dlsym. */
#include "hook_app.h"

typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;

enum { VERSION = 12080, PER_THREAD = 2, CUDA_ERROR_NOT_FOUND = 500 };

static void *get(const char *name, int version, unsigned long long flags) {
  void *p = NULL;
  int st = -1;
  CUresult r = gpa(name, &p, version, flags, &st);
  if (r != CUDA_SUCCESS || st != 0 || !p) {
    fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu): %d, status %d\n", name, version, flags, r,
            st);
    exit(2);
  }
  return p;
}

static int in_hook(void *p) {
  Dl_info i;
  return p && dladdr(p, &i) && i.dli_fname && strstr(i.dli_fname, "libcuda_limiter");
}

static int entry(void *h) {
  void *p = (void *)1;
  int st = -1;
  CHECK(in_hook((void *)gpa), "dlsym(cuGetProcAddress_v2) is the hook's");
  CHECK(get("cuGetProcAddress", VERSION, 0) == (void *)gpa,
        "cuGetProcAddress through itself is the hook's _v2");
  typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
  gpa1_t v1 = (gpa1_t)get("cuGetProcAddress", 11030, 0);
  CHECK(in_hook((void *)v1) && (void *)v1 != (void *)gpa, "cuGetProcAddress (v1) at 11.3");
  void *through_v1 = NULL;
  CHECK(v1("cuMemAlloc", &through_v1, VERSION, 0) == CUDA_SUCCESS &&
            through_v1 == dlsym(h, "cuMemAlloc_v2"),
        "the v1 lookup swaps too");
  void *alloc = get("cuMemAlloc", VERSION, 0);
  CHECK(in_hook(alloc) && alloc == dlsym(h, "cuMemAlloc_v2"),
        "cuMemAlloc at 12.8 is the hook's cuMemAlloc_v2, through both ways in");
  void *legacy = get("cuMemAlloc", 3010, 0);
  CHECK(in_hook(legacy) && legacy == dlsym(h, "cuMemAlloc") && legacy != alloc,
        "cuMemAlloc before 3.2 is the hook's wrapper of the driver's 32-bit v1");
  void *release = get("cuDevicePrimaryCtxRelease", 7000, 0);
  CHECK(in_hook(release) && release == dlsym(h, "cuDevicePrimaryCtxRelease") &&
            release != get("cuDevicePrimaryCtxRelease", VERSION, 0),
        "cuDevicePrimaryCtxRelease at 7000 (the runtime's request) is the hook's v1 wrapper");
  CHECK(in_hook(get("cuDevicePrimaryCtxReset", 7000, 0)), "so is cuDevicePrimaryCtxReset");
  CHECK(get("cuCtxCreate", VERSION, 0) == dlsym(h, "cuCtxCreate_v3"),
        "the driver's version choice stands (_v3 at 12.8)");
  CHECK(get("cuCtxCreate", 11000, 0) == dlsym(h, "cuCtxCreate_v2"), "_v2 at 11.0");
  CHECK(in_hook(get("cuCtxCreate", 13000, 0)) && get("cuCtxCreate", 13000, 0) == dlsym(h, "cuCtxCreate_v4"),
        "_v4 at 13.0, the hook's");
  void *legacy_stream = get("cuMemAllocAsync", VERSION, 0);
  void *per_thread = get("cuMemAllocAsync", VERSION, PER_THREAD);
  CHECK(in_hook(legacy_stream) && in_hook(per_thread) && legacy_stream != per_thread,
        "both stream variants are wrapped, each by its own wrapper");
  CHECK(per_thread == dlsym(h, "cuMemAllocAsync_ptsz"), "the _ptsz wrapper");
  CHECK(gpa("cuNoSuchFunction", &p, VERSION, 0, &st) == CUDA_ERROR_NOT_FOUND && p == NULL &&
            st == 1,
        "an unknown name: the driver's answer (%p, status %d)", p, st);
  CHECK(gpa("cuMemAllocAsync", &p, 11000, 0, &st) == CUDA_ERROR_NOT_FOUND && st == 2,
        "a version too old: the driver's answer (status %d)", st);
  CHECK(gpa("cuInit", NULL, VERSION, 0, &st) == CUDA_ERROR_INVALID_VALUE,
        "a NULL pfn goes to the driver");
  void *version = dlsym(h, "cuDriverGetVersion");
  CHECK(version && !in_hook(version) && get("cuDriverGetVersion", VERSION, 0) == version,
        "functions the hook does not wrap pass through");
  CHECK(dlsym(h, "fake_cuda_mem") == (void *)A.fake_mem && !in_hook((void *)A.fake_mem),
        "non-CUDA names pass through");
  CHECK(dlsym(h, "cuNoSuchFunction") == NULL, "an unknown name is NULL");
  /* RTLD_NEXT keeps meaning "after the caller": after this program comes the
   * preloaded hook, whose own dlsym is found. */
  CHECK(in_hook(dlsym(RTLD_NEXT, "dlsym")), "dlsym(RTLD_NEXT) resolves from the caller");
  return test_summary();
}

int main(int argc, char **argv) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) {
    fprintf(stderr, "no cuGetProcAddress_v2\n");
    return 2;
  }
  A.Init = get("cuInit", VERSION, 0);
  A.CtxCreate = get("cuCtxCreate", 11000, 0);
  A.CtxSetCurrent = get("cuCtxSetCurrent", VERSION, 0);
  A.CtxDestroy = get("cuCtxDestroy", VERSION, 0);
  A.PrimaryCtxRetain = get("cuDevicePrimaryCtxRetain", VERSION, 0);
  /* As libcudart 11.8 to 13.x: the v1 functions, asked at 7000. */
  A.PrimaryCtxRelease = get("cuDevicePrimaryCtxRelease", 7000, 0);
  A.PrimaryCtxReset = get("cuDevicePrimaryCtxReset", 7000, 0);
  A.MemPoolCreate = get("cuMemPoolCreate", VERSION, 0);
  A.MemPoolDestroy = get("cuMemPoolDestroy", VERSION, 0);
  A.DeviceGetDefaultMemPool = get("cuDeviceGetDefaultMemPool", VERSION, 0);
  A.DeviceGetMemPool = get("cuDeviceGetMemPool", VERSION, 0);
  A.DeviceSetMemPool = get("cuDeviceSetMemPool", VERSION, 0);
  A.MemAlloc = get("cuMemAlloc", VERSION, 0);
  A.MemFree = get("cuMemFree", VERSION, 0);
  A.MemGetInfo = get("cuMemGetInfo", VERSION, 0);
  A.DeviceTotalMem = get("cuDeviceTotalMem", VERSION, 0);
  A.MemAllocManaged = get("cuMemAllocManaged", VERSION, 0);
  A.MemAllocAsync = get("cuMemAllocAsync", VERSION, PER_THREAD);
  A.MemAllocFromPoolAsync = get("cuMemAllocFromPoolAsync", VERSION, PER_THREAD);
  A.MemFreeAsync = get("cuMemFreeAsync", VERSION, PER_THREAD);
  A.CtxSynchronize = get("cuCtxSynchronize", VERSION, 0);
  A.MemPoolTrimTo = get("cuMemPoolTrimTo", VERSION, 0);
  A.MemPoolSetAttribute = get("cuMemPoolSetAttribute", VERSION, 0);
  A.MemAllocPitch = get("cuMemAllocPitch", VERSION, 0);
  A.MemCreate = get("cuMemCreate", VERSION, 0);
  A.MemRelease = get("cuMemRelease", VERSION, 0);
  A.ArrayCreate = get("cuArrayCreate", VERSION, 0);
  A.Array3DCreate = get("cuArray3DCreate", VERSION, 0);
  A.ArrayDestroy = get("cuArrayDestroy", VERSION, 0);
  A.MipmappedArrayCreate = get("cuMipmappedArrayCreate", VERSION, 0);
  A.MipmappedArrayDestroy = get("cuMipmappedArrayDestroy", VERSION, 0);
  A.fake_calls = dlsym(h, "fake_cuda_calls");
  A.fake_mem = dlsym(h, "fake_cuda_mem");
  A.async_name = "cuMemAllocAsync_ptsz";
  if (!A.fake_calls || !A.fake_mem) {
    fprintf(stderr, "not the fake driver\n");
    return 2;
  }
  if (argc == 3 && strcmp(argv[1], "entry") == 0)
    return entry(h);
  return app_main(argc, argv);
}
