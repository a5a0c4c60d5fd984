/* The hook's overhead on the fake driver, hooked vs unhooked in one run.
 *
 * Usage: bench_hook LIBACCELERATOR HOOK
 * Runs itself as a child per mode, taking turns (7 rounds, medians):
 *   driver only     no LD_PRELOAD
 *   hook, no worker LD_PRELOAD, no ACCELERATOR_WORKER_ID (inert)
 *   hook, unlimited LD_PRELOAD, a worker without a limit on the device
 *                   (its books exist, made by a limit on another device:
 *                   usage recorded, each launch checks the limiter)
 *   hook, limited   LD_PRELOAD, a worker with a limit it never reaches
 *   hook, no books  LD_PRELOAD, a worker the host never named (no books:
 *                   fail-open, allocations and launches go to the driver)
 * Each child times cuMemAlloc_v2 + cuMemFree_v2 pairs and
 * cuGetProcAddress_v2("cuMemAlloc") lookups through pointers taken with
 * dlopen + dlsym (through the hook's dlsym when preloaded), and
 * cuLaunchKernel_ptsz launches through the pointer cuGetProcAddress_v2
 * hands out (the hook's wrapper when preloaded; no compute limit set). */
#include <dlfcn.h>
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
#define LAUNCHES 1000000
#define ROUNDS 7
#define MODES 5

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int child(void) {
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
  void *c, *launch_p = NULL;
  int launch_st;
  if (!init || !ctx || !alloc || !release || !gpa || init(0) || ctx(&c, 0, 0) ||
      gpa("cuLaunchKernel", &launch_p, 12080, 2, &launch_st) || !launch_p)
    return 2;
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) =
      (CUresult(*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **))launch_p;
  CUdeviceptr p;
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
  for (int i = 0; i < LAUNCHES; i++)
    launch(c, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  double t3 = now_ns();
  printf("%.2f %.2f %.2f\n", (t1 - t0) / PAIRS, (t2 - t1) / LOOKUPS, (t3 - t2) / LAUNCHES);
  return 0;
}

static int run_mode(const char *self, const char *hook, const char *worker, double out[3]) {
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
    execl(self, self, "--child", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char buf[128] = {0};
  ssize_t n = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
      sscanf(buf, "%lf %lf %lf", &out[0], &out[1], &out[2]) != 3)
    return -1;
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--child") == 0)
    return child();
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  int (*set_limit)(const char *, const char *, uint64_t) =
      acc ? (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit") : NULL;
  if (!set_limit ||
      set_limit("bench-limited", "GPU-11111111-1111-1111-1111-1111111111a4", 40ULL << 30) ||
      set_limit("bench-unlimited", "GPU-00000000-0000-0000-0000-0000000000h1", 40ULL << 30)) {
    fprintf(stderr, "cannot set the bench worker's limit\n");
    return 2;
  }
  static const char *const names[MODES] = {"driver only", "hook, no worker",
                                           "hook, unlimited worker", "hook, limited worker",
                                           "hook, worker, no books"};
  const char *hooks[MODES] = {NULL, argv[2], argv[2], argv[2], argv[2]};
  const char *workers[MODES] = {NULL, NULL, "bench-unlimited", "bench-limited", "bench-bookless"};
  double pair[MODES][ROUNDS], look[MODES][ROUNDS], lau[MODES][ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int m = 0; m < MODES; m++) {
      double v[3];
      if (run_mode(argv[0], hooks[m], workers[m], v)) {
        fprintf(stderr, "bench child (%s) failed\n", names[m]);
        return 1;
      }
      pair[m][r] = v[0];
      look[m][r] = v[1];
      lau[m][r] = v[2];
    }
  printf("hook overhead on the fake driver (medians of %d rounds taking turns)\n", ROUNDS);
  printf("%-24s %14s %10s %10s %16s %10s %10s %10s %8s\n", "mode", "alloc+free ns", "added ns",
         "ratio", "GetProcAddr ns", "ratio", "launch ns", "added ns", "ratio");
  double base_pair = 0, base_look = 0, base_lau = 0;
  for (int m = 0; m < MODES; m++) {
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
  return 0;
}
