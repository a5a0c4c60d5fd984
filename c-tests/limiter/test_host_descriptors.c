/* One descriptor budget for the process, whichever libraries are loaded
 * (issue 38).
 *
 * libaccelerator's and liblimiter's views of the workers' books each keep a
 * pidfd per process they watch. A host that loads both, under the C
 * default soft RLIMIT_NOFILE of 1,024, with 1,000 tenant processes: the two
 * views together must leave the host its margin (a quarter of the limit,
 * at least 64 descriptors), so that
 * - every report (libaccelerator) lists all 1,000 processes, and every
 *   usage query (liblimiter) gives each worker's exact bytes, round after
 *   round (the processes past the budget are checked in /proc instead);
 * - the host's own `open` succeeds, 64 files at once;
 * - the process never holds more than the limit less the margin.
 *
 * Usage: test_host_descriptors build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"
#include "worker_proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define DEV0 "stub-device-0"
#define WORKERS 10
#define PER_WORKER 100
#define PROCS (WORKERS * PER_WORKER)
#define SOFT 1024
#define MARGIN 256 /* a quarter of SOFT */

static pid_t pids[PROCS];

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d)
    return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n - 3; /* ".", "..", the directory's own */
}

/* How many of the tenant processes the report lists; -1: it failed. */
static int listed(void) {
  static MemoryUtilization mu[2 * PROCS];
  size_t n = 0;
  if (L.procMem(mu, 2 * PROCS, &n) != RESULT_SUCCESS)
    return -1;
  int found = 0;
  for (size_t i = 0; i < n; i++) {
    int pid = atoi(mu[i].processId);
    for (int j = 0; j < PROCS; j++)
      if (pids[j] == pid) {
        found++;
        break;
      }
  }
  return found;
}

int main(int argc, char **argv) {
  limiter_test_state(argc, argv);
  struct rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_max < SOFT) {
    fprintf(stderr, "the hard RLIMIT_NOFILE is below %d\n", SOFT);
    return 2;
  }
  nofile.rlim_cur = SOFT;
  CHECK(setrlimit(RLIMIT_NOFILE, &nofile) == 0, "soft RLIMIT_NOFILE %d", SOFT);
  limiter_load(argv[1], argv[2]);
  char worker[WORKERS][32];
  for (int w = 0; w < WORKERS; w++) {
    snprintf(worker[w], sizeof worker[w], "fd-w%d", w);
    EXPECT_RC_WITH(L.accLastError, L.setMem(worker[w], DEV0, 1ull << 30), RESULT_SUCCESS);
  }
  int started = 0;
  for (int i = 0; i < PROCS; i++) {
    pids[i] = worker_process(L.mem, worker[i % WORKERS], DEV0);
    started += pids[i] > 0;
  }
  CHECK(started == PROCS, "%d tenant processes started, each holding 1 MiB (%d)", PROCS, started);

  const int rounds = test_quick() ? 3 : 20;
  int reports_ok = 0, usage_ok = 0, opens_ok = 0, most_fds = 0;
  char why[512] = "";
  for (int r = 0; r < rounds; r++) {
    int n = listed();
    if (n == PROCS)
      reports_ok++;
    else if (!*why)
      snprintf(why, sizeof why, "report listed %d: %s", n, L.accLastError());
    int exact = 0;
    for (int w = 0; w < WORKERS; w++) {
      uint64_t used = 0, lim = 0;
      int rc = L.usage(worker[w], DEV0, &used, &lim);
      exact += rc == RESULT_SUCCESS && used == (uint64_t)PER_WORKER << 20;
      if (rc != RESULT_SUCCESS && !*why)
        snprintf(why, sizeof why, "usage %d: %s", rc, L.lastError());
    }
    usage_ok += exact == WORKERS;
    int fds[64], opened = 0;
    for (int i = 0; i < 64; i++) {
      fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
      opened += fds[i] >= 0;
    }
    int now = open_fds();
    most_fds = now > most_fds ? now : most_fds;
    for (int i = 0; i < 64; i++)
      if (fds[i] >= 0)
        close(fds[i]);
    opens_ok += opened == 64;
  }
  int held = open_fds();
  printf("  %d rounds: %d full reports, %d rounds of exact usage, %d of 64 host opens; %d descriptors "
         "open at most (64 of them the host's), %d after\n",
         rounds, reports_ok, usage_ok, opens_ok, most_fds, held);
  CHECK(reports_ok == rounds, "every report lists all %d processes under a soft limit of %d (%s)", PROCS, SOFT,
        why);
  CHECK(usage_ok == rounds, "every usage query of the %d workers is exact (%s)", WORKERS, why);
  CHECK(opens_ok == rounds, "the host opens 64 files of its own in every round");
  CHECK(held >= 0 && held <= SOFT - MARGIN, "the libraries leave the host its margin: %d of %d descriptors open",
        held, SOFT);
  for (int i = 0; i < PROCS; i++)
    end_worker_process(pids[i]);
  limiter_unload();
  return test_summary();
}
