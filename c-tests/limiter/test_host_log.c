/* Lines a tenant can cause on the host's stderr are bounded (issue 38).
 *
 * The host says why it leaves a worker's books out of a report. A tenant
 * writes its books: it can cut them to a new size before every report.
 * Here 100 workers' books are cut to ever new sizes, 60 times each, each
 * round followed by a host report (6,000 books left out in all): the host
 * says why, naming the reason, and says at most 20 lines a minute, the
 * count of those left out included (docs/scale.md), however many books and
 * sizes.
 *
 * Usage: test_host_log build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"

#include <fcntl.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#define DEV0 "stub-device-0"
#define WORKERS 100
#define ROUNDS 60
#define LINES_PER_MINUTE 20 /* the count of those left out included */

int main(int argc, char **argv) {
  /* A state directory of its own, on every run (books cut by an earlier
   * run would refuse the limits that make them). */
  static char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/log.XXXXXX", limiter_test_state(argc, argv));
  if (!mkdtemp(dir)) {
    fprintf(stderr, "mkdtemp %s\n", dir);
    return 2;
  }
  setenv("ACCELERATOR_STATE_DIR", dir, 1);
  limiter_load(argv[1], argv[2]);
  static char books[WORKERS][PATH_MAX + 64];
  for (int w = 0; w < WORKERS; w++) {
    char name[32];
    snprintf(name, sizeof name, "log-w%d", w);
    snprintf(books[w], sizeof books[w], "%s/workers/%s/limiter.shm", dir, name);
    EXPECT_RC_WITH(L.accLastError, L.setMem(name, DEV0, 1 << 20), RESULT_SUCCESS);
  }
  char errpath[PATH_MAX + 32];
  snprintf(errpath, sizeof errpath, "%s/host-stderr", dir);
  fflush(stderr);
  int saved = dup(2), errfd = open(errpath, O_CREAT | O_RDWR | O_TRUNC, 0600);
  dup2(errfd, 2);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  static MemoryUtilization mu[1024];
  int served = 0, cut = 0;
  for (int r = 0; r < ROUNDS; r++) {
    for (int w = 0; w < WORKERS; w++)
      cut += truncate(books[w], 4096 + 8 * (r * WORKERS + w)) == 0;
    size_t n = 0;
    served += L.procMem(mu, 1024, &n) == RESULT_SUCCESS;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  size_t len = 0;
  char *text = slurp(errpath, &len);
  close(errfd);
  int lines = 0;
  for (size_t i = 0; text && i < len; i++)
    lines += text[i] == '\n';
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  int bound = LINES_PER_MINUTE * (1 + (int)(secs / 60));
  printf("  %d books cut, %d reports in %.1f s: %d lines on stderr (at most %d)\n", cut, ROUNDS, secs, lines,
         bound);
  CHECK(cut == WORKERS * ROUNDS && served == ROUNDS, "%d cuts and %d reports made", cut, served);
  CHECK(text && strstr(text, "leaving out the limiter books at") && strstr(text, "truncated"),
        "the host says why it leaves books out: %.300s", text ? text : "");
  CHECK(lines <= bound, "books cut to ever new sizes make at most %d lines in %.1f s: %d", bound, secs, lines);
  free(text);
  limiter_unload();
  return test_summary();
}
