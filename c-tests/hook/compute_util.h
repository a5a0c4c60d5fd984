/* Helpers of the compute tests (test_compute.c, test_compute_cases.c): the
 * workers they start, each in a pid namespace of its own, and the
 * simulated device's timeline they read. */
#ifndef COMPUTE_UTIL_H
#define COMPUTE_UTIL_H

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../fakes/timeline.h"
#include "../test_util.h"

/* The hook library and app_launch. */
static const char *hook, *app;
static struct timeline *tl;

/* A worker: its host pid (the app) and the harness that made its namespace. */
struct app {
  pid_t host, harness;
};

static inline void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static inline int wait_status(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The app with arguments `argv` (NULL-terminated), as a worker (`worker`;
 * NULL: not hooked) in a pid namespace of its own: the harness unshares,
 * forks the app (pid 1 there), tells it its host pid, and exits with its
 * status. `out`: the app's stdout (-1: null). */
static inline struct app spawn_argv(const char *worker, const char *kernel_us, int err, int out, int in,
                             char *const argv[]) {
  int p[2];
  struct app a = {-1, -1};
  if (pipe(p) != 0)
    return a;
  fflush(NULL);
  a.harness = fork();
  if (a.harness == 0) {
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0)
      _exit(126);
    pid_t child = fork();
    if (child == 0) {
      pid_t host;
      if (read(p[0], &host, sizeof host) != sizeof host || getpid() != 1)
        _exit(125);
      if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
          mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        _exit(124);
      char h[16];
      snprintf(h, sizeof h, "%d", (int)host);
      setenv("FAKE_CUDA_HOST_PID", h, 1);
      if (worker) {
        setenv("LD_PRELOAD", hook, 1);
        setenv("ACCELERATOR_WORKER_ID", worker, 1);
      }
      setenv("FAKE_KERNEL_US", kernel_us, 1);
      int null = open("/dev/null", O_WRONLY);
      dup2(out >= 0 ? out : null, 1);
      if (err >= 0)
        dup2(err, 2);
      if (in >= 0)
        dup2(in, 0);
      execv(app, argv);
      _exit(127);
    }
    /* Once for the app, once for the test. */
    if (child < 0 || write(p[1], &child, sizeof child) != sizeof child ||
        write(p[1], &child, sizeof child) != sizeof child)
      _exit(123);
    int st;
    waitpid(child, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  if (read(p[0], &a.host, sizeof a.host) != sizeof a.host)
    a.host = -1;
  close(p[0]);
  close(p[1]);
  return a;
}

/* The app in `mode` with one argument. */
static inline struct app spawn_app(const char *worker, const char *kernel_us, int err, int out, int in,
                            const char *mode, const char *arg) {
  char *const argv[] = {(char *)app, (char *)mode, (char *)arg, NULL};
  return spawn_argv(worker, kernel_us, err, out, in, argv);
}

static inline struct app spawn(const char *worker, const char *kernel_us, const char *mode,
                        const char *arg) {
  return spawn_app(worker, kernel_us, -1, -1, -1, mode, arg);
}

/* The device time of host pid `pid`'s kernels so far (ns). */
static inline unsigned long long busy(pid_t pid) {
  struct tl_proc *p = tl_proc(&tl->dev[0], (unsigned)pid);
  return p ? tl_busy(p, tl_now()) : 0;
}

#endif
