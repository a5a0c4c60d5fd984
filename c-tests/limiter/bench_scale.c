/* The scale benchmark (docs/scale.md): what the host's calls, the host's
 * sampler and the state directory cost as a node holds more workers (N)
 * and a worker more processes (P), each row as a ratio to N = P = 1 in the
 * same run.
 *
 * Usage: bench_scale LIBLIMITER LIBACCELERATOR DEVICE_UUID
 * (libaccelerator of the nvidia build on the fake NVML, so its compute
 * sampler runs.) Per row: N workers with a memory and a compute limit on
 * the device and P forked processes each, every process registered by its
 * own allocation through the limiter (as a hooked process is). Figures are
 * medians of the calling thread's CPU time per call:
 *   v1 report   GetProcessMemoryUtilization
 *   v2 info     AccelGetProcessInformation
 *   usage       limiterGetWorkerUsage of one worker
 *   add         AddWorkerProcess of a registered process
 *   sampler     the host sampler thread's CPU over 2 s, all workers idle
 *               (% of a core: the process's CPU while this thread sleeps)
 *   state       the state directory's RAM (st_blocks)
 * The churn test's figures are in `make lifetime-test`'s output. */
#include "accelerator.h"
#include "limiter.h"
#include "worker_proc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*info_fn)(void *, size_t, size_t *);

static __typeof__(&CheckAndRecordMemoryOps) mem;
static __typeof__(&AddWorkerProcess) addProcess;
static __typeof__(&limiterGetWorkerUsage) usage;
static __typeof__(&LimiterRemoveWorker) removeWorker;
static __typeof__(&SetMemHardLimit) setMem;
static __typeof__(&SetComputeUnitHardLimit) setCompute;
static __typeof__(&GetProcessMemoryUtilization) procMem;
static info_fn procInfo;
static const char *dev;
static char state[4096];

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing %s\n", name);
    exit(2);
  }
  return p;
}

static double cpu_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static pid_t start_process(const char *w) {
  pid_t pid = worker_process(mem, w, dev);
  if (pid <= 0) {
    fprintf(stderr, "a process of %s did not register\n", w);
    exit(1);
  }
  return pid;
}

enum { COLS = 6 };
static const char *names[COLS] = {"v1 report us", "v2 info us", "usage us", "add us", "sampler %", "state KiB"};

/* Median CPU µs of `reps` calls of `what`. */
#define MEDIAN(reps, call)                                                                         \
  ({                                                                                               \
    static double t_[400];                                                                         \
    int n_ = (reps);                                                                               \
    for (int i_ = 0; i_ < n_; i_++) {                                                              \
      double a_ = cpu_ns(CLOCK_THREAD_CPUTIME_ID);                                                 \
      call;                                                                                        \
      t_[i_] = (cpu_ns(CLOCK_THREAD_CPUTIME_ID) - a_) / 1e3;                                       \
    }                                                                                              \
    qsort(t_, n_, sizeof t_[0], cmp);                                                              \
    t_[n_ / 2];                                                                                    \
  })

static void row(int n, int p, double out[COLS]) {
  int total = n * p;
  pid_t *pids = calloc((size_t)total, sizeof *pids);
  char w[64], pid0[16];
  for (int i = 0; i < n; i++) {
    snprintf(w, sizeof w, "scale-%d-%d-%d", n, p, i);
    if (setMem(w, dev, 1ULL << 30) != RESULT_SUCCESS || setCompute(w, dev, 50) != RESULT_SUCCESS) {
      fprintf(stderr, "cannot limit %s\n", w);
      exit(1);
    }
    for (int j = 0; j < p; j++)
      pids[i * p + j] = start_process(w);
  }
  snprintf(w, sizeof w, "scale-%d-%d-0", n, p);
  snprintf(pid0, sizeof pid0, "%d", (int)pids[0]);
  size_t cap = (size_t)total + 16, count;
  void *buf = calloc(cap, 512);
  int reps = total >= 100 ? 21 : 101;
  out[0] = MEDIAN(reps, procMem(buf, cap, &count));
  out[1] = MEDIAN(reps, procInfo(buf, cap, &count));
  uint64_t u, l;
  out[2] = MEDIAN(201, usage(w, dev, &u, &l));
  out[3] = MEDIAN(201, addProcess(dev, pid0));
  /* The sampler: the process's CPU while this thread sleeps. */
  usleep(300 * 1000);
  double a = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
  usleep(2000 * 1000);
  out[4] = (cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - a) / 2e9 * 100;
  out[5] = (double)tree_ram(state) / 1024;
  for (int i = 0; i < total; i++)
    end_worker_process(pids[i]);
  for (int i = 0; i < n; i++) {
    snprintf(w, sizeof w, "scale-%d-%d-%d", n, p, i);
    removeWorker(NULL, w);
  }
  free(buf);
  free(pids);
}

int main(int argc, char **argv) {
  if (argc < 4 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "usage: ACCELERATOR_STATE_DIR=dir %s liblimiter.so libaccelerator.so device-uuid\n", argv[0]);
    return 2;
  }
  snprintf(state, sizeof state, "%s", getenv("ACCELERATOR_STATE_DIR"));
  dev = argv[3];
  unsetenv("ACCELERATOR_WORKER_ID");
  void *lim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), *acc = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!lim || !acc) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  *(void **)&mem = sym(lim, "CheckAndRecordMemoryOps");
  *(void **)&addProcess = sym(lim, "AddWorkerProcess");
  *(void **)&usage = sym(lim, "limiterGetWorkerUsage");
  *(void **)&removeWorker = sym(lim, "LimiterRemoveWorker");
  *(void **)&setMem = sym(acc, "SetMemHardLimit");
  *(void **)&setCompute = sym(acc, "SetComputeUnitHardLimit");
  *(void **)&procMem = sym(acc, "GetProcessMemoryUtilization");
  *(void **)&procInfo = sym(acc, "AccelGetProcessInformation");
  int (*init)(void) = (int (*)(void))sym(acc, "AccelInit");
  init();
  static const int shape[][2] = {{1, 1}, {10, 1}, {100, 1}, {500, 1}, {1, 10}, {1, 100}, {1, 500}};
  enum { ROWS = sizeof shape / sizeof shape[0] };
  double r[ROWS][COLS];
  for (int i = 0; i < ROWS; i++)
    row(shape[i][0], shape[i][1], r[i]);
  printf("Scale (%s; medians of CPU per call; ratio to N = P = 1 of this run)\n\n", argv[2]);
  printf("| N workers x P processes |");
  for (int c = 0; c < COLS; c++)
    printf(" %s |", names[c]);
  printf("\n|---|");
  for (int c = 0; c < COLS; c++)
    printf("---|");
  printf("\n");
  for (int i = 0; i < ROWS; i++) {
    printf("| %d x %d |", shape[i][0], shape[i][1]);
    for (int c = 0; c < COLS; c++) {
      if (i == 0)
        printf(" %.*f |", c == 4 ? 2 : 1, r[i][c]);
      else
        printf(" %.*f (%.1fx) |", c == 4 ? 2 : 1, r[i][c], r[0][c] > 0 ? r[i][c] / r[0][c] : 0);
    }
    printf("\n");
  }
  return 0;
}
