/* A SIGBUS sent to the host is not one of the guard's faults (issue 38).
 *
 * The library's SIGBUS handler turns a truncation of a mapped state file
 * under a host read into zero pages (guard.rs). A SIGBUS that is no such
 * fault (sent with kill, tgkill or sigqueue) must get exactly what it
 * would have got without the library, and the guard must stay for the
 * next truncation. Each case runs in a child host of its own (its own
 * state directory), which sets its SIGBUS disposition before it loads the
 * libraries, as a host program does:
 *
 * - a handler of its own: called for each sent SIGBUS (kill, tgkill,
 *   sigqueue), never for the guard's faults; the host survives its
 *   worker's books flapping under its reports and the limits file cut
 *   under a limit call;
 * - SIGBUS ignored: the sent signals stay ignored, and so do others sent
 *   after the truncations; the truncations are survived;
 * - the default action: the host is killed by a sent SIGBUS (kill, and
 *   tgkill), as it would have been without the library; with none sent,
 *   the truncations are survived.
 *
 * Usage: test_host_signals build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"
#include "worker_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV0 "stub-device-0"

static const char *lim_so, *acc_so;
static char base_dir[PATH_MAX];

/* The host's own handler: counts what it is given (sent signals only: a
 * fault given to it would recur on return and kill the host). */
static atomic_int handled;
static void host_handler(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  if (sig != SIGBUS || si->si_code > 0)
    _exit(104);
  atomic_fetch_add(&handled, 1);
}

static int send_sigbus(const char *how) {
  if (strcmp(how, "kill") == 0)
    return kill(getpid(), SIGBUS);
  if (strcmp(how, "tgkill") == 0)
    return (int)syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGBUS);
  union sigval v = {.sival_ptr = NULL};
  return sigqueue(getpid(), SIGBUS, v);
}

/* Worker "sig-w"'s books flap (cut and grown back as fast as a process
 * can) under `reports` host reports, each listing worker "sig-b"'s process
 * `client`, then the limits file is cut under a limit call. Returns the
 * failures seen (the host's survival is the parent's check). */
static int truncations(const char *state, pid_t client, int reports) {
  int bad = 0;
  char shm[PATH_MAX + 64], limits[PATH_MAX + 64];
  snprintf(shm, sizeof shm, "%s/workers/sig-w/limiter.shm", state);
  snprintf(limits, sizeof limits, "%s/limits.shm", state);
  struct stat sb;
  if (stat(shm, &sb) != 0)
    return 1;
  fflush(NULL);
  pid_t flapper = fork();
  if (flapper == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a host killed by SIGBUS ends it too */
    for (;;)
      if (truncate(shm, 4096) != 0 || truncate(shm, sb.st_size) != 0)
        _exit(1);
  }
  int served = 0;
  for (int i = 0; i < reports; i++)
    served += limiter_listed(client, NULL) == 1;
  kill(flapper, SIGKILL);
  waitpid(flapper, NULL, 0);
  if (served != reports) {
    fprintf(stderr, "  %d of %d reports failed or missed worker sig-b's process while sig-w's books flapped\n",
            reports - served, reports);
    bad++;
  }
  /* A deterministic fault: the limits file cut, then read by a limit call. */
  if (truncate(limits, 4096) != 0)
    return bad + 1;
  int rc = L.setMem("sig-w", DEV0, 1 << 20);
  if (rc != RESULT_ERROR_OPERATION_FAILED || !strstr(L.accLastError(), "truncated")) {
    fprintf(stderr, "  a limit call on the cut limits file: %d (%s)\n", rc, L.accLastError());
    bad++;
  }
  return bad;
}

/* One host: `mode` is its SIGBUS disposition before loading ("handler",
 * "ignore", "default"), `send` the signals it is sent once its view is
 * made ("" none, or "kill", "tgkill", "all": the three ways). Exit 0: all
 * went as expected for a surviving host; else the number of failures. */
static int host(const char *mode, const char *send) {
  char state[PATH_MAX + 32];
  snprintf(state, sizeof state, "%s/%s-%s", base_dir, mode, *send ? send : "none");
  if (mkdir(state, 0700) != 0 && errno != EEXIST)
    return 100;
  setenv("ACCELERATOR_STATE_DIR", state, 1);
  struct rlimit core = {0, 0};
  setrlimit(RLIMIT_CORE, &core); /* the default action dumps core */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (strcmp(mode, "handler") == 0) {
    sa.sa_sigaction = host_handler;
    sa.sa_flags = SA_SIGINFO;
  } else {
    sa.sa_handler = strcmp(mode, "ignore") == 0 ? SIG_IGN : SIG_DFL;
  }
  sigaction(SIGBUS, &sa, NULL);
  limiter_load(lim_so, acc_so);
  if (L.setMem("sig-w", DEV0, 1 << 30) != RESULT_SUCCESS)
    return 101;
  pid_t flapped = worker_process(L.mem, "sig-w", DEV0), client = worker_process(L.mem, "sig-b", DEV0);
  if (flapped < 0 || client < 0 || limiter_listed(flapped, NULL) != 1 || limiter_listed(client, NULL) != 1)
    return 102;
  int bad = 0, sent = 0;
  const char *ways[] = {"kill", "tgkill", "sigqueue"};
  for (int i = 0; i < 3; i++)
    if (strcmp(send, "all") == 0 || strcmp(send, ways[i]) == 0) {
      bad += send_sigbus(ways[i]) != 0;
      sent++;
    }
  /* A sent signal is delivered before kill/tgkill return; sigqueue's too. */
  if (strcmp(mode, "default") == 0 && sent) {
    fprintf(stderr, "  the host survived a sent SIGBUS with the default action\n");
    return 103;
  }
  bad += truncations(state, client, test_quick() ? 300 : 2000);
  if (strcmp(mode, "handler") == 0 && atomic_load(&handled) != sent) {
    fprintf(stderr, "  the host's handler ran %d times for %d sent signals\n", atomic_load(&handled), sent);
    bad++;
  }
  if (strcmp(mode, "ignore") == 0)
    bad += send_sigbus("kill") != 0; /* after the truncations: still ignored */
  limiter_unload();
  return bad;
}

/* Run host(mode, send) in a child, its own process group; its wait status
 * (its workers' processes are ended with it). */
static int run_host(const char *mode, const char *send) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    _exit(host(mode, send));
  }
  setpgid(pid, pid);
  int st = 0;
  waitpid(pid, &st, 0);
  kill(-pid, SIGKILL);
  while (waitpid(-pid, NULL, 0) > 0 || errno == EINTR)
    ;
  return st;
}

int main(int argc, char **argv) {
  const char *dir = limiter_test_state(argc, argv);
  snprintf(base_dir, sizeof base_dir, "%s/signals.XXXXXX", dir); /* its own, on every run */
  if (!mkdtemp(base_dir)) {
    fprintf(stderr, "mkdir %s: %s\n", base_dir, strerror(errno));
    return 2;
  }
  lim_so = argv[1];
  acc_so = argv[2];

  int st = run_host("handler", "all");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "a host with its own SIGBUS handler: it is called for SIGBUS sent by kill, tgkill and sigqueue, and "
        "the host survives truncations under its reads afterwards (status %#x)",
        st);
  st = run_host("ignore", "all");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "a host that ignored SIGBUS before loading: sent SIGBUS stays ignored, before and after truncations "
        "under its reads, which it survives (status %#x)",
        st);
  st = run_host("default", "");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "a host with the default action survives truncations under its reads (status %#x)", st);
  const char *ways[] = {"kill", "tgkill", "sigqueue"};
  for (int i = 0; i < 3; i++) {
    st = run_host("default", ways[i]);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
          "a host with the default action is killed by a SIGBUS sent with %s, as without the library "
          "(status %#x)",
          ways[i], st);
  }
  return test_summary();
}
