/* Compute limits through the hook, on simulated time: app_launch processes
 * under LD_PRELOAD=libcuda_limiter.so launch kernels of the fake driver,
 * which occupy one simulated device (c-tests/fakes/timeline.h); the fake
 * NVML reports per-process utilization from it to the hook's sampler.
 * Limits are set as the hypervisor sets them (SetComputeUnitHardLimit
 * through libaccelerator, nvidia vendor), freezes through liblimiter.
 * Utilization here is read from the timeline itself: device time of a
 * process's kernels over wall time.
 *
 * Usage: test_compute LIBACCELERATOR HOOK LIBLIMITER APP_LAUNCH
 * Windows are shorter than the 30 s to keep `make test` under a
 * minute: 2 s to converge, then 1.5 s measured. */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../fakes/timeline.h"
#include "../test_util.h"

#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"

static const char *hook, *app;
static int (*set_compute)(const char *, const char *, uint32_t);
static int (*freeze)(const char *, void *);
static int (*resume)(const char *, void *);
static int (*auto_freeze)(const char *, const char *, const char *);
static struct timeline *tl;

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static pid_t spawn(const char *worker, const char *kernel_us, int err, const char *mode,
                   const char *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LD_PRELOAD", hook, 1);
    setenv("ACCELERATOR_WORKER_ID", worker, 1);
    setenv("FAKE_KERNEL_US", kernel_us, 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    if (err >= 0)
      dup2(err, 2);
    execl(app, app, mode, arg, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int wait_status(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static unsigned long long busy(pid_t pid) {
  struct tl_proc *p = tl_proc(&tl->dev[0], (unsigned)pid);
  return p ? __atomic_load_n(&p->busy_ns, __ATOMIC_ACQUIRE) : 0;
}

/* Utilization (%) of each of n processes over `secs`. */
static void measure(const pid_t *pids, double *util, int n, double secs) {
  unsigned long long b0[8], t0 = tl_now();
  for (int i = 0; i < n; i++)
    b0[i] = busy(pids[i]);
  nap(secs);
  unsigned long long span = tl_now() - t0;
  for (int i = 0; i < n; i++)
    util[i] = 100.0 * (double)(busy(pids[i]) - b0[i]) / (double)span;
}

static void worker_name(char *w, size_t n, const char *tag) {
  snprintf(w, n, "cu%d-%s", (int)getpid(), tag);
}

/* Saturating worker limited to p %: converged within 2 s, then within ±5. */
static void accuracy(int p) {
  char w[64], tag[16];
  snprintf(tag, sizeof tag, "acc%d", p);
  worker_name(w, sizeof w, tag);
  CHECK(set_compute(w, UUID0, (uint32_t)p) == 0, "SetComputeUnitHardLimit(%s, %d)", w, p);
  pid_t pid = spawn(w, "100", -1, "spin", "4");
  /* Convergence: the first 250 ms window from which every window is within ±5. */
  double u, conv = -1, t = 0;
  for (int i = 0; i < 8; i++, t += 0.25) {
    measure(&pid, &u, 1, 0.25);
    if (u < p - 5 || u > p + 5)
      conv = -1;
    else if (conv < 0)
      conv = t;
  }
  measure(&pid, &u, 1, 1.5);
  printf("compute accuracy: limit %2d%%  measured %5.1f%%  error %+5.1f  converged in %.2f s\n", p,
         u, u - p, conv < 0 ? -1.0 : conv);
  CHECK(conv >= 0 && conv <= 2.0, "limit %d%%: converged within 2 s (%.2f)", p, conv);
  CHECK(u >= p - 5 && u <= p + 5, "limit %d%%: measured %.1f%% within ±5", p, u);
  CHECK(wait_status(pid) == 0, "app (limit %d%%)", p);
}

/* Two workers at 20 % and 60 % at once; then an unlimited one beside them
 * takes what they leave. (With it, the fake device is oversubscribed and
 * serves launches in order: the 60 % worker's launches then also wait in
 * the fake driver's queue, so only the 20 % worker is held to ±5 there.) */
static void shares(void) {
  char a[64], b[64], c[64];
  worker_name(a, sizeof a, "share20");
  worker_name(b, sizeof b, "share60");
  worker_name(c, sizeof c, "free");
  CHECK(set_compute(a, UUID0, 20) == 0 && set_compute(b, UUID0, 60) == 0, "limits 20/60");
  pid_t pids[3] = {spawn(a, "100", -1, "spin", "6.2"), spawn(b, "300", -1, "spin", "6.2"), 0};
  nap(2.0);
  double u[3];
  measure(pids, u, 2, 1.5);
  printf("compute shares: 20%% -> %.1f%%, 60%% -> %.1f%%\n", u[0], u[1]);
  CHECK(u[0] >= 15 && u[0] <= 25, "the 20%% worker measured %.1f%%", u[0]);
  CHECK(u[1] >= 55 && u[1] <= 65, "the 60%% worker measured %.1f%%", u[1]);
  pids[2] = spawn(c, "100", -1, "spin", "2.2");
  nap(0.5);
  measure(pids, u, 3, 1.5);
  printf("compute shares with an unlimited worker: 20%% -> %.1f%%, 60%% -> %.1f%%, "
         "unlimited -> %.1f%%\n",
         u[0], u[1], u[2]);
  CHECK(u[0] >= 15 && u[0] <= 25, "the 20%% worker measured %.1f%%", u[0]);
  CHECK(u[1] <= 65, "the 60%% worker stays under its limit: %.1f%%", u[1]);
  CHECK(u[2] >= 100 - u[0] - u[1] - 5, "the unlimited worker takes the rest: %.1f%%", u[2]);
  for (int i = 0; i < 3; i++)
    CHECK(wait_status(pids[i]) == 0, "app %d", i);
}

/* The sampler's holder is SIGKILLed: another process's thread takes the
 * lease and a worker started afterwards is still steered to its limit. */
static void takeover(void) {
  char a[64], b[64], c[64];
  worker_name(a, sizeof a, "lease-a");
  worker_name(b, sizeof b, "lease-b");
  worker_name(c, sizeof c, "lease-c");
  CHECK(set_compute(a, UUID0, 20) == 0 && set_compute(b, UUID0, 20) == 0 &&
            set_compute(c, UUID0, 30) == 0,
        "limits");
  pid_t first = spawn(a, "100", -1, "spin", "10");
  nap(0.5);
  pid_t second = spawn(b, "100", -1, "spin", "4.5");
  nap(1.0);
  kill(first, SIGKILL);
  CHECK(wait_status(first) == 128 + SIGKILL, "the first sampler was killed");
  nap(0.3);
  /* 400 µs kernels: 8x the launch estimate, so only a live sampler holds it. */
  pid_t third = spawn(c, "400", -1, "spin", "3.5");
  nap(2.0);
  double u;
  measure(&third, &u, 1, 1.5);
  printf("compute take-over: a worker started after the sampler's SIGKILL: 30%% -> %.1f%%\n", u);
  CHECK(u >= 25 && u <= 35, "steered after the take-over: %.1f%%", u);
  CHECK(wait_status(second) == 0 && wait_status(third) == 0, "apps");
}

/* FreezeWorker stops launches within 10 ms; ResumeWorker lets them go. */
static void freeze_resume(void) {
  char w[64], state[16];
  worker_name(w, sizeof w, "freeze");
  CHECK(set_compute(w, UUID0, 50) == 0, "limit");
  pid_t pid = spawn(w, "100", -1, "spin", "2");
  nap(0.5);
  CHECK(freeze(w, state) == 0, "FreezeWorker");
  nap(0.010 + 0.002); /* 10 ms, plus the fake driver's 2 ms launch queue */
  unsigned long long b0 = busy(pid);
  nap(0.3);
  unsigned long long b1 = busy(pid);
  CHECK(b1 == b0, "no launch 10 ms after the freeze (%llu ns more)", b1 - b0);
  unsigned long long r0 = tl_now();
  CHECK(resume(w, state) == 0, "ResumeWorker");
  while (busy(pid) == b1 && tl_now() - r0 < 1000000000ULL)
    nap(0.0005);
  double ms = (double)(tl_now() - r0) / 1e6;
  printf("compute freeze: launches stopped within 12 ms, resumed after %.1f ms\n", ms);
  CHECK(ms < 10, "launches resume within 10 ms (%.1f)", ms);
  CHECK(wait_status(pid) == 0, "app");
}

/* A worker whose every launch is held (AutoFreeze of "compute"; a 0 %
 * limit is refused by SetComputeUnitHardLimit, which takes 1..=100): the
 * launching thread waits, the others go on, and the process exits. */
static void held_forever(void) {
  char w[64];
  worker_name(w, sizeof w, "held");
  CHECK(set_compute(w, UUID0, 0) != 0, "a 0%% limit is refused");
  CHECK(set_compute(w, UUID0, 40) == 0, "limit");
  CHECK(auto_freeze(w, UUID0, "compute") == 0, "AutoFreeze compute");
  unsigned long long t0 = tl_now();
  pid_t pid = spawn(w, "100", -1, "blocked", "300");
  CHECK(wait_status(pid) == 0, "held launches: other threads and the exit go on");
  double s = (double)(tl_now() - t0) / 1e9;
  CHECK(s < 2.0, "the process exited in %.2f s", s);
}

static int count_lines(int fd, const char *needle) {
  char text[8192] = {0};
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  int c = 0;
  for (char *p = text; n > 0 && (p = strstr(p, needle)); p++)
    c++;
  return c;
}

/* NVML failing: fail-open keeps limiting on estimates, fail-closed holds
 * launches; each says so once, and NVML's errors are logged once a minute. */
static void measurement_lost(void) {
  setenv("FAKE_NVML_FAIL", "nvmlDeviceGetProcessUtilization", 1);
  for (int closed = 0; closed < 2; closed++) {
    if (closed)
      setenv("ACCELERATOR_COMPUTE_FAIL_CLOSED", "1", 1);
    char w[64], path[] = "/tmp/test_compute_err.XXXXXX";
    worker_name(w, sizeof w, closed ? "closed" : "open");
    CHECK(set_compute(w, UUID0, 30) == 0, "limit");
    int err = mkstemp(path);
    unlink(path);
    pid_t pid = spawn(w, "100", err, "spin", "3");
    nap(1.5);
    double u;
    measure(&pid, &u, 1, 1.0);
    if (closed) { /* its launch waits for good: end it */
      kill(pid, SIGKILL);
      CHECK(wait_status(pid) == 128 + SIGKILL, "app");
    } else {
      CHECK(wait_status(pid) == 0, "app");
    }
    printf("compute without measurement, fail-%s: %.1f%%\n", closed ? "closed" : "open", u);
    if (closed)
      CHECK(u < 1, "fail-closed holds launches: %.1f%%", u);
    else
      CHECK(u > 10, "fail-open keeps launching on estimates: %.1f%%", u);
    CHECK(count_lines(err, "no utilization measurement") == 1, "the policy is logged once");
    CHECK(count_lines(err, "cannot measure utilization") == 1,
          "NVML errors are logged once a minute, not per sample");
    close(err);
  }
  unsetenv("ACCELERATOR_COMPUTE_FAIL_CLOSED");
  unsetenv("FAKE_NVML_FAIL");
}

/* Every launch entry point, by cuGetProcAddress_v2 and dlsym, is throttled. */
static void paths(void) {
  char w[64];
  worker_name(w, sizeof w, "paths");
  CHECK(set_compute(w, UUID0, 10) == 0, "limit");
  int out[2];
  CHECK(pipe(out) == 0, "pipe");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LD_PRELOAD", hook, 1);
    setenv("ACCELERATOR_WORKER_ID", w, 1);
    setenv("FAKE_KERNEL_US", "100", 1);
    dup2(out[1], 1);
    execl(app, app, "paths", "100", (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  char line[32] = {0};
  CHECK(read(out[0], line, sizeof line - 1) > 0, "paths output");
  close(out[0]);
  CHECK(wait_status(pid) == 0, "every path reached the driver");
  /* 1,600 launches at 50 µs estimated each: 200 in the 100 ms burst, the
   * rest at 10 % (0.7 s); unthrottled, the fake's 100 µs kernels take 0.16 s. */
  double secs = atof(line);
  printf("compute paths: 1600 launches by 16 ways at 10%%: %.2f s\n", secs);
  CHECK(secs >= 0.5, "all 16 ways throttled (%.2f s)", secs);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK LIBLIMITER APP_LAUNCH\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void *lim = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
  if (!acc || !lim) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  set_compute = (int (*)(const char *, const char *, uint32_t))dlsym(acc, "SetComputeUnitHardLimit");
  freeze = (int (*)(const char *, void *))dlsym(lim, "FreezeWorker");
  resume = (int (*)(const char *, void *))dlsym(lim, "ResumeWorker");
  auto_freeze = (int (*)(const char *, const char *, const char *))dlsym(lim, "AutoFreeze");
  hook = argv[2];
  app = argv[4];
  char path[] = "/tmp/test_compute_timeline.XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  setenv("FAKE_GPU_TIMELINE", path, 1);
  tl = tl_map();
  if (!tl || !set_compute || !freeze || !resume || !auto_freeze) {
    fprintf(stderr, "setup failed\n");
    return 2;
  }
  char w[64];
  worker_name(w, sizeof w, "over");
  CHECK(set_compute(w, UUID0, 101) != 0, "a limit above 100%% is refused");
  paths();
  freeze_resume();
  held_forever();
  static const int ps[] = {10, 30, 50, 80};
  for (size_t i = 0; i < 4; i++)
    accuracy(ps[i]);
  shares();
  takeover();
  measurement_lost();
  unlink(path);
  return test_summary();
}
