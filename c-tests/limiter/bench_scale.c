/* The scale benchmark (docs/scale.md): what the host's calls, the host's
 * sampler and the state directory cost as a node holds more workers (N)
 * and a worker more processes (P), each row as a ratio to N = P = 1 in the
 * same run.
 *
 * Usage: bench_scale LIBLIMITER LIBACCELERATOR DEVICE_UUID HOOK VIEWER
 * (libaccelerator of the nvidia build on the fake NVML, so its compute
 * sampler runs; DEVICE_UUID the fake driver's device 0, so that a hooked
 * process sees its worker's limit there; HOOK libcuda_limiter.so; VIEWER
 * bench_hook, whose "--view" mode times the hook's view; the fake driver
 * and NVML on LD_LIBRARY_PATH.) Per row: N workers with a memory and a
 * compute limit on the device and P forked processes each, every process
 * registered by its own allocation through the limiter (as a hooked process
 * is). Figures are medians of the calling thread's CPU time per call:
 *   v1 report   GetProcessMemoryUtilization
 *   v2 info     AccelGetProcessInformation
 *   usage       limiterGetWorkerUsage of one worker
 *   add         AddWorkerProcess of a registered process
 *   sampler     the host sampler thread's CPU over 2 s, all workers idle
 *               (% of a core: the process's CPU while this thread sleeps)
 *   state       the state directory's RAM (st_blocks)
 *   view        cuMemGetInfo_v2 in one more process of worker 0 (the one
 *               with P processes), started under LD_PRELOAD=HOOK with its
 *               ACCELERATOR_WORKER_ID: VIEWER --view (medians of batches of
 *               calls, bench_hook.c), the median of VIEW_RUNS runs; then a
 *               table of the three calls of the view (cuMemGetInfo_v2,
 *               cuDeviceTotalMem_v2, nvmlDeviceGetMemoryInfo) with the ns
 *               each adds to the same call without the hook, in turns
 *
 * Then soft mode (issue 34): SOFT_WORKERS workers with requests (1 % each:
 * 500 % asked) and priorities (1..100) on the device and no hard limit,
 * one registered process each, so that the sampler schedules the device
 * every period: its CPU over 2 s with the processes idle, then with each
 * taking 100 us of tokens every 20 ms (CheckAndRecordComputeOps, as a
 * launching process: the scheduler sees every worker use its grant).
 *
 * BENCH_SCALE_ROWS="1x1,500x1" picks the rows (default: the seven below);
 * the first must be 1x1, the baseline of every ratio.
 * The churn test's figures follow the table in `make bench-scale`
 * (limiter.mk: test_lifetime's churn). */
#include "host_api.h"
#include "worker_proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>


static const char *dev, *hook, *viewer;
static char state[4096];

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

/* Descriptors as a Go hypervisor has them: since Go 1.19 every Go program
 * raises its soft RLIMIT_NOFILE to the hard limit at start
 * (go.dev/issue/46279), and a host that keeps a descriptor per tenant
 * process relies on it. The processes Go starts get the old soft limit
 * back; so do this one's tenants (the view's runs). */
static struct rlimit tenant_nofile;
static void raise_nofile(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    tenant_nofile = r;
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0)
      perror("setrlimit(RLIMIT_NOFILE)");
  }
  if (getrlimit(RLIMIT_NOFILE, &r) == 0)
    printf("descriptors as a Go host has them: soft RLIMIT_NOFILE %llu (hard %llu)\n\n",
           (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max);
}

enum { COLS = 7, VIEW = 6, VIEW_RUNS = 7, CALLS = 3 };
static const char *names[COLS] = {"v1 report us", "v2 info us", "usage us", "add us",
                                  "sampler %",    "state KiB",  "hook view ns"};

/* The view's calls, as VIEWER --view prints them (ns per call), each with
 * what the hook adds. */
static const char *view_names[2 * CALLS] = {"cuMemGetInfo_v2 ns",         "added",
                                            "cuDeviceTotalMem_v2 ns",     "added",
                                            "nvmlDeviceGetMemoryInfo ns", "added"};

/* A table's header: the rows' column, then `n` named columns. */
static void table_head(const char *const cols[], int n) {
  printf("| N workers x P processes |");
  for (int c = 0; c < n; c++)
    printf(" %s |", cols[c]);
  printf("\n|---|");
  for (int c = 0; c < n; c++)
    printf("---|");
  printf("\n");
}

/* The view's ns per call (`ns`, as `calls`) in a run of VIEWER --view:
 * under the hook as a process of `worker`, or, with `worker` NULL, without
 * the hook. Exits on failure: a benchmark that cannot run fails. The
 * child's environment is built before fork(): this process has the
 * sampler's thread, and the child only execs. */
static void view_ns(const char *worker, double ns[CALLS]) {
  extern char **environ;
  size_t k = 0;
  while (environ[k])
    k++;
  char **env = calloc(k + 3, sizeof *env), preload[4200], id[200];
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", hook);
  snprintf(id, sizeof id, "ACCELERATOR_WORKER_ID=%s", worker ? worker : "");
  k = 0;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "ACCELERATOR_WORKER_ID=", 22) != 0)
      env[k++] = *e;
  if (worker) {
    env[k++] = preload;
    env[k++] = id;
  }
  char *args[] = {(char *)viewer, "--view", NULL};
  int fd[2];
  if (!env || pipe(fd)) {
    perror("view_ns");
    exit(1);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    if (tenant_nofile.rlim_max)
      setrlimit(RLIMIT_NOFILE, &tenant_nofile);
    execve(viewer, args, env);
    _exit(127);
  }
  free(env);
  close(fd[1]);
  char buf[128] = {0};
  size_t got = 0;
  ssize_t n;
  while (got < sizeof buf - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
    got += (size_t)n;
  close(fd[0]);
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
      sscanf(buf, "%lf %lf %lf", &ns[0], &ns[1], &ns[2]) != CALLS) {
    fprintf(stderr, "%s --view (%s%s) failed\n", viewer,
            worker ? "hooked, worker " : "driver alone", worker ? worker : "");
    exit(1);
  }
}

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

static double median_runs(double v[VIEW_RUNS]) {
  qsort(v, VIEW_RUNS, sizeof v[0], cmp);
  return v[VIEW_RUNS / 2];
}

/* The row's processes, ended at exit too: a row that fails leaves none. */
static pid_t *pids;
static int total;
static void end_processes(void) {
  for (int i = 0; i < total; i++)
    end_worker_process(pids[i]);
  total = 0;
}

/* `out`: the columns; `view`: the view's calls under the hook ([0], its
 * cuMemGetInfo_v2 also out[VIEW]) and what the hook adds to them ([1]: the
 * median of each hooked run less the run without the hook right after it,
 * so that both were taken with the machine as it was then). */
static void row(int n, int p, double out[COLS], double view[2][CALLS]) {
  pids = calloc((size_t)n * (size_t)p, sizeof *pids);
  total = n * p;
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
  double runs[2][CALLS][VIEW_RUNS], ns[CALLS];
  for (int r = 0; r < VIEW_RUNS; r++)
    for (int h = 0; h < 2; h++) {
      view_ns(h == 0 ? w : NULL, ns);
      for (int c = 0; c < CALLS; c++)
        runs[h][c][r] = ns[c];
    }
  for (int c = 0; c < CALLS; c++) {
    double added[VIEW_RUNS];
    for (int r = 0; r < VIEW_RUNS; r++)
      added[r] = runs[0][c][r] - runs[1][c][r];
    view[0][c] = median_runs(runs[0][c]);
    view[1][c] = median_runs(added);
  }
  out[VIEW] = view[0][0];
  end_processes();
  for (int i = 0; i < n; i++) {
    snprintf(w, sizeof w, "scale-%d-%d-%d", n, p, i);
    removeWorker(NULL, w);
  }
  free(buf);
  free(pids);
}

/* A process of worker `w` registered on the device (see worker_process);
 * when `busy`, it then takes 100 us of tokens every 20 ms until killed. */
static pid_t soft_process(const char *w, int busy) {
  if (!busy)
    return start_process(w);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ACCELERATOR_WORKER_ID", w, 1);
    char me[16];
    snprintf(me, sizeof me, "%d", (int)getpid());
    MemoryOpRecord m;
    memset(&m, 0, sizeof m);
    if (mem(me, dev, 1 << 20, &m) != RESULT_SUCCESS || m.shouldBlock)
      _exit(1);
    for (;;) {
      ComputeOpRecord r;
      memset(&r, 0, sizeof r);
      compute(me, dev, 100000, &r);
      usleep(20000);
    }
  }
  if (pid < 0) {
    fprintf(stderr, "cannot fork a process of %s\n", w);
    exit(1);
  }
  return pid;
}

#define SOFT_WORKERS 500

/* The sampler's CPU (% of a core, over 2 s) with SOFT_WORKERS workers with
 * requests and priorities on the device, one process each, idle or busy. */
static double soft(int busy) {
  pids = calloc(SOFT_WORKERS, sizeof *pids);
  total = SOFT_WORKERS;
  char w[64];
  for (int i = 0; i < SOFT_WORKERS; i++) {
    snprintf(w, sizeof w, "soft-%d-%d", busy, i);
    if (setMem(w, dev, 1ULL << 30) != RESULT_SUCCESS || setRequest(w, dev, 1) != RESULT_SUCCESS ||
        setPriority(w, 1 + (uint32_t)(i % 100)) != RESULT_SUCCESS) {
      fprintf(stderr, "cannot set up %s\n", w);
      exit(1);
    }
    pids[i] = soft_process(w, busy);
  }
  usleep(500 * 1000);
  double a = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
  usleep(2000 * 1000);
  double pct = (cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - a) / 2e9 * 100;
  end_processes();
  for (int i = 0; i < SOFT_WORKERS; i++) {
    snprintf(w, sizeof w, "soft-%d-%d", busy, i);
    removeWorker(NULL, w);
  }
  free(pids);
  return pct;
}

enum { MAX_ROWS = 32 };
static const int all_rows[][2] = {{1, 1}, {10, 1}, {100, 1}, {500, 1}, {1, 10}, {1, 100}, {1, 500}};

/* The rows: BENCH_SCALE_ROWS ("NxP,NxP,...", the first 1x1) or all seven.
 * Their count; exits with a clear message on a bad list. N is bounded by
 * the limits table (1,024 workers), P by a worker's books (2,048 slots),
 * N * P by what one machine forks for a benchmark. */
static int pick_rows(int shape[MAX_ROWS][2]) {
  const char *e = getenv("BENCH_SCALE_ROWS");
  int rows = 0;
  if (!e || !*e) {
    for (; rows < (int)(sizeof all_rows / sizeof all_rows[0]); rows++)
      shape[rows][0] = all_rows[rows][0], shape[rows][1] = all_rows[rows][1];
    return rows;
  }
  for (const char *s = e; *s;) {
    int n, p, used = 0;
    if (rows == MAX_ROWS || sscanf(s, "%dx%d%n", &n, &p, &used) != 2 || n < 1 || n > 1000 || p < 1 ||
        p > 2000 || n * p > 2000 || (s[used] != ',' && s[used] != '\0')) {
      fprintf(stderr,
              "BENCH_SCALE_ROWS=\"%s\": expected at most %d rows NxP separated by commas, "
              "1 <= N <= 1000 workers, 1 <= P <= 2000 processes, N * P <= 2000 (e.g. \"1x1,500x1\")\n",
              e, MAX_ROWS);
      exit(2);
    }
    shape[rows][0] = n, shape[rows][1] = p;
    rows++;
    s += used + (s[used] == ',');
  }
  if (shape[0][0] != 1 || shape[0][1] != 1) {
    fprintf(stderr, "BENCH_SCALE_ROWS=\"%s\": the first row must be 1x1, the baseline every ratio is to\n",
            e);
    exit(2);
  }
  return rows;
}

int main(int argc, char **argv) {
  if (argc < 6 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr,
            "usage: ACCELERATOR_STATE_DIR=dir %s liblimiter.so libaccelerator.so device-uuid "
            "libcuda_limiter.so bench_hook\n",
            argv[0]);
    return 2;
  }
  int shape[MAX_ROWS][2];
  int rows = pick_rows(shape);
  raise_nofile();
  snprintf(state, sizeof state, "%s", getenv("ACCELERATOR_STATE_DIR"));
  dev = argv[3];
  hook = argv[4];
  viewer = argv[5];
  unsetenv("ACCELERATOR_WORKER_ID");
  host_api_load(argv[1], argv[2]);
  atexit(end_processes);
  double r[MAX_ROWS][COLS], view[MAX_ROWS][2][CALLS];
  for (int i = 0; i < rows; i++)
    row(shape[i][0], shape[i][1], r[i], view[i]);
  double soft_idle = soft(0), soft_busy = soft(1);
  printf("Scale (%s; medians of CPU per call; ratio to N = P = 1 of this run)\n\n", argv[2]);
  table_head(names, COLS);
  for (int i = 0; i < rows; i++) {
    printf("| %d x %d |", shape[i][0], shape[i][1]);
    for (int c = 0; c < COLS; c++) {
      if (i == 0)
        printf(" %.*f |", c == 4 ? 2 : 1, r[i][c]);
      else
        printf(" %.*f (%.*fx) |", c == 4 ? 2 : 1, r[i][c], c == VIEW ? 2 : 1,
               r[0][c] > 0 ? r[i][c] / r[0][c] : 0);
    }
    printf("\n");
  }
  /* Issue 30's target for the hook's view: flat in P and N (within 1.2x
   * of 1 x 1) and at most 100 ns over the driver alone (issue 22). */
  printf("\nThe hook's view in a hooked process of worker 0, ns per call (median of %d runs; ratio\n"
         "to 1 x 1), and added: over the same call without the hook (the driver alone, run right\n"
         "after each; median of the differences). Issue 30's target: within 1.2x of 1 x 1, at most\n"
         "100 ns added\n\n",
         VIEW_RUNS);
  table_head(view_names, 2 * CALLS);
  for (int i = 0; i < rows; i++) {
    printf("| %d x %d |", shape[i][0], shape[i][1]);
    for (int c = 0; c < CALLS; c++)
      printf(" %.1f (%.2fx) | %.1f |", view[i][0][c], view[0][0][c] > 0 ? view[i][0][c] / view[0][0][c] : 0,
             view[i][1][c]);
    printf("\n");
  }
  /* Issue 34's target: the sampler at most 1 % of a core with 500 idle
   * workers. */
  printf("\nSoft mode: the sampler with %d workers with requests (1 %% each) and priorities\n"
         "(1..100) on the device, one process each, %% of a core over 2 s (target: <= 1 %% idle)\n\n"
         "| processes | sampler %% |\n|---|---|\n| idle | %.2f |\n| busy (100 us of tokens "
         "every 20 ms) | %.2f |\n",
         SOFT_WORKERS, soft_idle, soft_busy);
  return 0;
}
