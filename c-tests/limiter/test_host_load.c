/* The host's view of other workers' books under load (issue 38).
 *
 * - Private workers registered from several host threads while another
 *   host thread's reports remove unused private workers' books: every
 *   AddWorkerProcess and CheckAndRecordMemoryOps succeeds (a race between
 *   the library's own calls is never RESULT_ERROR_INTERNAL, "the books ...
 *   vanished as they were made", nor a refusal).
 * - More workers' books than the view keeps mapped (4,096): 4,300 workers,
 *   100 of them with a live process; every live process is in every report
 *   (the view maps them one after the other past its cap, never runs out of
 *   guarded ranges, never caches a refusal of its own making).
 *
 * Workers' processes are forked children that allocate through the limiter,
 * as a hooked process does (the 4,200 without a live process are killed once
 * registered); private ones set no ACCELERATOR_WORKER_ID.
 * Run on tmpfs (`make host-load-test`: 4,300 workers' files).
 *
 * argv: [1] liblimiter.so, [2] libaccelerator.so (the stub). */
#include "limiter_load.h"
#include "../test_util.h"
#include "worker_proc.h"

#include <pthread.h>
#include <time.h>

#define D0 "stub-device-0"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static MemoryUtilization listing[8192];

/* One report: its entries in `listing`, -1 when it failed. */
static long report(void) {
  size_t n = 0;
  if (L.procMem(listing, sizeof listing / sizeof listing[0], &n) != RESULT_SUCCESS)
    return -1;
  return (long)n;
}

/* ---- private workers registered while reports remove unused ones ---- */

static atomic_int reporting;
static atomic_long reports, registered, refused, internal;

static void *report_loop(void *arg) {
  (void)arg;
  static MemoryUtilization mine[8192];
  while (atomic_load(&reporting)) {
    size_t n = 0;
    L.procMem(mine, sizeof mine / sizeof mine[0], &n);
    atomic_fetch_add(&reports, 1);
  }
  return NULL;
}

/* A child without a worker id (a private worker) that waits to be killed. */
static pid_t private_child(void) {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;)
      pause();
  }
  return pid;
}

/* Count a call's result (its error read right after it, on its thread). */
static void count(Result rc, const char *call) {
  if (rc == RESULT_SUCCESS) {
    atomic_fetch_add(&registered, 1);
    return;
  }
  if (rc == RESULT_ERROR_INTERNAL)
    atomic_fetch_add(&internal, 1);
  if (atomic_fetch_add(&refused, 1) < 5)
    fprintf(stderr, "  %s: %d %s\n", call, rc, L.lastError());
}

enum { ROUNDS = 150, THREADS = 4 };

static void *register_loop(void *arg) {
  int k = (int)(intptr_t)arg;
  for (int i = 0; i < ROUNDS; i++) {
    pid_t c = private_child();
    if (c <= 0)
      continue;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)c);
    /* Half registered first, half recorded first: both make the books. */
    if ((i + k) % 2 == 0)
      count(L.addProcess(D0, pid), "AddWorkerProcess");
    MemoryOpRecord r;
    memset(&r, 0, sizeof r);
    count(L.mem(pid, D0, 4096, &r), "CheckAndRecordMemoryOps");
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
  }
  return NULL;
}

static void test_private_registration(void) {
  atomic_store(&reporting, 1);
  pthread_t rep, reg[THREADS];
  pthread_create(&rep, NULL, report_loop, NULL);
  double t0 = now_s();
  for (int k = 0; k < THREADS; k++)
    pthread_create(&reg[k], NULL, register_loop, (void *)(intptr_t)k);
  for (int k = 0; k < THREADS; k++)
    pthread_join(reg[k], NULL);
  atomic_store(&reporting, 0);
  pthread_join(rep, NULL);
  long want = THREADS * ROUNDS + THREADS * ROUNDS / 2;
  printf("  %d threads registering %d private workers while reports remove unused ones: %ld calls succeeded, "
         "%ld failed (%ld INTERNAL), %ld reports, %.1f s\n",
         THREADS, THREADS * ROUNDS, atomic_load(&registered), atomic_load(&refused), atomic_load(&internal),
         atomic_load(&reports), now_s() - t0);
  CHECK(atomic_load(&internal) == 0, "no call is RESULT_ERROR_INTERNAL (%ld)", atomic_load(&internal));
  CHECK(atomic_load(&refused) == 0 && atomic_load(&registered) == want,
        "every AddWorkerProcess and CheckAndRecordMemoryOps succeeds (%ld of %ld, %ld failed)",
        atomic_load(&registered), want, atomic_load(&refused));
}

/* ---- more workers' books than the view keeps mapped ---- */

enum { WORKERS = 4300, LIVE_EVERY = 43, REPORTS = 5 };

static void test_many_workers(void) {
  static pid_t live[WORKERS / LIVE_EVERY + 1];
  int nlive = 0, made = 0;
  double t0 = now_s();
  for (int i = 0; i < WORKERS; i++) {
    char w[32];
    snprintf(w, sizeof w, "many-%d", i);
    pid_t p = worker_process(L.mem, w, D0);
    made += p > 0;
    if (i % LIVE_EVERY == 0)
      live[nlive++] = p;
    else
      end_worker_process(p);
  }
  double t_made = now_s() - t0;
  char workers[4200];
  snprintf(workers, sizeof workers, "%s/workers", getenv("ACCELERATOR_STATE_DIR"));
  uint64_t ram = tree_ram(workers);
  CHECK(made == WORKERS && nlive == 100, "%d workers' books made, %d with a live process (%d made)", WORKERS,
        nlive, made);
  int complete = 0, worst_missing = 0;
  double t_first = 0, t_rest = 0;
  for (int r = 0; r < REPORTS; r++) {
    double t = now_s();
    long n = report();
    *(r == 0 ? &t_first : &t_rest) += now_s() - t;
    int missing = 0;
    for (int j = 0; j < nlive; j++) {
      char pid[16];
      snprintf(pid, sizeof pid, "%d", (int)live[j]);
      int found = 0;
      for (long e = 0; e < n && !found; e++)
        found = strcmp(listing[e].processId, pid) == 0 && strcmp(listing[e].deviceUUID, D0) == 0 &&
                listing[e].usedBytes == 1 << 20;
      missing += !found;
    }
    complete += n >= 0 && missing == 0;
    worst_missing = missing > worst_missing ? missing : worst_missing;
  }
  printf("  %d workers (%d with a live process) made in %.1f s, %.1f MB of books; %d reports: the first %.0f ms, "
         "the others %.0f ms each; at most %d live processes missing from one\n",
         WORKERS, nlive, t_made, (double)ram / 1e6, REPORTS, t_first * 1e3, t_rest / (REPORTS - 1) * 1e3,
         worst_missing);
  CHECK(complete == REPORTS, "every live process is in every report (%d of %d reports complete, at most %d missing)",
        complete, REPORTS, worst_missing);
  for (int j = 0; j < nlive; j++)
    end_worker_process(live[j]);
}

int main(int argc, char **argv) {
  if (argc < 3 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "usage: ACCELERATOR_STATE_DIR=dir %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  unsetenv("ACCELERATOR_WORKER_ID"); /* this process is the host */
  limiter_load(argv[1], argv[2]);
  test_private_registration();
  test_many_workers();
  limiter_unload();
  return test_summary();
}
