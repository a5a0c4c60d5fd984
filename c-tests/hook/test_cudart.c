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
 *   exactly, cudaDeviceReset gives back everything (limiterGetWorkerUsage 0).
 * - unlimited: the same without the hook: the driver's total, no refusal.
 * - inert: with the hook and no worker, the driver sees exactly the calls
 *   it sees without the hook (FAKE_CUDA_TRACE). */
#include <dlfcn.h>
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
static int (*fake_cuda_mem)(int, unsigned long long *, unsigned long long *);

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
  *(void **)&fake_cuda_mem = dlsym(drv, "fake_cuda_mem");
  return cudaGetDeviceCount && cudaSetDevice && cudaMalloc && cudaFree && cudaMemGetInfo &&
                 cudaDeviceReset && fake_cuda_mem
             ? 0
             : -1;
}

static unsigned long long driver_allocations(void) {
  unsigned long long used, n;
  fake_cuda_mem(0, &used, &n);
  return n;
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
