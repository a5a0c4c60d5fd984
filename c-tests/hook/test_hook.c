/* The hook library's tests: run the three apps (runtime-like, Triton-like,
 * directly linked) under LD_PRELOAD=libcuda_limiter.so against the fake
 * driver, with limits set as the hypervisor sets them (SetMemHardLimit
 * through libaccelerator.so, nvidia vendor on the fake NVML, whose A40 is
 * the fake driver's device 0).
 *
 * Usage: test_hook LIBACCELERATOR HOOK LIBLIMITER APP...
 * The environment (Makefile) picks the vendor, its fake libraries, the
 * state directory and LD_LIBRARY_PATH for libcuda.so.1. Run it directly
 * and inside `unshare --pid --fork --mount-proc`. */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"
#include "../ns_util.h"
#include "accelerator.h"

#define MIB (1024ull * 1024ull)
#define LIMIT (256 * MIB)
#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"
/* The fake device 0 with one context: the scenarios run with contexts
 * that reserve nothing (FAKE_CUDA_CTX_RESERVE=0) but `context`'s. */
#define DRIVER_FREE 51539607552ULL
#define CTX_RESERVE (64 * MIB)

static const char *hook;
static int (*set_limit)(const char *, const char *, uint64_t);
static enum Result (*proc_mem)(MemoryUtilization *, size_t, size_t *);

/* Start `app args...` as worker `worker` (NULL: none) with the hook
 * preloaded; stdin/stdout/stderr redirected to the fds given (-1: keep). */
static int no_hook; /* spawn without the hook (the inert test's baseline) */
static pid_t spawn(const char *worker, int in, int out, int err, char *const argv[]) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (no_hook)
      unsetenv("LD_PRELOAD");
    else
      setenv("LD_PRELOAD", hook, 1);
    if (worker)
      setenv("ACCELERATOR_WORKER_ID", worker, 1);
    else
      unsetenv("ACCELERATOR_WORKER_ID");
    if (in >= 0)
      dup2(in, 0);
    if (out >= 0)
      dup2(out, 1);
    if (err >= 0)
      dup2(err, 2);
    execvp(argv[0], argv);
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

static char limit_text[32];

/* Run one scenario of `app` as `worker`; its exit status. */
static int run(const char *app, const char *worker, const char *scenario, const char *a3,
               const char *a4, const char *a5) {
  char *argv[] = {(char *)app, (char *)scenario, limit_text, (char *)a3, (char *)a4, (char *)a5,
                  NULL};
  return wait_status(spawn(worker, -1, -1, -1, argv));
}

static void new_worker(char *w, size_t n, const char *app, const char *what) {
  const char *base = strrchr(app, '/');
  snprintf(w, n, "%s-%s", base ? base + 1 : app, what);
  CHECK(set_limit(w, UUID0, LIMIT) == 0, "SetMemHardLimit(%s)", w);
}

static char *num(char *buf, unsigned long long v) {
  sprintf(buf, "%llu", v);
  return buf;
}

static void scenarios(const char *app, const char *liblimiter, int runtime) {
  static const char *const each[] = {"limit", "paths", "multi", "null", "threads", "fork",
                                     "pools"};
  char w[64];
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
    new_worker(w, sizeof w, app, each[i]);
    CHECK(run(app, w, each[i], NULL, NULL, NULL) == 0, "%s %s", app, each[i]);
  }
  char reserve[32];
  new_worker(w, sizeof w, app, "context");
  setenv("FAKE_CUDA_CTX_RESERVE", num(reserve, CTX_RESERVE), 1);
  CHECK(run(app, w, "context", reserve, NULL, NULL) == 0, "%s context", app);
  new_worker(w, sizeof w, app, "lifecycle");
  CHECK(run(app, w, "lifecycle", reserve, NULL, NULL) == 0, "%s lifecycle", app);
  setenv("FAKE_CUDA_CTX_RESERVE", "0", 1);
  if (runtime) {
    new_worker(w, sizeof w, app, "entry");
    CHECK(run(app, w, "entry", NULL, NULL, NULL) == 0, "%s entry", app);
    new_worker(w, sizeof w, app, "nvml");
    CHECK(run(app, w, "nvml", NULL, NULL, NULL) == 0, "%s nvml", app);
    new_worker(w, sizeof w, app, "dual");
    CHECK(run(app, w, "dual", liblimiter, NULL, NULL) == 0, "%s dual", app);
  }
}

/* A process running the `hold` scenario (argv) as `worker`: started, its
 * "held <pid>" line read into `line` (empty if it said nothing). Ended by
 * hold_end (EOF on its stdin) or by a signal. */
typedef struct {
  pid_t pid;
  int in, out;
} holder_t;

static holder_t hold_start(const char *worker, char *const argv[], char *line, size_t n) {
  holder_t h = {-1, -1, -1};
  int in[2], out[2];
  memset(line, 0, n);
  if (pipe(in) || pipe(out)) {
    CHECK(0, "pipe");
    return h;
  }
  h.pid = spawn(worker, in[0], out[1], -1, argv);
  close(in[0]);
  close(out[1]);
  h.in = in[1];
  h.out = out[0];
  if (read(h.out, line, n - 1) <= 0)
    line[0] = 0;
  return h;
}

static void hold_end(holder_t *h) {
  close(h->in);
  close(h->out);
}

/* Two processes of one worker share its limit; a SIGKILLed one's bytes
 * come back to the worker. */
static void shared_limit(const char *app) {
  char w[64], b1[32], b2[32];
  new_worker(w, sizeof w, app, "share");
  char *argv[] = {(char *)app, "hold", limit_text, num(b1, LIMIT * 3 / 4), NULL};
  char line[32];
  holder_t holder = hold_start(w, argv, line, sizeof line);
  CHECK(strncmp(line, "held", 4) == 0,
        "%s: the first process holds 3/4 of the limit", app);
  CHECK(run(app, w, "try", num(b1, LIMIT / 2), "2", num(b2, LIMIT / 4)) == 0,
        "%s: a second process is refused past the shared limit", app);
  CHECK(run(app, w, "try", num(b1, LIMIT / 4), "0", "0") == 0,
        "%s: and may take exactly what is left", app);
  kill(holder.pid, SIGKILL);
  CHECK(wait_status(holder.pid) == 128 + SIGKILL, "the holder was killed");
  hold_end(&holder);
  CHECK(run(app, w, "try", num(b1, LIMIT / 2), "0", num(b2, LIMIT / 2)) == 0,
        "%s: a SIGKILLed process's bytes come back to its worker", app);
}

/* The bytes libaccelerator's GetProcessMemoryUtilization reports for `pid`
 * on device 0 (-1: not listed). */
static long long reported(pid_t pid) {
  static MemoryUtilization mu[512];
  size_t n = 0;
  if (proc_mem(mu, 512, &n) != RESULT_SUCCESS)
    return -2;
  char id[32];
  snprintf(id, sizeof id, "%d", (int)pid);
  for (size_t i = 0; i < n; i++)
    if (strcmp(mu[i].processId, id) == 0 && strcmp(mu[i].deviceUUID, UUID0) == 0)
      return (long long)mu[i].usedBytes;
  return -1;
}

#define UNSHARE "unshare", "--pid", "--fork", "--mount-proc"

/* Containers: each app is pid 1 of its own pid namespace. Two of one
 * worker share its limit exactly; a SIGKILLed one's bytes come back; two
 * workers keep their own books; the host's report names host pids. */
static void containers(const char *app) {
  char w[64], w2[64], b1[32], b2[32];
  new_worker(w, sizeof w, app, "ns");
  new_worker(w2, sizeof w2, app, "ns2");
  char *hold[] = {UNSHARE, (char *)app, "hold", limit_text, num(b1, LIMIT * 3 / 4), NULL};
  char line[32];
  holder_t unshare_a = hold_start(w, hold, line, sizeof line);
  CHECK(strcmp(line, "held 1\n") == 0,
        "%s: app A, pid 1 of its namespace, holds 3/4 of the limit (%s)", app, line);
  pid_t host_a = child_of(unshare_a.pid);
  CHECK(host_a > 1, "A's pid on this side: %d", (int)host_a);

  char *refused[] = {UNSHARE, (char *)app, "try", limit_text, num(b1, LIMIT / 2), "2",
                     num(b2, LIMIT / 4), NULL};
  CHECK(wait_status(spawn(w, -1, -1, -1, refused)) == 0,
        "%s: app B in another namespace is refused past the shared limit", app);
  char *rest[] = {UNSHARE, (char *)app, "try", limit_text, num(b1, LIMIT / 4), "0", "0", NULL};
  CHECK(wait_status(spawn(w, -1, -1, -1, rest)) == 0, "%s: and may take exactly what is left",
        app);
  char *other[] = {UNSHARE, (char *)app, "try", limit_text, num(b1, LIMIT / 2), "0",
                   num(b2, LIMIT / 2), NULL};
  CHECK(wait_status(spawn(w2, -1, -1, -1, other)) == 0,
        "%s: another worker's app, pid 1 of a third namespace, has its own books", app);
  CHECK(reported(host_a) == (long long)(LIMIT * 3 / 4),
        "%s: the host's report names A by its pid here (%d): %lld bytes", app, (int)host_a,
        reported(host_a));

  kill(host_a, SIGKILL);
  /* (util-linux 2.38's unshare may say "sigprocmask unblock failed" as it
   * passes the SIGKILL on.) */
  CHECK(wait_status(unshare_a.pid) != 0, "A was killed");
  hold_end(&unshare_a);
  char *after[] = {UNSHARE, (char *)app, "try", limit_text, num(b1, LIMIT / 2), "0",
                   num(b2, LIMIT / 2), NULL};
  CHECK(wait_status(spawn(w, -1, -1, -1, after)) == 0,
        "%s: after A's SIGKILL, B takes what A held", app);
  CHECK(reported(host_a) == -1, "%s: A is gone from the report", app);
}

/* A context's reservation in the limiter's books, as the host's report
 * shows them; a SIGKILLed process's context comes back to its worker. */
static void context_books(const char *app) {
  char w[64], b1[32], reserve[32];
  new_worker(w, sizeof w, app, "ctxbooks");
  setenv("FAKE_CUDA_CTX_RESERVE", num(reserve, CTX_RESERVE), 1);
  char *hold[] = {(char *)app, "hold", limit_text, num(b1, LIMIT / 4), NULL};
  char line[32];
  holder_t holder = hold_start(w, hold, line, sizeof line);
  CHECK(strncmp(line, "held", 4) == 0, "%s: the holder has its context and L/4", app);
  CHECK(reported(holder.pid) == (long long)(CTX_RESERVE + LIMIT / 4),
        "%s: the books hold its context and its allocation: %lld", app, reported(holder.pid));
  /* A second process: its own context, and what is left. */
  char *rest[] = {(char *)app, "try", limit_text, num(b1, LIMIT - LIMIT / 4 - 2 * CTX_RESERVE),
                  "0", "0", NULL};
  CHECK(wait_status(spawn(w, -1, -1, -1, rest)) == 0, "%s: a second process fits exactly", app);
  kill(holder.pid, SIGKILL);
  CHECK(wait_status(holder.pid) == 128 + SIGKILL, "the holder was killed");
  hold_end(&holder);
  char *after[] = {(char *)app, "try", limit_text, num(b1, LIMIT - CTX_RESERVE), "0", "0", NULL};
  CHECK(wait_status(spawn(w, -1, -1, -1, after)) == 0,
        "%s: the killed process's context came back to its worker", app);
  setenv("FAKE_CUDA_CTX_RESERVE", "0", 1);
}

/* Inert means inert: with no worker, the driver and NVML see exactly the
 * calls they see without the hook (their traces, FAKE_CUDA_TRACE and
 * FAKE_NVML_TRACE, compared line by line). */
static void inert(const char *app) {
  const char *names[2] = {"FAKE_CUDA_TRACE", "FAKE_NVML_TRACE"};
  char paths[2][2][64];
  char *argv[] = {(char *)app, "plain", limit_text, NULL};
  for (int with = 0; with < 2; with++) {
    for (int k = 0; k < 2; k++) {
      snprintf(paths[with][k], sizeof paths[with][k], "/tmp/hook-inert-%d-%d-%d", (int)getpid(),
               with, k);
      unlink(paths[with][k]);
      setenv(names[k], paths[with][k], 1);
    }
    no_hook = !with;
    CHECK(wait_status(spawn(NULL, -1, -1, -1, argv)) == 0, "%s plain, %s the hook", app,
          with ? "with" : "without");
    no_hook = 0;
  }
  for (int k = 0; k < 2; k++) {
    unsetenv(names[k]);
    size_t n0 = 0, n1 = 0;
    char *t0 = slurp(paths[0][k], &n0), *t1 = slurp(paths[1][k], &n1);
    CHECK(t0 && t1 && n0 > 0 && n0 == n1 && memcmp(t0, t1, n0) == 0,
          "%s: with no worker the %s sees the same calls with the hook (traces of %zu and %zu bytes)",
          app, k ? "NVML" : "driver", n0, n1);
    if (t0 && t1 && (n0 != n1 || memcmp(t0, t1, n0) != 0))
      fprintf(stderr, "--- without the hook:\n%s--- with it:\n%s", t0, t1);
    free(t0);
    free(t1);
    unlink(paths[0][k]);
    unlink(paths[1][k]);
  }
}

/* The view makes no system call per call: `views` under strace, the calls
 * between its two markers counted (3000 views; the worker's dead
 * processes are swept at most once per 100 ms, a few calls when it falls
 * in the window). Needs strace (.ci/run installs it). */
static void quiet(const char *app) {
  char w[64], out[64], cmd[512];
  new_worker(w, sizeof w, app, "views");
  snprintf(out, sizeof out, "/tmp/hook-views-%d.strace", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "LD_PRELOAD=%s ACCELERATOR_WORKER_ID=%s strace -f -qq -o %s %s views %s", hook, w,
           out, app, limit_text);
  int rc = system(cmd);
  CHECK(rc == 0, "%s views under strace (status %d; is strace installed?)", app, rc);
  FILE *f = fopen(out, "r");
  char line[512];
  int inside = 0, calls = 0, begun = 0, ended = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strstr(line, "\"views-begin\"")) {
      inside = begun = 1;
      continue;
    }
    if (strstr(line, "\"views-end\"")) {
      inside = 0;
      ended = 1;
      continue;
    }
    if (inside) {
      calls++;
      if (calls <= 5)
        fprintf(stderr, "  between the markers: %s", line);
    }
  }
  if (f)
    fclose(f);
  unlink(out);
  CHECK(begun && ended && calls <= 16,
        "%s: 3000 views (cuMemGetInfo_v2, cuDeviceTotalMem_v2, NVML) made %d system calls",
        app, calls);
}

/* Copy the books of a worker in use (a valid file, of another identity) to
 * `to`. */
static int copy_state(const char *to) {
  char from[600], buf[65536];
  const char *state = getenv("ACCELERATOR_STATE_DIR");
  snprintf(from, sizeof from, "%s/workers", state);
  DIR *d = opendir(from);
  struct dirent *e;
  while (d && (e = readdir(d)) && e->d_name[0] == '.')
    ;
  snprintf(from, sizeof from, "%s/workers/%s/limiter.shm", state, d && e ? e->d_name : "-");
  if (d)
    closedir(d);
  int in = open(from, O_RDONLY), out = open(to, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ssize_t n = 0;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)n) != n)
      n = -1;
  if (in >= 0)
    close(in);
  if (out >= 0)
    close(out);
  return in >= 0 && out >= 0 && n == 0;
}

/* An unusable state file -- corrupt, truncated, replaced (its identity is
 * not the one recorded in limiter.shm.id) or missing -- means fail-open with
 * one warning, or fail-closed with ACCELERATOR_HOOK_FAIL_CLOSED=1. */
static void bad_state(const char *app) {
  static const char *const kinds[] = {"corrupt", "truncated", "replaced", "missing"};
  /* What the warning says of each. */
  static const char *const why[] = {"bad magic", "truncated", "replaced", "does not exist"};
  char dir[] = "/tmp/hook-corrupt.XXXXXX", books[96], path[128], idpath[140], b1[32], b2[32];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  chmod(dir, 0700);
  /* The books of worker "corrupt" (workers/corrupt/). */
  snprintf(books, sizeof books, "%s/workers", dir);
  mkdir(books, 0700);
  snprintf(books, sizeof books, "%s/workers/corrupt", dir);
  mkdir(books, 0700);
  snprintf(path, sizeof path, "%s/limiter.shm", books);
  snprintf(idpath, sizeof idpath, "%s/limiter.shm.id", books);
  char *old = getenv("ACCELERATOR_STATE_DIR");
  char *saved = old ? strdup(old) : NULL;
  CHECK(saved != NULL, "ACCELERATOR_STATE_DIR is set");
  if (!saved)
    return;

  char errpath[160];
  snprintf(errpath, sizeof errpath, "%s/stderr", dir);
  for (int run_ = 0; run_ < 8; run_++) {
    int closed = run_ % 2;
    const char *kind = kinds[run_ / 2];
    unlink(path);
    unlink(idpath);
    if (strcmp(kind, "corrupt") == 0) {
      int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
      CHECK(fd >= 0 && write(fd, "not a limiter state file", 24) == 24, "write %s", path);
      close(fd);
    } else if (strcmp(kind, "truncated") == 0) {
      CHECK(copy_state(path) && truncate(path, 4096) == 0, "a truncated copy in %s", path);
    } else if (strcmp(kind, "replaced") == 0) {
      /* A valid file, but not the one whose identity was recorded. */
      int fd = open(idpath, O_CREAT | O_WRONLY | O_TRUNC, 0600);
      CHECK(copy_state(path) && fd >= 0 && write(fd, "1 2\n", 4) == 4, "a replaced file in %s",
            dir);
      close(fd);
    }
    if (closed)
      setenv("ACCELERATOR_HOOK_FAIL_CLOSED", "1", 1);
    else
      unsetenv("ACCELERATOR_HOOK_FAIL_CLOSED");
    setenv("ACCELERATOR_STATE_DIR", dir, 1);
    int err = open(errpath, O_CREAT | O_RDWR | O_TRUNC, 0600);
    char *argv[] = {(char *)app, "try", limit_text, num(b1, 2 * LIMIT),
                    closed ? "2" : "0", num(b2, closed ? DRIVER_FREE : DRIVER_FREE - 2 * LIMIT),
                    NULL};
    int st = wait_status(spawn("corrupt", -1, -1, err, argv));
    setenv("ACCELERATOR_STATE_DIR", saved, 1);
    char text[4096] = {0};
    ssize_t n = pread(err, text, sizeof text - 1, 0);
    close(err);
    int warnings = 0;
    for (char *p = text; n > 0 && (p = strstr(p, "libcuda_limiter:")); p++)
      warnings++;
    CHECK(st == 0, "%s: %s state, fail-%s (stderr: %s)", app, kind, closed ? "closed" : "open",
          text);
    CHECK(warnings == 1, "%s state: one warning on stderr, not %d", kind, warnings);
    CHECK(strstr(text, why[run_ / 2]) != NULL, "%s state: the warning says so: %s", kind, text);
    CHECK(strcmp(kind, "missing") != 0 || access(path, F_OK) != 0, "the hook created %s", path);
  }
  unsetenv("ACCELERATOR_HOOK_FAIL_CLOSED");
  free(saved);
  unlink(errpath);
  unlink(path);
  unlink(idpath);
  rmdir(books);
  snprintf(books, sizeof books, "%s/workers", dir);
  rmdir(books);
  rmdir(dir);

  /* Without ACCELERATOR_WORKER_ID the hook is inert. */
  char *argv[] = {(char *)app, "try", limit_text, num(b1, 2 * LIMIT), "0",
                  num(b2, DRIVER_FREE - 2 * LIMIT), NULL};
  CHECK(wait_status(spawn(NULL, -1, -1, -1, argv)) == 0, "%s: no worker, no limit", app);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK LIBLIMITER APP...\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!acc) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  set_limit = (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit");
  proc_mem = (enum Result (*)(MemoryUtilization *, size_t, size_t *))dlsym(
      acc, "GetProcessMemoryUtilization");
  if (!set_limit || !proc_mem) {
    fprintf(stderr, "%s: no SetMemHardLimit / GetProcessMemoryUtilization\n", argv[1]);
    return 2;
  }
  int unshare_rc = system("unshare --pid --fork --mount-proc true");
  CHECK(unshare_rc == 0,
        "unshare --pid --fork --mount-proc works here (needs root; status %d)", unshare_rc);
  hook = argv[2];
  setenv("FAKE_CUDA_CTX_RESERVE", "0", 1);
  snprintf(limit_text, sizeof limit_text, "%llu", LIMIT);
  for (int i = 4; i < argc; i++) {
    int runtime = strstr(argv[i], "app_runtime") != NULL;
    inert(argv[i]);
    scenarios(argv[i], argv[3], runtime);
    shared_limit(argv[i]);
    if (unshare_rc == 0)
      containers(argv[i]);
    context_books(argv[i]);
    if (runtime) {
      bad_state(argv[i]);
      quiet(argv[i]);
    }
  }
  return test_summary();
}
