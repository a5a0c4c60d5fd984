/* The compute test app: launches kernels on the fake driver's device 0
 * under LD_PRELOAD=libcuda_limiter.so (test_compute.c drives it).
 *
 *   spin SECONDS [BATCH [graph|kernel [FROM [WARM IDLE]]]]
 *                    cuLaunchKernel_ptsz (through cuGetProcAddress_v2 with
 *                    per-thread flags; `graph`: cuGraphLaunch_ptsz) as fast
 *                    as allowed for SECONDS; BATCH > 0: cuCtxSynchronize
 *                    after every BATCH launches. Prints the launches and
 *                    the longest time between two launches after FROM
 *                    seconds (default 1; ms). WARM > 0: first launches so
 *                    for WARM seconds, then idles IDLE seconds (a service
 *                    that warmed up and waits for traffic), then SECONDS
 *   serve SECONDS PERIOD_MS KERNELS
 *                    an inference service: a request every PERIOD_MS ms
 *                    (from its start), each KERNELS cuLaunchKernel on the
 *                    legacy stream then cuStreamSynchronize; prints the
 *                    requests and their latency's median, p99 and max
 *                    (ms, from the first launch to the synchronize's end;
 *                    the first 0.5 s left out: the device warms up)
 *   threads SECONDS N [graph|kernel]
 *                    N threads launching as spin does (each on its own
 *                    per-thread default stream) for SECONDS; prints the
 *                    launches and the most kernels the process ever had
 *                    queued or running (fake_cuda_max_queued)
 *   capture N        captures N cuLaunchKernel and one cuEventRecord of its
 *                    own into a graph on a stream of its own, launches the
 *                    graph on it and synchronizes; prints "captured"
 *   bursts SECONDS PERIOD_MS N
 *                    every PERIOD_MS, N launches then cuCtxSynchronize (a
 *                    service answering at a fixed rate), for SECONDS;
 *                    prints the bursts done and the late ones (a burst
 *                    that started after its period's start)
 *   paths N          N launches through each of the 8 launch entry points,
 *                    each reached by cuGetProcAddress_v2 and by dlsym;
 *                    checks the driver saw every one; prints the seconds taken
 *   blocked MS       (a worker the caller freezes) prints "ready" once it
 *                    has its context and waits for a byte on stdin; then a
 *                    thread launches, and never gets through in MS ms;
 *                    meanwhile the main thread calls cuMemAlloc (and
 *                    cuMemFree), prints "alloc <result>" and "exit <ns>"
 *                    (CLOCK_MONOTONIC), and returns from main with the
 *                    thread still waiting: the process exits
 */
#include <pthread.h>
#include <signal.h>
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "../test_util.h"

typedef int CUresult;
typedef void *CUcontext;
typedef CUresult (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, void *, void **, void **);
typedef CUresult (*launch_ex_fn)(const void *, void *, void **, void **);
typedef CUresult (*coop_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void *, void **);
typedef CUresult (*graph_fn)(void *, void *);

static void *lib;

/* A spin that outlives its time by 30 s is stuck: end it (a handler, since
 * the app is pid 1 of its namespace, which ignores signals it does not
 * handle). */
static void stuck(int sig) {
  (void)sig;
  _exit(3);
}
static get_proc_fn get_proc;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *proc(const char *name, int per_thread) {
  void *fn = NULL;
  int status = -1;
  CUresult r = get_proc(name, &fn, 12000, per_thread ? 2 : 0, &status);
  CHECK(r == 0 && fn, "cuGetProcAddress_v2(%s): %d", name, r);
  return fn;
}

/* One launch through `fn`, whose kind is the entry point's base name. */
static CUresult launch(const char *base, void *fn) {
  static int dummy;
  /* CUlaunchConfig (cuda.h): the driver reads the stream from it. */
  static const struct {
    unsigned grid[3], block[3], shared;
    void *stream, *attrs;
    unsigned nattrs;
  } config = {{1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, 0};
  void *f = &dummy;
  if (strcmp(base, "cuLaunchKernel") == 0)
    return ((launch_fn)fn)(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  if (strcmp(base, "cuLaunchKernelEx") == 0)
    return ((launch_ex_fn)fn)(&config, f, NULL, NULL);
  if (strcmp(base, "cuLaunchCooperativeKernel") == 0)
    return ((coop_fn)fn)(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL);
  return ((graph_fn)fn)(f, NULL);
}

static _Atomic unsigned long long launched;
static CUcontext ctx;
static CUresult (*set_current)(CUcontext);

/* A thread of `threads`: launches through `base` until `until`. */
struct spinner {
  const char *base;
  void *fn;
  double until;
};
static void *spin_thread(void *arg) {
  struct spinner *sp = arg;
  set_current(ctx);
  while (now_s() < sp->until) {
    CHECK(launch(sp->base, sp->fn) == 0, "launch");
    launched++;
  }
  return NULL;
}
static void *launcher(void *fn) {
  set_current(ctx);
  for (;;) {
    CHECK(launch("cuLaunchKernel", fn) == 0, "launch");
    launched++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  get_proc = (get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
  CUresult (*retain)(CUcontext *, int) = (CUresult(*)(CUcontext *, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
  set_current = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
  unsigned long long (*calls)(const char *) =
      (unsigned long long (*)(const char *))dlsym(lib, "fake_cuda_calls");
  if (!get_proc || !init || !retain || !set_current || !calls || init(0) || retain(&ctx, 0) ||
      set_current(ctx)) {
    fprintf(stderr, "app_launch: no driver\n");
    return 2;
  }
  if (strcmp(argv[1], "spin") == 0) {
    int batch = argc > 3 ? atoi(argv[3]) : 0;
    const char *base = argc > 4 && strcmp(argv[4], "graph") == 0 ? "cuGraphLaunch" : "cuLaunchKernel";
    void *k = proc(base, 1);
    CUresult (*sync)(void) = (CUresult(*)(void))proc("cuCtxSynchronize", 0);
    double warm = argc > 7 ? atof(argv[6]) : 0, idle = argc > 7 ? atof(argv[7]) : 0;
    signal(SIGALRM, stuck);
    alarm((unsigned)(warm + idle + atof(argv[2])) + 30);
    for (double t0 = now_s(), t = t0; t < t0 + warm; t = now_s())
      CHECK(launch(base, k) == 0, "launch");
    if (warm > 0) {
      CHECK(sync() == 0, "cuCtxSynchronize");
      struct timespec ts = {(time_t)idle, (long)((idle - (double)(time_t)idle) * 1e9)};
      nanosleep(&ts, NULL);
    }
    double start = now_s(), end = start + atof(argv[2]), last = start, gap = 0;
    double from = argc > 5 ? atof(argv[5]) : 1.0;
    unsigned long long n = 0;
    for (double t = start; t < end; t = now_s()) {
      if (last - start >= from && t - last > gap)
        gap = t - last;
      last = t;
      CHECK(launch(base, k) == 0, "launch");
      n++;
      if (batch > 0 && n % (unsigned)batch == 0)
        CHECK(sync() == 0, "cuCtxSynchronize");
    }
    printf("%llu %.1f\n", n, gap * 1e3);
    return test_summary();
  }
  if (strcmp(argv[1], "serve") == 0 && argc > 4) {
    void *k = proc("cuLaunchKernel", 0);
    CUresult (*sync)(void *) = (CUresult(*)(void *))proc("cuStreamSynchronize", 0);
    double secs = atof(argv[2]), period = atof(argv[3]) / 1e3;
    int kernels = atoi(argv[4]), n = 0;
    static double lat[100000];
    signal(SIGALRM, stuck);
    alarm((unsigned)secs + 30);
    double start = now_s();
    for (int i = 0; start + i * period < start + secs; i++) {
      double at = start + i * period, now = now_s();
      if (at > now) {
        struct timespec ts = {0, (long)((at - now) * 1e9)};
        nanosleep(&ts, NULL);
      }
      double t0 = now_s();
      for (int j = 0; j < kernels; j++)
        CHECK(launch("cuLaunchKernel", k) == 0, "launch");
      CHECK(sync(NULL) == 0, "cuStreamSynchronize");
      if (t0 - start >= 0.5 && n < (int)(sizeof lat / sizeof lat[0]))
        lat[n++] = (now_s() - t0) * 1e3;
    }
    for (int i = 1; i < n; i++) /* insertion sort: a few hundred */
      for (int j = i; j > 0 && lat[j - 1] > lat[j]; j--) {
        double t = lat[j];
        lat[j] = lat[j - 1], lat[j - 1] = t;
      }
    CHECK(n > 0, "requests");
    if (n > 0)
      printf("%d %.3f %.3f %.3f\n", n, lat[n / 2], lat[(int)(n * 0.99)], lat[n - 1]);
    return test_summary();
  }
  if (strcmp(argv[1], "threads") == 0 && argc > 3) {
    unsigned long long (*max_queued)(void) =
        (unsigned long long (*)(void))dlsym(lib, "fake_cuda_max_queued");
    int n = atoi(argv[3]);
    pthread_t t[64];
    struct spinner sp = {argc > 4 && strcmp(argv[4], "graph") == 0 ? "cuGraphLaunch" : "cuLaunchKernel",
                         NULL, now_s() + atof(argv[2])};
    sp.fn = proc(sp.base, 1);
    CHECK(max_queued && n > 0 && n <= 64, "threads");
    signal(SIGALRM, stuck);
    alarm((unsigned)atof(argv[2]) + 30);
    for (int i = 0; i < n && i < 64; i++)
      CHECK(pthread_create(&t[i], NULL, spin_thread, &sp) == 0, "thread");
    for (int i = 0; i < n && i < 64; i++)
      pthread_join(t[i], NULL);
    printf("%llu %llu\n", (unsigned long long)launched, max_queued ? max_queued() : 0);
    return test_summary();
  }
  if (strcmp(argv[1], "capture") == 0 && argc > 2) {
    CUresult (*create)(void **, unsigned) = (CUresult(*)(void **, unsigned))proc("cuStreamCreate", 0);
    CUresult (*begin)(void *, int) = (CUresult(*)(void *, int))proc("cuStreamBeginCapture", 0);
    CUresult (*end)(void *, void **) = (CUresult(*)(void *, void **))proc("cuStreamEndCapture", 0);
    CUresult (*instantiate)(void **, void *, unsigned long long) =
        (CUresult(*)(void **, void *, unsigned long long))proc("cuGraphInstantiateWithFlags", 0);
    CUresult (*event)(void **, unsigned) = (CUresult(*)(void **, unsigned))proc("cuEventCreate", 0);
    CUresult (*record)(void *, void *) = (CUresult(*)(void *, void *))proc("cuEventRecord", 0);
    CUresult (*sync)(void *) = (CUresult(*)(void *))proc("cuStreamSynchronize", 0);
    launch_fn kernel = (launch_fn)proc("cuLaunchKernel", 0);
    graph_fn run = (graph_fn)proc("cuGraphLaunch", 0);
    static int dummy;
    void *s = NULL, *g = NULL, *exec = NULL, *e = NULL;
    CHECK(create(&s, 0) == 0 && event(&e, 0) == 0, "stream, event");
    CHECK(begin(s, 0) == 0, "cuStreamBeginCapture");
    for (int i = 0; i < atoi(argv[2]); i++)
      CHECK(kernel(&dummy, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) == 0, "captured launch");
    CHECK(record(e, s) == 0, "captured record");
    CHECK(end(s, &g) == 0 && instantiate(&exec, g, 0) == 0, "graph");
    CHECK(run(exec, s) == 0 && sync(s) == 0, "graph launch");
    printf("captured\n");
    return test_summary();
  }
  if (strcmp(argv[1], "bursts") == 0 && argc == 5) {
    void *k = proc("cuLaunchKernel", 1);
    CUresult (*sync)(void) = (CUresult(*)(void))proc("cuCtxSynchronize", 0);
    double secs = atof(argv[2]), period = atof(argv[3]) / 1e3;
    int n = atoi(argv[4]);
    signal(SIGALRM, stuck);
    alarm((unsigned)secs + 30);
    double start = now_s(), next = start;
    unsigned long long done = 0, late = 0;
    while (next < start + secs) {
      double t = now_s();
      if (t < next) {
        double w = next - t;
        struct timespec ts = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
        nanosleep(&ts, NULL);
      } else if (t > next + period / 10) {
        late++;
      }
      for (int i = 0; i < n; i++)
        CHECK(launch("cuLaunchKernel", k) == 0, "launch");
      CHECK(sync() == 0, "cuCtxSynchronize");
      done++;
      next += period;
    }
    printf("%llu %llu\n", done, late);
    return test_summary();
  }
  if (strcmp(argv[1], "blocked") == 0) {
    /* The caller freezes the worker now that it has its context. */
    printf("ready\n");
    fflush(stdout);
    char go;
    CHECK(read(0, &go, 1) == 1, "the caller's go");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, launcher, proc("cuLaunchKernel", 0)) == 0, "thread");
    usleep((useconds_t)atoi(argv[2]) * 1000);
    CHECK(launched == 0, "a frozen worker's launch got through (%llu)", (unsigned long long)launched);
    CUresult (*alloc)(unsigned long long *, size_t) =
        (CUresult(*)(unsigned long long *, size_t))proc("cuMemAlloc", 0);
    CUresult (*release)(unsigned long long) = (CUresult(*)(unsigned long long))proc("cuMemFree", 0);
    unsigned long long dptr = 0;
    CUresult r = alloc(&dptr, 1 << 20);
    CHECK(r != 0 || (dptr && release(dptr) == 0), "cuMemFree");
    printf("alloc %d\n", r);
    /* The caller times the exit from here (CLOCK_MONOTONIC ns). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("exit %llu\n", (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
    fflush(stdout);
    return test_summary();
  }
  if (strcmp(argv[1], "paths") == 0) {
    static const char *const bases[] = {"cuLaunchKernel", "cuLaunchKernelEx",
                                        "cuLaunchCooperativeKernel", "cuGraphLaunch"};
    int n = atoi(argv[2]);
    double t0 = now_s();
    for (size_t b = 0; b < 4; b++)
      for (int pt = 0; pt < 2; pt++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", bases[b], pt ? "_ptsz" : "");
        void *ways[2] = {proc(bases[b], pt), dlsym(lib, name)};
        CHECK(ways[1] != NULL, "dlsym(%s)", name);
        unsigned long long before = calls(name);
        for (int w = 0; w < 2; w++)
          for (int i = 0; i < n; i++)
            CHECK(launch(bases[b], ways[w]) == 0, "%s", name);
        CHECK(calls(name) - before == 2ULL * (unsigned)n, "%s: the driver saw %llu of %d", name,
              calls(name) - before, 2 * n);
      }
    printf("%.3f\n", now_s() - t0);
    return test_summary();
  }
  return 2;
}
