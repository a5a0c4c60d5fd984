/* The hook's overhead on the fake driver, hooked vs unhooked in one run.
 *
 * Usage: GRANT_TOOL=path/to/grant bench_hook LIBACCELERATOR HOOK [HOOK_BEFORE]
 * (GRANT_TOOL: common/examples/grant.rs, which make hook-bench builds).
 * Runs itself as a child per mode, taking turns (7 rounds, medians of the
 * calling thread's CPU time per call, so other load on the machine counts little):
 *   driver only     no LD_PRELOAD
 *   hook, no worker LD_PRELOAD, no ACCELERATOR_WORKER_ID (inert)
 *   hook, unlimited LD_PRELOAD, a worker without a limit on the device
 *                   (its books exist, made by a limit on another device:
 *                   usage recorded, each launch checks the limiter)
 *   hook, limited   LD_PRELOAD, a worker with a limit it never reaches
 *   hook, granted   LD_PRELOAD, a worker with a request and a priority:
 *                   its row holds a grant of the scheduler's (48 % of the
 *                   device) and a measured launch charge (1 µs), written
 *                   by GRANT_TOOL (the sampler's setters); each launch
 *                   takes its turn of the bucket
 *   hook, capped    the same with the queue cap the scheduler gives a
 *                   worker of lower priority (1 launch in flight): each
 *                   launch also asks the driver about its last (events)
 *   hook, no books  LD_PRELOAD, a worker the host never named (no books:
 *                   fail-open, allocations and launches go to the driver)
 *   before, ...     with HOOK_BEFORE (another build of the hook, e.g. the
 *                   last release's: same books layout), its unlimited and
 *                   limited, granted and capped workers, in the same
 *                   turns: before/after in one run
 * Each child times cuMemAlloc_v2 + cuMemFree_v2 pairs and
 * cuGetProcAddress_v2("cuMemAlloc") lookups through pointers taken with
 * dlopen + dlsym (through the hook's dlsym when preloaded), and
 * cuLaunchKernel_ptsz launches (of a loaded module's function) through the
 * pointer cuGetProcAddress_v2 hands out (the hook's wrapper when
 * preloaded), and the virtualized view: cuMemGetInfo_v2, cuDeviceTotalMem_v2 and the fake
 * NVML's nvmlDeviceGetMemoryInfo (the same device; medians of batches,
 * VIEW_NS).
 *
 * Then the view at 1, 10, 100 and 500 live processes of one limited worker
 * (the others started first, each holding an allocation, then waiting):
 * its cost must not grow with them (ratios to 1 process, same run).
 *
 * A granted worker's bucket is reached by launches this fast (one charge
 * of 1 µs each at 48 %: 48,000 a 100 ms burst), so every mode launches in
 * BATCHES batches of BURST, 100 ms apart (the bucket refills while the
 * child sleeps, which its CPU time leaves out): the check as it runs while
 * the worker is within its grant, as the limited worker's within its
 * limit, and every mode's batches start as cold after the sleep. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define PAIRS 200000
#define LOOKUPS 200000
#define VIEWS 500000
#define ROUNDS 7
#define MODES 11
/* Launches: BATCHES batches of BURST (see above). */
#define BURST 40000
#define BATCHES 5

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The view's ns per call: the median over VIEW_BATCHES batches of
 * VIEWS / VIEW_BATCHES calls (a clock read costs more than a call, so
 * calls are timed in batches; the median leaves out a batch that a
 * preemption or the hook's periodic sweep of the worker's processes fell in). */
#define VIEW_BATCHES 101
#define VIEW_NS(call)                                                                              \
  ({                                                                                               \
    double b_[VIEW_BATCHES];                                                                       \
    for (int k_ = 0; k_ < VIEW_BATCHES; k_++) {                                                    \
      double t_ = now_ns();                                                                        \
      for (int i_ = 0; i_ < VIEWS / VIEW_BATCHES; i_++)                                            \
        call;                                                                                      \
      b_[k_] = (now_ns() - t_) / (VIEWS / VIEW_BATCHES);                                           \
    }                                                                                              \
    qsort(b_, VIEW_BATCHES, sizeof b_[0], cmp);                                                    \
    b_[VIEW_BATCHES / 2];                                                                          \
  })

typedef struct { unsigned long long total, free, used; } nvml_memory_t;

/* ns per call of cuMemGetInfo_v2, cuDeviceTotalMem_v2 and
 * nvmlDeviceGetMemoryInfo (a context current on device 0). */
static int time_view(void *h, double out[3]) {
  CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))dlsym(h, "cuMemGetInfo_v2");
  CUresult (*total)(size_t *, int) = (CUresult(*)(size_t *, int))dlsym(h, "cuDeviceTotalMem_v2");
  void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  int (*nv_init)(void) = nv ? (int (*)(void))dlsym(nv, "nvmlInit_v2") : NULL;
  int (*by_index)(unsigned, void **) =
      nv ? (int (*)(unsigned, void **))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2") : NULL;
  int (*nv_info)(void *, nvml_memory_t *) =
      nv ? (int (*)(void *, nvml_memory_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo") : NULL;
  void *dev;
  size_t f, t;
  nvml_memory_t m;
  /* The fake NVML's device 1 is the fake driver's device 0. */
  if (!info || !total || !nv_init || !by_index || !nv_info || nv_init() || by_index(1, &dev) ||
      info(&f, &t) || total(&t, 0) || nv_info(dev, &m))
    return 4;
  out[0] = VIEW_NS(info(&f, &t));
  out[1] = VIEW_NS(total(&t, 0));
  out[2] = VIEW_NS(nv_info(dev, &m));
  return 0;
}

/* `mode`: "--child" (everything), "--view" (the view only; also what
 * bench_scale runs in a process of each row's worker), "--hold" (allocate,
 * say so, wait for EOF on stdin). */
static int child(const char *mode) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return 2;
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
  CUresult (*ctx)(void **, unsigned, int) = (CUresult(*)(void **, unsigned, int))dlsym(
      h, "cuCtxCreate_v2");
  CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(
      h, "cuMemAlloc_v2");
  CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(h, "cuMemFree_v2");
  CUresult (*gpa)(const char *, void **, int, unsigned long long, int *) =
      (CUresult(*)(const char *, void **, int, unsigned long long, int *))dlsym(
          h, "cuGetProcAddress_v2");
  CUresult (*load)(void **, const void *) =
      (CUresult(*)(void **, const void *))dlsym(h, "cuModuleLoadData");
  CUresult (*get_function)(void **, void *, const char *) =
      (CUresult(*)(void **, void *, const char *))dlsym(h, "cuModuleGetFunction");
  void *c, *launch_p = NULL, *module = NULL, *kernel = NULL;
  int launch_st;
  if (!init || !ctx || !alloc || !release || !gpa || !load || !get_function || init(0) ||
      ctx(&c, 0, 0) || gpa("cuLaunchKernel", &launch_p, 12080, 2, &launch_st) || !launch_p ||
      load(&module, ".visible .entry k()\n{\n\tret;\n}\n") ||
      get_function(&kernel, module, "k"))
    return 2;
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) =
      (CUresult(*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **))launch_p;
  CUdeviceptr p;
  if (strcmp(mode, "--hold") == 0) {
    char c;
    if (alloc(&p, 1 << 20) || write(1, "ok\n", 3) != 3)
      return 3;
    while (read(0, &c, 1) > 0)
      ;
    return 0;
  }
  double view[3];
  if (strcmp(mode, "--view") == 0) {
    if (alloc(&p, 1 << 20) || time_view(h, view))
      return 4;
    printf("%.2f %.2f %.2f 0 0 0\n", view[0], view[1], view[2]);
    return 0;
  }
  for (int i = 0; i < PAIRS / 10; i++)
    if (alloc(&p, 1 << 20) || release(p))
      return 3;
  double t0 = now_ns();
  for (int i = 0; i < PAIRS; i++) {
    alloc(&p, 1 << 20);
    release(p);
  }
  double t1 = now_ns();
  void *f;
  int st;
  for (int i = 0; i < LOOKUPS; i++)
    gpa("cuMemAlloc", &f, 12080, 0, &st);
  double t2 = now_ns();
  double in_batches = 0;
  for (int b = 0; b < BATCHES; b++) {
    usleep(100000);
    double tb = now_ns();
    for (int i = 0; i < BURST; i++)
      launch(kernel, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    in_batches += now_ns() - tb;
  }
  if (time_view(h, view))
    return 4;
  printf("%.2f %.2f %.2f %.2f %.2f %.2f\n", (t1 - t0) / PAIRS, (t2 - t1) / LOOKUPS,
         in_batches / (BURST * BATCHES), view[0], view[1], view[2]);
  return 0;
}

#define OUTS 6
static int run_mode(const char *self, const char *mode, const char *hook, const char *worker,
                    double out[OUTS]) {
  int fd[2];
  if (pipe(fd))
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (hook)
      setenv("LD_PRELOAD", hook, 1);
    if (worker)
      setenv("ACCELERATOR_WORKER_ID", worker, 1);
    else
      unsetenv("ACCELERATOR_WORKER_ID");
    dup2(fd[1], 1);
    execl(self, self, mode, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char buf[128] = {0};
  ssize_t n = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
      sscanf(buf, "%lf %lf %lf %lf %lf %lf", &out[0], &out[1], &out[2], &out[3], &out[4],
             &out[5]) != OUTS)
    return -1;
  return 0;
}

/* A process of `worker` under the hook holding an allocation; its stdin
 * is the returned descriptor (closing it ends the process). -1: failed. */
static int hold(const char *self, const char *hook, const char *worker, pid_t *pid) {
  int in[2], out[2];
  /* Close-on-exec: the holders started later must not keep this one's stdin open. */
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
    return -1;
  fflush(NULL);
  *pid = fork();
  if (*pid == 0) {
    setenv("LD_PRELOAD", hook, 1);
    setenv("ACCELERATOR_WORKER_ID", worker, 1);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execl(self, self, "--hold", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  char buf[4] = {0};
  ssize_t n = read(out[0], buf, 3);
  close(out[0]);
  if (n != 3 || strcmp(buf, "ok\n") != 0) {
    close(in[1]);
    return -1;
  }
  return in[1];
}

/* The view's cost at 1, 10, 100 and 500 live processes of one worker. */
static int processes(const char *self, const char *hook) {
  static const int counts[] = {1, 10, 100, 500};
  enum { N = sizeof counts / sizeof counts[0], MAXHOLD = 500, VROUNDS = 9 };
  static int fds[MAXHOLD];
  static pid_t pids[MAXHOLD];
  /* The three views under the hook, and cuMemGetInfo_v2 without it (a
   * control taken in turns with them: how much the machine moved). */
  double v[N][4][VROUNDS];
  int held = 0, rc = 0;
  for (int c = 0; c < N && rc == 0; c++) {
    while (held < counts[c] - 1) {
      fds[held] = hold(self, hook, "bench-procs", &pids[held]);
      if (fds[held] < 0) {
        fprintf(stderr, "holder %d failed\n", held);
        rc = 1;
        break;
      }
      held++;
    }
    for (int r = 0; r < VROUNDS && rc == 0; r++) {
      double o[OUTS];
      if (run_mode(self, "--view", hook, "bench-procs", o)) {
        fprintf(stderr, "view child at %d processes failed\n", counts[c]);
        rc = 1;
        break;
      }
      for (int k = 0; k < 3; k++)
        v[c][k][r] = o[k];
      if (run_mode(self, "--view", NULL, NULL, o)) {
        fprintf(stderr, "control view child failed\n");
        rc = 1;
        break;
      }
      v[c][3][r] = o[0];
    }
  }
  for (int i = 0; i < held; i++) {
    close(fds[i]);
    waitpid(pids[i], NULL, 0);
  }
  if (rc)
    return rc;
  printf("\nthe view at P live processes of one limited worker (medians of %d rounds)\n",
         VROUNDS);
  printf("%-10s %15s %6s %15s %6s %15s %6s %15s %6s\n", "processes", "cuMemGetInfo ns",
         "ratio", "TotalMem ns", "ratio", "nvml info ns", "ratio", "control ns", "ratio");
  double base[4] = {0, 0, 0, 0};
  for (int c = 0; c < N; c++) {
    double med[4];
    for (int k = 0; k < 4; k++) {
      qsort(v[c][k], VROUNDS, sizeof(double), cmp);
      med[k] = v[c][k][VROUNDS / 2];
      if (c == 0)
        base[k] = med[k];
    }
    printf("%-10d %15.1f %6.2f %15.1f %6.2f %15.1f %6.2f %15.1f %6.2f\n", counts[c], med[0],
           med[0] / base[0], med[1], med[1] / base[1], med[2], med[2] / base[2], med[3],
           med[3] / base[3]);
  }
  printf("(control: cuMemGetInfo_v2 without the hook, in turns with the rows' runs)\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && argv[1][0] == '-' && argv[1][1] == '-')
    return child(argv[1]);
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK [HOOK_BEFORE]\n", argv[0]);
    return 2;
  }
  const int modes = argc == 4 ? MODES : MODES - 4;
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  int (*set_limit)(const char *, const char *, uint64_t) =
      acc ? (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit") : NULL;
  const char *a4 = "GPU-11111111-1111-1111-1111-1111111111a4";
  if (!set_limit || set_limit("bench-limited", a4, 40ULL << 30) ||
      set_limit("bench-unlimited", "GPU-00000000-0000-0000-0000-0000000000h1", 40ULL << 30) ||
      set_limit("bench-procs", a4, 40ULL << 30) || set_limit("bench-granted", a4, 40ULL << 30) ||
      set_limit("bench-capped", a4, 40ULL << 30)) {
    fprintf(stderr, "cannot set the bench worker's limit\n");
    return 2;
  }
  /* The scheduler's words: 4,800 bp; the capped worker's queue at 1. */
  const char *grant = getenv("GRANT_TOOL");
  char cmd[2][4096];
  snprintf(cmd[0], sizeof cmd[0], "%s bench-granted %s 4800 0 1000", grant ? grant : "", a4);
  snprintf(cmd[1], sizeof cmd[1], "%s bench-capped %s 4800 1 1000", grant ? grant : "", a4);
  if (!grant || system(cmd[0]) != 0 || system(cmd[1]) != 0) {
    fprintf(stderr, "cannot grant the bench workers their share (GRANT_TOOL)\n");
    return 2;
  }
  static const char *const names[MODES] = {
      "driver only",           "hook, no worker",          "hook, unlimited worker",
      "hook, limited worker",  "hook, granted worker",     "hook, capped worker",
      "hook, worker, no books", "before, unlimited worker", "before, limited worker",
      "before, granted worker", "before, capped worker"};
  const char *before = argc == 4 ? argv[3] : NULL;
  const char *hooks[MODES] = {NULL,    argv[2], argv[2], argv[2], argv[2], argv[2],
                              argv[2], before,  before,  before,  before};
  const char *workers[MODES] = {NULL,           NULL,           "bench-unlimited", "bench-limited",
                                "bench-granted", "bench-capped", "bench-bookless",
                                "bench-unlimited", "bench-limited", "bench-granted",
                                "bench-capped"};
  double pair[MODES][ROUNDS], look[MODES][ROUNDS], lau[MODES][ROUNDS];
  double view[3][MODES][ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int m = 0; m < modes; m++) {
      double v[OUTS];
      if (run_mode(argv[0], "--child", hooks[m], workers[m], v)) {
        fprintf(stderr, "bench child (%s) failed\n", names[m]);
        return 1;
      }
      pair[m][r] = v[0];
      look[m][r] = v[1];
      lau[m][r] = v[2];
      for (int k = 0; k < 3; k++)
        view[k][m][r] = v[3 + k];
    }
  printf("hook overhead on the fake driver (medians of %d rounds taking turns)\n", ROUNDS);
  printf("%-24s %14s %10s %10s %16s %10s %10s %10s %8s\n", "mode", "alloc+free ns", "added ns",
         "ratio", "GetProcAddr ns", "ratio", "launch ns", "added ns", "ratio");
  double base_pair = 0, base_look = 0, base_lau = 0;
  for (int m = 0; m < modes; m++) {
    qsort(pair[m], ROUNDS, sizeof(double), cmp);
    qsort(look[m], ROUNDS, sizeof(double), cmp);
    qsort(lau[m], ROUNDS, sizeof(double), cmp);
    double p = pair[m][ROUNDS / 2], l = look[m][ROUNDS / 2], k = lau[m][ROUNDS / 2];
    if (m == 0) {
      base_pair = p;
      base_look = l;
      base_lau = k;
    }
    printf("%-24s %14.1f %10.1f %10.2f %16.1f %10.2f %10.1f %10.1f %8.2f\n", names[m], p,
           p - base_pair, p / base_pair, l, l / base_look, k, k - base_lau, k / base_lau);
  }
  printf("\nthe virtualized view, ns per call (added: over the driver only)\n");
  printf("%-24s %16s %10s %16s %10s %16s %10s\n", "mode", "cuMemGetInfo_v2", "added",
         "DeviceTotalMem", "added", "nvmlMemoryInfo", "added");
  double vbase[3] = {0, 0, 0};
  for (int m = 0; m < modes; m++) {
    double med[3];
    for (int k = 0; k < 3; k++) {
      qsort(view[k][m], ROUNDS, sizeof(double), cmp);
      med[k] = view[k][m][ROUNDS / 2];
      if (m == 0)
        vbase[k] = med[k];
    }
    printf("%-24s %16.1f %10.1f %16.1f %10.1f %16.1f %10.1f\n", names[m], med[0],
           med[0] - vbase[0], med[1], med[1] - vbase[1], med[2], med[2] - vbase[2]);
  }
  return processes(argv[0], argv[2]);
}
