/* Compute limits through the hook, on simulated time, the production way:
 * the limited workers run in pid namespaces of their own (each its own
 * unshare(CLONE_NEWPID) + fork, /proc mounted for it), so every worker is
 * pid 1 where it runs, and a host process measures them: this test, as the
 * hypervisor does (libaccelerator dlopened RTLD_NOW|RTLD_GLOBAL, AccelInit,
 * limits set with SetComputeUnitHardLimit, nvidia vendor on the fake NVML),
 * runs the host compute sampler; later, two host processes of its own
 * (`test_compute --host`) take turns.
 *
 * app_launch processes under LD_PRELOAD=libcuda_limiter.so launch kernels
 * of the fake driver, which occupy one simulated device
 * (c-tests/fakes/timeline.h) under the pid the driver would see: the host
 * pid, which the harness that made the namespace passes in
 * FAKE_CUDA_HOST_PID. The fake NVML reports per-process utilization from
 * the timeline, by host pid. Utilization here is read from the timeline
 * itself: device time of a process's kernels over wall time.
 *
 * Usage: test_compute LIBACCELERATOR HOOK LIBLIMITER APP_LAUNCH
 *        test_compute --host LIBACCELERATOR   (a host sampler: AccelInit, then wait)
 *        test_compute --host-dlclose LIBACCELERATOR   (AccelInit, then dlclose)
 *        test_compute --host-fork LIBACCELERATOR   (AccelInit, fork, wait) 
 * Accuracy across kernel lengths, fairness among a worker's processes and
 * workers side by side: test_compute_cases.c. */
#include <dlfcn.h>
#include <math.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compute_util.h"

#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"

static const char *libacc, *self;
static int (*set_compute)(const char *, const char *, uint32_t);
static int (*accel_shutdown)(void);
static int (*freeze)(const char *, void *);
static int (*resume)(const char *, void *);
static int (*auto_freeze)(const char *, const char *, const char *);

/* A host sampler process: this program with --host. */
static pid_t spawn_host(int err) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (err >= 0)
      dup2(err, 2);
    execl(self, self, "--host", libacc, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int host_main(const char *lib, const char *how) {
  void *acc = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  int (*init)(void) = acc ? (int (*)(void))dlsym(acc, "AccelInit") : NULL;
  if (!init || init() != 0)
    return 2;
  if (strcmp(how, "--host-fork") == 0) {
    /* Fork once the sampler holds the lease; the child (no sampler thread)
     * lives on; its pid on stdout. */
    nap(0.5);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0)
      for (;;)
        pause();
    printf("%d\n", (int)child);
    fflush(stdout);
  }
  if (strcmp(how, "--host-dlclose") == 0) {
    /* dlclose without AccelShutdown while the sampler runs: the library
     * pinned itself, so its code stays mapped and the thread keeps going. */
    if (dlclose(acc) != 0)
      return 3;
    nap(0.5);
    return dlopen(lib, RTLD_NOW | RTLD_NOLOAD) ? 0 : 4;
  }
  for (;;)
    pause();
}

/* Whether a process holds the node's sampler lease. */
static int lease_held(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/sampler.lock", getenv("ACCELERATOR_STATE_DIR"));
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return 0;
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
  int held = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  close(fd);
  return held;
}

/* A sampling host process forks, and is SIGKILLed while its child lives:
 * the child's copy of the lease's descriptor was closed at the fork, so the
 * lease is free (a dead sampler is not kept elected). */
static void fork_keeps_no_lease(void) {
  int out[2];
  CHECK(pipe(out) == 0, "pipe");
  fflush(NULL);
  pid_t host = fork();
  if (host == 0) {
    dup2(out[1], 1);
    execl(self, self, "--host-fork", libacc, (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  char line[32] = {0};
  CHECK(read(out[0], line, sizeof line - 1) > 0, "the host process forked");
  close(out[0]);
  pid_t child = (pid_t)atoi(line);
  CHECK(child > 0 && lease_held(), "the forking host process holds the lease");
  kill(host, SIGKILL);
  CHECK(wait_status(host) == 128 + SIGKILL, "the host process was killed");
  unsigned long long t0 = tl_now();
  while (lease_held() && tl_now() - t0 < 1000000000ULL)
    nap(0.005);
  CHECK(!lease_held(), "its forked child keeps no lease");
  CHECK(child > 0 && kill(child, 0) == 0, "the child lives on");
  if (child > 0)
    kill(child, SIGKILL);
}

/* A host process that unloads the library without shutting it down. */
static void unload_without_shutdown(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--host-dlclose", libacc, (char *)NULL);
    _exit(127);
  }
  CHECK(wait_status(pid) == 0, "dlclose without AccelShutdown: the sampler's library stays loaded");
}

/* Utilization (%) of each of n processes over `secs`. */
static void measure(const struct app *apps, double *util, int n, double secs) {
  unsigned long long b0[8], t0 = tl_now();
  for (int i = 0; i < n; i++)
    b0[i] = busy(apps[i].host);
  nap(secs);
  unsigned long long span = tl_now() - t0;
  for (int i = 0; i < n; i++)
    util[i] = 100.0 * (double)(busy(apps[i].host) - b0[i]) / (double)span;
}

static void worker_name(char *w, size_t n, const char *tag) {
  snprintf(w, n, "cu%d-%s", (int)getpid(), tag);
}

/* Whether process `pid` maps limits.shm, and only without write permission. */
static int limits_mapped_read_only(pid_t pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  int seen = 0, writable = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (!strstr(line, "/limits.shm"))
      continue;
    char perms[8] = {0};
    if (sscanf(line, "%*s %7s", perms) == 1) {
      seen = 1;
      writable |= strchr(perms, 'w') != NULL;
    }
  }
  if (f)
    fclose(f);
  return seen && !writable;
}

/* The sampling host process is SIGKILLed while a second stands by: the
 * second takes the lease within a second and the limit keeps holding. */
static void takeover(void) {
  char c[64];
  worker_name(c, sizeof c, "lease");
  CHECK(set_compute(c, UUID0, 30) == 0, "limit");
  /* This process's sampler stops: the two host processes take turns. */
  CHECK(accel_shutdown() == 0, "AccelShutdown");
  CHECK(!lease_held(), "AccelShutdown gave the lease up");
  pid_t first = spawn_host(-1);
  for (int i = 0; i < 200 && !lease_held(); i++)
    nap(0.01);
  CHECK(lease_held(), "the first host process took the lease");
  pid_t second = spawn_host(-1);
  /* 400 µs kernels: 8x the launch estimate, so only a live sampler holds it. */
  struct app w = spawn(c, "400", "spin", "5");
  nap(2.0);
  double u;
  measure(&w, &u, 1, 0.5);
  printf("compute take-over: 30%% -> %.1f%% before the sampler's SIGKILL\n", u);
  /* The tenant's view of its charge: limits.shm mapped without write permission. */
  CHECK(limits_mapped_read_only(w.host), "the worker maps limits.shm read-only");
  CHECK(u >= 25 && u <= 35, "held before: %.1f%%", u);
  unsigned long long t0 = tl_now();
  kill(first, SIGKILL);
  CHECK(wait_status(first) == 128 + SIGKILL, "the first host process was killed");
  while (!lease_held() && tl_now() - t0 < 3000000000ULL)
    nap(0.001);
  double took = (double)(tl_now() - t0) / 1e9;
  measure(&w, &u, 1, 1.5);
  printf("compute take-over: the standby host process took the lease %.3f s after the SIGKILL; "
         "30%% -> %.1f%% after\n",
         took, u);
  CHECK(took <= 1.0, "taken over within 1 s (%.3f)", took);
  CHECK(u >= 25 && u <= 35, "held after the take-over: %.1f%%", u);
  CHECK(wait_status(w.harness) == 0, "app");
  kill(second, SIGKILL);
  CHECK(wait_status(second) == 128 + SIGKILL, "the second host process was killed");
}

/* FreezeWorker stops launches within 10 ms; ResumeWorker lets them go. */
static void freeze_resume(void) {
  char w[64], state[16];
  worker_name(w, sizeof w, "freeze");
  CHECK(set_compute(w, UUID0, 50) == 0, "limit");
  struct app a = spawn(w, "100", "spin", "2");
  nap(0.5);
  CHECK(freeze(w, state) == 0, "FreezeWorker");
  nap(0.010 + 0.002); /* 10 ms, plus the fake driver's 2 ms launch queue */
  unsigned long long b0 = busy(a.host);
  nap(0.3);
  unsigned long long b1 = busy(a.host);
  CHECK(b1 == b0, "no launch 10 ms after the freeze (%llu ns more)", b1 - b0);
  unsigned long long r0 = tl_now();
  CHECK(resume(w, state) == 0, "ResumeWorker");
  while (busy(a.host) == b1 && tl_now() - r0 < 1000000000ULL)
    nap(0.0005);
  double ms = (double)(tl_now() - r0) / 1e6;
  printf("compute freeze: launches stopped within 12 ms, resumed after %.1f ms\n", ms);
  CHECK(ms < 10, "launches resume within 10 ms (%.1f)", ms);
  CHECK(wait_status(a.harness) == 0, "app");
}

/* A worker whose every launch is held (FreezeWorker, or AutoFreeze of
 * "compute"; a 0 % limit is refused by SetComputeUnitHardLimit, which
 * takes 1..=100): the launching thread waits, another thread's cuMemAlloc
 * returns (refused for a frozen worker, whose memory is frozen too;
 * granted under AutoFreeze of compute), and the process exits within a
 * second of leaving main with the launch still blocked. */
static void held_forever(void) {
  for (int how = 0; how < 2; how++) {
    char w[64], state[16];
    worker_name(w, sizeof w, how ? "held-auto" : "held-frozen");
    CHECK(set_compute(w, UUID0, 0) != 0, "a 0%% limit is refused");
    CHECK(set_compute(w, UUID0, 40) == 0, "limit");
    int out[2], in[2];
    CHECK(pipe(out) == 0 && pipe(in) == 0, "pipes");
    struct app a = spawn_app(w, "100", -1, out[1], in[0], "blocked", "300");
    close(out[1]);
    close(in[0]);
    char text[256] = {0};
    size_t got = 0;
    ssize_t n;
    while (!strstr(text, "ready") && got < sizeof text - 1 &&
           (n = read(out[0], text + got, sizeof text - 1 - got)) > 0)
      got += (size_t)n;
    if (how)
      CHECK(auto_freeze(w, UUID0, "compute") == 0, "AutoFreeze compute");
    else
      CHECK(freeze(w, state) == 0, "FreezeWorker");
    CHECK(write(in[1], "g", 1) == 1, "go");
    close(in[1]);
    while (got < sizeof text - 1 && (n = read(out[0], text + got, sizeof text - 1 - got)) > 0)
      got += (size_t)n;
    close(out[0]);
    int st = wait_status(a.harness);
    unsigned long long end = tl_now();
    const char *e = strstr(text, "exit "), *al = strstr(text, "alloc ");
    int alloc_rc = al ? atoi(al + 6) : -1;
    double secs = e ? (double)(end - strtoull(e + 5, NULL, 10)) / 1e9 : -1;
    printf("compute held launches (%s): cuMemAlloc on another thread returned %d; the process "
           "exited %.3f s after leaving main\n",
           how ? "AutoFreeze" : "FreezeWorker", alloc_rc, secs);
    CHECK(st == 0, "held launches: no launch got through (%d)", st);
    CHECK(how ? alloc_rc == 0 : alloc_rc == 2, "cuMemAlloc: %d", alloc_rc);
    CHECK(e && secs < 1.0, "the exit with a launch blocked took %.3f s", secs);
    if (!how)
      CHECK(resume(w, state) == 0, "ResumeWorker");
  }
}

static int count_lines(int fd, const char *needle) {
  char text[8192] = {0};
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  int c = 0;
  for (char *p = text; n > 0 && (p = strstr(p, needle)); p++)
    c++;
  return c;
}

static int temp_file(void) {
  char path[] = "/tmp/test_compute_err.XXXXXX";
  int fd = mkstemp(path);
  unlink(path);
  return fd;
}

/* No measurement: fail-open (the default) keeps limiting on estimates,
 * fail-closed holds launches; each worker says so once. First a host
 * sampler whose NVML fails (its errors logged once a minute, not per
 * sample), then no host sampler at all. */
static void measurement_lost(void) {
  for (int closed = 0; closed < 2; closed++) {
    char w[64];
    worker_name(w, sizeof w, closed ? "closed" : "open");
    CHECK(set_compute(w, UUID0, 30) == 0, "limit");
    int err = temp_file(), host_err = temp_file();
    pid_t host = -1;
    if (!closed) {
      setenv("FAKE_NVML_FAIL", "nvmlDeviceGetProcessUtilization", 1);
      host = spawn_host(host_err);
      unsetenv("FAKE_NVML_FAIL");
    } else {
      setenv("ACCELERATOR_COMPUTE_FAIL_CLOSED", "1", 1);
    }
    struct app a = spawn_app(w, "100", err, -1, -1, "spin", "3");
    nap(1.5);
    double u;
    measure(&a, &u, 1, 1.0);
    if (closed) { /* its launch waits for good: end it */
      kill(a.host, SIGKILL);
      CHECK(wait_status(a.harness) == 128 + SIGKILL, "app");
    } else {
      CHECK(wait_status(a.harness) == 0, "app");
      kill(host, SIGKILL);
      CHECK(wait_status(host) == 128 + SIGKILL, "host process");
      CHECK(count_lines(host_err, "cannot measure utilization") == 1,
            "NVML errors are logged once a minute, not per sample");
    }
    printf("compute without measurement (%s), fail-%s: %.1f%%\n",
           closed ? "no host sampler" : "the host sampler's NVML failing",
           closed ? "closed" : "open", u);
    if (closed)
      CHECK(u < 1, "fail-closed holds launches: %.1f%%", u);
    else
      CHECK(u > 10, "fail-open keeps launching on estimates: %.1f%%", u);
    CHECK(count_lines(err, "no utilization measurement") == 1, "the policy is logged once");
    close(err);
    close(host_err);
  }
  unsetenv("ACCELERATOR_COMPUTE_FAIL_CLOSED");
}

/* Every launch entry point, by cuGetProcAddress_v2 and dlsym, is throttled. */
static void paths(void) {
  char w[64];
  worker_name(w, sizeof w, "paths");
  CHECK(set_compute(w, UUID0, 10) == 0, "limit");
  int out[2];
  CHECK(pipe(out) == 0, "pipe");
  struct app a = spawn_app(w, "100", -1, out[1], -1, "paths", "100");
  close(out[1]);
  char line[32] = {0};
  CHECK(read(out[0], line, sizeof line - 1) > 0, "paths output");
  close(out[0]);
  CHECK(wait_status(a.harness) == 0, "every path reached the driver");
  /* 1,600 launches at 50 µs estimated each: 200 in the 100 ms burst, the
   * rest at 10 % (0.7 s); unthrottled, the fake's 100 µs kernels take 0.16 s. */
  double secs = atof(line);
  printf("compute paths: 1600 launches by 16 ways at 10%%: %.2f s\n", secs);
  CHECK(secs >= 0.5, "all 16 ways throttled (%.2f s)", secs);
}

int main(int argc, char **argv) {
  if (argc == 3 && strncmp(argv[1], "--host", 6) == 0)
    return host_main(argv[2], argv[1]);
  if (argc < 5) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK LIBLIMITER APP_LAUNCH\n", argv[0]);
    return 2;
  }
  char path[] = "/tmp/test_compute_timeline.XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  setenv("FAKE_GPU_TIMELINE", path, 1);
  /* As the hypervisor loads it; its first compute limit (or AccelInit)
   * starts this process's host sampler. */
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  void *lim = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
  if (!acc || !lim) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  int (*init)(void) = (int (*)(void))dlsym(acc, "AccelInit");
  accel_shutdown = (int (*)(void))dlsym(acc, "AccelShutdown");
  set_compute = (int (*)(const char *, const char *, uint32_t))dlsym(acc, "SetComputeUnitHardLimit");
  freeze = (int (*)(const char *, void *))dlsym(lim, "FreezeWorker");
  resume = (int (*)(const char *, void *))dlsym(lim, "ResumeWorker");
  auto_freeze = (int (*)(const char *, const char *, const char *))dlsym(lim, "AutoFreeze");
  libacc = argv[1];
  hook = argv[2];
  app = argv[4];
  self = "/proc/self/exe";
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0)
    self = exe;
  tl = tl_map();
  if (!tl || !init || !accel_shutdown || !set_compute || !freeze || !resume || !auto_freeze ||
      !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "setup failed\n");
    return 2;
  }
  CHECK(init() == 0, "AccelInit");
  char w[64];
  worker_name(w, sizeof w, "over");
  CHECK(set_compute(w, UUID0, 101) != 0, "a limit above 100%% is refused");
  paths();
  freeze_resume();
  held_forever();
  takeover();
  measurement_lost();
  fork_keeps_no_lease();
  unload_without_shutdown();
  unlink(path);
  return test_summary();
}
