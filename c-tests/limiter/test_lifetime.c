/* A worker's lifetime (docs/scale.md): LimiterRemoveWorker, reclamation of
 * workers without a live process (after the reclaim time, or at once when the
 * limits table is full), books sized to use, a worker made again under its
 * name while its old process lives (its new limit binds) and clients starting
 * while their worker is removed (none fails), and a churn of
 * 100,000 workers (500 alive at a time) that must end with 0 errors and the
 * state directory back to its empty size.
 *
 * argv: [1] liblimiter.so, [2] libaccelerator.so (the stub). Workers'
 * processes are forked children that set ACCELERATOR_WORKER_ID and
 * allocate through the limiter, as a hooked process does.
 * ACCELERATOR_TEST_CHURN=N sets the churn's workers (ACCELERATOR_TEST_QUICK:
 * 2,000). */
#include "limiter_load.h"
#include "../test_util.h"
#include "worker_proc.h"

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define D0 "stub-device-0"
#define EXPECT_RC(call, expected) EXPECT_RC_WITH(L.lastError, call, expected)
#define EXPECT_ACC(call, expected) EXPECT_RC_WITH(L.accLastError, call, expected)
#define GIB (1ULL << 30)

static __typeof__(&LimiterRemoveWorker) removeWorker;
static char state[4096];

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t file_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

static int entries_in(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", path);
  FILE *f = popen(cmd, "r");
  int n = -1;
  if (f) {
    if (fscanf(f, "%d", &n) != 1)
      n = -1;
    pclose(f);
  }
  return n;
}

static pid_t start_process(const char *w) { return worker_process(L.mem, w, D0); }

/* Whether `w` still has its one-time memory limit `limit` on D0: another
 * value is refused. (A worker that lost it gets the new value: a failure.) */
static int kept(const char *w, uint64_t limit) {
  return L.setMem(w, D0, limit + (1 << 20)) == RESULT_ERROR_OPERATION_FAILED;
}

/* Whether `w` is gone: neither books nor limits (else it is removed now). */
static int gone(const char *w) { return removeWorker(NULL, w) == RESULT_ERROR_NOT_FOUND; }

static void set_reclaim(const char *seconds) { setenv("ACCELERATOR_WORKER_RECLAIM_S", seconds, 1); }

/* A host call that runs a reclamation pass (on a limit of another worker). */
static void host_pass(void) {
  static int n;
  char w[32];
  snprintf(w, sizeof w, "pass-%d", n++);
  L.setMem(w, D0, GIB);
  removeWorker(NULL, w);
}

static void worker_dir(char *out, size_t n, const char *w) { snprintf(out, n, "%s/workers/%s", state, w); }

static void test_books_sized_to_use(void) {
  char dir[4200];
  pid_t p = start_process("size-1");
  CHECK(p > 0, "a process of worker size-1 allocated");
  worker_dir(dir, sizeof dir, "size-1");
  uint64_t one = tree_ram(dir);
  printf("  worker with one process: %llu KiB of RAM in the state directory\n", (unsigned long long)(one >> 10));
  CHECK(one > 0 && one <= 64 << 10, "one idle worker with one process costs <= 64 KiB (%llu B)", (unsigned long long)one);
  end_worker_process(p);
  EXPECT_RC(removeWorker(NULL, "size-1"), RESULT_SUCCESS);

  enum { N = 500 };
  static pid_t pids[N];
  int started = 0;
  for (int i = 0; i < N; i++) {
    char w[32];
    snprintf(w, sizeof w, "size-%d", i + 2);
    pids[i] = start_process(w);
    started += pids[i] > 0;
  }
  CHECK(started == N, "500 workers with a process each started (%d)", started);
  char workers[4200];
  snprintf(workers, sizeof workers, "%s/workers", state);
  uint64_t all = tree_ram(workers);
  printf("  500 workers x 1 process: %.1f MB of RAM in the state directory\n", (double)all / 1e6);
  CHECK(all <= 64000000ULL, "500 workers x 1 process cost <= 64 MB (%llu B)", (unsigned long long)all);
  int removed = 0;
  for (int i = 0; i < N; i++) {
    char w[32];
    snprintf(w, sizeof w, "size-%d", i + 2);
    end_worker_process(pids[i]);
    removed += removeWorker(NULL, w) == RESULT_SUCCESS;
  }
  CHECK(removed == N, "500 ended workers removed (%d)", removed);
  CHECK(entries_in(workers) == 0, "their books are gone (%d directories left)", entries_in(workers));
}

static void test_remove(void) {
  char dir[4200];
  EXPECT_RC(removeWorker(NULL, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(removeWorker(NULL, ""), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(removeWorker(NULL, "never-seen"), RESULT_ERROR_NOT_FOUND);

  /* Upstream's (namespace, pod): the worker "namespace/pod". */
  EXPECT_ACC(L.setMem("team-a/pod-1", D0, GIB), RESULT_SUCCESS);
  EXPECT_RC(removeWorker("team-a", "pod-1"), RESULT_SUCCESS);
  CHECK(gone("team-a/pod-1"), "LimiterRemoveWorker(\"team-a\", \"pod-1\") removed worker team-a/pod-1");

  /* Removed while a process lives: nothing changes until it is gone. */
  set_reclaim("600");
  EXPECT_ACC(L.setMem("rm-live", D0, GIB), RESULT_SUCCESS);
  pid_t p = start_process("rm-live");
  CHECK(p > 0, "a process of rm-live allocated");
  EXPECT_RC(removeWorker(NULL, "rm-live"), RESULT_SUCCESS);
  uint64_t used = 0, limit = 0;
  EXPECT_RC(L.usage("rm-live", D0, &used, &limit), RESULT_SUCCESS);
  CHECK(limit == GIB, "a removed worker with a live process keeps its limit (%llu)", (unsigned long long)limit);
  worker_dir(dir, sizeof dir, "rm-live");
  CHECK(access(dir, F_OK) == 0, "and its books");
  end_worker_process(p);
  set_reclaim("0"); /* the next pass now, not in 10 s */
  host_pass();
  CHECK(access(dir, F_OK) != 0 && gone("rm-live"), "once its process died, the next pass removed it");

  /* A removed worker's id starts afresh: a new limit is a new worker's. */
  EXPECT_ACC(L.setMem("rm-again", D0, GIB), RESULT_SUCCESS);
  EXPECT_RC(removeWorker(NULL, "rm-again"), RESULT_SUCCESS);
  EXPECT_ACC(L.setMem("rm-again", D0, 2 * GIB), RESULT_SUCCESS);
  EXPECT_RC(removeWorker(NULL, "rm-again"), RESULT_SUCCESS);
}

/* A worker with limits and no process uses 0 of its limit (not NOT_FOUND):
 * before its first process, with a compute limit only, and after
 * LimiterRemoveWorker and a new limit. */
static int usage_is(const char *w, uint64_t used, uint64_t limit) {
  uint64_t u = ~0ULL, l = ~0ULL;
  int rc = L.usage(w, D0, &u, &l);
  if (rc != RESULT_SUCCESS || u != used || l != limit)
    printf("  limiterGetWorkerUsage(%s): %d (%s), %llu of %llu\n", w, rc, L.lastError(),
           (unsigned long long)u, (unsigned long long)l);
  return rc == RESULT_SUCCESS && u == used && l == limit;
}

static void test_usage_without_process(void) {
  set_reclaim("600");
  EXPECT_ACC(L.setMem("use-new", D0, GIB), RESULT_SUCCESS);
  CHECK(usage_is("use-new", 0, GIB), "a worker with a memory limit and no process uses 0 of it");
  EXPECT_ACC(L.setCompute("use-cu", D0, 30), RESULT_SUCCESS);
  CHECK(usage_is("use-cu", 0, 0), "a worker with a compute limit only uses 0 (no memory limit)");
  pid_t p = start_process("use-new");
  CHECK(p > 0, "a process of use-new allocated");
  end_worker_process(p);
  EXPECT_RC(removeWorker(NULL, "use-new"), RESULT_SUCCESS);
  uint64_t u, l;
  EXPECT_RC(L.usage("use-new", D0, &u, &l), RESULT_ERROR_NOT_FOUND);
  EXPECT_ACC(L.setMem("use-new", D0, 2 * GIB), RESULT_SUCCESS);
  CHECK(usage_is("use-new", 0, 2 * GIB), "removed and limited again: 0 of its new limit");
  EXPECT_RC(L.usage("use-new", "no-such-device", &u, &l), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(removeWorker(NULL, "use-new"), RESULT_SUCCESS);
  EXPECT_RC(removeWorker(NULL, "use-cu"), RESULT_SUCCESS);
}

/* A StatefulSet's pod made again at once under its name (issue 38): the host
 * removes the worker while its old process lives, limits the name again, and
 * the old process exits: the new limit binds, and it was the new worker's
 * first (another value than the old one's is taken). */
static void test_recreated(void) {
  enum { LIMIT = 4000000 };
  set_reclaim("2"); /* a pass at most every second; an unused worker goes after 2 s */
  EXPECT_ACC(L.setMem("sts-0", D0, LIMIT), RESULT_SUCCESS);
  pid_t old = start_process("sts-0");
  CHECK(old > 0, "the old pod's process of sts-0 allocated");
  EXPECT_RC(removeWorker(NULL, "sts-0"), RESULT_SUCCESS);
  EXPECT_ACC(L.setMem("sts-0", D0, LIMIT), RESULT_SUCCESS);
  end_worker_process(old);
  usleep(1100 * 1000);
  host_pass(); /* main: the removal's pass forgot the new pod's entry */
  int blocked = -1;
  pid_t p = asking_process(L.mem, "sts-0", D0, 6000000, &blocked);
  CHECK(p > 0 && blocked == 1, "the new pod's client is refused 6,000,000 B under its 4,000,000 B limit (%d)",
        blocked);
  CHECK(kept("sts-0", LIMIT), "the new pod's limit stayed after the old process exited");

  /* Removed again while the new pod's process lives: the next pod's limit is
   * a first limit (any value), and binds once that process has exited. */
  EXPECT_RC(removeWorker(NULL, "sts-0"), RESULT_SUCCESS);
  EXPECT_ACC(L.setMem("sts-0", D0, LIMIT / 2), RESULT_SUCCESS);
  end_worker_process(p);
  usleep(1100 * 1000);
  host_pass();
  p = asking_process(L.mem, "sts-0", D0, 3000000, &blocked);
  CHECK(p > 0 && blocked == 1, "the next pod's client is refused 3,000,000 B under its new 2,000,000 B limit (%d)",
        blocked);
  end_worker_process(p);
  EXPECT_RC(removeWorker(NULL, "sts-0"), RESULT_SUCCESS);
  set_reclaim("600");
}

/* Clients starting while the host removes their worker again and again
 * (issue 38): each joins the books there are or makes the new ones; none
 * fails. They start one after the other, each exiting once it has its
 * answer, so the books are removed (and made again by the host's limit)
 * under the next one's start. */
static atomic_int removing;
static atomic_long removals;

static void *remove_again(void *arg) {
  (void)arg;
  while (atomic_load(&removing)) {
    if (removeWorker(NULL, "race-0") == RESULT_SUCCESS)
      atomic_fetch_add(&removals, 1);
    L.setMem("race-0", D0, GIB);
  }
  return NULL;
}

static void test_start_racing_removal(void) {
  enum { CLIENTS = 400 };
  static pid_t pids[CLIENTS];
  int go[2], res[2];
  CHECK(pipe(go) == 0 && pipe(res) == 0, "pipes");
  fflush(NULL);
  for (int i = 0; i < CLIENTS; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      close(go[1]);
      char b;
      if (read(go[0], &b, 1) != 1) /* one byte: this one's turn */
        _exit(1);
      setenv("ACCELERATOR_WORKER_ID", "race-0", 1);
      char me[16];
      snprintf(me, sizeof me, "%d", (int)getpid());
      MemoryOpRecord r;
      memset(&r, 0, sizeof r);
      Result rc = L.mem(me, D0, 1 << 20, &r);
      if (rc != RESULT_SUCCESS)
        fprintf(stderr, "  a client of race-0: %d %s\n", rc, L.lastError());
      char ok = rc == RESULT_SUCCESS ? 'y' : 'n';
      _exit(write(res[1], &ok, 1) == 1 ? 0 : 1);
    }
  }
  close(go[0]);
  close(res[1]);
  atomic_store(&removing, 1);
  pthread_t t;
  pthread_create(&t, NULL, remove_again, NULL);
  int ok = 0, failed = 0;
  char b = 'x';
  for (int i = 0; i < CLIENTS && write(go[1], &b, 1) == 1 && read(res[0], &b, 1) == 1; i++)
    b == 'y' ? ok++ : failed++;
  close(go[1]);
  atomic_store(&removing, 0);
  pthread_join(t, NULL);
  close(res[0]);
  for (int i = 0; i < CLIENTS; i++)
    if (pids[i] > 0)
      waitpid(pids[i], NULL, 0);
  printf("  %d clients starting while their worker was removed %ld times: %d started, %d failed\n", CLIENTS,
         atomic_load(&removals), ok, failed);
  CHECK(ok == CLIENTS && failed == 0, "every client started (%d of %d, %d failed)", ok, CLIENTS, failed);
  CHECK(atomic_load(&removals) > 1, "the worker was removed under them (%ld times)", atomic_load(&removals));
  EXPECT_RC(removeWorker(NULL, "race-0"), RESULT_SUCCESS);
  char workers[4200];
  snprintf(workers, sizeof workers, "%s/workers", state);
  CHECK(entries_in(workers) == 0, "the removals left nothing behind (%d entries, a removed directory with a "
        "client's temporary file in it)", entries_in(workers));
}

static void test_reclaim(void) {
  char dir[4200], books[4300];

  /* A live worker is never reclaimed, however short the time. */
  set_reclaim("0");
  EXPECT_ACC(L.setMem("live", D0, GIB), RESULT_SUCCESS);
  pid_t p = start_process("live");
  CHECK(p > 0, "a process of worker live allocated");
  for (int i = 0; i < 3; i++)
    host_pass();
  CHECK(kept("live", GIB), "a live worker keeps its limit");
  end_worker_process(p);

  /* A tenant that empties its own books keeps its limit: removed... */
  EXPECT_ACC(L.setMem("swap", D0, GIB), RESULT_SUCCESS);
  worker_dir(dir, sizeof dir, "swap");
  snprintf(books, sizeof books, "%s/limiter.shm", dir);
  CHECK(unlink(books) == 0, "the tenant removed its books");
  host_pass();
  CHECK(kept("swap", GIB), "removed books: the limit stays");
  /* ...replaced (the record beside them too, and a process made new ones)... */
  snprintf(books, sizeof books, "%s/limiter.shm.id", dir);
  unlink(books);
  p = start_process("swap");
  CHECK(p > 0, "a process of swap made new books");
  end_worker_process(p);
  host_pass();
  CHECK(kept("swap", GIB), "replaced books: the limit stays");
  /* ...or cut short. */
  EXPECT_ACC(L.setMem("cut", D0, GIB), RESULT_SUCCESS);
  worker_dir(dir, sizeof dir, "cut");
  snprintf(books, sizeof books, "%s/limiter.shm", dir);
  CHECK(truncate(books, 100) == 0, "the tenant truncated its books");
  host_pass();
  CHECK(kept("cut", GIB), "truncated books: the limit stays");
  /* Only the host ends such a worker. */
  EXPECT_RC(removeWorker(NULL, "swap"), RESULT_SUCCESS);
  EXPECT_RC(removeWorker(NULL, "cut"), RESULT_SUCCESS);
  CHECK(gone("swap") && gone("cut"), "removed by the host");

  /* Unused for the documented time: reclaimed without a call. */
  set_reclaim("1");
  EXPECT_ACC(L.setMem("idle", D0, GIB), RESULT_SUCCESS);
  p = start_process("idle");
  end_worker_process(p);
  usleep(600 * 1000);
  host_pass(); /* first seen unused */
  CHECK(kept("idle", GIB), "not yet: unused for less than 1 s");
  usleep(1100 * 1000);
  host_pass();
  worker_dir(dir, sizeof dir, "idle");
  CHECK(access(dir, F_OK) != 0 && gone("idle"), "unused for 1 s: reclaimed, with its books");
  set_reclaim("600");
}

/* The limits table caps live workers, not workers per reclaim time: a new
 * worker that finds its 1,024 entries full takes the entry of the worker
 * without a live process the longest, at once; books a tenant removed or cut
 * short are never taken; only 1,024 live workers refuse the next. */
enum { PRESSED = 3000, KEEP_EVERY = 100 };

static void pressure_worker(char *w, size_t n, const char *kind, int i) { snprintf(w, n, "%s-%d", kind, i); }

static void test_table_pressure(void) {
  char w[32], dir[4200], books[4300];
  set_reclaim("600"); /* nothing is due: every entry given back is taken under pressure */

  /* (c) Books a tenant cut short or replaced: never taken for unused. */
  EXPECT_ACC(L.setMem("press-cut", D0, GIB), RESULT_SUCCESS);
  worker_dir(dir, sizeof dir, "press-cut");
  snprintf(books, sizeof books, "%s/limiter.shm", dir);
  CHECK(truncate(books, 100) == 0, "the tenant of press-cut truncated its books");
  EXPECT_ACC(L.setMem("press-swap", D0, GIB), RESULT_SUCCESS);
  worker_dir(dir, sizeof dir, "press-swap");
  snprintf(books, sizeof books, "%s/limiter.shm", dir);
  unlink(books);
  snprintf(books, sizeof books, "%s/limiter.shm.id", dir);
  unlink(books);
  end_worker_process(start_process("press-swap")); /* new books, unused */

  /* (a) 3,000 workers one after another, each with a process that
   * allocates and ends, never removed; one in 100 keeps its process. */
  static pid_t kept_pids[PRESSED / KEEP_EVERY];
  long errors = 0;
  double t0 = now_s(), t_room = 0, t_full = 0;
  for (int i = 0; i < PRESSED; i++) {
    if (i == 1000) /* the first 1,000 found free entries; the last 1,000 a full table */
      t_room = now_s();
    if (i == PRESSED - 1000)
      t_full = now_s();
    pressure_worker(w, sizeof w, "press", i);
    Result a = L.setMem(w, D0, GIB), b = L.setCompute(w, D0, 50);
    if ((a != RESULT_SUCCESS || b != RESULT_SUCCESS) && errors++ < 5)
      fprintf(stderr, "limit %s: %d %d %s\n", w, a, b, L.accLastError());
    pid_t p = start_process(w);
    if (p <= 0 && errors++ < 5)
      fprintf(stderr, "process of %s did not start\n", w);
    if (i % KEEP_EVERY == 0)
      kept_pids[i / KEEP_EVERY] = p;
    else
      end_worker_process(p);
  }
  double t = now_s() - t0;
  printf("  %d workers limited one after another (1 in %d kept live), never removed: %.1f s, %ld errors; "
         "a worker (2 limits, 1 process) %.0f us in the first 1000 (free entries), %.0f us in the last 1000 "
         "(table full)\n",
         PRESSED, KEEP_EVERY, t, errors, (t_room - t0) / 1000 * 1e6, (now_s() - t_full) / 1000 * 1e6);
  CHECK(errors == 0, "%d workers through a 1,024-entry table: every limit and process succeeded (%ld errors)",
        PRESSED, errors);
  int live_kept = 0;
  for (int i = 0; i < PRESSED; i += KEEP_EVERY) {
    pressure_worker(w, sizeof w, "press", i);
    live_kept += kept(w, GIB);
  }
  CHECK(live_kept == PRESSED / KEEP_EVERY, "every still-live worker kept its limit (%d of %d)", live_kept,
        PRESSED / KEEP_EVERY);
  CHECK(kept("press-cut", GIB) && kept("press-swap", GIB),
        "workers whose books their tenant cut short or replaced kept their limits under pressure");
  pressure_worker(w, sizeof w, "press", PRESSED - 1);
  worker_dir(dir, sizeof dir, "press-1");
  CHECK(kept(w, GIB) && access(dir, F_OK) != 0,
        "the longest unused went first: %s kept its limit, press-1's books are gone", w);
  for (int i = 0; i < PRESSED / KEEP_EVERY; i++)
    end_worker_process(kept_pids[i]);
  EXPECT_RC(removeWorker(NULL, "press-cut"), RESULT_SUCCESS);
  EXPECT_RC(removeWorker(NULL, "press-swap"), RESULT_SUCCESS);

  /* (b) 1,024 workers with a live process: the 1,025th is refused, and
   * gets its limit once one of them ends. */
  enum { LIVE = 1024 };
  static pid_t pids[LIVE];
  int started = 0;
  t0 = now_s();
  for (int i = 0; i < LIVE; i++) {
    pressure_worker(w, sizeof w, "live", i);
    pids[i] = L.setMem(w, D0, GIB) == RESULT_SUCCESS ? start_process(w) : -1;
    started += pids[i] > 0;
  }
  CHECK(started == LIVE, "1,024 workers limited, each with a live process (%d)", started);
  pressure_worker(w, sizeof w, "live", LIVE);
  double t1 = now_s();
  EXPECT_ACC(L.setMem(w, D0, GIB), RESULT_ERROR_RESOURCE_EXHAUSTED);
  t1 = now_s() - t1;
  const char *why = L.accLastError();
  printf("  the 1,025th, refused in %.1f ms (a pass over 1,024 live workers): %s\n", t1 * 1e3, why);
  CHECK(strstr(why, "holds 1024 workers") && strstr(why, "1024 with a live process"),
        "the refusal says the table holds 1,024 workers, 1,024 of them live");
  end_worker_process(pids[0]);
  pids[0] = 0;
  EXPECT_ACC(L.setMem(w, D0, GIB), RESULT_SUCCESS);
  int still = 0;
  for (int i = 1; i < LIVE; i++) {
    pressure_worker(w, sizeof w, "live", i);
    still += kept(w, GIB);
  }
  CHECK(still == LIVE - 1, "the other 1,023 live workers kept their limits (%d)", still);
  /* (c) under pressure: the one unused worker's books cut short by its
   * tenant: not taken, and the refusal counts it. */
  pressure_worker(w, sizeof w, "live", LIVE);
  worker_dir(dir, sizeof dir, w);
  snprintf(books, sizeof books, "%s/limiter.shm", dir);
  CHECK(truncate(books, 100) == 0, "the tenant of %s truncated its books", w);
  char next[32];
  pressure_worker(next, sizeof next, "live", LIVE + 1);
  EXPECT_ACC(L.setMem(next, D0, GIB), RESULT_ERROR_RESOURCE_EXHAUSTED);
  why = L.accLastError();
  CHECK(strstr(why, "1023 with a live process, 1 whose books"), "refused: 1,023 live and 1 cut short (%s)", why);
  CHECK(kept(w, GIB), "the worker whose books were cut short kept its limit");
  printf("  1,024 live workers and the refusal: %.1f s\n", now_s() - t0);

  for (int i = 0; i < LIVE; i++)
    end_worker_process(pids[i]);
  for (int i = 0; i <= LIVE + 1; i++) {
    pressure_worker(w, sizeof w, "live", i);
    removeWorker(NULL, w);
  }
  for (int i = 0; i < PRESSED; i++) {
    pressure_worker(w, sizeof w, "press", i);
    removeWorker(NULL, w);
  }
  char workers[4200];
  snprintf(workers, sizeof workers, "%s/workers", state);
  CHECK(entries_in(workers) == 0, "all removed (%d directories left)", entries_in(workers));
}

/* 100,000 workers, 500 alive at a time, each with limits, one in 50 with a
 * process of its own; each ends with LimiterRemoveWorker. */
static void test_churn(void) {
  long n = 100000;
  if (getenv("ACCELERATOR_TEST_QUICK"))
    n = 2000;
  if (getenv("ACCELERATOR_TEST_CHURN"))
    n = atol(getenv("ACCELERATOR_TEST_CHURN"));
  enum { ALIVE = 500, EVERY = 50 };
  static pid_t pids[ALIVE];
  set_reclaim("600");
  char limits[4200];
  snprintf(limits, sizeof limits, "%s/limits.shm", state);
  uint64_t empty = tree_ram(state);
  long errors = 0;
  uint64_t peak = 0;
  double t0 = now_s();
  for (long i = 0; i < n + ALIVE; i++) {
    char w[32];
    if (i >= ALIVE) { /* end worker i - 500 */
      long j = i - ALIVE;
      snprintf(w, sizeof w, "churn-%ld", j);
      end_worker_process(pids[j % ALIVE]);
      pids[j % ALIVE] = 0;
      Result rc = removeWorker(NULL, w);
      if (rc != RESULT_SUCCESS && errors++ < 5)
        fprintf(stderr, "remove %s: %d %s\n", w, rc, L.lastError());
    }
    if (i < n) {
      snprintf(w, sizeof w, "churn-%ld", i);
      Result a = L.setMem(w, D0, GIB), b = L.setCompute(w, D0, 50);
      if ((a != RESULT_SUCCESS || b != RESULT_SUCCESS) && errors++ < 5)
        fprintf(stderr, "limit %s: %d %d %s\n", w, a, b, L.accLastError());
      if (i % EVERY == 0) {
        pids[i % ALIVE] = start_process(w);
        if (pids[i % ALIVE] <= 0 && errors++ < 5)
          fprintf(stderr, "process of %s did not start\n", w);
      }
    }
    if (i % 1000 == 999) {
      uint64_t b = tree_ram(state);
      if (b > peak)
        peak = b;
    }
  }
  double t = now_s() - t0;
  uint64_t end = tree_ram(state);
  char workers[4200];
  snprintf(workers, sizeof workers, "%s/workers", state);
  printf("  churn: %ld workers (%d alive at a time, 1 in %d with a process) in %.1f s (%.0f us a worker); "
         "state directory: %llu KiB before, peak %llu KiB, %llu KiB after (limits file %llu KiB); "
         "%ld errors\n",
         n, ALIVE, EVERY, t, t / (double)n * 1e6, (unsigned long long)(empty >> 10),
         (unsigned long long)(peak >> 10), (unsigned long long)(end >> 10),
         (unsigned long long)(file_bytes(limits) >> 10), errors);
  CHECK(errors == 0, "the churn of %ld workers had 0 errors (%ld)", n, errors);
  CHECK(entries_in(workers) == 0, "no worker's books are left (%d)", entries_in(workers));
  /* Empty: the limits file's header, device and worker tables (204 KiB at
   * most, whichever entries were ever used) and no row, no books. */
  CHECK(file_bytes(limits) <= 208896, "the limits file holds no rows of ended workers (%llu B)",
        (unsigned long long)file_bytes(limits));
  CHECK(end <= empty + 208896, "the state directory is back to its empty size (%llu B, %llu B before)",
        (unsigned long long)end, (unsigned long long)empty);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  const char *dir = getenv("ACCELERATOR_STATE_DIR");
  if (!dir) {
    fprintf(stderr, "ACCELERATOR_STATE_DIR must name a private state directory\n");
    return 2;
  }
  snprintf(state, sizeof state, "%s", dir);
  unsetenv("ACCELERATOR_WORKER_ID");
  limiter_load(argv[1], argv[2]);
  *(void **)(&removeWorker) = load_sym(L.lim, "LimiterRemoveWorker");
  test_books_sized_to_use();
  test_remove();
  test_usage_without_process();
  test_recreated();
  test_start_racing_removal();
  test_reclaim();
  test_table_pressure();
  test_churn();
  limiter_unload();
  return test_summary();
}
