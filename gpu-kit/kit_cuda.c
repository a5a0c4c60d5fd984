/* The GPU verification kit's CUDA program: the driver API only, loaded at run
 * time (no toolkit on the target), PTX JIT-compiled by the driver.
 *
 *   kit_cuda load SECONDS      keep every SM busy with a spin kernel
 *   kit_cuda hold BYTES        allocate BYTES, fill them with a known pattern,
 *                              print "READY <pid> <checksum>", then on each
 *                              line "verify" read stdin copy the memory back and
 *                              print "VERIFY <checksum> ok|mismatch"; EOF ends
 *   kit_cuda meminfo BYTES     print cuMemGetInfo and whether BYTES allocate
 *   kit_cuda uuid              print the device's UUID as the preload hook
 *                              names it (NVML's text form, GPU-...)
 *
 * Output is one JSON object per line. The driver library is KIT_CUDA_PATH or
 * libcuda.so.1. It changes no device setting. Exit 0 on success, 3 when the
 * driver is missing, 4 when it sees no device (CUDA_ERROR_NO_DEVICE: no GPU,
 * or MIG mode on with no GPU/compute instance), 1 on a failed call. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static void *cuda;

static void *sym(const char *name) {
  void *p = dlsym(cuda, name);
  if (!p) {
    printf("{\"error\":\"symbol %s missing from the CUDA driver\"}\n", name);
    exit(1);
  }
  return p;
}

#define CU(call)                                                               \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != 0) {                                                             \
      printf("{\"error\":\"%s failed\",\"cuResult\":%d}\n", #call, r_);        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A spin kernel: each thread runs `iters` dependent FMAs and stores one word. */
static const char ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 out, .param .u32 iters)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b32 %r<4>;\n"
    "  .reg .f32 %f<2>;\n"
    "  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  ld.param.u32 %r1, [iters];\n"
    "  mov.u32 %r2, 0;\n"
    "  mov.f32 %f1, 0f3F800000;\n"
    "LOOP:\n"
    "  fma.rn.f32 %f1, %f1, 0f3F7FFFFF, 0f3A83126F;\n"
    "  add.u32 %r2, %r2, 1;\n"
    "  setp.lt.u32 %p, %r2, %r1;\n"
    "  @%p bra LOOP;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mul.wide.u32 %rd2, %r3, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  st.global.f32 [%rd3], %f1;\n"
    "  ret;\n"
    "}\n";

static int dev;

static void open_context(void) {
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))sym("cuInit");
  CUresult (*get)(int *, int) = (CUresult(*)(int *, int))sym("cuDeviceGet");
  CUresult (*retain)(void **, int) = (CUresult(*)(void **, int))sym("cuDevicePrimaryCtxRetain");
  CUresult (*set)(void *) = (CUresult(*)(void *))sym("cuCtxSetCurrent");
  void *ctx = NULL;
  CUresult r = init(0);
  if (r == 0)
    r = get(&dev, 0);
  if (r == 100) { /* CUDA_ERROR_NO_DEVICE */
    printf("{\"unavailable\":\"the CUDA driver sees no device (no GPU, or MIG mode on with no GPU/compute "
           "instance to run on)\"}\n");
    exit(4);
  }
  CU(r);
  CU(retain(&ctx, dev));
  CU(set(ctx));
}

static int load(double seconds) {
  CUresult (*attr)(int *, int, int) = (CUresult(*)(int *, int, int))sym("cuDeviceGetAttribute");
  CUresult (*mod_load)(void **, const void *) = (CUresult(*)(void **, const void *))sym("cuModuleLoadData");
  CUresult (*get_fn)(void **, void *, const char *) =
      (CUresult(*)(void **, void *, const char *))sym("cuModuleGetFunction");
  CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2");
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                     void **, void **) =
      (CUresult(*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                   void **, void **))sym("cuLaunchKernel");
  CUresult (*sync)(void) = (CUresult(*)(void))sym("cuCtxSynchronize");
  int sms = 0;
  void *mod = NULL, *fn = NULL;
  CUdeviceptr out = 0;
  CU(attr(&sms, 16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */, dev));
  CU(mod_load(&mod, ptx));
  CU(get_fn(&fn, mod, "spin"));
  CU(alloc(&out, 1024 * sizeof(float)));
  unsigned iters = 1u << 16;
  void *params[] = {&out, &iters};
  double t0 = now_s(), t = t0;
  unsigned long launches = 0;
  while (t - t0 < seconds) {
    CU(launch(fn, (unsigned)sms * 8, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CU(sync());
    launches++;
    t = now_s();
  }
  printf("{\"load\":{\"sms\":%d,\"launches\":%lu,\"seconds\":%.3f}}\n", sms, launches, t - t0);
  return 0;
}

#define CHUNK ((size_t)64 << 20)

/* The pattern word at 64-bit index i, and a checksum over every word. */
static uint64_t word(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ULL ^ (i >> 7); }

static int hold(size_t bytes) {
  CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) =
      (CUresult(*)(CUdeviceptr, const void *, size_t))sym("cuMemcpyHtoD_v2");
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = (CUresult(*)(void *, CUdeviceptr, size_t))sym("cuMemcpyDtoH_v2");
  bytes -= bytes % CHUNK; /* whole chunks */
  if (bytes == 0)
    bytes = CHUNK;
  CUdeviceptr p = 0;
  uint64_t *buf = malloc(CHUNK);
  if (!buf)
    return 1;
  CU(alloc(&p, bytes));
  uint64_t sum = 0, words = CHUNK / 8;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    uint64_t base = off / 8;
    for (uint64_t i = 0; i < words; i++) {
      buf[i] = word(base + i);
      sum += buf[i] * (base + i + 1);
    }
    CU(htod(p + off, buf, CHUNK));
  }
  printf("READY %d %016llx %zu\n", (int)getpid(), (unsigned long long)sum, bytes);
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "verify", 6) != 0)
      continue;
    uint64_t again = 0;
    int same = 1;
    for (size_t off = 0; off < bytes; off += CHUNK) {
      uint64_t base = off / 8;
      CU(dtoh(buf, p + off, CHUNK));
      for (uint64_t i = 0; i < words; i++) {
        same &= buf[i] == word(base + i);
        again += buf[i] * (base + i + 1);
      }
    }
    printf("VERIFY %016llx %s\n", (unsigned long long)again, same && again == sum ? "ok" : "mismatch");
    fflush(stdout);
  }
  free(buf);
  return 0;
}

static int meminfo(size_t bytes) {
  CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))sym("cuMemGetInfo_v2");
  CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2");
  CUresult (*mfree)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))sym("cuMemFree_v2");
  size_t free_b = 0, total = 0;
  CU(info(&free_b, &total));
  CUdeviceptr p = 0;
  CUresult r = alloc(&p, bytes);
  if (r == 0)
    mfree(p);
  printf("{\"meminfo\":{\"free\":%zu,\"total\":%zu,\"alloc_bytes\":%zu,\"alloc_result\":%d}}\n", free_b, total,
         bytes, r);
  return 0;
}

/* cuDeviceGetUuid_v2 where the driver has it (CUDA 11.4+), as the hook asks. */
static int uuid(void) {
  typedef CUresult (*get_uuid)(unsigned char *, int);
  get_uuid get = (get_uuid)dlsym(cuda, "cuDeviceGetUuid_v2");
  if (!get)
    get = (get_uuid)sym("cuDeviceGetUuid");
  unsigned char b[16];
  CU(get(b, dev));
  printf("{\"device\":{\"uuid\":\"GPU-");
  for (int i = 0; i < 16; i++)
    printf("%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", b[i]);
  printf("\"}}\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 && !(argc == 2 && strcmp(argv[1], "uuid") == 0)) {
    fprintf(stderr, "usage: %s load SECONDS | hold BYTES | meminfo BYTES | uuid\n", argv[0]);
    return 2;
  }
  const char *path = getenv("KIT_CUDA_PATH");
  cuda = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    printf("{\"error\":\"no CUDA driver: %s\"}\n", dlerror());
    return 3;
  }
  open_context();
  if (strcmp(argv[1], "load") == 0)
    return load(atof(argv[2]));
  if (strcmp(argv[1], "hold") == 0)
    return hold((size_t)strtoull(argv[2], NULL, 10));
  if (strcmp(argv[1], "meminfo") == 0)
    return meminfo((size_t)strtoull(argv[2], NULL, 10));
  if (strcmp(argv[1], "uuid") == 0)
    return uuid();
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
